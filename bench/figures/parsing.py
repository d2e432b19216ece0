"""Figures of one real sentence: its shift-reduce trace and its thin stack.

The sentence is chosen by a rule, not by hand: the first premise of the
embedded SNLI sample with :data:`SENTENCE_WORDS` words. Its transitions come
from shared/transitions.py (``parse`` of the data's binary parse), its trace
from running them on a Python stack and buffer, as the define-by-run code
does, and its thin stack from the integer rules of impl_jax/model.py's
``SPINN._write`` (thin layout) replayed in plain Python, so that no framework
starts. tests/test_figures.py checks the replay against ``_write`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared import snli
from shared.transitions import REDUCE, SHIFT, TRANSITION_NAMES, Sentence, Tree, build_tree, to_bracket

from bench.figures import style
from bench.figures.sources import ROOT, Sources

SENTENCE_WORDS = 6  # short enough to read every step, long enough for a tree with two branches
LEAF_COLOUR, REDUCE_COLOUR = "#1f6fb4", "#2e9e44"  # a word, and a phrase made by a REDUCE, in both figures
UNUSED = "\u2013"  # a pointer slot no step has written yet (an en dash)


@dataclass(frozen=True)
class Chosen:
    sentence: Sentence
    row: int  # the data row (0-based line of the jsonl file)
    pair_id: str


def choose_sentence(path=snli.SAMPLE_PATH, words: int = SENTENCE_WORDS) -> Chosen:
    """The first premise of the data file with ``words`` words."""
    pairs, _ = snli.read_snli(path)
    for pair in pairs:
        if len(pair.premise) == words:
            return Chosen(pair.premise, pair.row, pair.pair_id)
    raise ValueError(f"{path}: no premise of {words} words")


def compact(tree: Tree) -> str:
    """A tree in brackets without the spaces inside them: ``(A (long-beaked bird))``."""
    if isinstance(tree, str):
        return tree
    return f"({compact(tree[0])} {compact(tree[1])})"


def trace(sentence: Sentence) -> list[dict]:
    """The state after every step: transition, stack (bottom first) and buffer (front first)."""
    buffer = list(sentence.tokens)
    stack: list[Tree] = []
    steps = []
    for t, op in enumerate(sentence.transitions):
        if op == SHIFT:
            stack.append(buffer.pop(0))
        elif op == REDUCE:
            right, left = stack.pop(), stack.pop()
            stack.append((left, right))
        steps.append({"step": t, "transition": TRANSITION_NAMES[op], "stack": [compact(x) for x in stack],
                      "buffer": list(buffer)})
    return steps


def thin_stack(transitions, n_words: int) -> dict:
    """The thin stack of one sentence, replayed with the integer rules of impl_jax/model.py (thin layout).

    Rows 0..N-1 of the array are the leaves; step t writes row N + t (for every
    step: a SHIFT's write is never pointed at). The stack is ``pointers``, N + 1
    slots of row numbers: SHIFT writes the leaf's row (bp) at slot sp, REDUCE
    writes N + t at slot sp - 2, PAD writes N + t at the free slot sp, where
    nobody reads it. Slots at or above sp keep whatever they held (stale).
    """
    N = n_words
    pointers = [0] * (N + 1)
    sp = bp = 0
    rows = [{"row": k, "kind": "leaf", "word": k} for k in range(N)]
    steps = []
    for t, op in enumerate(transitions):
        is_shift, is_reduce = op == SHIFT, op == REDUCE
        new_row = N + t
        write_slot = sp - 2 * is_reduce
        target = bp if is_shift else new_row
        if is_reduce:
            rows.append({"row": new_row, "kind": "reduce", "step": t,
                         "children": [pointers[sp - 2], pointers[sp - 1]]})
        else:
            rows.append({"row": new_row, "kind": "unused", "step": t, "op": TRANSITION_NAMES[op]})
        pointers[write_slot] = target
        sp += int(is_shift) - int(is_reduce)
        bp += int(is_shift)
        steps.append({"step": t, "transition": TRANSITION_NAMES[op], "pointers": list(pointers), "sp": sp, "bp": bp,
                      "written_slot": write_slot, "written_row": target})
    return {"N": N, "T": len(transitions), "rows": rows, "steps": steps}


def _sentence_entry(chosen: Chosen) -> dict:
    return {"data_file": str(snli.SAMPLE_PATH.relative_to(ROOT)), "row": chosen.row, "pair_id": chosen.pair_id,
            "rule": f"the first premise of {SENTENCE_WORDS} words", "tokens": list(chosen.sentence.tokens),
            "transitions": [TRANSITION_NAMES[op] for op in chosen.sentence.transitions],
            "tree": to_bracket(build_tree(chosen.sentence.tokens, chosen.sentence.transitions))}


def _tree_layout(tree: Tree, steps_of: dict) -> tuple[list, list]:
    """(nodes, edges) of a tree drawing: leaves 0..n-1 along x, a node above its children at its height."""
    nodes, edges = [], []
    counter = iter(range(10 ** 6))

    def place(t):
        if isinstance(t, str):
            x = next(counter)
            nodes.append((x, 0, t, None))
            return x, 0
        (lx, ly), (rx, ry) = place(t[0]), place(t[1])
        x, y = (lx + rx) / 2, max(ly, ry) + 1
        nodes.append((x, y, compact(t), steps_of.get(compact(t))))
        edges.extend([((x, y), (lx, ly)), ((x, y), (rx, ry))])
        return x, y

    place(tree)
    return nodes, edges


def shift_reduce(src: Sources, plt):
    """The trace of one sentence, step by step, with the tree its transitions build."""
    chosen = choose_sentence()
    s = chosen.sentence
    steps = trace(s)
    tree = build_tree(s.tokens, s.transitions)
    fig = plt.figure(figsize=(11.5, 4.6))
    table = fig.add_axes((0.01, 0.02, 0.64, 0.86))
    table.set_axis_off()
    lines = len(steps) + 2
    y = lambda k: 1 - (k + 0.5) / lines  # noqa: E731  (row k of the table, top down)
    columns = ((0.0, "step"), (0.07, "transition"), (0.21, "stack (bottom | ... | top)"), (0.71, "buffer (front ...)"))
    for x, name in columns:
        table.text(x, y(0), name, fontweight="bold", va="center", family=style.MONO, fontsize=8)
    rows = [{"step": "", "transition": "(start)", "stack": [], "buffer": list(s.tokens)}] + steps
    for k, row in enumerate(rows, start=1):
        if row["transition"] == "REDUCE":
            table.axhspan(y(k) - 0.5 / lines, y(k) + 0.5 / lines, color=REDUCE_COLOUR, alpha=0.12, lw=0)
        cells = (str(row["step"]), row["transition"], " | ".join(row["stack"]), " ".join(row["buffer"]))
        for (x, _), text in zip(columns, cells):
            table.text(x, y(k), text, va="center", family=style.MONO, fontsize=8)
    table.set_xlim(0, 1)
    table.set_ylim(0, 1)
    ax = fig.add_axes((0.67, 0.1, 0.32, 0.74))
    steps_of = {}
    for row in steps:  # the step whose REDUCE made each phrase: the top of the stack right after it
        if row["transition"] == "REDUCE":
            steps_of[row["stack"][-1]] = row["step"]
    nodes, edges = _tree_layout(tree, steps_of)
    for (x0, y0), (x1, y1) in edges:
        ax.plot([x0, x1], [y0, y1], color="#555555", lw=1)
    for x, yy, label, step in nodes:
        if step is None:
            ax.text(x, yy - 0.15, label, ha="center", va="top", fontsize=8, rotation=30)
            ax.plot(x, yy, "o", color="#555555", ms=3)
        else:
            ax.plot(x, yy, "o", color=REDUCE_COLOUR, ms=13, mfc="white")
            ax.text(x, yy, f"{step}", ha="center", va="center", fontsize=7)
    ax.set_axis_off()
    ax.set_ylim(-1.2, max(n[1] for n in nodes) + 0.5)
    ax.set_xlim(-0.6, len(s.tokens) - 0.4)
    ax.set_title("the tree (node: the step of its REDUCE)", fontsize=9)
    fig.suptitle(f"Shift-reduce: \"{' '.join(s.tokens)}\" (SNLI sample, row {chosen.row}), {len(s.transitions)} "
                 f"steps: SHIFT moves a word onto the stack, REDUCE composes the top two", fontsize=10)
    entry = {
        "title": "A shift-reduce trace of one sentence",
        "caption": (f"The transitions of the first {SENTENCE_WORDS}-word premise of data/snli_1.0_dev_sample.jsonl "
                    f"(row {chosen.row}), from shared.transitions.parse of its binary parse, run on a Python stack "
                    "and buffer: the state after every step, and the tree they build."),
        "sources": [{"file": str(snli.SAMPLE_PATH.relative_to(ROOT)), "row": chosen.row,
                     "keys": [snli.PREMISE_FIELD], "code": "shared.transitions.parse, build_tree"}],
        "data": {"sentence": _sentence_entry(chosen), "steps": steps},
    }
    return fig, entry


def thin_stack_figure(src: Sources, plt):
    """The same sentence's thin stack: the array of rows, and the pointer stack after every step."""
    chosen = choose_sentence()
    s = chosen.sentence
    thin = thin_stack(s.transitions, len(s.tokens))
    N, T = thin["N"], thin["T"]
    tree_of = {}
    for row in thin["rows"]:  # each row's phrase, built from its children's
        if row["kind"] == "leaf":
            tree_of[row["row"]] = s.tokens[row["word"]]
        elif row["kind"] == "reduce":
            left, right = row["children"]
            tree_of[row["row"]] = f"({tree_of[left]} {tree_of[right]})"
    fig = plt.figure(figsize=(11.5, 5.6))
    ax = fig.add_axes((0.01, 0.04, 0.40, 0.84))
    ax.set_axis_off()
    total = N + T
    for row in thin["rows"]:
        k = row["row"]
        yy = total - 1 - k
        if row["kind"] == "leaf":
            face, text, tone = LEAF_COLOUR, f"leaf {row['word']}: {tree_of[k]}", "black"
        elif row["kind"] == "reduce":
            a, b = row["children"]
            face, text, tone = REDUCE_COLOUR, f"step {row['step']} REDUCE of rows {a}, {b}: {tree_of[k]}", "black"
        else:
            face, text, tone = "#bbbbbb", f"step {row['step']} {row['op']}: written, never pointed at", "#888888"
        ax.add_patch(plt.Rectangle((0, yy - 0.42), 0.09, 0.84, color=face, alpha=0.35 if tone == "black" else 0.2))
        ax.text(0.045, yy, str(k), ha="center", va="center", fontsize=8, family=style.MONO)
        ax.text(0.11, yy, text, va="center", fontsize=7.5, family=style.MONO, color=tone)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, total - 0.3)
    ax.set_title(f"thin[{N} + {T} rows]: rows 0..{N - 1} the leaves, row {N} + t written by step t",
                 fontsize=9, loc="left")
    grid = fig.add_axes((0.47, 0.12, 0.51, 0.70))
    written = set()  # slots some step has written so far: the others hold the array's initial 0, no pointer
    for step in thin["steps"]:
        t, sp = step["step"], step["sp"]
        written.add(step["written_slot"])
        for slot, value in enumerate(step["pointers"]):
            live = slot < sp
            if slot not in written:  # a dash, not "0": a 0 would read as a pointer to row 0
                grid.text(t, slot, UNUSED, ha="center", va="center", fontsize=8, family=style.MONO, color="#bbbbbb")
                continue
            face = (LEAF_COLOUR if value < N else REDUCE_COLOUR) if live else "white"
            grid.add_patch(plt.Rectangle((t - 0.45, slot - 0.45), 0.9, 0.9, color=face, alpha=0.35 if live else 1,
                                         lw=0))
            if slot == step["written_slot"]:
                grid.add_patch(plt.Rectangle((t - 0.45, slot - 0.45), 0.9, 0.9, fill=False, ec="black", lw=1.2))
            grid.text(t, slot, str(value), ha="center", va="center", fontsize=8, family=style.MONO,
                      color="black" if live else "#bbbbbb")
        grid.plot([t - 0.45, t + 0.45], [sp - 0.5, sp - 0.5], color="#d9541e", lw=2)
    grid.set_xticks(range(T), [f"{st['step']}\n{st['transition'][0]}" for st in thin["steps"]])
    grid.set_yticks(range(N + 1))
    grid.set_xlim(-0.6, T - 0.4)
    grid.set_ylim(-0.6, N + 0.6)
    grid.grid(False)
    grid.set_xlabel("after step t (S = SHIFT, R = REDUCE); outlined: the slot the step wrote")
    grid.set_ylabel("pointer slot (0 = bottom of the stack)")
    grid.set_title("pointers[N + 1]: the stack, as row numbers into thin\n"
                   "orange line: sp (items on the stack); grey: stale slots at and above it; "
                   f"{UNUSED}: not written yet", fontsize=8)
    fig.suptitle(f"The thin stack (Bowman et al. 2016) of \"{' '.join(s.tokens)}\": nothing is copied, "
                 "SHIFT pushes a row number, REDUCE writes one new row", fontsize=10)
    entry = {
        "title": "The thin stack of the same sentence",
        "caption": ("The thin-stack layout of impl_jax/model.py for the shift-reduce figure's sentence: the array "
                    "of N + T rows and the pointer stack after every step, replayed from the transitions with the "
                    "integer rules of SPINN._write (thin layout). A slot no step has written yet is drawn as a "
                    f"dash ({UNUSED}): the array holds its initial 0 there, which points at nothing."),
        "sources": [{"file": str(snli.SAMPLE_PATH.relative_to(ROOT)), "row": chosen.row,
                     "keys": [snli.PREMISE_FIELD], "code": "impl_jax/model.py SPINN._write, thin layout (replayed)"}],
        "data": {"sentence": _sentence_entry(chosen), **thin},
    }
    return fig, entry

