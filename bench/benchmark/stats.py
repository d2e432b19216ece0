"""What a run's records say when read together: speed ratios round by round, and which rounds were busy.

The statistics behind the report, ``bench compare``, the figures and the documents' quotes (bench/render), so that all
of them read a run alike.
"""

from __future__ import annotations

import numpy as np

from bench import frameworks
from bench.benchmark.record import Measurement


def round_ratios(records: list[Measurement], baseline: str | None = None) -> list[dict]:
    """Each implementation's speed over the baseline's, measured round by round.

    Where both records come from the same run's interleaved rounds, the ratio is taken in every round (the same batches,
    seconds apart) and summarised by its median, quartiles and range; otherwise (records of different runs) it is the
    ratio of the two overall figures, marked as not interleaved (``rounds`` 0). The baseline is the registry's unless
    named.
    """
    baseline = baseline or frameworks.BASELINE
    base = {r.key()[:-1]: r for r in records if r.implementation == baseline}
    own = run_share(records)
    rows = []
    for r in sorted(records, key=Measurement.key):
        key = r.key()[:-1]  # the same measurement of the baseline
        b = base.get(key)
        if r.implementation == baseline or b is None:
            continue
        same_run = (r.run_id == b.run_id and r.round_pairs_per_s
                    and len(r.round_pairs_per_s) == len(b.round_pairs_per_s))
        ratios = (np.array(r.round_pairs_per_s) / np.array(b.round_pairs_per_s) if same_run
                  else np.array([r.pairs_per_s / b.pairs_per_s]))
        q1, median, q3 = np.percentile(ratios, [25, 50, 75])
        mine, theirs = busy_rounds(r, own), busy_rounds(b, own)  # a round is busy where either side's was
        rows.append({"device": key[0], "mode": key[1], "transitions": key[2], "batch_size": key[3],
                     "implementation": r.implementation, "median": float(median), "q1": float(q1),
                     "q3": float(q3), "min": float(ratios.min()), "max": float(ratios.max()),
                     "rounds": len(ratios) if same_run else 0, "data": r.data,
                     "round_ratios": ratios.tolist(), "busy": [x or y for x, y in zip(mine, theirs)]
                     if same_run and mine is not None and theirs is not None else None})
    return rows


def device_fraction(r: Measurement) -> float:
    """Useful FLOP/s over the best matmul any framework reached on the device in the run (or, in older records, its
    own framework's peak)."""
    return r.useful_flops_per_s / (r.device_peak_flops_per_s or r.matmul_peak_flops_per_s)


# ---------------------------------------------------------------------------
# Busy rounds (docs/spec.md §6, "Decision: load in every round")
# ---------------------------------------------------------------------------

def other_work_limit(cores: int) -> float:
    """How many cores' worth of other work makes a machine busy: one core, or a quarter of them on a larger machine."""
    return max(1.0, cores / 4)


def is_busy(load: float, cores: int, own: float = 0.0) -> bool:
    """The rule that marks a round as measured on a busy machine (docs/spec.md §6, "Decision: load in every round"):
    the load less ``own``, the cores the run's own workers keep busy (:func:`run_share`; 0 before a run starts), above
    :func:`other_work_limit`."""
    return load - own > other_work_limit(cores)


def run_share(records: list[Measurement]) -> float:
    """The cores a run's own timed processes kept busy: the median CPU share of every round (0 where none was kept)."""
    shares = [share for r in records for share in r.round_cpu_share]
    return float(np.median(shares)) if shares else 0.0


def busy_rounds(record: Measurement, own: float) -> list[bool] | None:
    """Which of a record's rounds ran on a busy machine (``own``: the run's :func:`run_share`); None where the record
    has no load figures (runs from before they were recorded)."""
    if not record.round_load or not record.cpu_count:
        return None
    return [is_busy(load, record.cpu_count, own) for load in record.round_load]


def busy_count(row: dict) -> int:
    """How many rounds of a ratio row (round_ratios) were busy."""
    return sum(row.get("busy") or [])


def round_flags(records: list[Measurement]) -> list[bool]:
    """Every timed round of a run: busy or not."""
    own = run_share(records)
    return [flag for r in records for flag in (busy_rounds(r, own) or [])]
