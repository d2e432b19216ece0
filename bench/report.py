"""``python -m bench report``: report.md, its plots and the tables of ``bench run``'s summary.

Everything is rendered from the records and their statistics (bench/run/measurement.py), nothing parsed back out of
log text; ``bench run`` ends by writing the same report with the same code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import frameworks
from bench.figures import style
from bench.render.table import table
from bench.run.measurement import (KEY_COLUMNS, Measurement, breakdown, busy_count, busy_rounds, device_fraction,
                                   load, other_work_limit, round_flags, round_ratios, run_share)
from bench.run.targets import format_targets
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32


def register(sub) -> None:
    p = sub.add_parser("report", help="render a Markdown table, the targets and PNG plots from results")
    p.add_argument("results", nargs="+", help="results.jsonl files, or folders holding one")
    p.add_argument("--out", default=None, help="folder for report.md and the plots [default: beside the first]")
    p.add_argument("--no-plots", action="store_true", help="only the Markdown report")
    p.add_argument("--over", default="", metavar="IMPLS",
                   help="comma-separated implementations to take ratios over as well, round by round, beside "
                        f"the baseline {frameworks.BASELINE} (a variant over the implementation it varies, say)")
    p.set_defaults(func=cmd_report)


def format_table(records: list[Measurement]) -> str:
    """A Markdown row per record, grouped by device, mode, transitions, batch size ("-": a figure older runs lack)."""
    return table([*KEY_COLUMNS, "pairs/s", "% of limit", "step median (ms)", "p10-p90 (ms)", "compile (s)", "traces",
                  "useful GFLOP/s", "% of device peak", "peak memory", "enc. err", "logit err", "PAD %"], [
        [*r.key(), f"{r.pairs_per_s:,.1f}",
         "-" if r.fraction_of_limit is None else f"{100 * r.fraction_of_limit:.1f}",
         f"{r.step_s_median * 1e3:,.1f}", f"{r.step_s_p10 * 1e3:,.1f}-{r.step_s_p90 * 1e3:,.1f}", f"{r.compile_s:.2f}",
         r.traces, f"{r.useful_flops_per_s / 1e9:,.2f}", f"{100 * device_fraction(r):.1f}",
         "-" if r.peak_mem_bytes is None else f"{r.peak_mem_bytes / 2**20:,.0f} MiB",
         f"{r.max_abs_err_encoding:.1e}", f"{r.max_abs_err_logits:.1e}",
         "-" if r.padding_waste is None else f"{100 * r.padding_waste:.0f}"
         + ("" if r.padding_waste_arrays is not None else " (arrays)")] for r in sorted(records, key=Measurement.key)])


def format_ratios(records: list[Measurement], baseline: str | None = None) -> str:
    baseline = baseline or frameworks.BASELINE
    rows = round_ratios(records, baseline)
    if not rows:
        return f"Ratios: no {baseline} records to compare with."
    loaded = any(row["busy"] is not None for row in rows)  # older runs recorded no load: their table is as it was
    peaks = {r.key(): r.matmul_peak_flops_per_s for r in records}
    keys = [(row["device"], row["mode"], row["transitions"], row["batch_size"], row["implementation"]) for row in rows]
    lines = [f"Speed over {baseline} (median of per-round ratios; interquartile range; min-max; rounds; the dense "
             "matmul peak of the implementation's framework and of the baseline's):", "",
             table([*KEY_COLUMNS, "ratio", "IQR", "min-max", "rounds"] + ["busy rounds"] * loaded
                   + ["dense peaks (GFLOP/s)"], [
                 [*key, f"{row['median']:.2f}x", f"{row['q1']:.2f}-{row['q3']:.2f}",
                  f"{row['min']:.2f}-{row['max']:.2f}", row["rounds"] or "not interleaved"]
                 + ["-" if row["busy"] is None else f"**{busy_count(row)} of {len(row['busy'])}**" if busy_count(row)
                    else "0"] * loaded
                 + [" / ".join(f"{peaks[(*key[:-1], name)] / 1e9:,.0f}" for name in (key[-1], baseline))]
                 for key, row in zip(keys, rows)])]
    if loaded:
        lines += ["", "Busy rounds: rounds in which the machine's 1-minute load average, less the run's own share "
                      "of the cores, was above one core of other work while either side was timed (docs/spec.md §6; "
                      "see Load); a ratio with busy rounds may read otherwise on a quiet machine."]
    return "\n".join(lines)


# The paper's sentences/s, DyNet without autobatching and autobatched by agenda, on its CPU and its GPU.
PAPER_TABLE2 = {"source": "Neubig, Goldberg and Dyer (2017), Table 2 (Tree-LSTM training, sentences/s)",
                "batch_size": 64, "cpu": (50.0, 350.0), "gpu": (77.0, 670.0)}
TABLE2_BASELINE = frameworks.TABLE2["unbatched"]
TABLE2_PAPERS_BATCHED = frameworks.TABLE2["autobatched"]  # whose figure the paper's autobatched one is (by agenda)


def table2_measured(records: list[Measurement]) -> bool:
    """Whether the records hold Table 2's protocol: DyNet unbatched and autobatched, Tree-LSTM training."""
    found = {r.implementation for r in records if r.mode == "train" and r.transitions == "gold"
             and r.model.get("tracker_dim") == 0}
    return {TABLE2_BASELINE, TABLE2_PAPERS_BATCHED} <= found


