"""Quote functions of training runs: a run is a sub-folder holding metrics.jsonl (bench train)."""

from __future__ import annotations

from bench.render.registry import lookup, quote
from bench.render.values import QuoteError, Value
from bench.training import curves

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
