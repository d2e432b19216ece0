"""Figures drawn from committed benchmark records: speed ratios, padding, compile time, host reads.

Every ratio is the report's (bench/benchmark/stats.py ``round_ratios``):
each implementation's pairs/s over the baseline's, taken round by round in
the interleaved rounds of one run, then summarised by its median and
quartiles. A figure therefore shows what ``report.md`` tabulates, and the
lead's re-run of a folder redraws it with no change here: only the record
format is assumed, never a value.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench import frameworks
from bench.benchmark import stats
from bench.figures import style
from bench.figures.sources import Block, Sources

HEADLINE_RUN = "cpu"  # the README's headline run: `python -m bench run --out results/cpu`
# The runs the headline figure draws, a row each where committed: the CPU run, then the GPU preset's run.
HEADLINE_RUNS = (HEADLINE_RUN, "gpu-h100")
MODE_ORDER = ("infer", "train")
MODE_TITLES = {"infer": "inference", "train": "training step"}


def _r(x: float) -> float:
    """Numbers as figures.json keeps them: enough digits for any check, none of float noise."""
    return round(float(x), 6)


def _modes(rows) -> list[str]:
    found = {row["mode"] for row in rows}
    return [m for m in MODE_ORDER if m in found] + sorted(found - set(MODE_ORDER))


def _ratio_axis(ax) -> None:
    """A log axis of speed ratios, ticks written as 0.8x, 1x, 2x; the baseline at 1x."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ticks = [t for t in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 30, 50) if low <= t <= high]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1.0, color=style.BASELINE_GREY, ls="--", lw=1, zorder=1)


def _ratio_row(row: dict) -> dict:
    """A ratio row as figures.json keeps it."""
    return {"mode": row["mode"], "transitions": row["transitions"], "device": row["device"],
            "batch_size": row["batch_size"], "implementation": row["implementation"],
            "median": _r(row["median"]), "q1": _r(row["q1"]), "q3": _r(row["q3"]),
            "min": _r(row["min"]), "max": _r(row["max"]), "rounds": row["rounds"]}


# ---------------------------------------------------------------------------
# 1. The headline: speed over the baseline against batch size
# ---------------------------------------------------------------------------

def headline(src: Sources, plt):
    """Every implementation's speed over the baseline against batch size, gold parses: a row of panels (one per
    mode) for each headline run that is committed, the CPU run first, then the GPU run."""
    baseline = frameworks.BASELINE
    runs = [run for run in HEADLINE_RUNS if run == HEADLINE_RUN or run in src.run_names()]
    by_run = {}
    for run in runs:
        rows = [row for row in stats.round_ratios(src.records(run)) if row["transitions"] == "gold"]
        if not rows:
            raise ValueError(f"{src.record_file(run)}: no gold-parse ratios over {baseline} to draw")
        by_run[run] = rows
    panels = [[(run, device, mode) for mode in _modes(rows) for device in sorted({r["device"] for r in rows})
               if any(r["mode"] == mode and r["device"] == device for r in rows)] for run, rows in by_run.items()]
    columns = max(len(row) for row in panels)
    fig, axes = plt.subplots(len(panels), columns, figsize=(4.6 * columns, 4.0 * len(panels)), squeeze=False)
    for row_axes, row_panels in zip(axes, panels):
        rows = by_run[row_panels[0][0]]
        sizes = sorted({row["batch_size"] for row in rows})
        for ax, (run, device, mode) in zip(row_axes, row_panels):
            mine = [row for row in rows if row["mode"] == mode and row["device"] == device]
            for impl in style.registry_order(row["implementation"] for row in mine):
                line = sorted((row for row in mine if row["implementation"] == impl),
                              key=lambda row: row["batch_size"])
                xs = [row["batch_size"] for row in line]
                c = style.colour(impl)
                ax.fill_between(xs, [row["q1"] for row in line], [row["q3"] for row in line], color=c, alpha=0.18,
                                lw=0)
                ax.plot(xs, [row["median"] for row in line], color=c, marker=style.marker(impl),
                        ls=style.linestyle(impl), label=impl)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(b) for b in sizes])
            ax.minorticks_off()
            ax.set_xlabel("batch size (sentence pairs)")
            ax.set_title(f"{MODE_TITLES.get(mode, mode)}, gold parses ({device}; results/{run})", fontsize=9)
        low = min(row["q1"] for row in rows)
        high = max(row["q3"] for row in rows)
        for ax in row_axes[:len(row_panels)]:
            ax.set_ylim(min(low, 1.0) / 1.15, max(high, 1.0) * 1.15)
            _ratio_axis(ax)
        row_axes[0].set_ylabel(f"pairs/s over {baseline}'s (log; {baseline} = 1x)")
        row_axes[len(row_panels) - 1].plot([], [], color=style.BASELINE_GREY, ls="--", lw=1,
                                           label=f"{baseline} (define-by-run) = 1x")
        row_axes[len(row_panels) - 1].legend(loc="best", fontsize=8)
        for ax in row_axes[len(row_panels):]:
            ax.set_visible(False)
    rounds = sorted({row["rounds"] for rows in by_run.values() for row in rows})
    data = src.records(HEADLINE_RUN)[0].data or "?"
    fig.suptitle(f"Speed over define-by-run {baseline}: median of per-round ratios, band = interquartile range",
                 fontsize=10)
    fig.tight_layout()
    files = [src.record_file(run) for run in by_run]
    entry = {
        "title": "Speed over PyTorch against batch size",
        "caption": (f"Each implementation's pairs/s over {baseline}'s on the same device, the median of the "
                    f"per-round ratios of {'/'.join(map(str, rounds))} interleaved rounds (band: interquartile "
                    f"range), gold parses, data {data}, from {' and '.join(files)}; the report's round_ratios."),
        "sources": [{"file": file,
                     "keys": ["implementation", "mode", "transitions", "device", "batch_size", "round_pairs_per_s",
                              "run_id"],
                     "select": f"transitions gold; ratios over {baseline} round by round"} for file in files],
        "data": [dict(_ratio_row(row), run=run) for run, rows in by_run.items() for row in rows],
    }
    return fig, entry


