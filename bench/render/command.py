"""``python -m bench render`` writes every marker of README.md and docs/, explain.json and the figures from their
sources; ``python -m bench check`` changes nothing and exits 1 naming each that differs (bench/render/__init__.py).
``render --check`` is ``check``; ``figures`` and ``figures --check`` are ``render`` and ``check --only figures``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from bench import ROOT, reproduce
from bench.render import document
from bench.render.sources import EXPLAIN_JSON, FIGURES_DIR, Results
from shared.files import written_aside

KINDS = document.KINDS + ("figures",)
# name -> (module of bench/figures, builder(results, pyplot) -> (figure, figures.json entry)); NAME.svg is drawn.
FIGURES = {"headline": ("runs", "headline"), "shift-reduce": ("parsing", "shift_reduce"),
           "thin-stack": ("parsing", "thin_stack_figure"), "graph-size": ("graphs", "graph_size"),
           "host-reads": ("runs", "host_reads"), "padding": ("runs", "padding"),
           "compile-shapes": ("runs", "compile_shapes"), "levels": ("parsing", "levels_figure")}
INDEX = "figures.json"


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def run(paths=None, *, write: bool = False, only=KINDS, root: Path = ROOT, redraw: bool = False):
    """(problems, counts) over ``paths`` (by default every document, explain.json and the figures). With ``write``,
    what differs from its source is rewritten and only what cannot be rendered is a problem. A quote of a stale
    folder (bench reproduce --check) is a problem either way."""
    if set(only) - set(KINDS) or not only:
        raise ValueError(f"--only: a comma list of {', '.join(KINDS)}, not {','.join(only)!r}")
    results, outcomes = Results(root), []
    for path in paths or documents(root):
        outcomes.append(document.render(Path(path), results, only=only, write=write))
        if write and outcomes[-1].text != Path(path).read_text():
            with written_aside(path) as tmp:
                tmp.write_text(outcomes[-1].text)
            print(f"render: wrote {path}", file=sys.stderr)
    problems = [p for o in outcomes for p in o.problems]
    counts = {k: sum(o.counts[k] for o in outcomes) for k in outcomes[0].counts} if outcomes else {}
    shown = set().union(*(o.measured_at for o in outcomes))
    digests: dict = {}
    for name in sorted(set().union(*(o.folders for o in outcomes))):
        reasons = reproduce.stale_reasons(results.entries[name], results.root, digests)
        # A folder this machine cannot make (a GPU run) stays quotable after its code changed where a document
        # shows its measured-at block, which names the commit it measured and says it is stale.
        if reasons and (name not in shown or reproduce.can_make(results.entries[name])):
            problems.append(f"results/{name} is quoted but stale ({reasons[0]}; python -m bench reproduce {name} "
                            "re-runs it)")
    if not paths and "explain" in only:
        problems += explain_json(results, outcomes, write)
    if not paths and "figures" in only:
        problems += figures(results, write, redraw)
        counts["figures"] = len(FIGURES)
    return problems, counts


def explain_json(results: Results, outcomes, write: bool) -> list[str]:
    """docs/figures/explain.json, the results of the documents' explain blocks that the figures read: an entry
    whose counts differ from a fresh run (times and versions aside) is a problem, or, with ``write``, rewritten."""
    path = results.root / FIGURES_DIR / EXPLAIN_JSON
    fresh = {fig: {"guide": document.display(o.path, results), "command": command, "result": result}
             for o in outcomes for fig, (command, result) in o.explained.items()}
    old = json.loads(path.read_text()) if path.exists() else {}
    masked = lambda entry: {**entry, "result": document.comparable(entry["result"])}  # noqa: E731
    differ = sorted(f for f in fresh.keys() | old.keys() if f not in fresh or f not in old
                    or masked(old[f]) != masked(fresh[f]))
    if write and differ:
        with written_aside(path) as tmp:
            tmp.write_text(json.dumps({f: fresh[f] if f in differ else old[f] for f in fresh}, indent=1,
                                      sort_keys=True) + "\n")
    return [] if write else [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} differs from a fresh run of the documents' explain "
                             "blocks" for f in differ]


def figures(results: Results, write: bool, redraw: bool = False) -> list[str]:
    """The figures, checked through their numbers: each is drawn afresh and its figures.json entry (what it drew
    and from where) compared with the committed one, never its SVG bytes, which change with matplotlib's
    version. With ``write`` a figure whose entry differs, or is missing, or every one (``redraw``) is saved."""
    from bench.figures import style

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


def register(sub) -> None:
    for name, text in (("render", "write every quoted value, block, excerpt and explain output of README.md and "
                                  "docs/, explain.json and the figures from their sources (--check: bench check)"),
                       ("check", "change nothing; exit 1 naming every quoted value, block, excerpt, explain output or "
                                 "figure that differs from its source, and every quote of a stale folder")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("paths", nargs="*", help="Markdown files [README.md and docs/*.md, explain.json, the figures]")
        p.add_argument("--only", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)} [all]")
        p.add_argument("--check", action="store_true", help=argparse.SUPPRESS if name == "check" else
                       "the same as python -m bench check")
        p.set_defaults(func=cmd_render, write=name == "render", redraw=False)
    p = sub.add_parser("figures", help="redraw docs/figures/ (render --only figures; --check: check --only figures)")
    p.add_argument("--check", action="store_true", help="the same as python -m bench check --only figures")
    p.set_defaults(func=cmd_render, write=True, paths=[], only="figures", redraw=True)


def cmd_render(args) -> int:
    write = args.write and not args.check
    problems, counts = run(args.paths or None, write=write, only=tuple(k for k in args.only.split(",") if k),
                           redraw=args.redraw and write)
    return report(problems, counts, write)


def report(problems: list[str], counts: dict, write: bool) -> int:
    """Print the problems and what was covered; the exit code (1 where a problem is left)."""
    for problem in problems:
        print(problem)
    covered = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing"
    print(f"{len(problems)} problem(s); covered {covered}" if problems else
          f"{'rendered' if write else 'checked'} {covered}: each one from its source", file=sys.stderr)
    return 1 if problems else 0
