"""The lessons' notebooks (lessons/notebooks/, made by ``python -m lessons.notebooks`` from the lessons' .py
files): each is what its source makes, opens with the notation, the glossary and its figure, is short, and runs
in a fresh kernel (nbclient, the virtualenv's own Python: ipykernel's native kernel spec runs sys.executable) to
its agreement line without a framework's start-up or log lines. One kernel per notebook, in a temporary folder."""

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
MAX_CODE_LINES = 100  # a notebook's code cells, read whole like the lesson they come from
# What each prints when it ran to its end: the agreement with the float64 reference, or for the two answers that
# compare no encodings, the line of their finding.
AGREES = r"encoded, largest difference from the float64 reference \S+ \(agrees\)"
PRINTS = {"answers.tracer_if": r"under jit: TracerBoolConversionError", "answers.grad_loop": r"grad of the masked scan 32\.0"}
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
    checked = run("--check")
    assert checked.returncode == 1
    assert "lessons/notebooks/jax_scan.ipynb: differs from lessons/jax_scan.py" in checked.stderr
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
    for letter in ("B", "N", "T", "E", "H", "D"):
        assert f"| {letter} |" in first or f"T = 2N" in first, letter
    assert "SHIFT = 1, REDUCE = 2, PAD = 0" in first
    assert (ROOT / "docs" / "glossary.md").is_file()
    images = re.findall(r"!\[[^]]+\]\(([^)]+)\)", "".join("".join(c["source"]) for c in nb["cells"]
                                                             if c["cell_type"] == "markdown"))
    assert len(images) == (name in notebooks.FIGURES)
    for image in images:
        assert (notebooks.FOLDER / image).resolve().is_file(), image
    code = sum(len("".join(c["source"]).splitlines()) for c in nb["cells"] if c["cell_type"] == "code")
    assert code < MAX_CODE_LINES, f"{name}: {code} lines of code"
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")  # written without outputs


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
    assert not NOISE.search(text), text
    assert all(out.output_type == "stream" and out.name == "stdout" for cell in nb.cells if cell.cell_type == "code"
               for out in cell.outputs), text  # nothing on stderr, no error
