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
training runs (RUN/metrics.jsonl): ``acc``, ``eval``, ``train``,
``first-epoch``, ``train-wall``, ``eval-time``, ``loss-diff``,
``loss-diff-span``, ``loss-diff-max``, ``train-diff``, ``steps``,
``run-info``, ``parse-summary``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from bench import frameworks
from bench.benchmark import compare as compare_runs
from bench.benchmark import report
from bench.render.sources import Results
from bench.render.values import KINDS, QuoteError, Value
from bench.training import curves, scaling

QUOTES: dict[str, Callable[..., Value]] = {}


def quote(name: str):
    def register(fn):
        QUOTES[name] = fn
        return fn
    return register


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


# ---------------------------------------------------------------------------
# Selecting benchmark records
# ---------------------------------------------------------------------------

def _match(value, pattern: str) -> bool:
    return pattern == "*" or str(value) in pattern.split(",")


def select(results: Results, folder: str, impl: str, mode: str, transitions: str, batch: str) -> list[dict]:
    records = [r for r in results.records(folder)
               if _match(r["implementation"], impl) and _match(r["mode"], mode)
               and _match(r.get("transitions", "gold"), transitions) and _match(r["batch_size"], batch)]
    if not records:
        raise QuoteError(f"results/{folder}: no record of {impl} {mode} {transitions} batch {batch}")
    return records


