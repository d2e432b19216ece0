"""The figures of docs/figures/: each one's name, module and builder."""

from __future__ import annotations

import importlib
import json
import sys

from bench.figures import style
from bench.render.sources import FIGURES_DIR, Results
from shared.files import written_aside

# name -> (module of bench/figures, builder(results, pyplot) -> (figure, figures.json entry)); NAME.svg is drawn.
FIGURES = {"headline": ("runs", "headline"), "shift-reduce": ("parsing", "shift_reduce"),
           "thin-stack": ("parsing", "thin_stack_figure"), "graph-size": ("graphs", "graph_size"),
           "host-reads": ("runs", "host_reads"), "padding": ("runs", "padding"),
           "compile-shapes": ("runs", "compile_shapes"), "levels": ("parsing", "levels_figure"),
           "breakdown": ("runs", "breakdown")}
INDEX = "figures.json"


def figures(results: Results, write: bool, redraw: bool = False) -> list[str]:
    """The figures drawn afresh, checked through figures.json (never SVG bytes); ``write`` saves those that differ."""
    folder = results.root / FIGURES_DIR
    index = json.loads((folder / INDEX).read_text()) if (folder / INDEX).exists() else {}
    problems = []
    with style.drawing() as plt:
        for name, (module, builder) in FIGURES.items():
            fig, entry = getattr(importlib.import_module(f"bench.figures.{module}"), builder)(results, plt)
            entry = {"file": f"{name}.svg", **json.loads(json.dumps(entry))}
            differs = entry != index.get(name) or not (folder / entry["file"]).exists()
            if write and (differs or redraw):
                with written_aside(folder / entry["file"]) as tmp:
                    style.save(fig, tmp)
                index[name] = entry
                print(f"render: drew {FIGURES_DIR / entry['file']}", file=sys.stderr)
            elif differs:
                problems.append(f"{FIGURES_DIR / entry['file']}: missing, or its numbers differ from {INDEX}'s")
            plt.close(fig)
    if write:
        with written_aside(folder / INDEX) as tmp:
            tmp.write_text(to_json({n: index[n] for n in FIGURES}) + "\n")
    return problems


def to_json(value, level: int = 0) -> str:
    """figures.json's layout: nested levels indented, each row of numbers on one line (a diff shows which)."""
    members = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    if not value or all(not isinstance(v, (dict, list)) or isinstance(v, list) and
                        all(not isinstance(x, (dict, list)) for x in v) for v in members):
        return json.dumps(value, ensure_ascii=False)
    pad = " " * (level + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {to_json(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    return "[\n" + ",\n".join(pad + to_json(v, level + 1) for v in value) + "\n" + " " * level + "]"
