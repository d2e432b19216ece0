"""The figure of one small batch scheduled into levels (shared/levels.py), as the host-scheduled implementations run it.

The batch is chosen by a rule, not by hand: the first :data:`SENTENCES`
different premises of the embedded SNLI sample with :data:`WORDS` words or fewer. Their
gold transitions go through ``shared.levels.schedule_by_height`` (the
schedule without the tracker: a node's level is its height) with every level
exactly as wide as its nodes, as tensorflow-levels runs it. No framework
starts.
"""

from __future__ import annotations

import numpy as np

from shared import snli
from shared.levels import schedule_by_height
from shared.transitions import PAD, TRANSITION_NAMES

from bench.figures import style
from bench.figures.parsing import LEAF_COLOUR
from bench.figures.sources import ROOT, Sources

SENTENCES = 3  # enough for levels of different widths, few enough to read every node
WORDS = 7  # the longest premise taken
PHRASE_CHARS = 26  # a longer phrase is shortened in the table (the tree beside it shows it whole)


def choose_batch(path=snli.SAMPLE_PATH) -> list:
    """The first SENTENCES different premises of the data file with at most WORDS words (a premise comes with
    several hypotheses, so it repeats): (row, pair_id, sentence)."""
    pairs, _ = snli.read_snli(path)
    chosen, seen = [], set()
    for p in pairs:
        if len(p.premise) <= WORDS and p.premise.tokens not in seen and len(chosen) < SENTENCES:
            seen.add(p.premise.tokens)
            chosen.append((p.row, p.pair_id, p.premise))
    if len(chosen) < SENTENCES:
        raise ValueError(f"{path}: fewer than {SENTENCES} premises of at most {WORDS} words")
    return chosen


def batch_schedule(sentences) -> dict:
    """The batch's transitions padded into one array, and its schedule: every level's nodes, as table rows."""
    N = max(len(s.tokens) for s in sentences)
    T = max(len(s.transitions) for s in sentences)
    transitions = np.full((len(sentences), T), PAD, np.int32)
    for k, s in enumerate(sentences):
        transitions[k, :len(s.transitions)] = s.transitions
    sched = schedule_by_height(transitions, N, widths=(1,))
    phrase = {k * N + i: word for k, s in enumerate(sentences) for i, word in enumerate(s.tokens)}
    owner = {k * N + i: k for k, s in enumerate(sentences) for i in range(len(s.tokens))}
    levels = []
    for number, level in enumerate(sched.levels, start=1):
        nodes = []
        for j in range(level.used):
            left, right, row = int(level.left[j]), int(level.right[j]), level.offset + j
            phrase[row], owner[row] = f"({phrase[left]} {phrase[right]})", owner[left]
            nodes.append({"row": row, "left": left, "right": right, "sentence": owner[row], "phrase": phrase[row]})
        levels.append({"level": number, "first_row": level.offset, "width": level.used, "nodes": nodes})
    return {"N": N, "T": T, "steps": [len(s.transitions) for s in sentences], "zero_row": sched.n_leaves_rows,
            "levels": levels, "roots": [int(r) for r in sched.roots]}


def _short(text: str) -> str:
    return text if len(text) <= PHRASE_CHARS else text[:PHRASE_CHARS - 1] + "\u2026"


