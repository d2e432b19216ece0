"""The benchmark's goals (docs/spec.md §6, "Decision: one set of targets"), each one row graded PASS or MISS once
against the run's own records; a MISS says where the step's time went (measurement.breakdown)."""

from __future__ import annotations

from bench import frameworks
from bench.run.measurement import PARTS, Measurement, breakdown, busy_count, round_ratios
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32

SAMPLE = "snli-dev-sample"  # the workload the goals are set for
# (what, mode, batch size, goal): the goals of the speed and the limit, each a row of the report.
LIMIT_GOALS = [("infer", 128, 0.70), ("train", 128, 0.50)]  # best implementation / the limit
LIMIT_PEAK_GOAL = 0.70  # at batch 128, the limit's FLOP/s over the best dense matmul peak of the run: the limit's check
STATIC_GOALS = [("infer", 1, 3.0), ("infer", 128, 2.0), ("train", 128, 1.5)]  # best static / define-by-run
LEVELS_COMPUTED_GOAL = 1.25  # FLOPs the level schedule computed, padding included, over the useful ones, batch 128
COLD_COMPILE_GOAL = 3.0  # seconds per shape, the train step of a framework with a persistent compilation cache
CACHED_COMPILE_GOAL = 0.5  # the same, loaded from the persistent compilation cache
LEVELS_ROW, COLD_ROW = "computed / useful FLOPs", "train compile per shape, cold"  # the rows' words
CACHED_ROW = "train compile per shape, persistent cache"
VERDICTS = {True: "PASS", False: "MISS", None: "-"}


def targets(records: list[Measurement]) -> list[dict]:
    """One row per goal: target (what), goal, measured (text), met (bool)."""
    rows, baseline = [], frameworks.BASELINE
    gold_cpu = [r for r in records if r.device == "cpu" and r.transitions == "gold" and r.data == SAMPLE]
    if not any(r.implementation == baseline for r in gold_cpu):
        gold_cpu = []  # a run whose baseline ran elsewhere (a GPU run, DyNet on the host): the CPU goals do not apply
    for mode, batch_size, goal in LIMIT_GOALS:
        where = f"{mode} batch {batch_size}"
        candidates = [r for r in gold_cpu if (r.mode, r.batch_size) == (mode, batch_size)
                      and r.fraction_of_limit is not None]
        checked = next((r for r in candidates if r.limit_flops_per_s and r.device_peak_flops_per_s), None)
        share = checked.limit_flops_per_s / checked.device_peak_flops_per_s if checked else None
        rows.append(_row(f"the limit's FLOP/s over the run's best dense peak, {where}" + (
            f" ({checked.limit_matmul}: {checked.limit_kernel})" if checked else ""),
            f">= {100 * LIMIT_PEAK_GOAL:g}% of the peak", checked and f"{100 * share:.1f}% ("
            f"{checked.limit_flops_per_s / 1e9:,.0f} of {checked.device_peak_flops_per_s / 1e9:,.0f} GFLOP/s, "
            f"{checked.device_peak_implementation})", checked and share >= LIMIT_PEAK_GOAL))
        best = max(candidates, key=lambda r: r.fraction_of_limit, default=None)
        rows.append(_row(f"best share of the limit, {where}" + (
            f" ({best.implementation}: {best.pairs_per_s:,.0f} of {best.limit_pairs_per_s:,.0f} pairs/s)"
            if best else ""), f">= {100 * goal:g}% of the limit", best and f"{100 * best.fraction_of_limit:.1f}%",
            best and best.fraction_of_limit >= goal, [best]))
    ratios = [row for row in round_ratios(gold_cpu) if row["implementation"] not in frameworks.EAGER]
    own = {(r.implementation, r.mode, r.batch_size): r for r in gold_cpu}
    for mode, batch_size, goal in STATIC_GOALS:
        candidates = [row for row in ratios if (row["mode"], row["batch_size"]) == (mode, batch_size)]
        if not candidates:
            rows.append(_row(f"best static / {baseline}, {mode} batch {batch_size}", f">= {goal:g}x", None, None))
        else:
            best = max(candidates, key=lambda row: row["median"])
            busy = f", {busy_count(best)} on a busy machine" if busy_count(best) else ""
            spread = (f" (IQR {best['q1']:.2f}-{best['q3']:.2f}, {best['rounds']} rounds{busy})"
                      if best["rounds"] else "")
            mine = own.get((best["implementation"], mode, batch_size))
            rows.append(_row(f"best static / {baseline}, {mode} batch {batch_size} ({best['implementation']})",
                             f">= {goal:g}x", f"{best['median']:.2f}x{spread}" + _levels_said(mine),
                             best["median"] >= goal, [mine, own.get((baseline, mode, batch_size))]))
    levels = {name for name, impl in frameworks.IMPLEMENTATIONS_BY_NAME.items() if impl.family == frameworks.LEVELS}
    for r in gold_cpu:
        computed = computed_over_useful(r)
        if r.implementation in levels and r.batch_size == 128 and computed is not None:
            rows.append(_row(f"{r.implementation} {LEVELS_ROW}, {r.mode} batch 128",
                             f"<= {LEVELS_COMPUTED_GOAL:g}x", f"{computed:.2f}x" + _levels_said(r),
                             computed <= LEVELS_COMPUTED_GOAL, [r]))
    with_cache = {name for name in frameworks.FRAMEWORKS if frameworks.platform(name).has_compilation_cache}
    one_trace = {name for name, impl in frameworks.IMPLEMENTATIONS_BY_NAME.items() if impl.one_trace}
    for r in records:
        if r.framework in with_cache and r.mode == "train" and r.device == "cpu":
            per_shape = r.compile_s / max(r.warmup_shapes or 1, 1)
            rows.append(_row(f"{r.implementation} {COLD_ROW}, batch {r.batch_size}",
                             f"<= {COLD_COMPILE_GOAL:g} s", f"{per_shape:.2f} s", per_shape <= COLD_COMPILE_GOAL))
            if cached := r.cached_compile:
                per_shape = cached["compile_s"] / max(cached["shapes"], 1)
                rows.append(_row(f"{r.implementation} {CACHED_ROW}, batch {r.batch_size} "
                                 f"({cached['cache_hits']} hits)", f"<= {CACHED_COMPILE_GOAL:g} s",
                                 f"{per_shape:.2f} s", per_shape <= CACHED_COMPILE_GOAL and cached["cache_hits"] > 0))
        if r.implementation in one_trace:
            rows.append(_row(f"{r.implementation} traces, {r.mode} {r.transitions} batch {r.batch_size} "
                             f"({r.warmup_shapes} shapes)", "1 per function", str(r.traces), r.traces <= 1))
    for family, goal, whose in ((LEVELS_ROW, f"<= {LEVELS_COMPUTED_GOAL:g}x", "host-scheduled levels, batch 128"),
                                (COLD_ROW, f"<= {COLD_COMPILE_GOAL:g} s", "a framework with a persistent cache"),
                                (CACHED_ROW, f"<= {CACHED_COMPILE_GOAL:g} s", "a framework with a persistent cache"),
                                ("traces", "1 per function", "the implementations that trace once")):
        if not any(family in row["target"] for row in rows):  # every goal has its row, measured or not
            rows.append(_row(f"{family} ({whose})", goal, None, None))
    for what, key, tolerance in (("encodings", "max_abs_err_encoding", ENCODING_TOL_F32),
                                 ("logits", "max_abs_err_logits", LOGITS_TOL_F32)) if records else ():
        worst = max(records, key=lambda r: getattr(r, key))
        rows.append(_row(f"{what} vs float64 reference (worst: {worst.implementation})", f"<= {tolerance:g}",
                         f"{getattr(worst, key):.1e}", getattr(worst, key) <= tolerance))
    return rows


