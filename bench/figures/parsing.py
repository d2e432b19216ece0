"""Figures of real sentences run through the project's transition code, no framework started: one sentence's
shift-reduce trace and its thin stack (the integer rules of impl_jax/masked.py's ``SPINN._write``, thin layout,
replayed in Python; tests/test_figures.py holds the replay to ``_write``), and a small batch scheduled into levels
(``shared.levels.schedule_by_height``, as tensorflow-levels runs it). Each is chosen by a rule, not by hand."""

from __future__ import annotations

import numpy as np

from bench import ROOT
from bench.figures import style
from shared import snli
from shared.levels import schedule_by_height
from shared.transitions import PAD, REDUCE, SHIFT, TRANSITION_NAMES, build_tree, to_bracket

SENTENCE_WORDS = 6  # the premise of the trace: short enough to read every step, long enough for two branches
SENTENCES, WORDS = 3, 7  # the batch of levels: the first 3 different premises of at most 7 words
PHRASE_CHARS = 26  # a longer phrase is shortened in the node table (the tree beside it shows it whole)
LEAF_COLOUR, REDUCE_COLOUR = "#1f6fb4", "#2e9e44"  # a word, and a phrase made by a REDUCE
UNUSED = "\u2013"  # a pointer slot no step has written yet (an en dash)
DATA = str(snli.SAMPLE_PATH.relative_to(ROOT))


def choose(words: int, count: int = 1, at_most: bool = False) -> list:
    """The first ``count`` different premises of the sample with ``words`` words (or at most): (row, id, sentence)."""
    chosen = {}  # the words of a premise -> the first (row, id, sentence) with them
    for p in snli.read_snli(snli.SAMPLE_PATH)[0]:
        if len(p.premise) <= words if at_most else len(p.premise) == words:
            chosen.setdefault(p.premise.tokens, (p.row, p.pair_id, p.premise))
    if len(chosen) < count:
        raise ValueError(f"{DATA}: fewer than {count} premises of {'at most ' * at_most}{words} words")
    return list(chosen.values())[:count]


def compact(tree) -> str:
    """A tree in brackets without the spaces inside them: ``(A (long-beaked bird))``."""
    return tree if isinstance(tree, str) else f"({compact(tree[0])} {compact(tree[1])})"


def trace(sentence) -> list[dict]:
    """The state after every step: transition, stack (bottom first) and buffer (front first)."""
    buffer, stack, steps = list(sentence.tokens), [], []
    for t, op in enumerate(sentence.transitions):
        if op == SHIFT:
            stack.append(buffer.pop(0))
        elif op == REDUCE:
            stack[-2:] = [(stack[-2], stack[-1])]
        steps.append({"step": t, "transition": TRANSITION_NAMES[op], "stack": list(map(compact, stack)),
                      "buffer": list(buffer)})
    return steps


def _sentence(row, pair_id, s) -> dict:
    return {"data_file": DATA, "row": row, "pair_id": pair_id, "rule": f"the first premise of {SENTENCE_WORDS} words",
            "tokens": list(s.tokens), "transitions": [TRANSITION_NAMES[op] for op in s.transitions],
            "tree": to_bracket(build_tree(s.tokens, s.transitions))}


def _entry(title, rows, code, data) -> dict:
    return {"title": title, "sources": [{"file": DATA, **rows, "keys": [snli.PREMISE_FIELD], "code": code}],
            "data": data}


def _lines(ax, rows: list, xs: tuple, styles: tuple) -> None:
    """Rows of text down an axis, top first: each (cells, a band's colour or None, bold or not)."""
    y = lambda k: 1 - (k + 0.5) / len(rows)  # noqa: E731
    for k, (cells, band, bold) in enumerate(rows):
        if band is not None:
            ax.axhspan(y(k) - 0.5 / len(rows), y(k) + 0.5 / len(rows), lw=0, **band)
        for x, cell, text in zip(xs, cells, styles):
            ax.text(x, y(k), cell, va="center", **text, **({"fontweight": "bold"} if bold else {}))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.set_axis_off()


