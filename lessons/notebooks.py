"""``python -m lessons.notebooks``: each lesson and each exercise answer as a Jupyter notebook.

The code exists once, in the lessons' .py files, written in jupytext's percent format: ``# %%`` starts a code
cell and ``# %% [markdown]`` a Markdown cell, and the file stays a script (``python -m lessons.pytorch_lists``).
This command makes ``lessons/notebooks/<name>.ipynb`` from each (``answers.mask`` for lessons/answers/mask.py),
without outputs: a first cell with the notation and a link to docs/glossary.md, the file's first cell (its
title and what to notice), the lesson's figure where it has one, a code cell that puts the repository's root
on the import path wherever Jupyter was started, then the file's cells. jupytext's active cells say which
cells are the notebook's alone and which the script's: a cell marked ``active="ipynb"`` is commented out in
the .py file and runs in the notebook (a lesson's steps, one question at a time); a cell marked
``active="py"`` (the script's ``if __name__ == "__main__": main()``) is left out of the notebook. A notebook
left in the folder without a source is removed.

The notebooks are written without outputs, and kept so: what a lesson prints is measured when it runs
(seconds, and counts that move with a framework's version), so committed outputs would be one machine's
figures presented as the lesson's, and would go stale with every release; and a learner is to predict
before running. ``--check`` compares the bytes this command writes, outputs none.

``--check`` writes nothing: it makes each notebook again and exits 1, naming every notebook that differs from
what its source makes (an edited source, a missing notebook, one without a source). Needs the ``notebooks``
extra (jupytext, nbformat).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # lessons/
FOLDER = HERE / "notebooks"
NOT_LESSONS = {"__init__", "setup", "today", "notebooks"}  # lessons/*.py that are helpers, probes or this command

# Each lesson's picture (docs/figures, drawn by bench figures), as the guides caption it.
FIGURES = {
    "pytorch_lists": ("shift-reduce.svg", "One SNLI sentence parsed by SPINN: at each step the transition taken, "
                                          "the stack and the buffer, and the tree they build"),
    "tensorflow_while": ("thin-stack.svg", "The thin stack of one sentence: the leaves in rows 0 to N − 1, row N + t "
                                           "written by step t's REDUCE, and the stack of row numbers after each step"),
}
FIGURES["dynet_loop"], FIGURES["jax_scan"] = FIGURES["pytorch_lists"], FIGURES["tensorflow_while"]

NOTATION = """\
*`{module}` as a notebook, made from [`{source}`]({link}) by `python -m lessons.notebooks`: edit that file, \
then run the command, and the notebook follows.*

**Notation** (every word of the lessons in [docs/glossary.md](../../docs/glossary.md)):

| letter | what |
| --- | --- |
| B | pairs in a batch (here 8 SNLI pairs) |
| S | sentences one call encodes: here the B premises, or the B hypotheses (S = B = 8) |
| N | token slots of a sentence; T = 2N − 1 transition slots |
| E | word vector size (here 16) |
| H | size of an item's h and of its c: a stack item is [h; c], 2H numbers (here H = 16) |
| D | the tracker's size (here 8) |
| SHIFT = 1, REDUCE = 2, PAD = 0 | the transitions: SHIFT moves the buffer's front word onto the stack, \
REDUCE composes the top two items into one, PAD does nothing |
"""

ROOT_ON_PATH = """\
import sys  # the repository's root on the import path, wherever Jupyter was started
from pathlib import Path

roots = [p for p in (Path.cwd(), *Path.cwd().parents) if (p / "lessons" / "setup.py").is_file()]
sys.path[:0] = [str(root) for root in roots[:1]]"""


def sources(here: Path = HERE) -> dict[str, Path]:
    """Notebook name -> its source: the lessons, then the answers."""
    found = {p.stem: p for p in sorted(here.glob("*.py")) if p.stem not in NOT_LESSONS}
    found.update({f"answers.{p.stem}": p for p in sorted((here / "answers").glob("*.py")) if p.stem != "__init__"})
    return found


def notebook(name: str, source: Path) -> str:
    """The notebook's JSON text, as this command writes it: the same source always makes the same bytes."""
    import jupytext
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    cells = jupytext.reads(source.read_text(), fmt="py:percent").cells
    link = source.relative_to(source.parents[1] if name.startswith("answers.") else source.parent).as_posix()
    head = [new_markdown_cell(NOTATION.format(module=f"lessons.{name}", source=f"lessons/{link}", link=f"../{link}"))]
    if cells and cells[0].cell_type == "markdown":
        head.append(new_markdown_cell(cells.pop(0).source))
    if name in FIGURES:
        figure, caption = FIGURES[name]
        head.append(new_markdown_cell(f"![{caption}](../../docs/figures/{figure})\n\n*{caption}.*"))
    head.append(new_code_cell(ROOT_ON_PATH))
    cells = [c for c in cells if c.metadata.get("active") != "py"]  # the script's own cells
    body = [new_code_cell(c.source) if c.cell_type == "code" else new_markdown_cell(c.source) for c in cells]
    made = new_notebook(cells=head + body, metadata={
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})
    for k, cell in enumerate(made.cells):
        cell.id = f"cell-{k}"  # nbformat draws random ids; fixed ones keep the file the same from run to run
    return nbformat.writes(made) + "\n"


def differing(here: Path = HERE) -> list[str]:
    """The notebooks that are not what their sources make, each with why."""
    folder, made = here / "notebooks", sources(here)
    found = []
    for name, source in made.items():
        path = folder / f"{name}.ipynb"
        if not path.is_file():
            found.append(f"{path.relative_to(here.parent)}: missing")
        elif path.read_text() != notebook(name, source):
            found.append(f"{path.relative_to(here.parent)}: differs from {source.relative_to(here.parent)}")
    found += [f"{path.relative_to(here.parent)}: no source" for path in sorted(folder.glob("*.ipynb"))
              if path.stem not in made]
    return found


def write(here: Path = HERE) -> list[Path]:
    """Write every notebook, remove those without a source; the paths written."""
    folder, made = here / "notebooks", sources(here)
    folder.mkdir(exist_ok=True)
    for path in folder.glob("*.ipynb"):
        if path.stem not in made:
            path.unlink()
    written = []
    for name, source in made.items():
        path = folder / f"{name}.ipynb"
        path.write_text(notebook(name, source))
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons.notebooks", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1, naming each notebook that differs from what its source makes")
    args = parser.parse_args(argv)
    if args.check:
        found = differing()
        for line in found:
            print(line, file=sys.stderr)
        if found:
            print("run: python -m lessons.notebooks", file=sys.stderr)
        return 1 if found else 0
    for path in write():
        print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
