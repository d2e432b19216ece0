"""Figures of committed runs from benchmark records, every ratio and part the report's (bench/run/measurement.py)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench import frameworks
from bench.run.measurement import PARTS, breakdown as parts_of, round_ratios
from bench.figures import style
from bench.render.sources import QuoteError, Results

HEADLINE_RUNS = ("cpu", "gpu-h100")  # the README's headline runs, a row of panels each where committed
MODE_TITLES = {"infer": "inference", "train": "training step"}
BASELINE = frameworks.BASELINE


def _r(x: float) -> float:
    """Numbers as figures.json keeps them: enough digits for any check, none of float noise."""
    return round(float(x), 6)


def _modes(rows) -> list[str]:
    found = {row["mode"] for row in rows}
    return [m for m in MODE_TITLES if m in found] + sorted(found - set(MODE_TITLES))


def _ratio_row(row: dict) -> dict:
    return {**{k: row[k] for k in ("mode", "transitions", "device", "batch_size", "implementation")},
            **{k: _r(row[k]) for k in ("median", "q1", "q3", "min", "max")}, "rounds": row["rounds"]}


def _ratio_axis(ax, low: float, high: float) -> None:
    """A log axis of speed ratios from ``low`` to ``high``, ticks written as 0.8x, 1x, 2x; the baseline at 1x."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set(ylim=(low, high), yscale="log")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator([t for t in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20,
                                                         30, 50) if low <= t <= high]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1.0, color=style.BASELINE_GREY, ls="--", lw=1, zorder=1)


def _sources(runs, keys: list[str], **more) -> list[dict]:
    return [{"file": f"results/{run}/results.jsonl", "keys": keys, **more} for run in dict.fromkeys(runs)]


def draw_by_batch(plt, panels: list[list[tuple[str, list[dict]]]], ylabel: str, ratios: bool = True):
    """Lines against batch size, an implementation each, a row of panels per list (``ratios``: a log ratio axis)."""
    columns = max(len(row) for row in panels)
    fig, axes = plt.subplots(len(panels), columns, figsize=(4.6 * columns, 4.0 * len(panels)), squeeze=False)
    for row_axes, row_panels in zip(axes, panels):
        every = [row for _, rows in row_panels for row in rows]
        sizes = sorted({row["batch_size"] for row in every})
        for ax, (title, rows) in zip(row_axes, row_panels):
            for impl in style.registry_order(row["implementation"] for row in rows):
                line = sorted((r for r in rows if r["implementation"] == impl), key=lambda r: r["batch_size"])
                xs = [row["batch_size"] for row in line]
                if "q1" in line[0]:
                    ax.fill_between(xs, [r["q1"] for r in line], [r["q3"] for r in line], color=style.colour(impl),
                                    alpha=0.18, lw=0)
                ax.plot(xs, [r["median"] for r in line], label=impl, **style.look(impl))
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(b) for b in sizes])
            ax.minorticks_off()
            ax.set(xlabel="batch size (sentence pairs)", yscale="log")
            ax.set_title(title, fontsize=9)
            if ratios:
                _ratio_axis(ax, min(min(r["q1"] for r in every), 1.0) / 1.15,
                            max(max(r["q3"] for r in every), 1.0) * 1.15)
        row_axes[0].set_ylabel(ylabel)
        last = row_axes[len(row_panels) - 1]
        if ratios:
            last.plot([], [], color=style.BASELINE_GREY, ls="--", lw=1, label=f"{BASELINE} (define-by-run) = 1x")
        if last.get_legend_handles_labels()[0]:  # a run of sampled parses only has no gold line to name
            last.legend(loc="best", fontsize=8)
        for ax in row_axes[len(row_panels):]:
            ax.set_visible(False)
    return fig