# ---------------------------------------------------------------------------
# 6. Speed ratio against the padding share, over the runs that measured it
# ---------------------------------------------------------------------------

def padding_runs(src: Sources) -> list[str]:
    """Runs whose ratios the padding figure may set side by side.

    A run qualifies when every record has an implementation and a padding
    share, it measured the baseline, and it measured only default
    implementations: a run of opt-in variants has other work in its rounds
    and answers another question.
    """
    chosen = []
    for run in src.run_names():
        records = src.records(run)
        if not all(r.padding_waste is not None for r in records):
            continue
        impls = {r.implementation for r in records}
        if frameworks.BASELINE in impls and not impls & frameworks.OPT_IN:
            chosen.append(run)
    return chosen


def padding_points(src: Sources) -> list[dict]:
    """One point per run, batch size and static implementation: its padding share and its ratio (inference, gold)."""
    points = []
    for run in padding_runs(src):
        records = src.records(run)
        waste = {r.key(): r.padding_waste for r in records}
        for row in stats.round_ratios(records):
            if row["mode"] != "infer" or row["transitions"] != "gold" or row["implementation"] in frameworks.EAGER:
                continue
            key = (row["device"], row["mode"], row["transitions"], row["batch_size"], row["implementation"])
            points.append({"run": run, "data": row["data"], "padding_waste": _r(waste[key]),
                           **_ratio_row(row)})
    return points


