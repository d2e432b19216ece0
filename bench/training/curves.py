"""``python -m bench curves``: loss and accuracy curves of training runs.

Rendered from the metrics.jsonl files ``bench train`` writes (one record a line), as a Markdown summary (``curves.md``:
the runs, and how far each pair of loss curves is apart) and a plot (``curves.png``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.figures import style
from bench.render import table
from bench.training import reinforce_curves
from bench.training.metrics import read_metrics


def register(sub) -> None:
    p = sub.add_parser("curves", help="loss and accuracy curves of training runs (their metrics.jsonl files)")
    p.add_argument("runs", nargs="+", help="run folders of `bench train`, or their metrics.jsonl files")
    p.add_argument("--out", default=None, help="folder for curves.md and curves.png [default: the first run's]")
    p.add_argument("--no-plots", action="store_true", help="only the Markdown summary")
    p.set_defaults(func=cmd_curves)


def load_runs(paths) -> list[dict]:
    """One dict per run: label, the run record, train records, eval records."""
    runs = []
    for path in map(Path, paths):
        file = path / "metrics.jsonl" if path.is_dir() else path
        if not file.exists():
            raise FileNotFoundError(f"no metrics at {file}")
        records = read_metrics(file)
        head = next((r for r in records if r.get("kind") == "run"), None)
        if head is None:
            raise ValueError(f"{file} has no 'run' record: is it a metrics file of `bench train`?")
        runs.append({"label": f"{head['framework']} ({file.parent.name})", "path": file, "run": head,
                     "train": [r for r in records if r.get("kind") == "train"],
                     "eval": [r for r in records if r.get("kind") == "eval"]})
    return runs


def loss_agreement(runs: list[dict]) -> list[dict]:
    """Every pair of runs' training-loss curves, at the steps both logged: the largest relative difference |a - b| /
    |b|, b the earlier run given (put the float64 reference first to measure everything against it)."""
    rows = []
    for i, base_run in enumerate(runs):
        base = {r["step"]: r["loss"] for r in base_run["train"]}
        for run in runs[i + 1:]:
            common = [(r["loss"], base[r["step"]]) for r in run["train"] if r["step"] in base]
            if common:
                rel = max(abs(a - b) / max(abs(b), 1e-30) for a, b in common)
                rows.append({"run": run["label"], "against": base_run["label"], "points": len(common),
                             "max_rel_diff": rel})
    return rows


def format_runs(runs: list[dict]) -> str:
    rows = []
    for run in runs:
        cfg = run["run"]["config"]
        last_train = run["train"][-1] if run["train"] else {}
        dev = [r for r in run["eval"] if r["split"] == "dev"]
        train = [r for r in run["eval"] if r["split"] == "train"]
        wall = max([r.get("elapsed_s", 0.0) for r in run["train"] + run["eval"]] or [0.0])
        pct = lambda r: f"{100 * r['accuracy']:.2f}%" if r else "-"  # noqa: E731
        rows.append([run["label"], cfg["optimizer"], f"{cfg['lr']:g}", cfg["batch_size"],
                     f"{last_train.get('step', 0):,}", f"{last_train.get('epoch', 0):.2f}", f"{wall:,.0f} s",
                     f"{last_train.get('loss', float('nan')):.4f}", pct(dev[-1] if dev else None),
                     pct(max(dev, key=lambda r: r["accuracy"]) if dev else None), pct(train[-1] if train else None)])
    return table(["run", "optimizer", "lr", "batch", "steps", "epochs", "wall time", "final loss", "dev acc. (last)",
                  "dev acc. (best)", "train acc. (last)"], rows)


def plot_curves(runs: list[dict], out_dir: Path) -> Path:
    """Training loss against step, and dev (filled marks) / train (open marks) accuracy against step; each run in its
    framework's look (bench/figures/style.py)."""
    with style.drawing() as plt:
        fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.2))
        for run, look in zip(runs, style.looks([run["run"]["framework"] for run in runs])):
            if run["train"]:
                ax_loss.plot([r["step"] for r in run["train"]], [r["loss"] for r in run["train"]], label=run["label"],
                             lw=1.2, **look)
            for split, fill in (("dev", None), ("train", "white")):
                rows = [r for r in run["eval"] if r["split"] == split]
                if rows:
                    ax_acc.plot([r["step"] for r in rows], [100 * r["accuracy"] for r in rows], marker="o", ms=3,
                                mfc=fill, label=f"{run['label']} {split}", **look)
        ax_loss.set(xlabel="step", ylabel="training loss (mean cross-entropy)", yscale="log", title="loss")
        if ax_loss.lines:
            ax_loss.legend(fontsize=7)
        ax_acc.set(xlabel="step", ylabel="accuracy (%)", title="accuracy at epoch ends (filled: dev, open: train)")
        if ax_acc.lines:
            ax_acc.legend(fontsize=7)
        else:
            ax_acc.text(0.5, 0.5, "no evaluations in these runs", ha="center", va="center", transform=ax_acc.transAxes)
        fig.tight_layout()
        return style.save(fig, out_dir / "curves.png")


def cmd_curves(args) -> int:
    runs = load_runs(args.runs)
    first = Path(args.runs[0])
    out_dir = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# Training curves", "", f"Rendered by `python -m bench curves {' '.join(map(str, args.runs))}`.", "",
             format_runs(runs), ""]
    agreement = loss_agreement(runs)
    if agreement:
        lines += ["Training-loss curves, pair by pair (at the steps both logged):", "",
                  table(["run", "against", "steps compared", "max relative difference"],
                        [[a["run"], a["against"], a["points"], f"{a['max_rel_diff']:.2e}"] for a in agreement]), ""]
    if any(map(reinforce_curves.has_reinforce, runs)):
        lines += ["Parses learned by reward (`--transitions reinforce`):", "", reinforce_curves.format_reinforce(runs),
                  ""]
    if not args.no_plots:
        path = plot_curves(runs, out_dir)
        lines.append(f"![curves]({path.name})")
        if any(map(reinforce_curves.has_reinforce, runs)):
            lines.append(f"![reinforce]({reinforce_curves.plot_reinforce(runs, out_dir).name})")
    markdown = "\n".join(lines) + "\n"
    (out_dir / "curves.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out_dir / 'curves.md'}" + ("" if args.no_plots else f", {out_dir / 'curves.png'}"),
          file=sys.stderr)
    return 0
