"""The lessons' notebooks (lessons/notebooks/, made by ``python -m lessons.notebooks`` from the lessons' .py
files): each is what its source makes, written without outputs, opens with the notation, the glossary and its
figure, goes one idea a cell, and runs in a fresh kernel (nbclient, the virtualenv's own Python: ipykernel's
native kernel spec runs sys.executable) to its agreement lines without a framework's start-up or log lines. A
lesson's notebook asks "Predict, then run" before its steps and shows the graph itself. One kernel per
notebook, in a temporary folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from lessons import notebooks

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(notebooks.sources())
MAX_CELL_LINES = 80  # a code cell: one idea (an encoder), read at once
LESSONS = ("pytorch_lists", "tensorflow_while", "jax_scan", "tracing", "dynet_loop")  # taught step by step
MIN_CELLS = 8
# What each prints when it ran to its end: the agreement with the float64 reference, or for those that compare
# no encodings, the line of their finding.
AGREES = r"encoded,\s+largest difference from the float64 reference \S+ \(agrees\)"
PRINTS = {"answers.tracer_if": r"under jit: TracerBoolConversionError",
          "answers.grad_loop": r"grad of the masked scan 32\.0",
          "answers.autobatching": r"the encodings of the two runs differ by at most 0\.0e\+00",
          "tracing": r"static_argnums=2, the flag True, False, True: traced 2 times"}
GRADIENTS = r"the gradients of \d+ weights,\s+largest difference from the float64 reference \S+ \(agrees\)"
# The graph itself, as each framework's notebook shows it for one sentence of two words.
GRAPHS = {"pytorch_lists": r"\n\s*0 StackBackward0 +-> \[1\](.|\n)*AccumulateGrad",
          "tensorflow_while": r"encode's graph: .*While(.|\n)*function while_body\w* \(\d+ ops\)",
          "jax_scan": r"\{ lambda (.|\n)*= scan ",
          "dynet_loop": r"v0 = lookup_parameters(.|\n)*v\d+ = concat\(\{v\d+,v\d+,v\d+\}, 0\)"}
# A framework's start-up or log line: glog's and absl's prefix (TensorFlow's C++, torch._logging's Dynamo lines),
# absl's notice, TensorFlow's oneDNN notice.
NOISE = re.compile(r"^[VIWEF]\d{4} |^WARNING: All log messages before absl|oneDNN", re.MULTILINE)


def stream_text(nb) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
                   if out.output_type == "stream")


def test_every_lesson_and_answer_has_its_notebook():
    """That each notebook is what its source makes today is CI's check (``python -m lessons.notebooks --check``,
    beside the results'), not a test: an edited lesson fails here only if it no longer runs."""
    assert {p.stem for p in notebooks.FOLDER.glob("*.ipynb")} == set(NAMES)
    assert {"pytorch_lists", "tensorflow_while", "jax_scan", "dynet_loop", "answers.compile_lists"} <= set(NAMES)
    readme = (ROOT / "lessons" / "README.md").read_text()
    assert [name for name in NAMES if f"(notebooks/{name}.ipynb)" not in readme] == []  # the README lists each
    assert set(LESSONS) <= set(NAMES) and set(GRAPHS) < set(LESSONS)


