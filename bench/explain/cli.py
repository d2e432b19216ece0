"""``python -m bench explain``: what each framework actually built for one small batch.

The teaching companion of ``docs/static-vs-dynamic.md``. For one batch it
reports, side by side, what each framework of the registry built, read by its
Platform (``impl_<framework>/explain.py``, whose docstring says what it
shows): a define-by-run framework's recorded graph and how often its Python
loop called Tracker and Reduce; a compiled framework's traced program, its
loop body, the state the body receives and the trace and compile times; and
for all, how many traces the batch, the same words as other trees, and the
same batch padded wider needed (a define-by-run framework: none, it records
afresh).

Everything is read from the Runners the benchmark and training use (their
recorded graphs, traced functions and programs), not from a second copy of
the models. ``--out DIR`` writes the graphs (Graphviz text, program text,
graph protos, as each framework has them). ``--json`` prints the figures as
JSON. ``--bad-input`` shows what each framework does with an invalid
transition sequence or token id; ``--parse``, what deciding the parse at run
time costs it; ``--levels``, the batch's host-scheduled levels and the loop
each levels implementation runs over them.

The guide's code excerpts and figure blocks are kept in step with the code by
``--check-guide`` (exit 1 and a diff on drift) and ``--sync-guide`` (rewrite
them from the sources and fresh runs); the tests run the same check
(bench/guide_sync.py).

Counts (nodes, ops, equations, traces) are deterministic for a given library
version; times are single measurements and vary from run to run.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import guide_sync
from bench.config import quiet_frameworks
from bench.explain.arguments import add_arguments
from bench.explain.report import format_text, run


def register(sub) -> None:
    p = sub.add_parser("explain", help="what each framework built for one small batch: graph sizes, traces, times",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    quiet_frameworks()
    if args.check_guide or args.sync_guide:
        failed = False
        results: dict = {}  # figure commands shared by the guides run once
        for guide in [args.guide] if args.guide else guide_sync.GUIDES:
            problems = guide_sync.sync_guide(guide, write=args.sync_guide, results=results)
            for problem in problems:
                print(problem, file=sys.stderr)
            failed = failed or bool(problems)
            if args.sync_guide:
                print(f"synced {guide}" + (f"; {len(problems)} problem(s) left to fix by hand" if problems else ""))
            else:
                print(f"{guide}: {'drifted' if problems else 'in step with the code'}")
        if not args.guide:  # the blocks' results, as JSON: what the figures read of them
            problems = guide_sync.sync_explain_json(results, write=args.sync_guide)
            for problem in problems:
                print(problem, file=sys.stderr)
            failed = failed or bool(problems)
        if not args.guide:  # the figures the guides show are drawn from their explain blocks and the runs
            from bench.figures.command import FIGURES_DIR, check, draw
            if args.sync_guide:
                draw(FIGURES_DIR)
                print(f"redrew the figures in {FIGURES_DIR}")
            else:
                stale = check(FIGURES_DIR)
                for name in stale:
                    print(f"figure {FIGURES_DIR / name} is out of date (python -m bench figures redraws it)",
                          file=sys.stderr)
                print(f"{FIGURES_DIR}: {'out of date' if stale else 'in step with the guides and runs'}")
                failed = failed or bool(stale)
        return 1 if failed else 0
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0
