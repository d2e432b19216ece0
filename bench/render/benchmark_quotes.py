"""Quote functions of the benchmark's folders: ratios, record fields, busy rounds, targets, bench data, bench scale."""

from __future__ import annotations

import numpy as np

from bench import frameworks
from bench.benchmark import compare as compare_runs
from bench.benchmark import stats
from bench.benchmark import targets as targets_module
from bench.benchmark.record import Measurement
from bench.render.registry import kind, lookup, quote
from bench.render.sources import Results
from bench.render.values import QuoteError, Value
from bench.training import scaling

# ---------------------------------------------------------------------------
# Selecting benchmark records
# ---------------------------------------------------------------------------

def _match(value, pattern: str) -> bool:
    return pattern == "*" or str(value) in pattern.split(",")


def select(results: Results, folder: str, impl: str, mode: str, transitions: str, batch: str) -> list[Measurement]:
    records = [r for r in results.measurements(folder)
               if _match(r.implementation, impl) and _match(r.mode, mode)
               and _match(r.transitions, transitions) and _match(r.batch_size, batch)]
    if not records:
        raise QuoteError(f"results/{folder}: no record of {impl} {mode} {transitions} batch {batch}")
    return records


def _ratio_row(results: Results, folder: str, mode, transitions, batch, impl, over=None) -> dict:
    baseline = over or frameworks.BASELINE
    rows = [row for row in stats.round_ratios(results.measurements(folder), baseline)
            if row["mode"] == mode and row["transitions"] == transitions and str(row["batch_size"]) == batch
            and row["implementation"] == impl]
    if len(rows) != 1:
        raise QuoteError(f"results/{folder}: {len(rows)} ratios of {impl} over {baseline}, {mode} {transitions} "
                         f"batch {batch}")
    return rows[0]


@quote("ratio")
def ratio(results, folder, mode, transitions, batch, impl, over=None) -> Value:
    """The median of the per-round ratios of IMPL's pairs/s over the baseline's (or OVER's)."""
    return Value(_ratio_row(results, folder, mode, transitions, batch, impl, over)["median"], "ratio")


@quote("iqr")
def iqr(results, folder, mode, transitions, batch, impl, over=None) -> Value:
    row = _ratio_row(results, folder, mode, transitions, batch, impl, over)
    return Value((row["q1"], row["q3"]), "number", digits=2)


@quote("minmax")
def minmax(results, folder, mode, transitions, batch, impl, over=None) -> Value:
    row = _ratio_row(results, folder, mode, transitions, batch, impl, over)
    return Value((row["min"], row["max"]), "number", digits=2)


@quote("best")
def best(results, folder, mode, transitions, batch) -> Value:
    """The implementation that builds its graph ahead of time with the highest median ratio over the baseline
    (the report's "best static")."""
    rows = [row for row in stats.round_ratios(results.measurements(folder))
            if row["mode"] == mode and row["transitions"] == transitions and str(row["batch_size"]) == batch
            and row["implementation"] not in frameworks.EAGER]
    if not rows:
        raise QuoteError(f"results/{folder}: no static implementation measured {mode} {transitions} batch {batch}")
    return Value(max(rows, key=lambda row: row["median"])["implementation"], "text")


@quote("busy")
def busy(results, folder, mode, transitions, batch, impl, over=None) -> Value:
    """How many of the ratio's rounds were busy (docs/spec.md §6)."""
    row = _ratio_row(results, folder, mode, transitions, batch, impl, over)
    return Value(sum(row["busy"] or []), "count")


def _values(results, folder, impl, mode, transitions, batch, key) -> list:
    return [lookup(r, key) for r in select(results, folder, impl, mode, transitions, batch)]


@quote("field")
def field(results, folder, impl, mode, transitions, batch, key) -> Value:
    """One record's KEY (dotted for nested keys): IMPL MODE TRANSITIONS BATCH must name one record."""
    values = _values(results, folder, impl, mode, transitions, batch, key)
    if len(values) != 1:
        raise QuoteError(f"results/{folder}: {len(values)} records of {impl} {mode} {transitions} batch {batch}; "
                         "field needs one (span or total for several)")
    value = values[0]
    return Value(value, "text" if isinstance(value, str) else kind(key))


@quote("field-ratio")
def field_ratio(results, folder, impl, other, mode, transitions, batch, key) -> Value:
    """IMPL's KEY over OTHER's KEY in the same measurement (``phase_s_per_batch.evaluate`` of dynet-unbatched
    over dynet's: how much faster one phase ran)."""
    mine = field(results, folder, impl, mode, transitions, batch, key).value
    theirs = field(results, folder, other, mode, transitions, batch, key).value
    return Value(mine / theirs, "ratio", digits=1)