def test_check_names_an_edited_source_a_missing_notebook_and_one_without_a_source(tmp_path):
    """On a copy of lessons/: the check passes, then fails naming each kind of difference, and writing mends it."""
    shutil.copytree(ROOT / "lessons", tmp_path / "lessons", ignore=shutil.ignore_patterns("__pycache__"))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "lessons.notebooks", *args], cwd=tmp_path, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": ""})
    assert run("--check").returncode == 0
    source = tmp_path / "lessons" / "jax_scan.py"
    source.write_text(source.read_text().replace("PAD, SHIFT, REDUCE = 0, 1, 2", "PAD, SHIFT, REDUCE = 0, 1, 2  # !"))
    (tmp_path / "lessons" / "notebooks" / "dynet_loop.ipynb").unlink()
    (tmp_path / "lessons" / "notebooks" / "gone.ipynb").write_text("{}")
    ran = tmp_path / "lessons" / "notebooks" / "tracing.ipynb"  # saved after running: outputs, not committed
    nb = json.loads(ran.read_text())
    next(c for c in nb["cells"] if c["cell_type"] == "code")["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    ran.write_text(json.dumps(nb, indent=1) + "\n")
    checked = run("--check")
    assert checked.returncode == 1
    assert "lessons/notebooks/jax_scan.ipynb: differs from lessons/jax_scan.py" in checked.stderr
    assert "lessons/notebooks/tracing.ipynb: differs from lessons/tracing.py" in checked.stderr
    assert "lessons/notebooks/dynet_loop.ipynb: missing" in checked.stderr
    assert "lessons/notebooks/gone.ipynb: no source" in checked.stderr
    assert "pytorch_lists" not in checked.stderr  # what did not change is not named
    assert run().returncode == 0 and run("--check").returncode == 0
    assert "PAD, SHIFT, REDUCE = 0, 1, 2  # !" in (tmp_path / "lessons" / "notebooks" / "jax_scan.ipynb").read_text()
    assert not (tmp_path / "lessons" / "notebooks" / "gone.ipynb").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_notebook_opens_with_the_notation_the_glossary_and_its_figure_and_is_short(name):
    nb = json.loads((notebooks.FOLDER / f"{name}.ipynb").read_text())
    first = "".join(nb["cells"][0]["source"])
    assert nb["cells"][0]["cell_type"] == "markdown" and "(../../docs/glossary.md)" in first
    for letter in ("B", "S", "N", "T", "E", "H", "D"):
        assert f"| {letter} |" in first or f"T = 2N" in first, letter
    assert "SHIFT = 1, REDUCE = 2, PAD = 0" in first and "| B | pairs in a batch" in first
    assert (ROOT / "docs" / "glossary.md").is_file()
    images = re.findall(r"!\[[^]]+\]\(([^)]+)\)", "".join("".join(c["source"]) for c in nb["cells"]
                                                             if c["cell_type"] == "markdown"))
    assert len(images) == (name in notebooks.FIGURES)
    for image in images:
        assert (notebooks.FOLDER / image).resolve().is_file(), image
    longest = max(len("".join(c["source"]).splitlines()) for c in nb["cells"] if c["cell_type"] == "code")
    assert longest <= MAX_CELL_LINES, f"{name}: a code cell of {longest} lines"
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")  # written without outputs
    assert "if __name__" not in "".join("".join(c["source"]) for c in nb["cells"]) or name not in LESSONS


@pytest.mark.parametrize("name", LESSONS)
def test_a_lesson_s_notebook_asks_before_each_step_and_shows_its_graph(name):
    cells = json.loads((notebooks.FOLDER / f"{name}.ipynb").read_text())["cells"]
    assert len(cells) >= MIN_CELLS
    asks = [k for k, c in enumerate(cells) if c["cell_type"] == "markdown"
            and "**Predict, then run.**" in "".join(c["source"])]
    assert len(asks) >= 2, name
    for k in asks:  # the question, then (after the functions it needs) the cell that runs the step
        runs = [c for c in cells[k + 1:] if c["cell_type"] == "code" and "def " not in "".join(c["source"])]
        assert runs, f"{name}: nothing runs after the question in cell {k}"
    if name in GRAPHS:  # a cell that shows the graph itself
        assert any("show_" in "".join(c["source"]) and "def " not in "".join(c["source"])
                   for c in cells if c["cell_type"] == "code"), name


def test_the_path_cell_finds_the_repository_from_the_notebooks_folder():
    """Jupyter started in lessons/notebooks/, without PYTHONPATH: the notebook's first code cell makes lessons
    importable."""
    code = notebooks.ROOT_ON_PATH + "\nimport lessons.setup\nprint(lessons.setup.ROOT)"
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=notebooks.FOLDER, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(ROOT), done.stderr


def test_the_kernel_is_this_virtualenv_s_python():
    """ipykernel's native kernel spec names "python", which jupyter_client starts as sys.executable."""
    assert KernelManager(kernel_name="python3").format_kernel_cmd()[0] == sys.executable


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_runs_to_its_agreement_line_without_framework_noise(name, tmp_path, monkeypatch):
    nb = nbformat.read(notebooks.FOLDER / f"{name}.ipynb", as_version=4)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # in a temporary folder, the path cell finds no repository
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    NotebookClient(nb, km=kernel, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = stream_text(nb)
    assert re.search(PRINTS.get(name, AGREES), text), text
    if name in GRAPHS:
        assert re.search(GRADIENTS, text) and re.search(GRAPHS[name], text), text
    assert not NOISE.search(text), text
    assert all(out.output_type == "stream" and out.name == "stdout" for cell in nb.cells if cell.cell_type == "code"
               for out in cell.outputs), text  # nothing on stderr, no error