TABLE2_INTRO = (f"The protocol of {PAPER_TABLE2['source']}: training of a Tree-LSTM (SPINN without its tracker), "
                "in sentences per second (two per pair), and each implementation's speed over DyNet without "
                "autobatching, the median of per-round ratios with its interquartile range. The paper's absolute "
                "figures are of its own machines; compare the ratios.")


def format_table2(records: list[Measurement]) -> str:
    """The table TABLE2_INTRO says what it holds."""
    base = {r.key()[:-1] for r in records if r.implementation == TABLE2_BASELINE}
    rows = {(row["device"], row["batch_size"], row["implementation"]): row
            for row in round_ratios(records, TABLE2_BASELINE) if row["mode"] == "train"}
    lines = []
    for r in sorted(records, key=Measurement.key):
        if r.mode != "train" or r.transitions != "gold" or r.key()[:-1] not in base:
            continue
        paper = PAPER_TABLE2.get(r.device) if r.batch_size == PAPER_TABLE2["batch_size"] else None
        row = rows.get((r.device, r.batch_size, r.implementation))  # None for the baseline: no ratio over itself
        ratio = "1" if r.implementation == TABLE2_BASELINE else f"{row['median']:.2f}x" if row else ""
        iqr = f"{row['q1']:.2f}-{row['q3']:.2f}" if row else ""
        theirs = {TABLE2_BASELINE: f"{paper[0]:g} sentences/s", TABLE2_PAPERS_BATCHED: f"{paper[1] / paper[0]:.1f}x "
                  f"({paper[1]:g} sentences/s)"}.get(r.implementation, "") if paper else ""
        lines.append([r.device, r.batch_size, r.implementation, f"{2 * r.pairs_per_s:,.1f}", ratio, iqr, theirs])
    return table(["device", "batch", "implementation", "sentences/s", "over dynet-unbatched", "IQR", "the paper's"],
                 lines)


def load_summary(records: list[Measurement]) -> str:
    """One line: how many timed rounds ran on a busy machine (the rule of measurement.is_busy)."""
    own, flags = run_share(records), round_flags(records)
    if not flags:
        return ""
    measured = [r for r in records if busy_rounds(r, own) is not None]
    cores = sorted({r.cpu_count for r in measured})
    limit = "/".join(f"{own + other_work_limit(c):.2f}" for c in cores)
    highest = max(load for r in measured for load in r.round_load)
    busy = sum(flags)
    return (f"Load: {busy} of {len(flags)} timed rounds ran on a busy machine (1-minute load average above "
            f"{limit}: the run's own {own:.2f} cores, its median CPU share, plus "
            f"{'/'.join(f'{other_work_limit(c):g}' for c in cores)} of other work on "
            f"{'/'.join(map(str, cores))} cores; highest {highest:.2f})"
            + (": their ratios are marked." if busy else "."))