@quote("span")
def span(results, folder, impl, mode, transitions, batch, key) -> Value:
    """The smallest and largest KEY over the records selected (one value where they are equal)."""
    values = _values(results, folder, impl, mode, transitions, batch, key)
    low, high = min(values), max(values)
    return Value(low if low == high else (low, high), kind(key))


@quote("total")
def total(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(float(np.sum(_values(results, folder, impl, mode, transitions, batch, key))), kind(key))


@quote("most")
def most(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(max(_values(results, folder, impl, mode, transitions, batch, key)), kind(key))


@quote("least")
def least(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(min(_values(results, folder, impl, mode, transitions, batch, key)), kind(key))


def _round_flags(results, folder) -> list[bool]:
    return stats.round_flags(results.measurements(folder))


@quote("rounds-busy")
def rounds_busy(results, folder) -> Value:
    """How many timed rounds of the whole run were busy."""
    return Value(sum(_round_flags(results, folder)), "count")


@quote("rounds-all")
def rounds_all(results, folder) -> Value:
    return Value(len(_round_flags(results, folder)), "count")


def _compared(results, folder, first) -> dict:
    return compare_runs.compare(results.measurements(first), results.measurements(folder))


@quote("inside")
def inside(results, folder, first) -> Value:
    """How many of this run's ratio medians lie inside FIRST's per-round min-max (bench compare FIRST this)."""
    return Value(_compared(results, folder, first)["inside"], "count")


@quote("compared")
def compared(results, folder, first) -> Value:
    return Value(_compared(results, folder, first)["compared"], "count")


def _target(results, folder, words: tuple[str, ...]) -> dict:
    text = " ".join(words)
    rows = [row for row in targets_module.targets(results.measurements(folder)) if text in row["target"]]
    if len(rows) != 1:
        raise QuoteError(f"results/{folder}: {len(rows)} targets contain {text!r}")
    return rows[0]


@quote("target")
def target(results, folder, *words) -> Value:
    """PASS or MISS: the report's verdict on the one target whose name contains WORDS."""
    return Value("PASS" if _target(results, folder, words)["met"] else "MISS", "text")


@quote("target-value")
def target_value(results, folder, *words) -> Value:
    return Value(_target(results, folder, words)["measured"], "text")


@quote("wall")
def wall(results, folder) -> Value:
    """How long ``bench reproduce`` took to make the folder."""
    return Value(results.stamp(folder)["wall_s"], "wall")


# ---------------------------------------------------------------------------
# bench data, bench scale
# ---------------------------------------------------------------------------

DATA_KINDS = {"waste": "percent", "loop_waste": "percent", "masked_flops_over_useful": "ratio",
              "loop_steps_per_batch": "number", "mean": "number"}


@quote("data")
def data(results, folder, batch, key) -> Value:
    """A figure of ``bench data --batch-size BATCH`` (results/data/batch-BATCH.json), KEY dotted."""
    value = lookup(results.json(folder, f"batch-{batch}.json"), key)
    last = key.split(".")[-1]
    return Value(value, DATA_KINDS.get(last, "count" if isinstance(value, int) else "number"))


@quote("data-count")
def data_count(results, folder, batch, key) -> Value:
    """How many items a list of ``bench data --batch-size BATCH`` holds (``sentences.padding.shapes``...)."""
    return Value(len(lookup(results.json(folder, f"batch-{batch}.json"), key)), "count")


SCALE_KINDS = {"pairs_per_s": "number", "speedup": "ratio", "speedup_q1": "number", "speedup_q3": "number",
               "efficiency": "percent", "straggler_gap_s": "seconds", "straggler_gap_share": "percent"}


@quote("scale")
def scale(results, folder, framework, replicas, key) -> Value:
    """A figure of bench scale's report: FRAMEWORK with REPLICAS replicas, KEY a column of scaling.summary
    (``compute_s.0``: replica 0's compute)."""
    rows = [row for row in scaling.summary(results.records(folder))
            if row["framework"] == framework and str(row["replicas"]) == replicas]
    if len(rows) != 1:
        raise QuoteError(f"results/{folder}: no scaling row of {framework} with {replicas} replicas")
    value = lookup(rows[0], key)
    if value is None:
        raise QuoteError(f"results/{folder}: {framework} x{replicas} has no {key}")
    base = key.split(".")[0]
    return Value(value, SCALE_KINDS.get(base, "seconds" if base.endswith("_s") else "number"),
                 digits=3 if base in ("compute_s", "allreduce_wait_s", "straggler_gap_s") else None)


@quote("scale-iqr")
def scale_iqr(results, folder, framework, replicas) -> Value:
    q1 = scale(results, folder, framework, replicas, "speedup_q1").value
    q3 = scale(results, folder, framework, replicas, "speedup_q3").value
    return Value((q1, q3), "number", digits=2)