def headline(results: Results, plt):
    """Every implementation's speed over the baseline against batch size, gold parses, a row per headline run."""
    by_run = {run: [row for row in round_ratios(results.measurements(run)) if row["transitions"] == "gold"]
              for run in HEADLINE_RUNS if run == HEADLINE_RUNS[0] or run in results.runs()}
    fig = draw_by_batch(plt, [[(f"{MODE_TITLES.get(mode, mode)}, gold parses ({device}; results/{run})", mine)
                               for mode in _modes(rows) for device in sorted({r["device"] for r in rows})
                               if (mine := [r for r in rows if r["mode"] == mode and r["device"] == device])]
                              for run, rows in by_run.items()], f"pairs/s over {BASELINE}'s (log; {BASELINE} = 1x)")
    fig.suptitle(f"Speed over define-by-run {BASELINE}: median of per-round ratios, band = interquartile range",
                 fontsize=10)
    fig.tight_layout()
    return fig, {
        "title": "Speed over PyTorch against batch size",
        "sources": _sources(by_run, ["implementation", "mode", "transitions", "device", "batch_size",
                                     "round_pairs_per_s", "run_id"],
                            select=f"transitions gold; ratios over {BASELINE} round by round"),
        "data": [dict(_ratio_row(row), run=run) for run, rows in by_run.items() for row in rows]}


TOP = 250  # the breakdown's axis ends here (a per cent of the step), whatever a bar's height
PART_LOOKS = {"useful": (1.0, ""), "waste": (0.6, "//"), "slow_blas": (0.45, "xx"), "overhead": (0.22, "")}  # alpha


def breakdown_rows(records) -> list[dict]:
    """Every gold-parse record with the breakdown at the smallest and largest batch size: its parts in ms per batch."""
    order = style.registry_order(r.implementation for r in records)
    found = [r for r in records if r.transitions == "gold" and parts_of(r)]
    sizes = {min(r.batch_size for r in found), max(r.batch_size for r in found)} if found else set()
    chosen = sorted((r for r in found if r.batch_size in sizes), key=lambda r: (
        r.device, r.mode != "infer", r.batch_size, order.index(r.implementation)))
    return [{"device": r.device, "mode": r.mode, "batch_size": r.batch_size, "implementation": r.implementation,
             "step_ms": _r(r.step_s * 1e3), **{f"{part}_ms": _r(s * 1e3) for part, s in parts_of(r).items()}}
            for r in chosen]


