"""The block functions: a table (or a few lines) rendered from the records of one results folder.

A document writes ``<!-- render: NAME FOLDER ARGS... -->``, then the text this
module renders, then ``<!-- /render -->``. The tables use the reports' own
helpers (``bench.benchmark.report``, ``bench.training``), so they read a run
as its report does.
"""

from __future__ import annotations

from typing import Callable

from bench.render.sources import Results
from bench.render.values import QuoteError

BLOCKS: dict[str, Callable[..., str]] = {}


def block(name: str):
    def register(fn):
        BLOCKS[name] = fn
        return fn
    return register


def render(results: Results, name: str, folder: str, *args: str) -> str:
    if name not in BLOCKS:
        raise QuoteError(f"unknown block function {name!r}; choose from {', '.join(sorted(BLOCKS))}")
    try:
        return BLOCKS[name](results, folder, *args)
    except TypeError as err:
        raise QuoteError(f"{name}: wrong arguments ({err})") from None