def shift_reduce(results, plt):
    """The trace of one sentence, step by step, with the tree its transitions build."""
    (row, pair_id, s), = choose(SENTENCE_WORDS)
    steps, tree = trace(s), build_tree(s.tokens, s.transitions)
    fig = plt.figure(figsize=(11.5, 4.6))
    rows = [{"step": "", "transition": "(start)", "stack": [], "buffer": list(s.tokens)}] + steps
    head = ("step", "transition", "stack (bottom | ... | top)", "buffer (front ...)")
    _lines(fig.add_axes((0.01, 0.02, 0.64, 0.86)), [(head, None, True)] + [
        ((str(r["step"]), r["transition"], " | ".join(r["stack"]), " ".join(r["buffer"])),
         {"color": REDUCE_COLOUR, "alpha": 0.12} if r["transition"] == "REDUCE" else None, False) for r in rows],
        (0.0, 0.07, 0.21, 0.71), [{"family": style.MONO, "fontsize": 8}] * 4)
    ax = fig.add_axes((0.67, 0.1, 0.32, 0.74))
    made = {r["stack"][-1]: r["step"] for r in steps if r["transition"] == "REDUCE"}  # the phrase atop after it
    nodes, edges, leaves = [], [], iter(range(len(s.tokens)))

    def place(t):  # leaves along x, a node above its children at its height
        if isinstance(t, str):
            nodes.append((next(leaves), 0, t))
            return nodes[-1][:2]
        (lx, ly), (rx, ry) = place(t[0]), place(t[1])
        nodes.append(((lx + rx) / 2, max(ly, ry) + 1, t))
        edges.extend([(nodes[-1][:2], (lx, ly)), (nodes[-1][:2], (rx, ry))])
        return nodes[-1][:2]

    place(tree)
    for (x0, y0), (x1, y1) in edges:
        ax.plot([x0, x1], [y0, y1], color="#555555", lw=1)
    for x, y, t in nodes:  # a word, or a phrase labelled with the step of its REDUCE
        if isinstance(t, str):
            ax.text(x, y - 0.15, t, ha="center", va="top", fontsize=8, rotation=30)
            ax.plot(x, y, "o", color="#555555", ms=3)
        else:
            ax.plot(x, y, "o", color=REDUCE_COLOUR, ms=13, mfc="white")
            ax.text(x, y, f"{made[compact(t)]}", ha="center", va="center", fontsize=7)
    ax.set_axis_off()
    ax.set(ylim=(-1.2, max(n[1] for n in nodes) + 0.5), xlim=(-0.6, len(s.tokens) - 0.4))
    ax.set_title("the tree (node: the step of its REDUCE)", fontsize=9)
    fig.suptitle(f"Shift-reduce: \"{' '.join(s.tokens)}\" (SNLI sample, row {row}), {len(s.transitions)} steps: "
                 "SHIFT moves a word onto the stack, REDUCE composes the top two", fontsize=10)
    return fig, _entry("A shift-reduce trace of one sentence", {"row": row}, "shared.transitions.parse, build_tree",
                       {"sentence": _sentence(row, pair_id, s), "steps": steps})