def draw_breakdown(rows: list[dict], plt):
    """Stacked bars, an implementation each, a panel per device, mode and batch size: the shares of the step of the
    useful products, the algorithm's waste, slow BLAS and the framework's overhead, the step's ms above (a negative
    overhead: the bar passes 100 %, the step's line drawn across it)."""
    from matplotlib.patches import Patch

    panels = list(dict.fromkeys((row["device"], row["mode"], row["batch_size"]) for row in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 0.6, 4.6), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        mine = [row for row in rows if (row["device"], row["mode"], row["batch_size"]) == panel]
        for x, row in enumerate(mine):
            bottom = 0.0
            for part, (alpha, hatch) in PART_LOOKS.items():
                share = 100 * row[f"{part}_ms"] / row["step_ms"]
                if share > 0:
                    ax.bar(x, share, bottom=bottom, width=0.7, color=style.colour(row["implementation"]),
                           alpha=alpha, hatch=hatch, edgecolor="white", lw=0.5)
                    bottom += share
            if row["overhead_ms"] < 0:  # the step beat its own products timed back to back: kept, not clamped
                ax.hlines(100, x - 0.42, x + 0.42, color="black", lw=1.5)
            step = f"{row['step_ms']:,.0f}" if row["step_ms"] >= 100 else f"{row['step_ms']:.3g}"
            ax.text(x, min(max(bottom, 100), TOP), f"{step} ms" + (f"\n(products {bottom:,.0f} %)" if bottom > TOP
                                                                   else ""), ha="center", va="bottom", fontsize=6.5)
        ax.set_xticks(range(len(mine)), [row["implementation"] for row in mine], rotation=35, ha="right", fontsize=7.5)
        ax.set_title(f"{MODE_TITLES.get(panel[1], panel[1])}, batch {panel[2]} ({panel[0]})", fontsize=9)
        ax.grid(False, axis="x")
    axes[0][0].set_ylabel("share of the step (%); above each bar: the step")
    axes[0][0].set_ylim(0, min(max(100 * (r["step_ms"] - min(r["overhead_ms"], 0)) / r["step_ms"] for r in rows), TOP)
                        * 1.12)  # a bar past TOP % (a busy machine's limit) is cut there, its height written
    fig.legend([Patch(facecolor=style.BASELINE_GREY, alpha=alpha, hatch=hatch, edgecolor="white")
                for alpha, hatch in PART_LOOKS.values()] + [plt.Line2D([], [], color="black", lw=1.5)],
               [*PARTS.values(), "the step, where below its own products"], loc="lower center", ncol=5, fontsize=8,
               frameon=False)
    fig.suptitle("Where a step's time goes: the useful products (the limit), what the algorithm computes beyond\n"
                 "them (waste), the framework's slower BLAS and its overhead (the rest of the step)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def breakdown(results: Results, plt):
    """The default CPU run's breakdown of a step, gold parses, batch 1 and 128 (breakdown_rows, draw_breakdown)."""
    rows = breakdown_rows(results.measurements(HEADLINE_RUNS[0]))
    if not rows:
        raise QuoteError(f"results/{HEADLINE_RUNS[0]}: no record has the breakdown (useful_s, computed_s, step_s)")
    return draw_breakdown(rows, plt), {
        "title": "Where a step's time goes", "data": rows,
        "sources": _sources(HEADLINE_RUNS[:1], ["implementation", "mode", "transitions", "batch_size", "useful_s",
                                                "computed_s", "own_computed_s", "step_s"],
                            select="gold parses, batch 1 and 128")}


def padding(results: Results, plt):
    """Static implementations' speed over the baseline against the share of PAD transition slots."""
    points = []  # one per run, batch size and static implementation (inference, gold): its padding share and ratio
    for run in results.runs():
        records = results.measurements(run)
        impls = {r.implementation for r in records}
        if any(r.padding_waste is None for r in records) or BASELINE not in impls or impls & frameworks.OPT_IN:
            continue
        waste = {r.key(): r.padding_waste for r in records}
        points += [{"run": run, "data": row["data"], "padding_waste": _r(waste[row["device"], row["mode"],
                    row["transitions"], row["batch_size"], row["implementation"]]), **_ratio_row(row)}
                   for row in round_ratios(records) if row["mode"] == "infer" and row["transitions"] == "gold"
                   and row["implementation"] not in frameworks.EAGER]
    if not points:
        raise QuoteError(f"no run has inference ratios over {BASELINE} with padding_waste")
    sizes = sorted({p["batch_size"] for p in points})
    impls = style.registry_order(p["implementation"] for p in points)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.4 * len(sizes), 4.3), squeeze=False, sharey=True)
    for ax, size in zip(axes[0], sizes):
        mine = [p for p in points if p["batch_size"] == size]
        for i, impl in enumerate(impls):
            dots = sorted((p for p in mine if p["implementation"] == impl), key=lambda p: p["padding_waste"])
            offset = (i - (len(impls) - 1) / 2) * 0.9  # percentage points apart: no bar hides another
            xs = np.array([100 * p["padding_waste"] for p in dots]) + offset
            med = np.array([p["median"] for p in dots])
            if dots:
                ax.errorbar(xs, med, yerr=[med - [p["q1"] for p in dots], [p["q3"] for p in dots] - med],
                            fmt=style.marker(impl), color=style.colour(impl), ms=5, capsize=2, lw=1, label=impl)
            clusters = defaultdict(list)  # a thin line through the median of the runs at about the same padding
            for x, m in zip(xs, med):
                clusters[round(x - offset)].append(m)
            ax.plot(np.array(sorted(clusters)) + offset, [float(np.median(clusters[k])) for k in sorted(clusters)],
                    color=style.colour(impl), ls=style.linestyle(impl), lw=0.8, alpha=0.6)
        groups = defaultdict(list)  # which runs sit at which padding share: their names under the points
        for p in mine:
            groups[round(100 * p["padding_waste"])].append(p["run"])
        for x, runs in sorted(groups.items()):
            ax.annotate("\n".join(dict.fromkeys(runs)), (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                        textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="#444444")
        ax.set(xlim=(-6, 56), xlabel="PAD share of the transition slots computed (%)",
               title=f"inference, gold parses, batch {size}")
    for ax in axes[0]:  # room for the run names at the bottom
        _ratio_axis(ax, min(min(p["q1"] for p in points), 1.0) / 1.6, max(max(p["q3"] for p in points), 1.0) * 1.15)
    axes[0][0].set_ylabel(f"pairs/s over {BASELINE}'s (log)")
    axes[0][-1].legend(loc="upper right")
    fig.suptitle(f"Padding moves the comparison: static graphs compute PAD up to a batch's last real step, "
                 f"{BASELINE} skips it (median, bars = interquartile range)", fontsize=9)
    fig.tight_layout()
    return fig, {"title": "Speed over PyTorch against the padding share", "sources": _sources(
        (p["run"] for p in points), ["implementation", "mode", "transitions", "batch_size", "round_pairs_per_s",
                                     "padding_waste", "data"]), "data": points}


def compile_shapes(results: Results, plt):
    """Warm-up compile seconds against the shapes warmed up, ahead-of-time default implementations, a panel per mode."""
    points = [{"run": run, "implementation": r.implementation, "mode": r.mode, "transitions": r.transitions,
               "batch_size": r.batch_size, "warmup_shapes": r.warmup_shapes, "compile_s": _r(r.compile_s),
               "traces": r.traces, "xla_compilations": r.compile_detail.get("xla_compilations")}
              for run in results.runs() for r in results.measurements(run) if r.warmup_shapes
              and r.implementation not in frameworks.EAGER and r.implementation not in frameworks.OPT_IN]
    if not points:
        raise QuoteError("no run records compile_s and warmup_shapes")
    modes, impls = _modes(points), style.registry_order(p["implementation"] for p in points)
    fig, axes = plt.subplots(1, len(modes), figsize=(4.8 * len(modes), 4.0), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for i, impl in enumerate(impls):
            mine = [p for p in points if p["mode"] == mode and p["implementation"] == impl]
            offset = (i - (len(impls) - 1) / 2) * 0.12
            shapes = sorted({p["warmup_shapes"] for p in mine})
            ax.scatter([p["warmup_shapes"] + offset for p in mine], [p["compile_s"] for p in mine],
                       color=style.colour(impl), marker=style.marker(impl), s=16, alpha=0.55, lw=0)
            ax.plot(np.array(shapes) + offset, [float(np.median([p["compile_s"] for p in mine if p["warmup_shapes"]
                                                                 == n])) for n in shapes],
                    color=style.colour(impl), ls=style.linestyle(impl), lw=1.2)
        ax.set_xticks(sorted({p["warmup_shapes"] for p in points if p["mode"] == mode}))
        ax.set(ylim=(0, None), xlabel="shapes warmed up (bucket shapes of the run)",
               ylabel="compile and trace time, all shapes (s)", title=MODE_TITLES.get(mode, mode))
    runs = list(dict.fromkeys(p["run"] for p in points))
    fig.suptitle(f"One compilation per shape (XLA) against one trace for all shapes: {len(points)} warm-ups "
                 f"in {len(runs)} runs", fontsize=10)
    # One legend below the panels, where it covers no point.
    fig.legend([plt.Line2D([], [], lw=1.2, ms=4, alpha=0.8, **style.look(impl)) for impl in impls], impls,
               loc="lower center", ncol=len(impls), fontsize=8, frameon=False, title_fontsize=8,
               title="a dot per warm-up; a line through the medians per shape count")
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig, {"title": "Compile time against the number of shapes", "sources": _sources(
        runs, ["implementation", "mode", "warmup_shapes", "compile_s", "traces", "compile_detail.xla_compilations"]),
        "data": points}


def host_reads(results: Results, plt):
    """One median batch per implementation as a bar in time, with a mark for each decision read back to Python."""
    records = [r for r in results.measurements(HEADLINE_RUNS[0]) if r.mode == "infer"]
    order = style.registry_order(r.implementation for r in records)
    records.sort(key=lambda r: (order.index(r.implementation), r.transitions))
    # A lane per batch size with predicted parses: each median batch and its decisions read, beside the baseline's.
    lanes = [{"batch_size": size, "implementation": r.implementation, "transitions": r.transitions,
             "step_s_median": _r(r.step_s_median), "host_syncs_per_batch": _r(r.host_syncs_per_batch or 0.0),
             "phase_s_per_batch": {k: _r(v) for k, v in (r.phase_s_per_batch or {}).items()}}
            for size in sorted({r.batch_size for r in records if r.transitions == "predicted"}) for r in records
            if r.batch_size == size and (r.transitions == "predicted" or r.implementation == BASELINE
                                         and r.transitions == "gold")]
    if not lanes:
        raise QuoteError(f"results/{HEADLINE_RUNS[0]}/results.jsonl: no inference records with predicted parses")
    sizes = sorted({lane["batch_size"] for lane in lanes})
    most = max(sum(lane["batch_size"] == s for lane in lanes) for s in sizes)
    fig, axes = plt.subplots(len(sizes), 1, figsize=(8.6, 0.9 + (0.5 * most + 0.7) * len(sizes)), squeeze=False)
    for ax, size in zip(axes[:, 0], sizes):
        mine = [lane for lane in lanes if lane["batch_size"] == size]
        longest = max(max(lane["step_s_median"], sum(lane["phase_s_per_batch"].values())) for lane in mine) * 1e3
        for y, lane in enumerate(reversed(mine)):
            width, phases, c, start = lane["step_s_median"] * 1e3, lane["phase_s_per_batch"], \
                style.colour(lane["implementation"]), 0.0
            for k, (name, seconds) in enumerate(phases.items()):  # a batch split in phases: a segment each
                ax.barh(y, seconds * 1e3, left=start, height=0.5, color=c, alpha=0.85 - 0.3 * (k % 2),
                        edgecolor="white")
                ax.text(start + seconds * 5e2, y, name, ha="center", va="center", fontsize=6.5, color="white")
                start += seconds * 1e3
            if not phases:
                ax.barh(y, width, height=0.5, color=c, alpha=0.85)
            reads, drawn = lane["host_syncs_per_batch"], int(round(lane["host_syncs_per_batch"]))
            if drawn:  # spread evenly: the record holds how many reads a batch made, not when
                ax.plot([(k + 0.5) * width / drawn for k in range(drawn)], [y + 0.36] * drawn, "v", color="black",
                        ms=3.5)
            note = (f"{reads:.1f} decisions read back to Python per batch" if drawn else
                    "decided on the device: no read" if lane["transitions"] == "predicted" else
                    "gold parses: nothing to decide")
            end = max(width, sum(phases.values()) * 1e3)  # phases are means per batch: they may pass the median
            ax.text(end + longest * 0.01, y, f"{width:.1f} ms  {note}", va="center", fontsize=7.5)
        ax.set_yticks(range(len(mine)), [f"{lane['implementation']} ({lane['transitions']})"
                                         for lane in reversed(mine)])
        ax.set(xlim=(0, longest * 1.85), ylim=(-0.6, len(mine) - 0.2),
               title=f"inference, batch {size}: one median batch")
        ax.grid(False, axis="y")
        # The bars are timed, the marks only counted: the axis says so, so that no mark reads as a moment.
        ax.set_xlabel("time within the batch (ms): the bars' lengths only\n\u25bc a decision read back to Python "
                      "(device to host), spaced evenly: counted per batch, not timed", fontsize=8)
    block = results.explained().get("fig-parse")
    reads = [] if block is None else [
        {"section": name, "steps_gold": v["gold"]["python_steps"], "steps_predicted": v["predicted"]["python_steps"],
         "reads_gold": v["gold"]["host_syncs"], "reads_predicted": v["predicted"]["host_syncs"]}
        for name, v in block["result"].items() if isinstance(v, dict) and "host_syncs" in (v.get("predicted") or {})]
    note = next((f"python -m bench explain --parse ({block['guide']}): {r['section']} read {r['reads_predicted']} "
                 f"decisions in {r['steps_predicted']} steps with predicted parses, {r['reads_gold']} with gold ones."
                 for r in reads if r["section"] == BASELINE), "")
    fig.suptitle("Where the decision is read: define-by-run code asks the device at every step with a choice",
                 fontsize=10)
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="#444444", va="bottom")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    return fig, {
        "title": "A decision read on the host",
        "sources": _sources(HEADLINE_RUNS[:1], ["implementation", "mode", "transitions", "batch_size",
                                                "step_s_median", "host_syncs_per_batch", "phase_s_per_batch"],
                            select="inference, predicted parses, and the baseline's gold parses at the same batch "
                                   "sizes") + ([] if block is None else [
            {"block": block["source"], "keys": ["<implementation>.gold", "<implementation>.predicted"]}]),
        "data": {"lanes": lanes, "explain_parse": reads}}
