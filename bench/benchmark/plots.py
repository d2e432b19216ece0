"""The report's plots: throughput, every round's ratio, compile time, agreement (PNG files beside report.md)."""

from __future__ import annotations

from pathlib import Path

from bench import frameworks
from bench.benchmark.record import Measurement
from bench.figures import style
from bench.benchmark.stats import round_ratios
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32


def plot(records: list[Measurement], out_dir: Path) -> list[Path]:
    """Throughput vs batch size, per-round ratios, compile time, and agreement, as PNG files (bench/figures/style.py:
    the implementations' colours of every plot of the suite)."""
    with style.drawing() as plt:
        written = []
        impls = style.registry_order(r.implementation for r in records)
        devices = sorted({r.device for r in records})
        modes = [m for m in ("infer", "train") if any(r.mode == m for r in records)]

        fig, axes = plt.subplots(len(devices), len(modes), figsize=(6 * len(modes), 4.2 * len(devices)),
                                 squeeze=False)
        for i, device in enumerate(devices):
            for j, mode in enumerate(modes):
                ax = axes[i][j]
                for impl in impls:
                    rows = sorted((r for r in records if r.implementation == impl and r.mode == mode
                                   and r.device == device and r.transitions == "gold"),
                                  key=lambda r: r.batch_size)
                    if rows:
                        ax.plot([r.batch_size for r in rows], [r.pairs_per_s for r in rows], label=impl,
                                **style.look(impl))
                ax.set_xscale("log", base=2)
                ax.set(yscale="log", xlabel="batch size (pairs)", ylabel="sentence pairs / s",
                       title=f"{mode}, {device}, gold parses")
                if ax.get_legend_handles_labels()[0]:  # a run of sampled parses only has no gold line to name
                    ax.legend()
        fig.tight_layout()
        written.append(style.save(fig, out_dir / "throughput.png"))
        ratios = _plot_ratios(records, out_dir, plt)
        if ratios:
            written.append(ratios)

        compiled = [r for r in records if r.compile_s > 0 or r.first_call_s > 0]
        if compiled:
            fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(compiled)), 4))
            labels = [f"{r.implementation}\n{r.mode} B={r.batch_size}" for r in compiled]
            ax.bar(range(len(compiled)), [r.first_call_s for r in compiled], label="first calls (all shapes)",
                   color="#bbb")
            ax.bar(range(len(compiled)), [r.compile_s for r in compiled], label="compile/trace reported", width=0.5,
                   color=[style.colour(r.implementation) for r in compiled])
            ax.set_xticks(range(len(compiled)), labels, rotation=60, ha="right", fontsize=7)
            ax.set(ylabel="seconds", title="warm-up: compile time and first calls")
            ax.legend()
            fig.tight_layout()
            written.append(style.save(fig, out_dir / "compile.png"))

        fig, ax = plt.subplots(figsize=(6, 4))
        x, colours = range(len(impls)), [style.colour(n) for n in impls]
        for k, (what, key) in enumerate((("encodings", "max_abs_err_encoding"), ("logits", "max_abs_err_logits"))):
            worst = [max([1e-18] + [getattr(r, key) for r in records if r.implementation == n]) for n in impls]
            ax.bar([i + (0.4 * k - 0.2) for i in x], worst, width=0.4, label=what, color=colours,
                   alpha=0.5 if k else None)
        ax.axhline(ENCODING_TOL_F32, color="black", ls="--", lw=1)
        ax.axhline(LOGITS_TOL_F32, color=style.BASELINE_GREY, ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xticks(list(x), impls)
        ax.set(ylabel="max abs error vs float64 reference",
               title="numerical agreement (dashed: encodings' tolerance, dotted: logits')")
        ax.legend()
        fig.tight_layout()
        written.append(style.save(fig, out_dir / "agreement.png"))
        return written


def _plot_ratios(records: list[Measurement], out_dir: Path, plt) -> Path | None:
    """The interleaved per-round ratios over the baseline, one panel per device, mode and parse: every round a dot (a
    busy one a red cross), the median a circle, the interquartile range a thick bar and the range a thin one. The spread
    is the point: one median alone hides whether a ratio held."""
    rows = [row for row in round_ratios(records) if row["rounds"]]
    if not rows:
        return None
    panels = sorted({(row["device"], row["mode"], row["transitions"]) for row in rows})
    impls = style.registry_order(row["implementation"] for row in rows)
    columns = min(2, len(panels))
    lines = -(-len(panels) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(6.5 * columns, 4.2 * lines), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _ratio_panel(ax, [row for row in rows if (row["device"], row["mode"], row["transitions"]) == panel], impls)
        ax.set_title(f"{panel[1]}, {panel[2]} parses, {panel[0]}: speed over {frameworks.BASELINE}, per round")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return style.save(fig, out_dir / "ratios.png")


def _ratio_panel(ax, rows: list[dict], impls: list[str]) -> None:
    """One panel of ratios.png: batch sizes side by side, implementations offset within each."""
    sizes = sorted({row["batch_size"] for row in rows})
    width = 0.8 / len(impls)
    labelled = set()
    for row in rows:
        i = impls.index(row["implementation"])
        x = sizes.index(row["batch_size"]) + (i - (len(impls) - 1) / 2) * width
        color = style.colour(row["implementation"])
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

    ax.axhline(1.0, color=style.BASELINE_GREY, ls="--", lw=1)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xticks(range(len(sizes)), [f"batch {b}" for b in sizes])
    ax.set_ylabel(f"pairs/s over {frameworks.BASELINE}'s (log)")
    ax.grid(True, axis="y", which="both")
    ax.legend(fontsize=7)
