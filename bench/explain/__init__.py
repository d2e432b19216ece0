"""``python -m bench explain``: what each framework actually built for one small batch.
docs/static-vs-dynamic.md §3 says what it shows."""

from __future__ import annotations

import json

from bench.config import quiet_frameworks
from bench.explain.views import add_arguments, format_text, run


def register(sub) -> None:
    p = sub.add_parser("explain", help="what each framework built for one small batch: graph sizes, traces, times",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args) -> int:
    quiet_frameworks()
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0
