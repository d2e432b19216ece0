"""``python -m bench figures``: redraw the docs' figures, or check that the committed ones are current.

Each figure is an SVG file in docs/figures/ with an entry in
docs/figures/figures.json: its title, a one-line caption, the numbers it
drew and where they came from (a record file and its keys, or a guide's
explain block). Nothing is drawn by hand: the numbers come from committed
runs in results/, from the guides' explain blocks, and from the project's
own transition code, so the command runs in seconds and starts no framework.

``--check`` draws into a temporary folder and compares bytes with the
committed files (style.py makes the SVGs repeatable); it exits 1 naming
every file that differs, so a test can keep the figures true as the guide
test keeps the excerpts true.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from shared.files import written_aside

from bench.figures import graphs, levels, parsing, runs, style
from bench.figures.sources import FIGURES_DIR, RESULTS, Sources

# name -> builder(sources, pyplot) -> (figure, figures.json entry); the file is NAME.svg. Names are fixed:
# the docs link them.
FIGURES = {
    "headline": runs.headline,
    "shift-reduce": parsing.shift_reduce,
    "thin-stack": parsing.thin_stack_figure,
    "graph-size": graphs.graph_size,
    "host-reads": runs.host_reads,
    "padding": runs.padding,
    "compile-shapes": runs.compile_shapes,
    "levels": levels.levels_figure,
}
INDEX = "figures.json"


def register(sub) -> None:
    p = sub.add_parser("figures", help="redraw the docs' figures (SVG) from committed runs and the guides")
    p.add_argument("--out", default=str(FIGURES_DIR), help="folder of the SVG files and figures.json [%(default)s]")
    p.add_argument("--only", default=None, metavar="NAME", choices=sorted(FIGURES),
                   help=f"redraw (or check) one figure: {', '.join(FIGURES)}")
    p.add_argument("--check", action="store_true",
                   help="draw into a temporary folder and exit 1 naming each file that differs from the one in --out")
    p.add_argument("--results", default=str(RESULTS), help="the folder of committed runs [%(default)s]")
    p.set_defaults(func=cmd_figures)


def draw(out_dir: Path, names=None, src: Sources | None = None) -> list[Path]:
    """Draw the figures ``names`` (all by default) into ``out_dir`` and update its figures.json; the files written.

    figures.json keeps the entries of figures not redrawn, so ``--only`` leaves the others alone.
    """
    names = list(FIGURES) if names is None else list(names)
    src = src or Sources()
    index_path = out_dir / INDEX
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    written = []
    with style.drawing() as plt:
        drawn = []
        try:  # every figure first: a missing source then leaves the folder as it was
            for name in names:
                drawn.append((name, *FIGURES[name](src, plt)))
        except BaseException:
            plt.close("all")
            raise
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, fig, entry in drawn:
            path = out_dir / f"{name}.svg"
            with written_aside(path) as tmp:
                style.save(fig, tmp)
            index[name] = {"file": path.name, **entry}
            written.append(path)
    ordered = {name: index[name] for name in FIGURES if name in index}
    ordered.update({name: entry for name, entry in index.items() if name not in FIGURES})
    with written_aside(index_path) as tmp:
        Path(tmp).write_text(to_json(ordered) + "\n")
    return written + [index_path]


def _flat(value) -> bool:
    """A scalar, or a list or dict whose members are scalars or lists of scalars: written on one line."""
    def scalar(v):
        return not isinstance(v, (dict, list))

    members = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    return all(scalar(v) or (isinstance(v, list) and all(map(scalar, v))) for v in members)


def to_json(value, level: int = 0) -> str:
    """figures.json's layout: nested levels indented, each row of numbers on one line (a diff shows which)."""
    if _flat(value) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, end = " " * (level + 1), " " * level
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {to_json(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    return "[\n" + ",\n".join(pad + to_json(v, level + 1) for v in value) + "\n" + end + "]"


def check(committed: Path, names=None, src: Sources | None = None) -> list[str]:
    """The files of ``committed`` that a fresh drawing would change (missing ones included); [] when current."""
    names = list(FIGURES) if names is None else list(names)
    with tempfile.TemporaryDirectory(prefix="spinn-figures-") as tmp:
        fresh = Path(tmp)
        draw(fresh, names, src)
        differ = [f"{name}.svg" for name in names
                  if not (committed / f"{name}.svg").exists()
                  or (committed / f"{name}.svg").read_bytes() != (fresh / f"{name}.svg").read_bytes()]
        new_index = json.loads((fresh / INDEX).read_text())
        try:
            old_index = json.loads((committed / INDEX).read_text())
        except (OSError, ValueError):
            old_index = {}
        if any(old_index.get(name) != new_index.get(name) for name in names):
            differ.append(INDEX)
    return differ


def cmd_figures(args) -> int:
    out = Path(args.out)
    src = Sources(results=Path(args.results))
    names = [args.only] if args.only else None
    if args.check:
        differ = check(out, names, src)
        for name in differ:
            print(f"differs: {out / name}")
        if differ:
            print(f"{len(differ)} figure file(s) out of date: python -m bench figures"
                  + (f" --only {args.only}" if args.only else "") + " redraws them", file=sys.stderr)
            return 1
        print(f"figures up to date in {out} ({len(names or FIGURES)} checked)")
        return 0
    for path in draw(out, names, src):
        print(f"wrote {path}")
    return 0