def _row(target: str, goal: str, measured: str | None, met: bool | None, breakdown_of: tuple = ()) -> dict:
    """A target's row (``measured`` and ``met`` None: not measured in these records); a MISS also says where the
    time of the records behind it went (``why``)."""
    said = [_parts(r) for r in breakdown_of if r is not None] if met is False else []
    return {"target": target, "goal": goal, "measured": "not measured" if measured is None else measured, "met": met,
            "why": "; ".join(filter(None, said))}


def computed_over_useful(r: Measurement) -> float | None:
    """The FLOPs the implementation computed over the useful ones (records of before the breakdown: a level
    schedule's own figure, in graph_per_batch)."""
    return r.computed_flops / r.useful_flops if r.computed_flops and r.useful_flops else \
        (r.graph_per_batch or {}).get("computed_over_useful")


def _parts(r: Measurement) -> str:
    """Where a record's step went, in shares of it (measurement.breakdown); "" where it has no breakdown."""
    parts = breakdown(r)
    return "" if parts is None else f"{r.implementation}: " + ", ".join(
        f"{PARTS[name]} {100 * seconds / r.step_s:.0f}%" for name, seconds in parts.items()
        if name != "slow_blas" or r.own_computed_s is not None) + f" of {r.step_s * 1e3:,.1f} ms"


def _levels_said(r: Measurement | None) -> str:
    """What a levels record says of its step: levels per batch, the host's schedule time, the padded rows."""
    if r is None or not r.graph_per_batch:
        return ""
    graph, phases = r.graph_per_batch, r.phase_s_per_batch or {}
    said = [f"{graph['levels']:.0f} levels a batch"] if "levels" in graph else []
    if "schedule" in phases and r.step_s_median:
        said.append(f"the host's schedule {100 * phases['schedule'] / r.step_s_median:.0f}% of the step")
    if "level_padding_pct" in graph:
        said.append(f"{graph['level_padding_pct']:.0f}% of Reduce rows padding")
    return f"; {', '.join(said)}" if said else ""


def format_targets(records: list[Measurement]) -> str:
    rows = targets(records)
    if not rows:
        return "Targets: nothing to compare (no records)."
    return "\n".join(["| target | goal | measured | | where the time went |", "|---|---|---|---|---|"] + [
        f"| {r['target']} | {r['goal']} | {r['measured']} | {VERDICTS[r['met']]} | {r['why']} |"
        for r in rows])