def levels_figure(src: Sources, plt):
    """The batch's trees, every phrase numbered by its level, and the node table the levels fill."""
    chosen = choose_batch()
    sentences = [s for _, _, s in chosen]
    plan = batch_schedule(sentences)
    L = len(plan["levels"])
    hues = plt.get_cmap("viridis")
    colour = {lv["level"]: hues(0.1 + 0.75 * (lv["level"] - 1) / max(L - 1, 1)) for lv in plan["levels"]}
    level_of = {node["row"]: lv["level"] for lv in plan["levels"] for node in lv["nodes"]}
    fig = plt.figure(figsize=(11.5, 5.2))
    trees = fig.add_axes((0.01, 0.08, 0.50, 0.76))
    trees.set_axis_off()
    x0, N = 0.0, plan["N"]
    children = {node["row"]: (node["left"], node["right"]) for lv in plan["levels"] for node in lv["nodes"]}
    for k, s in enumerate(sentences):
        place = {}
        for i, word in enumerate(s.tokens):
            place[k * N + i] = (x0 + i, 0.0)
            trees.plot(x0 + i, 0, "o", color=LEAF_COLOUR, ms=3)
            trees.text(x0 + i, -0.2, word, ha="right", va="top", fontsize=7.5, rotation=40)
        for lv in plan["levels"]:
            for node in lv["nodes"]:
                if node["sentence"] != k:
                    continue
                (lx, _), (rx, _) = place[node["left"]], place[node["right"]]
                place[node["row"]] = ((lx + rx) / 2, float(lv["level"]))
        for row, (x, y) in place.items():
            if row in children:
                for child in children[row]:
                    cx, cy = place[child]
                    trees.plot([x, cx], [y, cy], color="#555555", lw=1, zorder=1)
        for row, (x, y) in place.items():
            if row in children:
                trees.plot(x, y, "o", ms=14, mfc=colour[level_of[row]], mec="black", mew=0.6, zorder=2)
                trees.text(x, y, str(level_of[row]), ha="center", va="center", fontsize=7.5, color="white", zorder=3)
        trees.text(x0 + (len(s.tokens) - 1) / 2, L + 0.7, f"sentence {k}: {plan['steps'][k]} steps", ha="center",
                   fontsize=8)
        x0 += len(s.tokens) + 1
    trees.set_xlim(-0.8, x0 - 1)
    trees.set_ylim(-2.2, L + 1.1)
    trees.set_title("the trees (node: its level = its height)", fontsize=9)
    table = fig.add_axes((0.53, 0.04, 0.46, 0.82))
    table.set_axis_off()
    lines = ([("", f"rows 0-{plan['zero_row'] - 1}: the leaves (S \u00d7 N = {len(sentences)} \u00d7 {N})", None),
              ("", f"row {plan['zero_row']}: zero (an absent child reads it)", None)])
    for lv in plan["levels"]:
        lines.append((f"level {lv['level']}", f"rows {lv['first_row']}-{lv['first_row'] + lv['width'] - 1}: "
                                             f"one Reduce on {lv['width']} row{'s' if lv['width'] != 1 else ''}", lv["level"]))
        for node in lv["nodes"]:
            lines.append(("", f"  {node['row']:>3} = Reduce({node['left']:>3}, {node['right']:>3})  "
                              f"s{node['sentence']} {_short(node['phrase'])}", None))
    y = lambda k: 1 - (k + 0.5) / len(lines)  # noqa: E731  (line k, top down)
    for k, (label, text, level) in enumerate(lines):
        if level is not None:
            table.axhspan(y(k) - 0.5 / len(lines), y(k) + 0.5 / len(lines), color=colour[level], alpha=0.3, lw=0)
        table.text(0.0, y(k), label, va="center", fontsize=7.5, fontweight="bold")
        table.text(0.15, y(k), text, va="center", fontsize=7.5, family=style.MONO)
    table.set_xlim(0, 1)
    table.set_ylim(0, 1)
    table.set_title("the node table: each level gathers its children's rows and appends one block", fontsize=9,
                    loc="left")
    fig.suptitle(f"{len(sentences)} sentences scheduled on the host: {max(plan['steps'])} transition steps for the "
                 f"longest, {L} levels of Reduce, each level one batched call", fontsize=10)
    entry = {
        "title": "One batch scheduled into levels",
        "caption": (f"The first {SENTENCES} different premises of at most {WORDS} words of data/snli_1.0_dev_sample.jsonl, "
                    "their gold transitions scheduled by shared.levels.schedule_by_height (no tracker: a node's "
                    "level is its height), every level exactly as wide as its nodes: the trees with each phrase's "
                    "level, and the node table each level's one Reduce fills."),
        "sources": [{"file": str(snli.SAMPLE_PATH.relative_to(ROOT)), "rows": [row for row, _, _ in chosen],
                     "keys": [snli.PREMISE_FIELD], "code": "shared.levels.schedule_by_height"}],
        "data": {"sentences": [{"row": row, "pair_id": pid, "tokens": list(s.tokens),
                                "transitions": [TRANSITION_NAMES[op] for op in s.transitions]}
                               for row, pid, s in chosen], **plan},
    }
    return fig, entry
