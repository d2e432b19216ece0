"""``python -m bench curves``: loss and accuracy curves of training runs, and the tables that compare them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.figures import style
from bench.records import read_metrics
from bench.render.table import table
from shared.arithmetic import arithmetic_pairs
from shared.parse_metrics import ParseCounts
from shared.snli import with_parse


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
        if (head := next((r for r in records if r.get("kind") == "run"), None)) is None:
            raise ValueError(f"{file} has no 'run' record: is it a metrics file of `bench train`?")
        runs.append({"label": f"{head['framework']} ({file.parent.name})", "path": file, "run": head,
                     "train": [r for r in records if r.get("kind") == "train"],
                     "eval": [r for r in records if r.get("kind") == "eval"]})
    return runs


def loss_agreement(runs: list[dict]) -> list[dict]:
    """Every pair of runs' loss curves at the steps both logged: the largest |a - b| / |b|, b the earlier run."""
    rows = []
    for i, base_run in enumerate(runs):
        base = {r["step"]: r["loss"] for r in base_run["train"]}
        for run in runs[i + 1:]:
            if common := [(r["loss"], base[r["step"]]) for r in run["train"] if r["step"] in base]:
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
    """Training loss, and dev (filled marks) and train (open marks) accuracy, against step."""
    with style.drawing() as plt:
        fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.2))
        for run, look in zip(runs, style.looks([run["run"]["framework"] for run in runs])):
            if run["train"]:
                ax_loss.plot([r["step"] for r in run["train"]], [r["loss"] for r in run["train"]], label=run["label"],
                             lw=1.2, **look)
            for split, fill in (("dev", None), ("train", "white")):
                if rows := [r for r in run["eval"] if r["split"] == split]:
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
        return style.save(fig, out_dir / "curves.png", tight=True)


def has_reinforce(run: dict) -> bool:
    return any("reward" in r for r in run["train"])


def format_reinforce(runs: list[dict]) -> str:
    """The last logged reward, baseline, entropy and parse shape, and the last dev bracket F1 (predicted)."""
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
    """Reward and baseline, entropy per pair, and the parses' bracket F1 and reduce share, against step."""
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
            if dev := [r for r in run["eval"] if r["split"] == "dev" and "parse_bracket_f1" in r]:
                ax_parse.plot([r["step"] for r in dev], [r["parse_bracket_f1"] for r in dev], "o", color=color, ms=4,
                              label="dev bracket F1 (predicted)")
        for ax, title, ylabel in ((ax_reward, "reward r = -CE (solid) and baseline b (dotted)", "nats"),
                                  (ax_entropy, "entropy of the sampled parses", "nats per pair"),
                                  (ax_parse, "parses against the data's trees", "share")):
            ax.set(title=title, xlabel="step", ylabel=ylabel)
            if ax.lines:
                ax.legend(fontsize=7)
        return style.save(fig, out_dir / "reinforce.png", tight=True)


def shape_f1(pairs, parse: str) -> float:
    """Bracket F1 of every sentence read with ``parse`` against its true tree."""
    gold = [s.transitions for p in pairs for s in (p.premise, p.hypothesis)]
    shaped = [s.transitions for p in with_parse(pairs, parse) for s in (p.premise, p.hypothesis)]
    counts = (ParseCounts.of_parses([s], [g]) for s, g in zip(shaped, gold))  # a sentence at a time: lengths differ
    return sum(counts, ParseCounts()).bracket_f1


def parse_summary(run_dir: Path) -> dict:
    """One arithmetic run's row of docs/learned-parses.md's table of learned parses against fixed ones."""
    info = json.loads((run_dir / "run.json").read_text())
    data = info["data"]
    if data.get("data") != "arithmetic":
        raise ValueError(f"{run_dir}: not an arithmetic run (data {data.get('data')!r})")
    records = read_metrics(run_dir)
    dev = [r for r in records if r.get("kind") == "eval" and r["split"] == "dev"]
    if not dev:
        raise ValueError(f"{run_dir}: no dev evaluation in its metrics")
    low, high = (int(v) for v in data.get("numbers", "4:8").split(":"))
    dev_pairs = arithmetic_pairs(info["dev_pairs"], seed=data["data_seed"] + 1, min_len=low, max_len=high)
    parses = "reinforce" if "reinforce" in info else data.get("parse", "gold")
    f1 = dev[-1]["parse_bracket_f1"] if parses == "reinforce" else shape_f1(dev_pairs, parses)
    row = {"run": run_dir.name, "parses": parses, "numbers": f"{low}:{high}", "steps": dev[-1]["step"],
           "dev_accuracy_last": dev[-1]["accuracy"], "dev_accuracy_best": max(r["accuracy"] for r in dev),
           "dev_bracket_f1": f1, "wall_s": max(r.get("elapsed_s", 0.0) for r in records)}
    if parses == "reinforce":
        last = [r for r in records if r.get("kind") == "train"][-1]
        row.update(entropy=last["entropy"], choice_reduce_share=last["choice_reduce_share"],
                   dev_exact_parse_rate=dev[-1]["parse_exact_parse_rate"])
    return row


def format_parses(rows: list[dict]) -> str:
    return table(["run", "parses in training", "numbers", "steps", "dev acc. (last)", "dev acc. (best)",
                  "dev bracket F1 vs true trees", "reduce share at choices (last)", "entropy per pair (last)", "wall"],
                 [[r["run"], r["parses"], r["numbers"], f"{r['steps']:,}", f"{100 * r['dev_accuracy_last']:.1f}%",
                   f"{100 * r['dev_accuracy_best']:.1f}%", f"{r['dev_bracket_f1']:.3f}",
                   f"{r['choice_reduce_share']:.3f}" if r["parses"] == "reinforce" else "-",
                   f"{r['entropy']:.2f}" if r["parses"] == "reinforce" else "-", f"{r['wall_s']:.0f} s"] for r in rows])


def cmd_curves(args) -> int:
    runs = load_runs(args.runs)
    first = Path(args.runs[0])
    out_dir = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# Training curves", "", f"Rendered by `python -m bench curves {' '.join(map(str, args.runs))}`.", "",
             format_runs(runs), ""]
    if agreement := loss_agreement(runs):
        lines += ["Training-loss curves, pair by pair (at the steps both logged):", "",
                  table(["run", "against", "steps compared", "max relative difference"],
                        [[a["run"], a["against"], a["points"], f"{a['max_rel_diff']:.2e}"] for a in agreement]), ""]
    if any(map(has_reinforce, runs)):
        lines += ["Parses learned by reward (`--transitions reinforce`):", "", format_reinforce(runs), ""]
    if not args.no_plots:
        lines.append(f"![curves]({plot_curves(runs, out_dir).name})")
        if any(map(has_reinforce, runs)):
            lines.append(f"![reinforce]({plot_reinforce(runs, out_dir).name})")
    markdown = "\n".join(lines) + "\n"
    (out_dir / "curves.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out_dir / 'curves.md'}" + ("" if args.no_plots else f", {out_dir / 'curves.png'}"), file=sys.stderr)
    return 0