def format_load(records: list[Measurement]) -> str:
    """Every round's load average (bold where busy) and the CPU share the implementation got."""
    own = run_share(records)
    rows = [r for r in records if busy_rounds(r, own) is not None]
    if not rows:
        return ""
    cells = []
    for r in sorted(rows, key=Measurement.key):
        flags = busy_rounds(r, own)
        loads = " ".join(f"**{x:.2f}**" if flag else f"{x:.2f}" for x, flag in zip(r.round_load, flags))
        cells.append([*r.key(), loads, " ".join(f"{x:.2f}" for x in r.round_cpu_share) or "-",
                      f"{sum(flags)} of {len(flags)}"])
    return "\n".join([load_summary(rows) + " Per round: the 1-minute load average as the implementation's timed "
                      "batches ended, and the CPU seconds its process got per wall second of them (every thread "
                      "counted).", "", table([*KEY_COLUMNS, "load per round", "CPU share per round", "busy rounds"],
                                             cells)])


def format_host_syncs(records: list[Measurement]) -> str:
    """How often define-by-run code read a decision back to Python, per batch."""
    rows = [r for r in records if r.host_syncs_per_batch]  # masked variants report 0: left out
    if not rows:
        return ""
    parts = [f"{r.implementation} B={r.batch_size}: {r.host_syncs_per_batch:.1f}"
             for r in sorted(rows, key=Measurement.key)]
    return ("Device-to-host reads of decisions per batch, predicted parses (static graphs: none, the decision "
            "stays a masked select on the device): " + "; ".join(parts) + ".")


def format_breakdown(records: list[Measurement]) -> str:
    """Where each record's step goes (measurement.breakdown) in shares of it, what the limit ran on, and the phases and
    graph per batch of the implementations that report them."""
    rows = [(r, breakdown(r)) for r in sorted(records, key=Measurement.key) if breakdown(r)]
    if not rows:
        return ""
    cells = []
    for r, parts in rows:
        share = {name: f"{100 * seconds / r.step_s:.0f} %" for name, seconds in parts.items()}
        cells.append([*r.key(), f"{r.step_s * 1e3:,.2f}", share["useful"], share["waste"],
                      "-" if r.own_computed_s is None else share["slow_blas"],
                      share["overhead"] if parts["overhead"] >= 0 else f"**{share['overhead']}** (below its products)",
                      f"{r.computed_flops / r.useful_flops:.2f}x", f"{r.matmul_peak_flops_per_s / 1e9:,.0f}",
                      "; ".join(", ".join(f"{name} {value * scale:,.1f}" for name, value in found.items())
                                for found, scale in ((r.phase_s_per_batch or {}, 1e3), (r.graph_per_batch or {}, 1))
                                if found) or "-"])
    return "\n".join([
        "Each step per timed batch as useful (the limit: the useful products alone, back to back on the fastest "
        "routine), waste (what the implementation's algorithm computes beyond them, timed the same way), slow BLAS "
        "(the same products on the framework's own routine beyond the fastest, where it has one) and overhead (the "
        "rest: gate arithmetic, gathers and scatters, control flow, dispatch, Python; negative where a compiled "
        "program beats its own products timed back to back): docs/spec.md §6. The limit ran on", *dict.fromkeys(
            f"- {r.device}: {r.limit_matmul} ({r.limit_kernel}), {r.limit_flops_per_s / 1e9:,.0f} GFLOP/s at {r.mode} "
            f"{r.transitions} batch {r.batch_size}, timed on {r.limit_sample['batches']} of {r.limit_sample['of']} "
            "timed batches (" + "-".join(f"{x / 1e9:,.0f}" for x in r.limit_sample["useful_flops_per_s"]) +
            " GFLOP/s)" for r, _ in rows), "", table(
            [*KEY_COLUMNS, "step (ms)", "useful", "waste", "slow BLAS", "overhead", "computed / useful FLOPs",
             "dense peak (GFLOP/s)", "phases (ms); graph per batch"], cells)])


