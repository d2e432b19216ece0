"""``python -m bench render``: write (or ``--check``) every quote and block of README.md and docs/."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import reproduce
from bench.render.document import render
from bench.render.sources import Results
from shared.files import written_aside

ROOT = reproduce.ROOT


def documents(root: Path = ROOT) -> list[Path]:
    """What is rendered: the README and every Markdown file of docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def run(paths=None, *, write: bool = False, root: Path = ROOT) -> tuple[list[str], list]:
    """(problems, outcomes) over ``paths`` (every document by default); with ``write``, documents whose quotes
    and blocks differ from their records are rewritten, and only what cannot be rendered is a problem. A quote
    of a stale folder (bench reproduce --check) is always a problem."""
    results = Results(root)
    outcomes = [render(Path(p), results) for p in (paths or documents(root))]
    problems = []
    for outcome in outcomes:
        if write:
            if outcome.text != outcome.path.read_text():
                with written_aside(outcome.path) as tmp:
                    tmp.write_text(outcome.text)
            problems += [p for p in outcome.problems if "differs from its records" not in p
                         and "its record says" not in p and "should read" not in p]
        else:
            problems += outcome.problems
    quoted = set().union(*(o.folders for o in outcomes)) if outcomes else set()
    digests: dict = {}
    texts = "\n".join(o.text for o in outcomes)
    for name in sorted(quoted):
        reasons = reproduce.stale_reasons(results.entries[name], root, digests)
        if not reasons:
            continue
        # A folder this machine cannot make (a GPU run) may stay quoted after its code changed, where a
        # document says so: its measured-at block names the commit it measured and that it is stale.
        if not reproduce.can_make(results.entries[name]) and f"<!-- render: measured-at {name} -->" in texts:
            continue
        problems.append(f"results/{name} is quoted but stale ({reasons[0]}; python -m bench reproduce "
                        f"{name} re-runs it)")
    return problems, outcomes


def register(sub) -> None:
    p = sub.add_parser("render", help="write every measured number and results table of README.md and docs/ from "
                                      "the records of results/ (--check: exit 1 where one differs or is typed)",
                       description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", help="Markdown files [default: README.md and docs/*.md]")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 naming every quote or block that differs from its records, every "
                        "quote of a stale folder, every measured-looking number typed in the prose")
    p.set_defaults(func=cmd_render)


def cmd_render(args) -> int:
    problems, outcomes = run(args.paths or None, write=not args.check)
    for problem in problems:
        print(problem)
    quotes = sum(o.quotes for o in outcomes)
    blocks = sum(o.blocks for o in outcomes)
    if problems:
        print(f"{len(problems)} problem(s) in {len(outcomes)} documents ({quotes} quotes, {blocks} blocks)",
              file=sys.stderr)
        return 1
    print(f"{'checked' if args.check else 'rendered'} {quotes} quotes and {blocks} blocks in {len(outcomes)} "
          f"documents: every one from its record", file=sys.stderr)
    return 0
