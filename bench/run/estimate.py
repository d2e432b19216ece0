"""How long a planned run will take, from an earlier run's records (``bench run --estimate DIR``), so a plan can be
checked against a lent GPU machine's 10 minutes a command before it starts. An implementation without a record counts
as its framework's costliest at the same measurement; one whose framework has none is left out, each said so."""

from __future__ import annotations

import statistics
from datetime import datetime

from bench import frameworks
from bench.run import limit
from bench.run.measurement import Measurement

START_UP_S = 60.0  # where the records cannot tell it: workers started, agreement checked, peaks measured
BETWEEN_S = 5.0  # where they cannot tell it either: per measurement, beyond the implementations' own costs


def _cost(r: Measurement, rounds: int, cached: bool, shapes: int | None = None) -> tuple[float, float]:
    """(warm-up seconds, timed seconds at ``rounds`` rounds) of one record, its warm-up scaled to ``shapes``."""
    warm = max(r.compile_s, r.first_call_s) + ((r.cached_compile or {}).get("compile_s", 0.0) if cached else 0.0)
    if shapes and r.warmup_shapes:
        warm *= shapes / r.warmup_shapes
    timed = sum(r.round_step_s) * r.batches_per_round * rounds / max(r.rounds or len(r.round_step_s), 1)
    return warm, timed


def estimate(plan, records: list[Measurement], shapes: dict, measure_cache: bool) -> tuple[float, list[str]]:
    """(seconds, notes): what the planned run would take, by ``records``; ``shapes``: plan.py's planned_shapes."""
    # The start-up and the seconds between measurements as the earlier run spent them, read from when its records
    # were written (each as its measurement ended, the first after the start-up), where they tell.
    groups: dict[tuple, list[Measurement]] = {}
    for r in records:
        if r.timestamp and r.run_id:
            groups.setdefault((r.run_id, r.mode, r.batch_size, r.transitions), []).append(r)
    ends = sorted(((max(datetime.strptime(r.timestamp, "%Y-%m-%dT%H:%M:%S%z") for r in rs), rs)
                   for rs in groups.values()), key=lambda e: e[0])
    gaps = []
    for (previous, before), (end, rs) in zip(ends[:-1], ends[1:]):
        if before[0].run_id == rs[0].run_id:
            gap = (end - previous).total_seconds() - sum(sum(_cost(r, r.rounds, True)) for r in rs)
            if 0 <= gap < 600:
                gaps.append(gap)
    between = statistics.median(gaps) if gaps else BETWEEN_S
    notes = [] if gaps else [f"between measurements: {BETWEEN_S:g} s each (the records do not say)"]
    start_up = -1.0
    if ends:
        end, first = ends[0]
        try:
            started = datetime.strptime(first[0].run_id + "+0000", "%Y%m%dT%H%M%S%z")
            start_up = (end - started).total_seconds() - sum(sum(_cost(r, r.rounds, True)) for r in first)
        except ValueError:
            pass
    if not 0 <= start_up < 1800:  # a resumed run's id is its second part's start, after its first records
        start_up = START_UP_S
        notes.append(f"start-up: {START_UP_S:g} s (the records do not say)")
    total, counted = 0.0, set()
    missing: dict[str, str] = {}  # implementation -> how it was counted where it has no record
    keyed = {(r.implementation, r.mode, r.batch_size, r.transitions): r for r in records}
    for key in plan.keys:
        mode, batch_size, transitions = key
        products: dict[tuple, float] = {}  # (routine, kind) -> seconds per timed batch of those products
        for name in plan.names:
            framework = frameworks.resolve(name)[0]
            r = keyed.get((name, *key))
            if r is None:
                kin = [rec for (other, *k), rec in keyed.items() if tuple(k) == key
                       and frameworks.resolve(other)[0] == framework]
                alike = [rec for rec in kin if (rec.implementation in frameworks.EAGER) == (name in frameworks.EAGER)]
                kin = alike or kin  # an eager one costs as the eager ones do: nothing to compile
                if not kin:
                    missing[name] = f"no record of {framework} there: not counted"
                    continue
                r = max(kin, key=lambda rec: sum(_cost(rec, plan.rounds, measure_cache)))
                missing.setdefault(name, f"no record: counted as the costliest {framework} implementation "
                                         f"{'that compiles nothing' if name in frameworks.EAGER else 'that compiles'}")
            counted.add(name)
            warm, timed = _cost(r, plan.rounds, measure_cache and mode == "train" and transitions == "gold",
                                shapes.get((mode, batch_size)))
            total += warm + timed
            # Each kind timed once on the limit's process (the host's) and on each framework's own routine.
            limit_s = r.useful_s or r.useful_flops / max(r.timed_batches, 1) / max(  # older records: at the peak
                r.device_peak_flops_per_s or r.matmul_peak_flops_per_s, 1.0)
            own = limit.own_routine(type(frameworks.platform(framework)))
            for routine in ("numpy",) * (r.device == "cpu") + (framework,) * own:
                products[routine, "useful"] = limit_s
                products[routine, r.computed_kind or name] = (  # a record before computed_kind: its own
                    r.own_computed_s if routine == framework else r.computed_s) or limit_s
            batches = r.batches_per_round * plan.rounds
        if products:
            total += limit.REPEATS * min(limit.SAMPLE, batches) * sum(products.values()) + between
    # Each worker starts, checks its agreement and times its peak before the first measurement.
    total += start_up * len(counted) / max(len({r.implementation for r in records}), 1)
    return total, notes + [f"{name}: {how}" for name, how in missing.items()]


def format_estimate(seconds: float, notes: list[str], folder: str) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return "\n".join([f"estimate: about {m} min {s} s, by the records of {folder}", *(f"  {n}" for n in notes)])
