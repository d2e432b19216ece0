"""``python -m bench report``: tables, targets and plots from results.jsonl files.

Everything here is rendered from the structured records the workers wrote;
nothing is parsed back out of log text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import frameworks
from bench.records import read_records
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32

# The registry says which implementation is the define-by-run baseline the
# static ones are compared with (frameworks.BASELINE), which build no graph
# ahead of time and so are no candidates for "best static" (frameworks.EAGER),
# and how the algorithm x framework matrix is laid out (frameworks.matrix()).
SAMPLE = "snli-dev-sample"  # the workload the speed goals are set for
SPEED_GOALS = [(1, 3.0), (128, 1.5)]  # (batch size, best static / define-by-run), CPU inference
PEAK_GOAL = 0.35  # useful FLOP/s over the device's matmul peak, batch 128
COLD_COMPILE_GOAL = 3.0  # seconds per shape, the train step of a framework with a persistent compilation cache
CACHED_COMPILE_GOAL = 0.5  # the same, loaded from the persistent compilation cache


def register(sub) -> None:
    p = sub.add_parser("report", help="render a Markdown table, the targets and PNG plots from results")
    p.add_argument("results", nargs="+", help="results.jsonl files, or folders holding one")
    p.add_argument("--out", default=None, help="folder for report.md and the plots [default: beside the first]")
    p.add_argument("--no-plots", action="store_true", help="only the Markdown report")
    p.add_argument("--over", default="", metavar="IMPLS",
                   help="comma-separated implementations to take ratios over as well, round by round, beside "
                        f"the baseline {frameworks.BASELINE} (a variant over the implementation it varies, say)")
    p.set_defaults(func=cmd_report)


def load(paths) -> list[dict]:
    records = []
    for path in map(Path, paths):
        file = path / "results.jsonl" if path.is_dir() else path
        if not file.exists():
            raise FileNotFoundError(f"no results at {file}")
        records.extend(read_records(file))
    return records


def _fmt_bytes(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def format_table(records: list[dict]) -> str:
    """One Markdown row per record, grouped by device, mode, transitions and batch size."""
    header = ("| device | mode | transitions | batch | implementation | pairs/s | step median (ms) | p10-p90 (ms) "
              "| compile (s) | traces | useful GFLOP/s | % of device peak | peak memory | enc. err | logit err "
              "| PAD % |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in sorted(records, key=measurement_key):
        lines.append(
            f"| {r['device']} | {r['mode']} | {_transitions(r)} | {r['batch_size']} | {r['implementation']} "
            f"| {r['pairs_per_s']:,.1f} | {r['step_s_median'] * 1e3:,.1f} "
            f"| {r['step_s_p10'] * 1e3:,.1f}-{r['step_s_p90'] * 1e3:,.1f} "
            f"| {r['compile_s']:.2f} | {r['traces']} | {r['useful_flops_per_s'] / 1e9:,.2f} "
            f"| {100 * _device_fraction(r):.1f} "
            f"| {_fmt_bytes(r.get('peak_mem_bytes'))} | {r['max_abs_err_encoding']:.1e} "
            f"| {r['max_abs_err_logits']:.1e} | {_padding_cell(r)} |")
    return "\n".join(lines)


def _padding_cell(record: dict) -> str:
    """The PAD share of the slots the implementation computed (docs/spec.md §6). Older runs
    recorded only the PAD share of the batch arrays, which is marked."""
    if "padding_waste" not in record:
        return "-"
    return f"{100 * record['padding_waste']:.0f}" + ("" if "padding_waste_arrays" in record else " (arrays)")


def _transitions(record: dict) -> str:
    return record.get("transitions", "gold")  # records from before model-decided parses were gold


def measurement_key(r: dict) -> tuple:
    """What a record (or a ratio row) measured: (device, mode, transitions,
    batch size, implementation); records sort by it."""
    return (r["device"], r["mode"], _transitions(r), r["batch_size"], r["implementation"])


def _device_fraction(r: dict) -> float:
    """Useful FLOP/s over the best matmul any framework reached on the device in the
    run (older records, which lack it, use their own framework's peak)."""
    return r["useful_flops_per_s"] / r.get("device_peak_flops_per_s", r["matmul_peak_flops_per_s"])


def round_ratios(records: list[dict], baseline: str | None = None) -> list[dict]:
    """Each implementation's speed over the baseline's, measured round by round.

    Where both records come from the same run's interleaved rounds, the ratio
    is taken in every round (the same batches, seconds apart) and summarised
    by its median, quartiles and range; otherwise (records of different runs)
    it is the ratio of the two overall figures, marked as not interleaved.
    The baseline is the registry's unless named.
    """
    baseline = baseline or frameworks.BASELINE
    base = {measurement_key(r)[:-1]: r for r in records if r["implementation"] == baseline}
    own = run_share(records)
    rows = []
    for r in sorted(records, key=measurement_key):
        key = measurement_key(r)[:-1]  # the same measurement of the baseline
        b = base.get(key)
        if r["implementation"] == baseline or b is None:
            continue
        same_run = (r.get("run_id") == b.get("run_id") and r.get("round_pairs_per_s")
                    and len(r["round_pairs_per_s"]) == len(b.get("round_pairs_per_s", [])))
        if same_run:
            ratios = np.array(r["round_pairs_per_s"]) / np.array(b["round_pairs_per_s"])
        else:
            ratios = np.array([r["pairs_per_s"] / b["pairs_per_s"]])
        q1, median, q3 = np.percentile(ratios, [25, 50, 75])
        rows.append({"device": key[0], "mode": key[1], "transitions": key[2], "batch_size": key[3],
                     "implementation": r["implementation"], "median": float(median), "q1": float(q1),
                     "q3": float(q3), "min": float(ratios.min()), "max": float(ratios.max()),
                     "rounds": len(ratios) if same_run else 0, "data": r.get("data"),
                     "round_ratios": ratios.tolist(), "busy": _busy_ratio_rounds(r, b, own) if same_run else None})
    return rows


def other_work_limit(cores: int) -> float:
    """How many cores' worth of other work makes a machine busy: one core, or a
    quarter of them on a larger machine."""
    return max(1.0, cores / 4)


def is_busy(load: float, cores: int, own: float = 0.0) -> bool:
    """The rule that marks a round as measured on a busy machine (docs/spec.md §6).

    The 1-minute load average counts every thread that runs or waits for a
    core, the benchmark's own included: its workers take turns, so over a
    minute they keep about ``own`` cores busy, the run's typical CPU share
    (:func:`run_share`). What is left, ``load - own``, is other work; above
    :func:`other_work_limit` the timed implementations lost cores to it, and
    how much differs from one implementation to the next, so a ratio taken in
    such a round need not hold on a quiet machine. Before a run starts, own
    is 0.
    """
    return load - own > other_work_limit(cores)


def run_share(records: list[dict]) -> float:
    """The cores a run's own timed processes kept busy: the median CPU share
    over every round of every record (0 where none was recorded)."""
    shares = [share for r in records for share in r.get("round_cpu_share") or []]
    return float(np.median(shares)) if shares else 0.0


def busy_rounds(record: dict, own: float) -> list[bool] | None:
    """Which of a record's rounds ran on a busy machine (``own``: the run's
    :func:`run_share`); None where the record has no load figures (runs from
    before they were recorded)."""
    loads, cores = record.get("round_load"), record.get("cpu_count")
    if not loads or not cores:
        return None
    return [is_busy(load, cores, own) for load in loads]


def _busy_ratio_rounds(r: dict, b: dict, own: float) -> list[bool] | None:
    """A per-round ratio is busy where either of its two sides was timed on a busy machine."""
    mine, theirs = busy_rounds(r, own), busy_rounds(b, own)
    if mine is None or theirs is None:
        return None
    return [x or y for x, y in zip(mine, theirs)]


def _busy_count(row: dict) -> int:
    return sum(row.get("busy") or [])


def format_ratios(records: list[dict], baseline: str | None = None) -> str:
    baseline = baseline or frameworks.BASELINE
    rows = round_ratios(records, baseline)
    if not rows:
        return f"Ratios: no {baseline} records to compare with."
    loaded = any(row["busy"] is not None for row in rows)  # older runs recorded no load: their table is as it was
    header = "| device | mode | transitions | batch | implementation | ratio | IQR | min-max | rounds |"
    lines = [f"Speed over {baseline} (median of per-round ratios; interquartile range; min-max; rounds):", "",
             header + (" busy rounds |" if loaded else ""), "|---" * (header.count("|") - 1 + loaded) + "|"]
    for row in rows:
        rounds = row["rounds"] or "not interleaved"
        line = (f"| {row['device']} | {row['mode']} | {row['transitions']} | {row['batch_size']} "
                f"| {row['implementation']} | {row['median']:.2f}x | {row['q1']:.2f}-{row['q3']:.2f} "
                f"| {row['min']:.2f}-{row['max']:.2f} | {rounds} |")
        lines.append(line + (f" {_busy_cell(row)} |" if loaded else ""))
    if loaded:
        lines += ["", "Busy rounds: rounds in which the machine's 1-minute load average, less the run's own share "
                      "of the cores, was above one core of other work while either side was timed (docs/spec.md §6; "
                      "see Load); a ratio with busy rounds may read otherwise on a quiet machine."]
    return "\n".join(lines)


def _busy_cell(row: dict) -> str:
    if row["busy"] is None:
        return "-"
    count = _busy_count(row)
    return f"**{count} of {len(row['busy'])}**" if count else "0"


def load_summary(records: list[dict]) -> str:
    """One line: how many timed rounds ran on a busy machine (the rule of is_busy)."""
    own = run_share(records)
    flags = [flag for r in records for flag in (busy_rounds(r, own) or [])]
    if not flags:
        return ""
    measured = [r for r in records if busy_rounds(r, own) is not None]
    cores = sorted({r["cpu_count"] for r in measured})
    limit = "/".join(f"{own + other_work_limit(c):.2f}" for c in cores)
    highest = max(load for r in measured for load in r["round_load"])
    busy = sum(flags)
    return (f"Load: {busy} of {len(flags)} timed rounds ran on a busy machine (1-minute load average above "
            f"{limit}: the run's own {own:.2f} cores, its median CPU share, plus "
            f"{'/'.join(f'{other_work_limit(c):g}' for c in cores)} of other work on "
            f"{'/'.join(map(str, cores))} cores; highest {highest:.2f})"
            + (": their ratios are marked." if busy else "."))


def format_load(records: list[dict]) -> str:
    """Every round's load average (bold where busy) and the CPU share the
    implementation got, so a slow round can be told from a busy one."""
    own = run_share(records)
    rows = [r for r in records if busy_rounds(r, own) is not None]
    if not rows:
        return ""
    lines = [load_summary(rows) + " Per round: the 1-minute load average as the implementation's timed batches "
             "ended, and the CPU seconds its process got per wall second of them (every thread counted).", "",
             "| device | mode | transitions | batch | implementation | load per round | CPU share per round "
             "| busy rounds |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=measurement_key):
        flags = busy_rounds(r, own)
        loads = " ".join(_bold_if(f"{x:.2f}", flag) for x, flag in zip(r["round_load"], flags))
        shares = " ".join(f"{x:.2f}" for x in r.get("round_cpu_share", []))
        lines.append(f"| {r['device']} | {r['mode']} | {_transitions(r)} | {r['batch_size']} "
                     f"| {r['implementation']} | {loads} | {shares or '-'} | {sum(flags)} of {len(flags)} |")
    return "\n".join(lines)


def _bold_if(text: str, flag: bool) -> str:
    return f"**{text}**" if flag else text


def format_host_syncs(records: list[dict]) -> str:
    """How often define-by-run code read a decision back to Python, per batch."""
    rows = [r for r in records if r.get("host_syncs_per_batch")]  # masked variants report 0: left out
    if not rows:
        return ""
    parts = [f"{r['implementation']} B={r['batch_size']}: {r['host_syncs_per_batch']:.1f}"
             for r in sorted(rows, key=measurement_key)]
    return ("Device-to-host reads of decisions per batch, predicted parses (static graphs: none, the decision "
            "stays a masked select on the device): " + "; ".join(parts) + ".")


def format_phases(records: list[dict]) -> str:
    """Where a batch's time went, for implementations that split it (building
    the graph against evaluating it), and what they built per batch."""
    rows = [r for r in records if r.get("phase_s_per_batch")]
    if not rows:
        return ""
    lines = ["Where the time of a batch goes (implementations that report it; ms per batch, and per-batch "
             "graph counts):", "", "| mode | transitions | batch | implementation | step | phases | graph |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=measurement_key):
        phases = ", ".join(f"{name} {seconds * 1e3:,.1f}" for name, seconds in r["phase_s_per_batch"].items())
        graph = ", ".join(f"{name} {count:,.0f}" for name, count in r.get("graph_per_batch", {}).items())
        lines.append(f"| {r['mode']} | {r['transitions']} | {r['batch_size']} | {r['implementation']} "
                     f"| {r['step_s_median'] * 1e3:,.1f} | {phases} | {graph or '-'} |")
    return "\n".join(lines)


MATRIX_MODES = (("infer", "Inference"), ("train", "Training"))


def _matrix_records(records: list[dict], mode: str) -> list[dict]:
    """The records one matrix reads: one mode, on the CPU."""
    return [r for r in records if r["mode"] == mode and r["device"] == "cpu"]


def _variant_matrices(records: list[dict]) -> list[tuple[str, list[dict]]]:
    """(title, records) of each mode whose CPU records include a variant."""
    chosen = [(title, _matrix_records(records, mode)) for mode, title in MATRIX_MODES]
    return [(title, rs) for title, rs in chosen if any(r["implementation"] in frameworks.OPT_IN for r in rs)]


def variants_measured(records: list[dict]) -> bool:
    """Whether a matrix has anything beside the default implementations."""
    return bool(_variant_matrices(records))


def format_matrix(records: list[dict]) -> str:
    """Algorithm x framework, one matrix per mode measured (inference first):
    pairs/s at batch 1 and 128 (gold and predicted parses) and compile
    seconds, from the records of one run."""
    blocks = [_one_matrix(rs, title) for title, rs in _variant_matrices(records)]
    if not blocks:
        return "Matrix: no variant was measured (run with --implementations naming the variants)."
    return "\n\n".join(blocks)


def _one_matrix(records: list[dict], title: str) -> str:
    by = {(r["implementation"], _transitions(r), r["batch_size"]): r for r in records}

    def cell(entry) -> str:
        if isinstance(entry, str):
            return entry
        parts = []
        for impl in entry:
            figures = []
            for transitions in ("gold", "predicted"):
                speeds = [by[impl, transitions, b] for b in (1, 128) if (impl, transitions, b) in by]
                if speeds:
                    figures.append(f"{transitions} " + " / ".join(f"{r['pairs_per_s']:,.0f}" for r in speeds)
                                   + f" (compile {sum(r['compile_s'] for r in speeds):.1f} s)")
            parts.append(f"**{impl}**: " + ("; ".join(figures) if figures else "not measured in this run"))
        return "<br>".join(parts)

    matrix, columns = frameworks.matrix(), frameworks.FRAMEWORKS
    lines = [f"{title} pairs/s at batch 1 / 128, and the compile seconds of both, per parse mode:", "",
             "| algorithm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for algorithm in frameworks.ALGORITHMS:
        lines.append(f"| {algorithm} | " + " | ".join(cell(matrix[algorithm, f]) for f in columns) + " |")
    return "\n".join(lines)


def targets(records: list[dict]) -> list[dict]:
    """The benchmark's goals, each computed from the run's own records.

    The speed goals are for the embedded SNLI sample, inference, gold parses,
    on the CPU: the best static implementation over the define-by-run baseline
    (interleaved medians), and the best useful FLOP/s against the device peak.
    Compile goals: the train step per shape of a framework with a persistent
    compilation cache, cold and loaded from the cache; one trace per function
    whatever the lengths for the implementations the registry marks
    ``one_trace``.
    """
    rows = []
    baseline = frameworks.BASELINE
    gold_cpu = [r for r in records if r["device"] == "cpu" and _transitions(r) == "gold"
                and r.get("data") == SAMPLE]
    ratios = [row for row in round_ratios(gold_cpu)
              if row["mode"] == "infer" and row["implementation"] not in frameworks.EAGER]
    for batch_size, goal in SPEED_GOALS:
        candidates = [row for row in ratios if row["batch_size"] == batch_size]
        if candidates:
            best = max(candidates, key=lambda row: row["median"])
            busy = f", {_busy_count(best)} on a busy machine" if _busy_count(best) else ""
            spread = (f" (IQR {best['q1']:.2f}-{best['q3']:.2f}, {best['rounds']} rounds{busy})"
                      if best["rounds"] else "")
            rows.append({"target": f"best static / {baseline} inference, batch {batch_size} ({best['implementation']})",
                         "goal": f">= {goal:g}x", "measured": f"{best['median']:.2f}x{spread}",
                         "met": best["median"] >= goal})
    infer128 = [r for r in gold_cpu if r["mode"] == "infer" and r["batch_size"] == 128]
    if infer128:
        best = max(infer128, key=_device_fraction)
        fraction = _device_fraction(best)
        rows.append({"target": f"best useful FLOP/s, inference batch 128 ({best['implementation']})",
                     "goal": f">= {100 * PEAK_GOAL:g}% of device peak", "measured": f"{100 * fraction:.1f}%",
                     "met": fraction >= PEAK_GOAL})
    with_cache = {name for name in frameworks.FRAMEWORKS if frameworks.platform(name).has_compilation_cache}
    one_trace = {name for name, impl in frameworks.IMPLEMENTATIONS_BY_NAME.items() if impl.one_trace}
    for r in records:
        if r["framework"] in with_cache and r["mode"] == "train" and r["device"] == "cpu":
            per_shape = r["compile_s"] / max(r.get("warmup_shapes", 1), 1)
            rows.append({"target": f"{r['implementation']} train compile per shape, cold, batch {r['batch_size']}",
                         "goal": f"<= {COLD_COMPILE_GOAL:g} s", "measured": f"{per_shape:.2f} s",
                         "met": per_shape <= COLD_COMPILE_GOAL})
            cached = r.get("cached_compile")
            if cached:
                per_shape = cached["compile_s"] / max(cached["shapes"], 1)
                rows.append({"target": f"{r['implementation']} train compile per shape, persistent cache, "
                                       f"batch {r['batch_size']} ({cached['cache_hits']} hits)",
                             "goal": f"<= {CACHED_COMPILE_GOAL:g} s", "measured": f"{per_shape:.2f} s",
                             "met": per_shape <= CACHED_COMPILE_GOAL and cached["cache_hits"] > 0})
        if r["implementation"] in one_trace:
            rows.append({"target": f"{r['implementation']} traces, {r['mode']} {_transitions(r)} "
                                   f"batch {r['batch_size']} ({r['warmup_shapes']} shapes)",
                         "goal": "1 per function", "measured": str(r["traces"]), "met": r["traces"] <= 1})
    if records:
        worst_enc = max(records, key=lambda r: r["max_abs_err_encoding"])
        worst_log = max(records, key=lambda r: r["max_abs_err_logits"])
        rows.append({"target": f"encodings vs float64 reference (worst: {worst_enc['implementation']})",
                     "goal": f"<= {ENCODING_TOL_F32:g}", "measured": f"{worst_enc['max_abs_err_encoding']:.1e}",
                     "met": worst_enc["max_abs_err_encoding"] <= ENCODING_TOL_F32})
        rows.append({"target": f"logits vs float64 reference (worst: {worst_log['implementation']})",
                     "goal": f"<= {LOGITS_TOL_F32:g}", "measured": f"{worst_log['max_abs_err_logits']:.1e}",
                     "met": worst_log["max_abs_err_logits"] <= LOGITS_TOL_F32})
    return rows


def format_targets(records: list[dict]) -> str:
    rows = targets(records)
    if not rows:
        return "Targets: nothing to compare (no records)."
    lines = ["| target | goal | measured | |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['target']} | {row['goal']} | {row['measured']} | {'PASS' if row['met'] else 'MISS'} |")
    return "\n".join(lines)


def plot(records: list[dict], out_dir: Path) -> list[Path]:
    """Throughput vs batch size, per-round ratios, compile time, and agreement, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    impls = sorted({r["implementation"] for r in records})
    devices = sorted({r["device"] for r in records})
    modes = [m for m in ("infer", "train") if any(r["mode"] == m for r in records)]

    fig, axes = plt.subplots(len(devices), len(modes), figsize=(6 * len(modes), 4.2 * len(devices)),
                             squeeze=False)
    for i, device in enumerate(devices):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            for impl in impls:
                rows = sorted((r for r in records if r["implementation"] == impl and r["mode"] == mode
                               and r["device"] == device and _transitions(r) == "gold"),
                              key=lambda r: r["batch_size"])
                if rows:
                    ax.plot([r["batch_size"] for r in rows], [r["pairs_per_s"] for r in rows], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size (pairs)")
            ax.set_ylabel("sentence pairs / s")
            ax.set_title(f"{mode}, {device}, gold parses")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:  # a run of sampled parses only has no gold line to name
                ax.legend()
    fig.tight_layout()
    written.append(out_dir / "throughput.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    ratios = _plot_ratios(records, out_dir, plt)
    if ratios:
        written.append(ratios)

    compiled = [r for r in records if r["compile_s"] > 0 or r["first_call_s"] > 0]
    if compiled:
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(compiled)), 4))
        labels = [f"{r['implementation']}\n{r['mode']} B={r['batch_size']}" for r in compiled]
        ax.bar(range(len(compiled)), [r["first_call_s"] for r in compiled], label="first calls (all shapes)",
               color="#bbb")
        ax.bar(range(len(compiled)), [r["compile_s"] for r in compiled], label="compile/trace reported", width=0.5)
        ax.set_xticks(range(len(compiled)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title("warm-up: compile time and first calls")
        ax.legend()
        fig.tight_layout()
        written.append(out_dir / "compile.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    worst = {}
    for r in records:
        w = worst.setdefault(r["implementation"], [0.0, 0.0])
        w[0] = max(w[0], r["max_abs_err_encoding"])
        w[1] = max(w[1], r["max_abs_err_logits"])
    names = sorted(worst)
    x = range(len(names))
    ax.bar([k - 0.2 for k in x], [max(worst[n][0], 1e-18) for n in names], width=0.4, label="encodings")
    ax.bar([k + 0.2 for k in x], [max(worst[n][1], 1e-18) for n in names], width=0.4, label="logits")
    ax.axhline(ENCODING_TOL_F32, color="C0", ls="--", lw=1)
    ax.axhline(LOGITS_TOL_F32, color="C1", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("max abs error vs float64 reference")
    ax.set_title("numerical agreement (dashed: tolerances)")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "agreement.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def _plot_ratios(records: list[dict], out_dir: Path, plt) -> Path | None:
    """The interleaved per-round ratios over the baseline, one panel per device,
    mode and parse: every round a dot (a busy one a red cross), the median a
    circle, the interquartile range a thick bar and the range a thin one. The
    spread is the point: one median alone hides whether a ratio held."""
    rows = [row for row in round_ratios(records) if row["rounds"]]
    if not rows:
        return None
    panels = sorted({(row["device"], row["mode"], row["transitions"]) for row in rows})
    impls = sorted({row["implementation"] for row in rows})
    columns = min(2, len(panels))
    lines = -(-len(panels) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(6.5 * columns, 4.2 * lines), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _ratio_panel(ax, [row for row in rows if (row["device"], row["mode"], row["transitions"]) == panel], impls)
        ax.set_title(f"{panel[1]}, {panel[2]} parses, {panel[0]}: speed over {frameworks.BASELINE}, per round")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    path = out_dir / "ratios.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ratio_panel(ax, rows: list[dict], impls: list[str]) -> None:
    """One panel of ratios.png: batch sizes side by side, implementations offset within each."""
    sizes = sorted({row["batch_size"] for row in rows})
    width = 0.8 / len(impls)
    labelled = set()
    for row in rows:
        i = impls.index(row["implementation"])
        x = sizes.index(row["batch_size"]) + (i - (len(impls) - 1) / 2) * width
        color = f"C{i}"
        ax.vlines(x, row["min"], row["max"], color=color, lw=1)
        ax.vlines(x, row["q1"], row["q3"], color=color, lw=5, alpha=0.6)
        ax.plot(x, row["median"], "o", color=color, mfc="white",
                label=None if row["implementation"] in labelled else row["implementation"])
        labelled.add(row["implementation"])
        busy = row["busy"] or [False] * len(row["round_ratios"])
        for ratio, flag in zip(row["round_ratios"], busy):
            ax.plot(x, ratio, "x" if flag else ".", color="red" if flag else "black", ms=6 if flag else 3,
                    label="busy round" if flag and "busy" not in labelled else None)
            labelled |= {"busy"} if flag else set()
    from matplotlib.ticker import FuncFormatter

    ax.axhline(1.0, color="#888", ls="--", lw=1)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xticks(range(len(sizes)), [f"batch {b}" for b in sizes])
    ax.set_ylabel(f"pairs/s over {frameworks.BASELINE}'s (log)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)


def render_markdown(records: list[dict], sources, over: tuple[str, ...] = ()) -> str:
    envs = {}
    for r in records:
        envs.setdefault(r["implementation"], r)
    flags = f" --over {','.join(over)}" if over else ""
    lines = ["# SPINN benchmark report", "",
             f"Rendered by `python -m bench report {' '.join(map(str, sources))}{flags}`.", ""]
    lines.append("## Environment")
    lines.append("")
    for impl, r in sorted(envs.items()):
        lines.append(f"- **{impl}**: {r['framework']} {r['framework_version']}, {r['device']} "
                     f"({r['device_name']}), {r['dtype']}, commit {r['git_commit']}, {r['timestamp']}, "
                     f"threads {json.dumps(r.get('threads', {}))}, data {r['data']}")
    lines += ["", "## Results", "", format_table(records), "", "## Ratios", "", format_ratios(records), ""]
    for baseline in over:
        lines += [format_ratios(records, baseline), ""]
    lines += [format_host_syncs(records), "", format_phases(records), ""]
    load = format_load(records)
    if load:  # runs from before the load was recorded render as they did
        lines += ["## Load", "", load, ""]
    lines += ["## Algorithm and framework", "", format_matrix(records), "",
              "## Targets", "", format_targets(records), ""]
    return "\n".join(lines)


def write_report(records: list[dict], sources, out_dir: Path, plots: bool = True,
                 over: tuple[str, ...] = ()) -> tuple[str, list[Path]]:
    """Write report.md and its plots into ``out_dir``; the Markdown and the files written.

    One writer for ``bench report`` and the end of ``bench run``, so the two
    cannot drift apart. Without matplotlib the plots are left out, said in
    one line, and report.md is written all the same: a run's figures are
    worth more than its pictures.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(records, sources, over)
    written = []
    if plots:
        try:
            import matplotlib  # noqa: F401  (only: is it there?)
        except ImportError:
            print("note: matplotlib is not installed: report.md without plots", file=sys.stderr)
        else:
            written = plot(records, out_dir)
    if written:
        markdown += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in written) + "\n"
    (out_dir / "report.md").write_text(markdown)
    return markdown, [out_dir / "report.md", *written]


def cmd_report(args) -> int:
    records = load(args.results)
    if not records:
        raise ValueError("no records in the given results")
    first = Path(args.results[0])
    out_dir = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    over = tuple(name.strip() for name in args.over.split(",") if name.strip())
    measured = {r["implementation"] for r in records}
    for name in over:
        if name not in measured:
            raise ValueError(f"--over {name}: not measured in these results; measured: {', '.join(sorted(measured))}")
    markdown, written = write_report(records, args.results, out_dir, plots=not args.no_plots, over=over)
    print(markdown)
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0