def padding(src: Sources, plt):
    """Static implementations' speed over the baseline against the share of PAD transition slots."""
    baseline = frameworks.BASELINE
    points = padding_points(src)
    if not points:
        raise ValueError(f"no run in {src.results} has inference ratios over {baseline} with padding_waste")
    sizes = sorted({p["batch_size"] for p in points})
    impls = style.registry_order(p["implementation"] for p in points)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.4 * len(sizes), 4.3), squeeze=False, sharey=True)
    for ax, size in zip(axes[0], sizes):
        mine = [p for p in points if p["batch_size"] == size]
        for i, impl in enumerate(impls):
            dots = sorted((p for p in mine if p["implementation"] == impl), key=lambda p: p["padding_waste"])
            if not dots:
                continue
            offset = (i - (len(impls) - 1) / 2) * 0.9  # percentage points apart, so the bars do not hide each other
            xs = np.array([100 * p["padding_waste"] for p in dots]) + offset
            med = np.array([p["median"] for p in dots])
            err = [med - [p["q1"] for p in dots], [p["q3"] for p in dots] - med]
            ax.errorbar(xs, med, yerr=err, fmt=style.marker(impl), color=style.colour(impl), ms=5, capsize=2,
                        lw=1, label=impl)
            # A thin line through the median of each cluster of runs at about the same padding.
            clusters = defaultdict(list)
            for x, m in zip(xs, med):
                clusters[round(x - offset)].append(m)
            keys = sorted(clusters)
            ax.plot(np.array(keys) + offset, [float(np.median(clusters[k])) for k in keys], color=style.colour(impl),
                    ls=style.linestyle(impl), lw=0.8, alpha=0.6)
        # Which runs sit at which padding share: their names under the points.
        groups = defaultdict(list)
        for p in mine:
            groups[round(100 * p["padding_waste"])].append(p["run"])
        for x, runs in sorted(groups.items()):
            names = "\n".join(dict.fromkeys(runs))
            ax.annotate(names, (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 4), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6.5, color="#444444")
        ax.set_xlim(-6, 56)
        ax.set_xlabel("PAD share of the transition slots computed (%)")
        ax.set_title(f"inference, gold parses, batch {size}")
    low = min(p["q1"] for p in points)
    high = max(p["q3"] for p in points)
    for ax in axes[0]:
        ax.set_ylim(min(low, 1.0) / 1.6, max(high, 1.0) * 1.15)  # room for the run names at the bottom
        _ratio_axis(ax)
    axes[0][0].set_ylabel(f"pairs/s over {baseline}'s (log)")
    axes[0][-1].legend(loc="upper right")
    fig.suptitle(f"Padding moves the comparison: static graphs compute PAD up to a batch's last real step, "
                 f"{baseline} skips it (median, bars = interquartile range)", fontsize=9)
    fig.tight_layout()
    runs = list(dict.fromkeys(p["run"] for p in points))
    entry = {
        "title": "Speed over PyTorch against the padding share",
        "caption": (f"Static implementations' pairs/s over {baseline}'s (median and IQR of per-round ratios, "
                    f"inference, gold parses) against padding_waste, the PAD share of the transition slots the "
                    f"implementation computes (runs before the sentence batches recorded the share of the batch "
                    f"arrays), in every run of default implementations that records it: {', '.join(runs)}."),
        "sources": [{"file": src.record_file(run),
                     "keys": ["implementation", "mode", "transitions", "batch_size", "round_pairs_per_s",
                              "padding_waste", "data"]} for run in runs],
        "data": points,
    }
    return fig, entry


# ---------------------------------------------------------------------------
# 7. Compile time against the number of shapes compiled
# ---------------------------------------------------------------------------

def compile_points(src: Sources) -> list[dict]:
    """Every warm-up of a default implementation that builds its graph ahead of time, in every run."""
    points = []
    for run in src.run_names():
        for r in src.records(run):
            impl = r.implementation
            if impl is None or impl in frameworks.EAGER or impl in frameworks.OPT_IN:
                continue
            if not r.warmup_shapes:
                continue
            points.append({"run": run, "implementation": impl, "mode": r.mode, "transitions": r.transitions,
                           "batch_size": r.batch_size, "warmup_shapes": r.warmup_shapes, "compile_s": _r(r.compile_s),
                           "traces": r.traces, "xla_compilations": r.compile_detail.get("xla_compilations")})
    return points