# The algorithm x framework matrix
def _variant_matrices(records: list[Measurement]) -> list[tuple[str, list[Measurement]]]:
    """(title, records) of each mode whose CPU records include a variant."""
    chosen = [(title, [r for r in records if r.mode == mode and r.device == "cpu"])
              for mode, title in (("infer", "Inference"), ("train", "Training"))]
    return [(title, rs) for title, rs in chosen if any(r.implementation in frameworks.OPT_IN for r in rs)]


def variants_measured(records: list[Measurement]) -> bool:
    """Whether a matrix has anything beside the default implementations."""
    return bool(_variant_matrices(records))


def format_matrix(records: list[Measurement]) -> str:
    """Algorithm x framework, one matrix per mode measured: pairs/s at batch 1 and 128, compile seconds."""
    return "\n\n".join(_one_matrix(rs, title) for title, rs in _variant_matrices(records)) or (
        "Matrix: no variant was measured (run with --implementations naming the variants).")


def _one_matrix(records: list[Measurement], title: str) -> str:
    by = {(r.implementation, r.transitions, r.batch_size): r for r in records}

    def figures(impl: str) -> str:  # per parse mode: pairs/s at batch 1 and 128, and the compile seconds of both
        speeds = {t: [by[impl, t, b] for b in (1, 128) if (impl, t, b) in by] for t in ("gold", "predicted")}
        return "; ".join(f"{t} " + " / ".join(f"{r.pairs_per_s:,.0f}" for r in rs)
                         + f" (compile {sum(r.compile_s for r in rs):.1f} s)" for t, rs in speeds.items() if rs)

    def cell(entry) -> str:
        return entry if isinstance(entry, str) else "<br>".join(
            f"**{impl}**: " + (figures(impl) or "not measured in this run") for impl in entry)

    matrix, columns = frameworks.matrix(), frameworks.FRAMEWORKS
    return "\n".join([f"{title} pairs/s at batch 1 / 128, and the compile seconds of both, per parse mode:", "",
                      table(["algorithm (module)", *columns],
                            [[f"{frameworks.TITLES[family]} (`{family}.py`)"]
                             + [cell(matrix[family, f]) for f in columns] for family in frameworks.FAMILIES])])


def plot(records: list[Measurement], out_dir: Path) -> list[Path]:
    """Throughput and the per-round ratios against batch size, where the time goes, compile time, and agreement, as
    PNG files (the first three drawn as the documents' figures are: bench/figures/runs.py)."""
    from bench.figures.runs import breakdown_rows, draw_breakdown, draw_by_batch

    with style.drawing() as plt:
        impls = style.registry_order(r.implementation for r in records)
        modes = [m for m in ("infer", "train") if any(r.mode == m for r in records)]
        fig = draw_by_batch(plt, [[(f"{mode}, {device}, gold parses", [
            {"implementation": r.implementation, "batch_size": r.batch_size, "median": r.pairs_per_s} for r in records
            if (r.mode, r.device, r.transitions) == (mode, device, "gold")]) for mode in modes]
            for device in sorted({r.device for r in records})], "sentence pairs / s", ratios=False)
        written = [style.save(fig, out_dir / "throughput.png", tight=True)]
        if ratios := [row for row in round_ratios(records) if row["rounds"]]:
            fig = draw_by_batch(plt, [[(f"{mode}, {parses} parses, {device}", mine) for mode in modes if (mine := [
                row for row in ratios if (row["device"], row["mode"], row["transitions"]) == (device, mode, parses)])]
                for device, parses in sorted({(row["device"], row["transitions"]) for row in ratios})],
                f"pairs/s over {frameworks.BASELINE}'s (log)")
            fig.suptitle(f"Speed over {frameworks.BASELINE}: median of per-round ratios, band = interquartile range",
                         fontsize=10)
            written.append(style.save(fig, out_dir / "ratios.png", tight=True))
        if rows := breakdown_rows(records):
            written.append(style.save(draw_breakdown(rows, plt), out_dir / "breakdown.png"))

        if compiled := [r for r in records if r.compile_s > 0 or r.first_call_s > 0]:
            fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(compiled)), 4))
            labels = [f"{r.implementation}\n{r.mode} B={r.batch_size}" for r in compiled]
            ax.bar(range(len(compiled)), [r.first_call_s for r in compiled], label="first calls (all shapes)",
                   color="#bbb")
            ax.bar(range(len(compiled)), [r.compile_s for r in compiled], label="compile/trace reported", width=0.5,
                   color=[style.colour(r.implementation) for r in compiled])
            ax.set_xticks(range(len(compiled)), labels, rotation=60, ha="right", fontsize=7)
            ax.set(ylabel="seconds", title="warm-up: compile time and first calls")
            ax.legend()
            written.append(style.save(fig, out_dir / "compile.png", tight=True))

        fig, ax = plt.subplots(figsize=(6, 4))
        x, colours = range(len(impls)), [style.colour(n) for n in impls]
        for k, (what, key) in enumerate((("encodings", "max_abs_err_encoding"), ("logits", "max_abs_err_logits"))):
            worst = [max([1e-18] + [getattr(r, key) for r in records if r.implementation == n]) for n in impls]
            ax.bar([i + (0.4 * k - 0.2) for i in x], worst, width=0.4, label=what, color=colours,
                   alpha=0.5 if k else None)
        ax.axhline(ENCODING_TOL_F32, color="black", ls="--", lw=1)
        ax.axhline(LOGITS_TOL_F32, color=style.BASELINE_GREY, ls=":", lw=1)
        ax.set_xticks(list(x), impls)
        ax.set(yscale="log", ylabel="max abs error vs float64 reference",
               title="numerical agreement (dashed: encodings' tolerance, dotted: logits')")
        ax.legend()
        written.append(style.save(fig, out_dir / "agreement.png", tight=True))
        return written