def thin_stack_figure(results, plt):
    """The same sentence's thin stack: the array of rows, and the pointer stack after every step."""
    (row, pair_id, s), = choose(SENTENCE_WORDS)
    # The thin stack: rows 0..N-1 the leaves, step t writes row N + t, and its N + 1 pointer slots.
    N, T = len(s.tokens), len(s.transitions)
    pointers, sp, bp = [0] * (N + 1), 0, 0
    rows, steps = [{"row": k, "kind": "leaf", "word": k} for k in range(N)], []
    for t, op in enumerate(s.transitions):
        is_shift, is_reduce = op == SHIFT, op == REDUCE
        write_slot, target = sp - 2 * is_reduce, bp if is_shift else N + t
        rows.append({"row": N + t, "kind": "reduce", "step": t, "children": [pointers[sp - 2], pointers[sp - 1]]}
                    if is_reduce else {"row": N + t, "kind": "unused", "step": t, "op": TRANSITION_NAMES[op]})
        pointers[write_slot] = target
        sp, bp = sp + int(is_shift) - int(is_reduce), bp + int(is_shift)
        steps.append({"step": t, "transition": TRANSITION_NAMES[op], "pointers": list(pointers), "sp": sp, "bp": bp,
                      "written_slot": write_slot, "written_row": target})
    thin = {"N": N, "T": T, "rows": rows, "steps": steps}
    phrase = {}
    for r in thin["rows"]:  # each row's phrase, built from its children's
        phrase[r["row"]] = s.tokens[r["word"]] if r["kind"] == "leaf" else \
            f"({phrase[r['children'][0]]} {phrase[r['children'][1]]})" if r["kind"] == "reduce" else None
    fig = plt.figure(figsize=(11.5, 5.6))
    ax = fig.add_axes((0.01, 0.04, 0.40, 0.84))
    ax.set_axis_off()
    for r in thin["rows"]:
        k, y = r["row"], N + T - 1 - r["row"]
        face, text, tone = (LEAF_COLOUR, f"leaf {r['word']}: {phrase[k]}", "black") if r["kind"] == "leaf" else \
            (REDUCE_COLOUR, f"step {r['step']} REDUCE of rows {r['children'][0]}, {r['children'][1]}: {phrase[k]}",
             "black") if r["kind"] == "reduce" else \
            ("#bbbbbb", f"step {r['step']} {r['op']}: written, never pointed at", "#888888")
        ax.add_patch(plt.Rectangle((0, y - 0.42), 0.09, 0.84, color=face, alpha=0.35 if tone == "black" else 0.2))
        ax.text(0.045, y, str(k), ha="center", va="center", fontsize=8, family=style.MONO)
        ax.text(0.11, y, text, va="center", fontsize=7.5, family=style.MONO, color=tone)
    ax.set(xlim=(0, 1), ylim=(-0.7, N + T - 0.3))
    ax.set_title(f"thin[{N} + {T} rows]: rows 0..{N - 1} the leaves, row {N} + t written by step t", fontsize=9,
                 loc="left")
    grid = fig.add_axes((0.47, 0.12, 0.51, 0.70))
    written = set()  # slots some step has written so far: the others hold the array's initial 0, no pointer
    for step in thin["steps"]:
        t, sp = step["step"], step["sp"]
        written.add(step["written_slot"])
        for slot, value in enumerate(step["pointers"]):
            if slot not in written:  # a dash, not "0": a 0 would read as a pointer to row 0
                grid.text(t, slot, UNUSED, ha="center", va="center", fontsize=8, family=style.MONO, color="#bbbbbb")
                continue
            live = slot < sp
            grid.add_patch(plt.Rectangle((t - 0.45, slot - 0.45), 0.9, 0.9, lw=0, alpha=0.35 if live else 1,
                                         color=(LEAF_COLOUR if value < N else REDUCE_COLOUR) if live else "white"))
            if slot == step["written_slot"]:
                grid.add_patch(plt.Rectangle((t - 0.45, slot - 0.45), 0.9, 0.9, fill=False, ec="black", lw=1.2))
            grid.text(t, slot, str(value), ha="center", va="center", fontsize=8, family=style.MONO,
                      color="black" if live else "#bbbbbb")
        grid.plot([t - 0.45, t + 0.45], [sp - 0.5, sp - 0.5], color="#d9541e", lw=2)
    grid.set_xticks(range(T), [f"{st['step']}\n{st['transition'][0]}" for st in thin["steps"]])
    grid.set(yticks=range(N + 1), xlim=(-0.6, T - 0.4), ylim=(-0.6, N + 0.6),
             ylabel="pointer slot (0 = bottom of the stack)",
             xlabel="after step t (S = SHIFT, R = REDUCE); outlined: the slot the step wrote")
    grid.grid(False)
    grid.set_title("pointers[N + 1]: the stack, as row numbers into thin\norange line: sp (items on the stack); "
                   f"grey: stale slots at and above it; {UNUSED}: not written yet", fontsize=8)
    fig.suptitle(f"The thin stack (Bowman et al. 2016) of \"{' '.join(s.tokens)}\": nothing is copied, SHIFT pushes "
                 "a row number, REDUCE writes one new row", fontsize=10)
    return fig, _entry("The thin stack of the same sentence", {"row": row},
                       "impl_jax/masked.py SPINN._write, thin layout (replayed)",
                       {"sentence": _sentence(row, pair_id, s), **thin})


