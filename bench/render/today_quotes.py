"""Quote functions of the lessons' probes: results/today/today.json (python -m lessons.today).

``today KEY`` quotes one entry of the record, KEY dotted (``jax.while_loop.reverse``,
``torch.compile.eager.batches.0.graph_breaks``; a list takes its index). What it writes follows
the value: a boolean is ``yes`` or ``no``, an integer a count, a float of seconds (a key ending in
``seconds`` or ``_s``) seconds, another float a number, a string as it is. ``today-ratio KEY OVER``
is one float over another, as a ratio (how many times as long).
"""

from __future__ import annotations

from bench.render.registry import lookup, quote
from bench.render.values import QuoteError, Value

RECORD = "today.json"


def _entry(results, folder, key):
    value = lookup(results.json(folder, RECORD), key)
    if value is None:
        raise QuoteError(f"results/{folder}/{RECORD}: {key} is null (the probe did not get that far)")
    return value


@quote("today")
def today(results, folder, key) -> Value:
    value = _entry(results, folder, key)
    if isinstance(value, bool):
        return Value("yes" if value else "no", "text")
    if isinstance(value, int):
        return Value(value, "count")
    if isinstance(value, float):
        last = key.split(".")[-1]
        return Value(value, "seconds" if last.endswith(("seconds", "_s")) else "number")
    if isinstance(value, str):
        return Value(value, "text")
    raise QuoteError(f"results/{folder}/{RECORD}: {key} is a {type(value).__name__}, not one value")


@quote("today-ratio")
def today_ratio(results, folder, key, over) -> Value:
    top, bottom = _entry(results, folder, key), _entry(results, folder, over)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (top, bottom)) or not bottom:
        raise QuoteError(f"results/{folder}/{RECORD}: {key} over {over} is no ratio of two numbers")
    return Value(top / bottom, "ratio", digits=0 if top / bottom >= 10 else 1)