def _ratio_row(results: Results, folder: str, mode, transitions, batch, impl, over=None) -> dict:
    baseline = over or frameworks.BASELINE
    rows = [row for row in report.round_ratios(results.records(folder), baseline)
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
    rows = [row for row in report.round_ratios(results.records(folder))
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


# Keys that are not stored but computed from a record, and the kind of every key a document quotes.
DERIVED = {
    "compile_per_shape": lambda r: r["compile_s"] / max(r.get("warmup_shapes", 1), 1),
    "cached_compile_per_shape": lambda r: r["cached_compile"]["compile_s"] / max(r["cached_compile"]["shapes"], 1),
}


def _kind(key: str) -> str:
    last = key.split(".")[-1]
    if last in ("pairs_per_s", "host_syncs_per_batch"):
        return "number"
    if last in ("useful_fraction_of_device_peak", "flops_fraction_of_peak", "parse_agreement") or \
            last.startswith("padding_waste"):
        return "percent"
    if last.startswith("max_abs_err") or last.startswith("max_rel_err"):
        return "relative"
    if last in ("useful_flops_per_s", "matmul_peak_flops_per_s", "device_peak_flops_per_s"):
        return "gflops"
    if last.endswith("_bytes"):
        return "mib"
    if last.endswith("_s") or last.endswith("_s_median") or last == "compile_per_shape" or \
            last == "cached_compile_per_shape" or last.startswith("step_s"):
        return "seconds"
    if last in ("traces", "warmup_shapes", "batches_per_round", "timed_batches", "rounds", "cache_hits",
                "cpu_count", "agreement_pairs", "batch_size", "timed_pairs", "matmul_peak_n"):
        return "count"
    return "number"


def lookup(record: dict, key: str):
    if key in DERIVED:
        return DERIVED[key](record)
    value = record
    for part in key.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise QuoteError(f"no {key!r} in the record of {record.get('implementation', '?')}")
    return value


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
    return Value(value, "text" if isinstance(value, str) else _kind(key))


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
    return Value(low if low == high else (low, high), _kind(key))


@quote("total")
def total(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(float(np.sum(_values(results, folder, impl, mode, transitions, batch, key))), _kind(key))


@quote("most")
def most(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(max(_values(results, folder, impl, mode, transitions, batch, key)), _kind(key))


@quote("least")
def least(results, folder, impl, mode, transitions, batch, key) -> Value:
    return Value(min(_values(results, folder, impl, mode, transitions, batch, key)), _kind(key))


def _round_flags(results, folder) -> list[bool]:
    records = results.records(folder)
    own = report.run_share(records)
    return [flag for r in records for flag in (report.busy_rounds(r, own) or [])]


@quote("rounds-busy")
def rounds_busy(results, folder) -> Value:
    """How many timed rounds of the whole run were busy."""
    return Value(sum(_round_flags(results, folder)), "count")


@quote("rounds-all")
def rounds_all(results, folder) -> Value:
    return Value(len(_round_flags(results, folder)), "count")


def _compared(results, folder, first) -> dict:
    return compare_runs.compare(results.records(first), results.records(folder))


@quote("inside")
def inside(results, folder, first) -> Value:
    """How many of this run's ratio medians lie inside FIRST's per-round min-max (bench compare FIRST this)."""
    return Value(_compared(results, folder, first)["inside"], "count")


@quote("compared")
def compared(results, folder, first) -> Value:
    return Value(_compared(results, folder, first)["compared"], "count")


def _target(results, folder, words: tuple[str, ...]) -> dict:
    text = " ".join(words)
    rows = [row for row in report.targets(results.records(folder)) if text in row["target"]]
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


# ---------------------------------------------------------------------------
# Training runs: RUN is a sub-folder holding metrics.jsonl
# ---------------------------------------------------------------------------

def _evals(results, folder, run, split) -> list[dict]:
    evals = [r for r in results.metrics(folder, run) if r.get("kind") == "eval" and r["split"] == split]
    if not evals:
        raise QuoteError(f"results/{folder}/{run}: no {split} evaluation")
    return evals


def _pick(records: list[dict], which: str, key: str = "accuracy") -> dict:
    if which == "last":
        return records[-1]
    if which == "best":
        return max(records, key=lambda r: r[key])
    if which.startswith("epoch="):
        epoch = float(which.partition("=")[2])
        chosen = [r for r in records if abs(r.get("epoch", -1) - epoch) < 1e-9]
        if not chosen:
            raise QuoteError(f"no record at epoch {which.partition('=')[2]}")
        return chosen[-1]
    if which.startswith("step="):
        step = int(which.partition("=")[2])
        chosen = [r for r in records if r.get("step") == step]
        if not chosen:
            raise QuoteError(f"no record at step {step}")
        return chosen[-1]
    raise QuoteError(f"which record: last, best, epoch=N or step=N, got {which!r}")


TRAIN_KINDS = {"accuracy": "percent", "loss": "number", "transition_loss": "number", "elapsed_s": "wall",
               "eval_s": "seconds"}


def _train_kind(key: str) -> str:
    if key in TRAIN_KINDS:
        return TRAIN_KINDS[key]
    if key.endswith(("_accuracy", "_rate", "_share")):
        return "percent"
    return "number"


@quote("acc")
def acc(results, folder, run, split, which="last") -> Value:
    """RUN's accuracy on SPLIT (dev or train) at its last, best, epoch=N or step=N evaluation."""
    return Value(_pick(_evals(results, folder, run, split), which)["accuracy"], "percent")


@quote("eval")
def eval_(results, folder, run, split, which, key) -> Value:
    """A key of one of RUN's evaluations on SPLIT (``parsing.bracket_f1``...)."""
    return Value(lookup(_pick(_evals(results, folder, run, split), which), key), _train_kind(key.split(".")[-1]))


@quote("train")
def train(results, folder, run, which, key) -> Value:
    """A key of one of RUN's "train" records (the mean loss, reward, entropy... of a logging window)."""
    records = [r for r in results.metrics(folder, run) if r.get("kind") == "train"]
    if not records:
        raise QuoteError(f"results/{folder}/{run}: no train records")
    return Value(lookup(_pick(records, which, key), key), _train_kind(key.split(".")[-1]))


@quote("first-epoch")
def first_epoch(results, folder, run, split, threshold) -> Value:
    """The first epoch whose SPLIT accuracy reached THRESHOLD (a fraction)."""
    for r in _evals(results, folder, run, split):
        if r["accuracy"] >= float(threshold):
            return Value(int(round(r["epoch"])), "plain")
    raise QuoteError(f"results/{folder}/{run}: {split} accuracy never reached {threshold}")


@quote("train-wall")
def train_wall(results, folder, run) -> Value:
    """RUN's wall time as its metrics recorded it (evaluations included)."""
    return Value(max(r.get("elapsed_s", 0.0) for r in results.metrics(folder, run)), "wall")


@quote("eval-time")
def eval_time(results, folder, run) -> Value:
    """The seconds RUN spent evaluating (eval_s, summed)."""
    return Value(sum(r.get("eval_s", 0.0) for r in results.metrics(folder, run) if r.get("kind") == "eval"),
                 "seconds", digits=0)


@quote("steps")
def steps(results, folder, run) -> Value:
    records = [r for r in results.metrics(folder, run) if r.get("kind") == "train"]
    return Value(records[-1]["step"] if records else 0, "count")


def _runs(results, folder, names: str) -> list[dict]:
    return curves.load_runs([results.run_dir(folder, name) for name in names.split(",")])


def _loss_diffs(results, folder, base: str, others: str) -> list[float]:
    runs = _runs(results, folder, f"{base},{others}")
    return [row["max_rel_diff"] for row in curves.loss_agreement(runs) if row["against"] == runs[0]["label"]]


@quote("loss-diff")
def loss_diff(results, folder, base, run) -> Value:
    """The largest relative difference of RUN's training-loss curve from BASE's (bench curves)."""
    return Value(_loss_diffs(results, folder, base, run)[0], "relative")


@quote("loss-diff-span")
def loss_diff_span(results, folder, base, runs) -> Value:
    """The smallest and largest of the RUNS' (comma list) loss-curve differences from BASE."""
    diffs = _loss_diffs(results, folder, base, runs)
    return Value((min(diffs), max(diffs)), "relative", separator=" to ")


@quote("loss-diff-max")
def loss_diff_max(results, folder, runs) -> Value:
    """The largest loss-curve difference between any two of RUNS (comma list)."""
    return Value(max(row["max_rel_diff"] for row in curves.loss_agreement(_runs(results, folder, runs))), "relative")


@quote("parse-summary")
def parse_summary(results, folder, run, key) -> Value:
    """A column of bench.training.parse_summary's row for RUN (an arithmetic run)."""
    from bench.training import parse_summary as summary

    row = summary.summarize(results.run_dir(folder, run))
    if key not in row:
        raise QuoteError(f"parse summary of {run} has no {key!r}; it has {', '.join(row)}")
    kinds = {"dev_accuracy_last": "percent", "dev_accuracy_best": "percent", "dev_bracket_f1": "number",
             "choice_reduce_share": "number", "entropy": "number", "wall_s": "seconds",
             "dev_exact_parse_rate": "percent", "steps": "count"}
    return Value(row[key], kinds.get(key, "number"), digits=3 if key in ("dev_bracket_f1",
                                                                          "choice_reduce_share") else None)


@quote("train-diff")
def train_diff(results, folder, base, runs, keys) -> Value:
    """The largest absolute difference, at the steps both logged, between BASE's "train" records and each of
    RUNS' (comma list) in any of KEYS (comma list: reward, baseline, entropy, left_share...); 0 when equal."""
    def logged(run):
        return {r["step"]: r for r in results.metrics(folder, run) if r.get("kind") == "train"}

    reference, worst, compared = logged(base), 0.0, 0
    for run in runs.split(","):
        for step, record in logged(run).items():
            if step not in reference:
                continue
            for key in keys.split(","):
                if key not in record or key not in reference[step]:
                    raise QuoteError(f"results/{folder}: no {key!r} in the train records of {run} or {base}")
                worst = max(worst, abs(record[key] - reference[step][key]))
                compared += 1
    if not compared:
        raise QuoteError(f"results/{folder}: {runs} and {base} logged no step in common")
    return Value(worst, "relative")


@quote("run-info")
def run_info(results, folder, run, key) -> Value:
    """A key of RUN's "run" record, the settings it started with (``train_pairs``, ``dev_pairs``...)."""
    head = next((r for r in results.metrics(folder, run) if r.get("kind") == "run"), None)
    if head is None:
        raise QuoteError(f"results/{folder}/{run}: no run record")
    value = lookup(head, key)
    return Value(value, "count" if isinstance(value, int) else "text" if isinstance(value, str) else "number")