def render_markdown(records: list[Measurement], sources, over: tuple[str, ...] = ()) -> str:
    envs = {r.implementation: r for r in reversed(records)}  # each implementation's first record
    flags = f" --over {','.join(over)}" if over else ""
    lines = ["# SPINN benchmark report", "",
             f"Rendered by `python -m bench report {' '.join(map(str, sources))}{flags}`.", "", "## Environment", ""]
    for impl, r in sorted(envs.items()):
        lines.append(f"- **{impl}**: {r.framework} {r.framework_version}, {r.device} "
                     f"({r.device_name}), {r.dtype}, commit {r.git_commit}, {r.timestamp}, "
                     f"threads {json.dumps(r.threads)}, data {r.data}")
    lines += ["", "## Results", "", format_table(records), "", "## Ratios", "", format_ratios(records), ""]
    for baseline in over:
        lines += [format_ratios(records, baseline), ""]
    lines += ["## Where the time goes", "", time_goes, ""] if (time_goes := format_breakdown(records)) else []
    lines += [format_host_syncs(records), ""]
    if table2_measured(records):
        lines += ["## Beside the paper's Table 2", "", TABLE2_INTRO, "", format_table2(records), ""]
    if load := format_load(records):  # runs from before the load was recorded render as they did
        lines += ["## Load", "", load, ""]
    lines += ["## Algorithm and framework", "", format_matrix(records), "",
              "## Targets", "", format_targets(records), ""]
    return "\n".join(lines)


def write_report(records: list[Measurement], sources, out_dir: Path, plots: bool = True,
                 over: tuple[str, ...] = (), note: str = "") -> tuple[str, list[Path]]:
    """Write report.md and its plots (without matplotlib, report.md alone) into ``out_dir``: the Markdown, the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(records, sources, over)
    if note:  # a line under the title (a run's partial report says so there)
        title, _, rest = markdown.partition("\n")
        markdown = f"{title}\n\n**{note}**\n{rest}"
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
    measured = {r.implementation for r in records}
    if unknown := [name for name in over if name not in measured]:
        raise ValueError(f"--over {unknown[0]}: not measured in these results; measured: {', '.join(sorted(measured))}")
    markdown, written = write_report(records, args.results, out_dir, plots=not args.no_plots, over=over)
    print(markdown)
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0
