"""The REINFORCE panels of ``bench curves`` (runs of ``bench train --transitions reinforce``).

Read from the "train" records' reward, baseline, entropy and parse fields (bench/training/reinforce.py) and the "eval"
records' parse metrics; runs without them are left out of these panels.
"""

from __future__ import annotations

from pathlib import Path

from bench.figures import style
from bench.render import table


def has_reinforce(run: dict) -> bool:
    return any("reward" in r for r in run["train"])


def format_reinforce(runs: list[dict]) -> str:
    """A Markdown table: the last logged reward, baseline, entropy and parse shape,
    and the last dev evaluation's bracket F1 (predicted mode)."""
    rows = []
    for run in filter(has_reinforce, runs):
        last = [r for r in run["train"] if "reward" in r][-1]
        dev = [r for r in run["eval"] if r["split"] == "dev" and "parse_bracket_f1" in r]
        rows.append([run["label"], f"{last['reward']:.4f}", f"{last['baseline']:.4f}", f"{last['entropy']:.3f}",
                     f"{last['choice_reduce_share']:.3f}", f"{last['bracket_f1']:.3f}",
                     f"{dev[-1]['parse_bracket_f1']:.3f}" if dev else "-"])
    return table(["run", "reward (last)", "baseline", "entropy per pair", "reduce share at choices",
                  "train bracket F1", "dev bracket F1 (predicted)"], rows)


def plot_reinforce(runs: list[dict], out_dir: Path) -> Path:
    """reward and baseline, entropy per pair, and parse statistics (bracket F1
    against the data's trees, reduce share at choice steps) against step; each run in its framework's colour."""
    chosen = list(filter(has_reinforce, runs))
    with style.drawing() as plt:
        fig, (ax_reward, ax_entropy, ax_parse) = plt.subplots(1, 3, figsize=(15, 4.2))
        for run, look in zip(chosen, style.looks([run["run"]["framework"] for run in chosen])):
            rows, color = [r for r in run["train"] if "reward" in r], look["color"]
            steps = [r["step"] for r in rows]
            ax_reward.plot(steps, [r["reward"] for r in rows], color=color, lw=1.2, label=f"{run['label']} reward")
            ax_reward.plot(steps, [r["baseline"] for r in rows], ":", color=color, lw=1.2, label="baseline")
            ax_entropy.plot(steps, [r["entropy"] for r in rows], color=color, lw=1.2, label=run["label"])
            ax_parse.plot(steps, [r["bracket_f1"] for r in rows], color=color, lw=1.2,
                          label=f"{run['label']} bracket F1 (sampled)")
            ax_parse.plot(steps, [r["choice_reduce_share"] for r in rows], "--", color=color, lw=1.0,
                          label="reduce share at choices")
            dev = [r for r in run["eval"] if r["split"] == "dev" and "parse_bracket_f1" in r]
            if dev:
                ax_parse.plot([r["step"] for r in dev], [r["parse_bracket_f1"] for r in dev], "o", color=color, ms=4,
                              label="dev bracket F1 (predicted)")
        for ax, title, ylabel in ((ax_reward, "reward r = -CE (solid) and baseline b (dotted)", "nats"),
                                  (ax_entropy, "entropy of the sampled parses", "nats per pair"),
                                  (ax_parse, "parses against the data's trees", "share")):
            ax.set(title=title, xlabel="step", ylabel=ylabel)
            if ax.lines:
                ax.legend(fontsize=7)
        fig.tight_layout()
        return style.save(fig, out_dir / "reinforce.png")