def compile_shapes(src: Sources, plt):
    """Warm-up compile seconds against the shapes warmed up, every run, one panel per mode."""
    points = compile_points(src)
    if not points:
        raise ValueError(f"no run in {src.results} records compile_s and warmup_shapes")
    modes = _modes(points)
    impls = style.registry_order(p["implementation"] for p in points)
    fig, axes = plt.subplots(1, len(modes), figsize=(4.8 * len(modes), 4.0), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for i, impl in enumerate(impls):
            mine = [p for p in points if p["mode"] == mode and p["implementation"] == impl]
            if not mine:
                continue
            offset = (i - (len(impls) - 1) / 2) * 0.12
            c = style.colour(impl)
            ax.scatter([p["warmup_shapes"] + offset for p in mine], [p["compile_s"] for p in mine], color=c,
                       marker=style.marker(impl), s=16, alpha=0.55, lw=0)
            shapes = sorted({p["warmup_shapes"] for p in mine})
            medians = [float(np.median([p["compile_s"] for p in mine if p["warmup_shapes"] == n])) for n in shapes]
            ax.plot(np.array(shapes) + offset, medians, color=c, ls=style.linestyle(impl), lw=1.2,
                    label=f"{impl} (median per count)")
        shapes = sorted({p["warmup_shapes"] for p in points if p["mode"] == mode})
        ax.set_xticks(shapes)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("shapes warmed up (bucket shapes of the run)")
        ax.set_ylabel("compile and trace time, all shapes (s)")
        ax.set_title(MODE_TITLES.get(mode, mode))
    runs = list(dict.fromkeys(p["run"] for p in points))
    fig.suptitle(f"One compilation per shape (XLA) against one trace for all shapes: {len(points)} warm-ups "
                 f"in {len(runs)} runs", fontsize=10)
    # One legend for every panel, below them, where it covers no point; each entry a warm-up's dot and the
    # median line of the same implementation.
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=style.colour(impl), ls=style.linestyle(impl), lw=1.2, marker=style.marker(impl),
                      ms=4, alpha=0.8) for impl in impls]
    fig.legend(handles, impls, loc="lower center", ncol=len(impls), fontsize=8, frameon=False,
               title="a dot per warm-up; a line through the medians per shape count", title_fontsize=8)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    entry = {
        "title": "Compile time against the number of shapes",
        "caption": ("compile_s (tracing and compiling before the first result, all shapes) against warmup_shapes "
                    "for every default implementation that builds its graph ahead of time, in every committed run "
                    f"({', '.join(runs)}); lines join the medians per shape count."),
        "sources": [{"file": src.record_file(run),
                     "keys": ["implementation", "mode", "warmup_shapes", "compile_s", "traces",
                              "compile_detail.xla_compilations"]} for run in runs],
        "data": points,
    }
    return fig, entry


# ---------------------------------------------------------------------------
# 5. A decision read on the host: one batch's timeline, predicted parses
# ---------------------------------------------------------------------------

def parse_block_reads(block: Block) -> list[dict]:
    """From an ``explain --parse`` block's result: per implementation that reads decisions on the host, its
    steps with work and its decisions read, in gold and predicted mode."""
    found = []
    for name, value in block.result.items():
        if isinstance(value, dict) and "host_syncs" in (value.get("predicted") or {}):
            gold, predicted = value["gold"], value["predicted"]
            found.append({"section": name, "steps_gold": gold["python_steps"],
                          "steps_predicted": predicted["python_steps"], "reads_gold": gold["host_syncs"],
                          "reads_predicted": predicted["host_syncs"]})
    return found


def host_lanes(src: Sources) -> list[dict]:
    """Per batch size with predicted parses: every implementation's median batch and decisions read per batch,
    and the baseline's gold-parse batch beside them."""
    records = [r for r in src.records(HEADLINE_RUN) if r.mode == "infer"]
    predicted_sizes = sorted({r.batch_size for r in records if r.transitions == "predicted"})
    order = style.registry_order(r.implementation for r in records)
    records.sort(key=lambda r: (order.index(r.implementation), r.transitions))
    lanes = []
    for size in predicted_sizes:
        for r in records:
            transitions = r.transitions
            if r.batch_size != size:
                continue
            if transitions == "predicted" or (transitions == "gold" and r.implementation == frameworks.BASELINE):
                lanes.append({"batch_size": size, "implementation": r.implementation, "transitions": transitions,
                              "step_s_median": _r(r.step_s_median),
                              "host_syncs_per_batch": _r(r.host_syncs_per_batch or 0.0),
                              "phase_s_per_batch": {k: _r(v) for k, v in (r.phase_s_per_batch or {}).items()}})
    return lanes