def levels_figure(results, plt):
    """The batch's trees, every phrase numbered by its level (its height), and the node table the levels fill."""
    chosen = choose(WORDS, SENTENCES, at_most=True)
    sentences = [s for _, _, s in chosen]
    # The batch's transitions padded into one array, and its schedule: every level's nodes, as table rows.
    N, T = max(len(s.tokens) for s in sentences), max(len(s.transitions) for s in sentences)
    transitions = np.array([list(s.transitions) + [PAD] * (T - len(s.transitions)) for s in sentences], np.int32)
    sched = schedule_by_height(transitions, N)
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
    plan = {"N": N, "T": T, "steps": [len(s.transitions) for s in sentences], "zero_row": sched.n_leaves_rows,
            "levels": levels, "roots": [int(r) for r in sched.roots]}
    L = len(levels)
    colour = {lv["level"]: plt.get_cmap("viridis")(0.1 + 0.75 * (lv["level"] - 1) / max(L - 1, 1))
              for lv in plan["levels"]}
    level_of = {node["row"]: lv["level"] for lv in plan["levels"] for node in lv["nodes"]}
    children = {node["row"]: (node["left"], node["right"]) for lv in plan["levels"] for node in lv["nodes"]}
    fig = plt.figure(figsize=(11.5, 5.2))
    trees = fig.add_axes((0.01, 0.08, 0.50, 0.76))
    trees.set_axis_off()
    x0 = 0.0
    for k, s in enumerate(sentences):
        place = {k * N + i: (x0 + i, 0.0) for i in range(len(s.tokens))}
        for i, word in enumerate(s.tokens):
            trees.plot(x0 + i, 0, "o", color=LEAF_COLOUR, ms=3)
            trees.text(x0 + i, -0.2, word, ha="right", va="top", fontsize=7.5, rotation=40)
        for lv in plan["levels"]:
            place.update({n["row"]: ((place[n["left"]][0] + place[n["right"]][0]) / 2, float(lv["level"]))
                          for n in lv["nodes"] if n["sentence"] == k})
        for row, (x, y) in place.items():
            for child in children.get(row, ()):
                trees.plot([x, place[child][0]], [y, place[child][1]], color="#555555", lw=1, zorder=1)
        for row, (x, y) in ((r, xy) for r, xy in place.items() if r in children):
            trees.plot(x, y, "o", ms=14, mfc=colour[level_of[row]], mec="black", mew=0.6, zorder=2)
            trees.text(x, y, str(level_of[row]), ha="center", va="center", fontsize=7.5, color="white", zorder=3)
        trees.text(x0 + (len(s.tokens) - 1) / 2, L + 0.7, f"sentence {k}: {plan['steps'][k]} steps", ha="center",
                   fontsize=8)
        x0 += len(s.tokens) + 1
    trees.set(xlim=(-0.8, x0 - 1), ylim=(-2.2, L + 1.1))
    trees.set_title("the trees (node: its level = its height)", fontsize=9)
    short = lambda text: text if len(text) <= PHRASE_CHARS else text[:PHRASE_CHARS - 1] + "\u2026"  # noqa: E731
    lines = [("", f"rows 0-{plan['zero_row'] - 1}: the leaves (S \u00d7 N = {len(sentences)} \u00d7 {N})", None),
             ("", f"row {plan['zero_row']}: zero (an absent child reads it)", None)]
    for lv in plan["levels"]:
        lines.append((f"level {lv['level']}", f"rows {lv['first_row']}-{lv['first_row'] + lv['width'] - 1}: one Reduce "
                      f"on {lv['width']} row{'s' if lv['width'] != 1 else ''}", {"color": colour[lv["level"]],
                                                                                 "alpha": 0.3}))
        lines += [("", f"  {n['row']:>3} = Reduce({n['left']:>3}, {n['right']:>3})  s{n['sentence']} "
                       f"{short(n['phrase'])}", None) for n in lv["nodes"]]
    table = fig.add_axes((0.53, 0.04, 0.46, 0.82))
    _lines(table, [((label, text), band, False) for label, text, band in lines], (0.0, 0.15),
           ({"fontsize": 7.5, "fontweight": "bold"}, {"fontsize": 7.5, "family": style.MONO}))
    table.set_title("the node table: each level gathers its children's rows and appends one block", fontsize=9,
                    loc="left")
    fig.suptitle(f"{len(sentences)} sentences scheduled on the host: {max(plan['steps'])} transition steps for the "
                 f"longest, {L} levels of Reduce, each level one batched call", fontsize=10)
    return fig, _entry("One batch scheduled into levels", {"rows": [r for r, _, _ in chosen]},
                       "shared.levels.schedule_by_height",
                       {"sentences": [{"row": r, "pair_id": p, "tokens": list(s.tokens), "transitions":
                                       [TRANSITION_NAMES[op] for op in s.transitions]} for r, p, s in chosen], **plan})
