"""``python -m bench explain``: what each framework actually built for one small batch.

The teaching companion of ``docs/static-vs-dynamic.md``. For one batch it reports, side by side, what each framework of
the registry built, read by its Platform (``impl_<framework>/explain.py``, whose docstring says what it shows): a
define-by-run framework's recorded graph and how often its Python loop called Tracker and Reduce; a compiled framework's
traced program, its loop body, the state the body receives and the trace and compile times; and for all, how many traces
the batch, the same words as other trees, and the same batch padded wider needed (a define-by-run framework: none, it
records afresh).

Everything is read from the Runners the benchmark and training use (their recorded graphs, traced functions and
programs), not from a second copy of the models. ``--out DIR`` writes the graphs (Graphviz text, program text, graph
protos, as each framework has them). ``--json`` prints the figures as JSON. ``--bad-input`` shows what each framework
does with an invalid transition sequence or token id; ``--parse``, what deciding the parse at run time costs it;
``--levels``, the batch's host-scheduled levels and the loop each levels implementation runs over them.

The guides' code excerpts and explain blocks are kept in step with the code by ``python -m bench check`` and rewritten
by ``python -m bench render`` (bench/render/); ``--check-guide`` and ``--sync-guide`` are those commands for the
excerpts, explain blocks and figures alone (of ``--guide`` only, if given).

Counts (nodes, ops, equations, traces) are deterministic for a given library version; times are single measurements and
vary from run to run.
"""

from __future__ import annotations

import argparse
import json

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
    if args.check_guide or args.sync_guide:  # aliases of bench check and bench render
        from bench.render import command

        problems, counts = command.run([args.guide] if args.guide else None, write=args.sync_guide,
                                       only=("code", "explain", "figures"))
        return command.report(problems, counts, args.sync_guide)
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0
