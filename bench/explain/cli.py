"""``python -m bench explain``: what each framework actually built for one small batch.

The teaching companion of ``docs/static-vs-dynamic.md``. For one batch it
reports, side by side:

* PyTorch (define-by-run): the autograd graph recorded for this batch's loss,
  walked from ``loss.grad_fn`` through ``next_functions`` (its node count, by
  type), how often the Python loop called Tracker and Reduce, and the node
  counts of the same words arranged as other trees, and of the same batch
  with more padding. A new batch is a new graph.
* TensorFlow (static graph): the ops of the traced ``tf.function`` (encode,
  and loss + gradients), the ops of each ``tf.while_loop`` body, the loop
  variables the body receives (shapes with ``?``), trace and first-call times.
* JAX (``jit`` + ``lax.scan``): the equations of the jaxpr (encode, and loss +
  gradients), of each scan body, the scan carry the body receives (shapes, no
  values), trace, lowering and XLA compile times.
* For all three: how many traces the batch, the same words as other trees,
  and the same batch padded wider needed (PyTorch: none, it records afresh).

Everything is read from the Runners the benchmark and training use (their
autograd root, traced functions and jaxprs), not from a second copy of the
models. ``--out DIR`` writes the graphs: the PyTorch autograd graph as
Graphviz text (written here by walking ``grad_fn``), the jaxprs as text, and
the TensorFlow graphs as GraphDef text (``.pbtxt``, the while bodies in its
function library). ``--json`` prints the figures as JSON. ``--bad-input``
shows what each framework does with an invalid transition sequence or token id.

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
        return 1 if failed else 0
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0
