"""The quote functions: one number (or range, or word) from the records of one results folder.

A document writes ``[TEXT](results/FOLDER "NAME ARGS...")``; ``NAME`` is a
function below, called with the folder and the arguments. Every function
reads records with the same helpers as the reports (``bench.benchmark.report``,
``bench.training.curves``, ``bench.training.scaling``), so a document and a
report can never read a run differently. ``NAME:K`` writes K digits after
the point; ``NAME:KIND`` writes the value as another kind (values.KINDS).

Arguments that select records take ``*`` (any) or comma lists; batch sizes
are numbers. The functions, by the folders they read:

benchmark (results.jsonl): ``ratio``, ``iqr``, ``minmax``, ``busy``,
``best``, ``field``, ``field-ratio``, ``span``, ``total``, ``most``, ``least``,
``rounds-busy``, ``rounds-all``, ``inside``, ``compared``, ``target``,
``target-value``;
any folder: ``wall`` (how long ``bench reproduce`` took);
``data``: ``data``, ``data-count``; ``cpu-scaling``: ``scale``, ``scale-iqr``;
``today`` (the lessons' probes, today.json): ``today``, ``today-ratio``;
training runs (RUN/metrics.jsonl): ``acc``, ``eval``, ``train``,
``first-epoch``, ``train-wall``, ``eval-time``, ``loss-diff``,
``loss-diff-span``, ``loss-diff-max``, ``train-diff``, ``steps``,
``run-info``, ``parse-summary``.
"""

from __future__ import annotations

# The quote functions register themselves (bench/render/registry.py) as their modules are imported.
from bench.render import benchmark_quotes, today_quotes, training_quotes  # noqa: F401
from bench.render.registry import QUOTES
from bench.render.sources import Results
from bench.render.values import KINDS, QuoteError, Value

def evaluate(results: Results, folder: str, query: str) -> str:
    """The text a quote writes: ``query`` is ``NAME[:MOD...] ARGS...``."""
    words = query.split()
    if not words:
        raise QuoteError("an empty query")
    name, *mods = words[0].split(":")
    if name not in QUOTES:
        raise QuoteError(f"unknown quote function {name!r}; choose from {', '.join(sorted(QUOTES))}")
    digits, kind = None, None
    for mod in mods:
        if mod.isdigit():
            digits = int(mod)
        elif mod in KINDS:
            kind = mod
        else:
            raise QuoteError(f"{words[0]}: {mod!r} is neither a number of digits nor a kind ({', '.join(KINDS)})")
    try:
        value = QUOTES[name](results, folder, *words[1:])
    except TypeError as err:
        raise QuoteError(f"{name}: wrong arguments ({err})") from None
    if kind:
        value = Value(value.value, kind, separator=value.separator)
    return value.write(digits)
