"""Learned parses against fixed ones: a table from runs of ``bench train`` on ``--data arithmetic``, rendered in the
documents by the ``parses`` block and quote (bench/render/).

For each run folder: how its sentences were parsed in training (the true trees, one fixed shape of ``--parse``, or
REINFORCE), its dev accuracy (last and best evaluation), and the unlabeled bracket F1 of its dev parses against the true
trees (docs/spec.md §7). A fixed shape's F1 is a property of the shape, computed here on the run's dev pairs
(regenerated from the seed and sizes its run.json records); a REINFORCE run's is the one its last dev evaluation
measured in predicted mode.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.render import table
from bench.training.metrics import read_metrics
from shared.arithmetic import arithmetic_pairs
from shared.parse_metrics import ParseCounts
from shared.snli import with_parse


def _padded(rows: list[tuple[int, ...]]) -> np.ndarray:
    width = max(map(len, rows))
    return np.array([list(r) + [0] * (width - len(r)) for r in rows], dtype=np.int32)


def shape_f1(pairs, parse: str) -> float:
    """Bracket F1 of every sentence read with ``parse`` against its true tree."""
    gold = [s.transitions for p in pairs for s in (p.premise, p.hypothesis)]
    shaped = [s.transitions for p in with_parse(pairs, parse) for s in (p.premise, p.hypothesis)]
    return ParseCounts.of_parses(_padded(shaped), _padded(gold)).bracket_f1


def summarize(run_dir: Path) -> dict:
    info = json.loads((run_dir / "run.json").read_text())
    data = info["data"]
    if data.get("data") != "arithmetic":
        raise ValueError(f"{run_dir}: not an arithmetic run (data {data.get('data')!r})")
    records = read_metrics(run_dir)
    dev = [r for r in records if r.get("kind") == "eval" and r["split"] == "dev"]
    train = [r for r in records if r.get("kind") == "train"]
    if not dev:
        raise ValueError(f"{run_dir}: no dev evaluation in its metrics")
    low, high = (int(v) for v in data.get("numbers", "4:8").split(":"))
    dev_pairs = arithmetic_pairs(info["dev_pairs"], seed=data["data_seed"] + 1, min_len=low, max_len=high)
    parses = "reinforce" if "reinforce" in info else data.get("parse", "gold")
    if parses == "reinforce":
        f1 = dev[-1]["parse_bracket_f1"]
    else:
        f1 = shape_f1(dev_pairs, parses)
    row = {"run": run_dir.name, "parses": parses, "numbers": f"{low}:{high}", "steps": dev[-1]["step"],
           "dev_accuracy_last": dev[-1]["accuracy"], "dev_accuracy_best": max(r["accuracy"] for r in dev),
           "dev_bracket_f1": f1, "wall_s": max(r.get("elapsed_s", 0.0) for r in records)}
    if parses == "reinforce":
        last = train[-1]
        row.update(entropy=last["entropy"], choice_reduce_share=last["choice_reduce_share"],
                   dev_exact_parse_rate=dev[-1]["parse_exact_parse_rate"])
    return row


def format_table(rows: list[dict]) -> str:
    return table(["run", "parses in training", "numbers", "steps", "dev acc. (last)", "dev acc. (best)",
                  "dev bracket F1 vs true trees", "reduce share at choices (last)", "entropy per pair (last)", "wall"],
                 [[r["run"], r["parses"], r["numbers"], f"{r['steps']:,}", f"{100 * r['dev_accuracy_last']:.1f}%",
                   f"{100 * r['dev_accuracy_best']:.1f}%", f"{r['dev_bracket_f1']:.3f}",
                   f"{r['choice_reduce_share']:.3f}" if r["parses"] == "reinforce" else "-",
                   f"{r['entropy']:.2f}" if r["parses"] == "reinforce" else "-", f"{r['wall_s']:.0f} s"] for r in rows])