def host_reads(src: Sources, plt):
    """One median batch per implementation as a bar in time, with a mark for each decision read back to Python."""
    lanes = host_lanes(src)
    if not lanes:
        raise ValueError(f"{src.record_file(HEADLINE_RUN)}: no inference records with predicted parses")
    sizes = sorted({lane["batch_size"] for lane in lanes})
    most = max(sum(lane["batch_size"] == s for lane in lanes) for s in sizes)
    fig, axes = plt.subplots(len(sizes), 1, figsize=(8.6, 0.9 + (0.5 * most + 0.7) * len(sizes)), squeeze=False)
    for ax, size in zip(axes[:, 0], sizes):
        mine = [lane for lane in lanes if lane["batch_size"] == size]
        longest = max(max(lane["step_s_median"], sum(lane["phase_s_per_batch"].values())) for lane in mine) * 1e3
        for y, lane in enumerate(reversed(mine)):
            impl, width = lane["implementation"], lane["step_s_median"] * 1e3
            c = style.colour(impl)
            phases = lane["phase_s_per_batch"]
            if phases:  # implementations that split their batch: one segment per phase
                start = 0.0
                for k, (name, seconds) in enumerate(phases.items()):
                    ax.barh(y, seconds * 1e3, left=start, height=0.5, color=c, alpha=0.85 - 0.3 * (k % 2),
                            edgecolor="white")
                    ax.text(start + seconds * 5e2, y, name, ha="center", va="center", fontsize=6.5, color="white")
                    start += seconds * 1e3
            else:
                ax.barh(y, width, height=0.5, color=c, alpha=0.85)
            reads = lane["host_syncs_per_batch"]
            drawn = int(round(reads))
            if drawn:  # spread evenly: the record holds how many reads a batch made, not when
                xs = [(k + 0.5) * width / drawn for k in range(drawn)]
                ax.plot(xs, [y + 0.36] * drawn, "v", color="black", ms=3.5)
                note = f"{reads:.1f} decisions read back to Python per batch"
            elif lane["transitions"] == "predicted":
                note = "decided on the device: no read"
            else:
                note = "gold parses: nothing to decide"
            end = max(width, sum(phases.values()) * 1e3)  # phases are means per batch: they may pass the median
            ax.text(end + longest * 0.01, y, f"{width:.1f} ms  {note}", va="center", fontsize=7.5)
        ax.set_yticks(range(len(mine)), [f"{lane['implementation']} ({lane['transitions']})"
                                         for lane in reversed(mine)])
        ax.set_xlim(0, longest * 1.85)
        ax.set_ylim(-0.6, len(mine) - 0.2)
        ax.grid(False, axis="y")
        ax.set_title(f"inference, batch {size}: one median batch")
        # The bars are timed, the marks only counted: the axis says so, so that no mark reads as a moment.
        ax.set_xlabel("time within the batch (ms): the bars' lengths only\n"
                      "\u25bc a decision read back to Python (device to host), spaced evenly: counted per batch, "
                      "not timed", fontsize=8)
    block_note = ""
    try:
        block = src.block("fig-parse")
    except ValueError:
        block, reads = None, []
    else:
        reads = parse_block_reads(block)
        for item in reads:
            if item["section"] == frameworks.BASELINE:
                block_note = (f"python -m bench explain --parse ({block.guide}): {item['section']} read "
                              f"{item['reads_predicted']} decisions in {item['steps_predicted']} steps with "
                              f"predicted parses, {item['reads_gold']} with gold ones.")
    fig.suptitle("Where the decision is read: define-by-run code asks the device at every step with a choice",
                 fontsize=10)
    if block_note:
        fig.text(0.01, 0.005, block_note, fontsize=7, color="#444444", va="bottom")
    fig.tight_layout(rect=(0, 0.03 if block_note else 0, 1, 1))
    sources = [{"file": src.record_file(HEADLINE_RUN),
                "keys": ["implementation", "mode", "transitions", "batch_size", "step_s_median",
                         "host_syncs_per_batch", "phase_s_per_batch"],
                "select": "inference, predicted parses, and the baseline's gold parses at the same batch sizes"}]
    if block is not None:
        sources.append({"block": block.source(), "keys": ["<implementation>.gold", "<implementation>.predicted"]})
    entry = {
        "title": "A decision read on the host",
        "caption": ("One median batch (step_s_median) per implementation as a bar in time, predicted parses, "
                    "with a mark per decision read back to Python (host_syncs_per_batch). Only the bars' lengths "
                    "are times: the marks are spaced evenly along the bar in the order of the reads, because the "
                    "record counts the reads per batch and does not time them. From "
                    f"{src.record_file(HEADLINE_RUN)}."),
        "sources": sources,
        "data": {"lanes": lanes, "explain_parse": reads},
    }
    return fig, entry
