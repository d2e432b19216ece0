"""Gold transitions -> a level schedule for host-scheduled batching (NumPy only).

The node table holds the leaves first (row ``s * N + i`` is word i of sentence
s), then a zero row (row ``S * N``: what an absent stack item or an empty
buffer reads), then the nodes the levels compute, one block per level, packed:
level l's nodes at rows ``S * N + 1 + offsets[l]`` on. A level reads its
rows from the table (its children, and with the tracker the buffer front,
stack top and item below the top of each sentence that steps), runs the
tracker on those sentences, one batched Reduce on its nodes, and writes its
block.

Without the tracker a level is a tree height (a batch takes as many levels as
its tallest tree). With the tracker a level is a transition step: the tracker
runs on the sentences still active, Reduce only on the sentences that reduce.

One format for every framework, :func:`level_arrays` (LEVEL_ARRAYS, int32):

    left, right   the table rows of each node's children, level after level
    reducing      per node, its sentence's position among its level's tracker rows
    offsets       [L + 1]: level l's nodes are left[offsets[l]:offsets[l + 1]]
    widths        [L]: the Reduce rows level l computes, from offsets[l] on
    active        per tracker row, the sentence that steps (row S of the
                  tracker's state: a spare that padding steps)
    active_offsets      [L + 1]: level l's tracker rows are active_offsets[l]:active_offsets[l + 1]
    parser        the table rows the tracker reads, three per tracker row:
                  level l's are parser[3 * active_offsets[l]:3 * active_offsets[l + 1]],
                  the buffer front of each of its rows, then the stack top
                  of each, then the item below the top of each
    n_levels      [] the levels the batch has: a loop runs levels 0 .. n_levels - 1
    roots         [S] the table row of each sentence's root

Without the tracker the tracker's arrays are empty, ``active_offsets`` zeros
and ``reducing`` zeros. What differs between frameworks is the padding
(PADDINGS), which only changes the values and lengths, never the meaning:

* ``"exact"``: nothing padded: each level exactly as wide as its nodes and
  its stepping sentences (``widths`` = the offsets' steps). A loop whose
  shapes may change per level runs it: PyTorch's eager ``for``, TensorFlow's
  ``tf.while_loop``.
* ``"static"`` (:func:`_pad_static`): what a compiled loop of fixed shapes
  needs (JAX's ``lax.scan``): with the tracker every level's tracker rows
  padded to A = S; a level's nodes read in a window of W rows, the smallest
  class of its ladder >= S (the most a step can reduce), a wider
  level (a tree height can hold more) split into sub-levels of W nodes; each
  level's Reduce width rounded up to a class of :func:`reduce_classes`
  (PER_OCTAVE classes per doubling over the window's last OCTAVES doublings,
  none under MIN_ROWS rows; the loop picks the class's branch at run time);
  the level count rounded up to a class too,
  T at most; the node count padded to S * (T - 1) // 2, the most a batch
  can hold, and a tail of W rows after it, so that every window stays inside
  the arrays. So the shapes are (S, T)'s but for the level count
  (:func:`static_shape` reads them back). Padding rows read the zero row and
  step the spare row S; a padded node's rows spill into the next levels'
  blocks, which those levels write afterwards, or into the tail.

docs/spec.md §6, "Decision: one level schedule", says which framework pads
what and why. Measured on the benchmark's batches of 128 pairs (the embedded
sample, H=300, D=64 or no tracker; the FLOPs over the sample's 9 batches,
bench.run.limit; the times over a batch of N=16 and one of N=32, 5 to 7
interleaved rounds in one process, medians of the rounds' ratios, on a 2-core
machine shared with other work, so read them as rough):

* FLOPs computed over the useful ones: exact 1.06 with the tracker and 1.09
  without; static 1.18 and 1.18 (every class of the ladder from 1 up: 1.18
  and 1.17; JAX's padding before this format, width classes doubling and
  doubling runs of levels: 1.29 and 1.66; with two classes per doubling
  without the tracker too, 1.13; with four, 1.14 and 1.12). At batch 1:
  exact 1.04 and 1.07, static 1.23 and 1.15 (over the sample's batches of one
  pair), whose window is 2 rows: classes 0 and 2 with the tracker, 2 alone
  without (every class from 1 up: 1.04 and 1.07; JAX's before: 4.2 and 3.3).
* PyTorch and TensorFlow consuming the static form instead of the exact one:
  encode 1.11x and 1.16x the time (PyTorch, with and without the tracker),
  1.14x and 1.10x (TensorFlow); a training step 1.13x and 1.11x, 1.07x and
  1.10x. So they take it exact.
* JAX against its design before: encode 0.86x and 0.82x the time, a training
  step 1.12x and 1.35x. A finer ladder costs the gradient: four classes per
  doubling made the tracker's training step 1.64x, two without the tracker
  1.59x (with the levels padded to T instead of a class, 2.2x; without the
  split into sub-levels, each level's window as wide as the widest, 7.1x).
* What a branch costs under ``jax.grad``. Partial evaluation of a cond in a
  scan body made the weights a residual of every level (the scan stacked a
  copy of Reduce's kernels per level), until impl_jax/levels.py put the body
  under ``jax.checkpoint`` (every residual saved, nothing recomputed): a
  training step at batch 1 then took 0.45x the time without the tracker and
  0.34x with it, at batch 128 0.90x and 0.94x. Each branch still adds its
  own residuals to every level, its own copy of the weights' gradient and
  about half a second of compile time (SPINN's training step at B=128,
  N=32: about 3 s with no switch, 5 s with 8 branches, 11 s with 17). The
  ladder from W/8 and MIN_ROWS (8 classes with the tracker at W=256, was 17;
  4 without, was 10; at batch 1 one class without the tracker, two with)
  took at batch 128 0.88x the time of a training step with the tracker and
  0.94x without, at batch 1 0.82x and 0.79x. A Reduce's forward and
  backward pass at H=300 took about as long on 1 to 4 rows (1.4x on 8).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from shared.batching import sentences_transitions
from shared.transitions import PAD, REDUCE, SHIFT, reduce_heights

# What a level schedule cannot do, made on the host before the program runs, from gold transitions: the
# reasons every runner of the levels algorithm gives (shared.runner.Runner sets its ``unsupported``).
_ON_HOST = "the level schedule is made on the host from gold transitions; a {} parse is known only inside the loop"
LEVELS_UNSUPPORTED = {"predicted parse": _ON_HOST.format("decided"), "sampled parse": _ON_HOST.format("sampled"),
                      "reinforce": "REINFORCE follows sampled parses, which the host cannot schedule ahead"}

PADDINGS = ("exact", "static")
LEVEL_ARRAYS = ("left", "right", "reducing", "offsets", "widths", "active", "active_offsets", "parser", "n_levels",
                "roots")
# Reduce's width classes per doubling, with the tracker and without it (docs/spec.md §6, "Decision: one level
# schedule", says why: a finer ladder pads less, and costs a compiled program more branches, each of whose
# residuals the gradient keeps at every level). Without the tracker most of a batch's nodes are in levels that
# fill their window (a wide level runs as full sub-levels), so the coarser ladder pads little.
PER_OCTAVE = {True: 2, False: 1}
# The doublings Reduce's ladder spans below its window, and the fewest rows a class has (a narrower window is
# one class): a level narrower pads up to the ladder's first class. Each class is a branch that a compiled
# program traces and compiles, forward and backward, and under jax.grad every branch costs each level its own
# residuals and its own copy of the weights' gradient; the classes below held few of a batch's nodes, and a
# Reduce on up to MIN_ROWS rows takes about the time of one on a single row (the module's docstring has the
# figures).
OCTAVES, MIN_ROWS = 3, 4


@dataclass(frozen=True, eq=False)
class Level:
    """One level: Reduce on its nodes, whose block starts at table row ``offset``."""

    offset: int
    left: np.ndarray  # <int32>[nodes] table rows of the left children
    right: np.ndarray  # <int32>[nodes]
    # tracker levels only (None without the tracker):
    active: np.ndarray | None = None  # <int32>[sentences that step]
    stack_top: np.ndarray | None = None  # <int32>[sentences that step] table rows
    stack_below: np.ndarray | None = None
    buffer_front: np.ndarray | None = None
    reducing: np.ndarray | None = None  # <int32>[nodes] positions in ``active`` that reduce

    @property
    def used(self) -> int:
        """Its nodes: the rows its Reduce composes."""
        return int(self.left.shape[0])

    @property
    def active_used(self) -> int:
        """Its sentences that step: the rows its tracker runs on (0 without the tracker)."""
        return 0 if self.active is None else int(self.active.shape[0])


@dataclass(frozen=True, eq=False)
class Schedule:
    n_leaves_rows: int  # S * N; the zero row follows
    levels: tuple[Level, ...]
    roots: np.ndarray  # <int32>[S] table row of each sentence's root

    @property
    def n_rows(self) -> int:
        return self.n_leaves_rows + 1 + sum(level.used for level in self.levels)

    @property
    def n_levels(self) -> int:
        return len(self.levels)


def _simulate(transitions: np.ndarray, N: int):
    """Per sentence: the list of (step, left, right) reduces, with node ids
    ('leaf', s, i) or ('node', s, k), and each node's height."""
    out = []
    for s, row in enumerate(transitions):
        stack, reduces, height, buffer = [], [], {}, 0
        for t, op in enumerate(row):
            op = int(op)
            if op == SHIFT:
                node = ("leaf", s, buffer)
                height[node] = 0
                stack.append(node)
                buffer += 1
            elif op == REDUCE:
                right, left = stack.pop(), stack.pop()
                node = ("node", s, len(reduces))
                reduces.append((t, left, right, node))
                stack.append(node)
            elif op != PAD:
                raise ValueError(f"sentence {s}: unknown transition {op} at step {t}")
        if len(stack) != 1:
            raise ValueError(f"sentence {s}: ends with {len(stack)} items on the stack, not 1")
        height.update((node, h) for (_, _, _, node), h in zip(reduces, reduce_heights([int(op) for op in row])))
        out.append((reduces, height, stack[0]))
    return out


def schedule_by_height(transitions, N: int) -> Schedule:
    """No tracker: every node of height h is computed at level h - 1."""
    transitions = np.asarray(transitions)
    S = transitions.shape[0]
    sims = _simulate(transitions, N)
    row: dict = {}
    for s in range(S):
        for i in range(N):
            row[("leaf", s, i)] = s * N + i
    by_level: dict[int, list] = {}
    for reduces, height, _ in sims:
        for _, left, right, node in reduces:
            by_level.setdefault(height[node] - 1, []).append((left, right, node))
    levels, offset = [], S * N + 1
    for h in range(len(by_level)):
        nodes = by_level[h]
        left = np.array([row[l] for l, _, _ in nodes], np.int32)
        right = np.array([row[r] for _, r, _ in nodes], np.int32)
        for k, (_, _, node) in enumerate(nodes):
            row[node] = offset + k
        levels.append(Level(offset, left, right))
        offset += len(nodes)
    roots = np.array([row[root] for _, _, root in sims], np.int32)
    return Schedule(S * N, tuple(levels), roots)


def schedule_by_step(transitions, N: int) -> Schedule:
    """With the tracker: level t is transition step t. The tracker reads the
    stack top, the item below it and the buffer front (the zero row when absent) of
    every sentence still active; Reduce runs on those that reduce."""
    transitions = np.asarray(transitions)
    S, T = transitions.shape
    stacks = [[] for _ in range(S)]
    buffers = [0] * S
    last = [max((t for t in range(T) if transitions[s, t] != PAD), default=-1) for s in range(S)]
    n_words = (transitions == SHIFT).sum(axis=1)
    zero = S * N
    levels, offset = [], zero + 1
    for t in range(max(last) + 1):
        active = [s for s in range(S) if transitions[s, t] != PAD]  # a PAD step changes nothing
        top, below, front, reducing = [], [], [], []
        for k, s in enumerate(active):
            st = stacks[s]
            top.append(st[-1] if st else zero)
            below.append(st[-2] if len(st) > 1 else zero)
            front.append(s * N + buffers[s] if buffers[s] < n_words[s] else zero)
            if transitions[s, t] == REDUCE:
                reducing.append(k)
        left, right = [], []
        for j, k in enumerate(reducing):
            s = active[k]
            right.append(stacks[s].pop())
            left.append(stacks[s].pop())
            stacks[s].append(offset + j)
        for s in active:
            if transitions[s, t] == SHIFT:
                stacks[s].append(s * N + buffers[s])
                buffers[s] += 1
        levels.append(Level(offset, *(np.array(a, np.int32) for a in (left, right, active, top, below, front,
                                                                     reducing))))
        offset += len(reducing)
    for s, st in enumerate(stacks):
        if len(st) != 1:
            raise ValueError(f"sentence {s}: ends with {len(st)} items on the stack, not 1")
    roots = np.array([st[0] for st in stacks], np.int32)
    return Schedule(S * N, tuple(levels), roots)


def schedule(transitions, N: int, tracker: bool) -> Schedule:
    """The batch's levels, every level exactly as wide as its nodes: by step with the tracker, by height without."""
    return (schedule_by_step if tracker else schedule_by_height)(transitions, N)


def width_classes(n: int, per_octave: int = 2) -> tuple[int, ...]:
    """The widths a statically padded level may take, up to the first >= n: 0, then ``per_octave`` evenly spaced
    integer widths in each doubling (1, 2, 3, 4, 6, 8, 12, 16, 24, ... for 2; 1, 2, 4, 8, ... for 1)."""
    out, low = [0], 1
    while out[-1] < n:
        for j in range(per_octave):
            width = low + j * low // per_octave
            if width > out[-1]:
                out.append(width)
            if out[-1] >= n:
                break
        low *= 2
    return tuple(out)


def reduce_classes(W: int, tracker: bool) -> tuple[int, ...]:
    """The Reduce widths a statically padded level may take in a window of W rows, narrowest first: with the
    tracker 0 (a step where no sentence reduces; without it every level holds a node), then PER_OCTAVE[tracker]
    classes per doubling (:func:`width_classes`) from W / 2**OCTAVES, and from MIN_ROWS, up to W."""
    low = min(W, max(MIN_ROWS, -(-W // 2 ** OCTAVES)))
    return (0,) * tracker + tuple(c for c in width_classes(W, PER_OCTAVE[tracker]) if c >= low)


def level_arrays(transitions, N: int, tracker: bool, padding: str = "exact") -> tuple[dict[str, np.ndarray], Schedule]:
    """The schedule of sentences ``transitions`` <int>[S, T] (gold, checked) with N token slots each, as the
    level loops take it: LEVEL_ARRAYS (the module's docstring), padded as ``padding`` says (PADDINGS). Returns
    (the arrays, the exact schedule)."""
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; choose from {PADDINGS}")
    transitions = np.asarray(transitions)
    sched = schedule(transitions, N, tracker)
    levels = sched.levels

    def cat(parts) -> np.ndarray:
        return np.concatenate([np.zeros(0, np.int32)] + [np.asarray(p, np.int32) for p in parts])

    def bounds(sizes) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int32)

    used = [lv.used for lv in levels]
    out = {"left": cat(lv.left for lv in levels), "right": cat(lv.right for lv in levels),
           "reducing": cat(lv.reducing for lv in levels) if tracker else np.zeros(sum(used), np.int32),
           "offsets": bounds(used), "widths": np.array(used, np.int32),
           "active": cat(lv.active for lv in levels if tracker),
           "parser": cat(part for lv in levels if tracker for part in (lv.buffer_front, lv.stack_top, lv.stack_below)),
           "active_offsets": bounds([lv.active_used for lv in levels]), "n_levels": np.array(len(levels), np.int32),
           "roots": np.asarray(sched.roots, np.int32)}
    if padding == "static":
        out = _pad_static(out, sched.n_leaves_rows, transitions.shape[1])
    return {name: out[name] for name in LEVEL_ARRAYS}, sched


def _pad_static(arrays: dict[str, np.ndarray], zero: int, T: int) -> dict[str, np.ndarray]:
    """The exact arrays padded as a compiled loop of fixed shapes needs them (``"static"``, the module's
    docstring); ``zero`` is the zero row (S * N) and T the transitions' steps."""
    S, R = len(arrays["roots"]), int(arrays["offsets"][-1])
    tracker = len(arrays["active"]) > 0
    W = width_classes(S, PER_OCTAVE[tracker])[-1]  # the window: a step reduces at most one node per sentence
    classes = reduce_classes(W, tracker)
    A = S if tracker else 0  # every sentence steps at step 0
    # A level wider than the window (a tree height may hold more than S nodes) runs as sub-levels of W nodes, in
    # order: their children are all in earlier levels. A sentence's n - 1 nodes take 2n - 1 <= T steps, so there
    # are at most S * (T - 1) // 2 nodes, and at most R / W + (T - 1) / 2 < T levels and sub-levels.
    parts = [(int(start) + k, min(W, int(n) - k)) for start, n in zip(arrays["offsets"], arrays["widths"])
             for k in range(0, max(int(n), 1), W)]
    L, nodes = len(parts), S * ((T - 1) // 2)
    levels = min(T, width_classes(L)[-1])  # the level count rounded up to a class: few shapes, few padding levels

    def pad(a, size: int, fill: int) -> np.ndarray:
        return np.concatenate([np.asarray(a, np.int32), np.full(size - len(a), fill, np.int32)])

    out = {"left": pad(arrays["left"], nodes + W, zero), "right": pad(arrays["right"], nodes + W, zero),
           "reducing": pad(arrays["reducing"], nodes + W, 0), "offsets": pad([p for p, _ in parts], levels + 1, R),
           "widths": pad([next(c for c in classes if c >= n) for _, n in parts], levels, 0),
           "active_offsets": np.arange(levels + 1, dtype=np.int32) * A, "n_levels": np.array(L, np.int32),
           "roots": arrays["roots"]}
    # Level l's tracker rows first, padding after them (with the tracker no level is split: its levels are the parts).
    counts = np.diff(arrays["active_offsets"])
    active = np.full((levels, A), S, np.int32)
    active[:len(counts)][np.arange(A) < counts[:, None]] = arrays["active"]
    parser = np.full((levels, 3, A), zero, np.int32)
    for l, (start, stop) in enumerate(zip(arrays["active_offsets"][:-1], arrays["active_offsets"][1:])):
        parser[l, :, :stop - start] = arrays["parser"][3 * start:3 * stop].reshape(3, stop - start)
    return {**out, "active": active.reshape(-1), "parser": parser.reshape(-1)}


def static_shape(arrays: dict) -> tuple[int, int, int]:
    """(L, A, W) of a statically padded schedule, from its arrays' shapes alone: its levels, the tracker rows of
    each and the Reduce rows of the window each reads; what it adds to a compiled program's shape (S, N, T)."""
    L, S = arrays["widths"].shape[0], arrays["roots"].shape[0]
    A = arrays["active"].shape[0] // max(L, 1)  # S with the tracker, else 0
    return L, A, width_classes(S, PER_OCTAVE[A > 0])[-1]


def _rows(arrays: dict) -> list[tuple[int, int]]:
    """Per level the loop runs, in order: (the tracker's rows, Reduce's rows), padding included."""
    n = int(arrays["n_levels"])
    return list(zip(np.diff(arrays["active_offsets"])[:n].tolist(), arrays["widths"][:n].tolist()))


def level_rows(transitions, N: int, tracker: bool, padding: str) -> list[tuple[int, int]]:
    """The rows each level's products run on, padding included, for sentences ``transitions`` <int>[S, T] with N
    token slots, the tracker running or not, padded as ``padding`` (a framework's levels.PADDING): per level, in
    the order the loop runs them, (tracker rows, Reduce rows). A level past the batch's own (static padding's)
    runs nothing, so it is not listed."""
    return _rows(level_arrays(transitions, N, tracker, padding)[0])


def level_row_counts(arrays: dict) -> dict[str, float]:
    """What a level loop over ``arrays`` computes, as a runner's ``last_rows`` says it: ``levels`` (those it
    runs), ``level_padding_pct`` (the percentage of its Reduce rows that are padding), ``reduce_rows`` and
    ``tracker_rows`` (the rows each cell computes, padding included)."""
    rows = _rows(arrays)
    reduce_rows = sum(r for _, r in rows)
    nodes = int(arrays["offsets"][int(arrays["n_levels"])])
    return {"levels": len(rows), "level_padding_pct": 100.0 * (1 - nodes / reduce_rows) if reduce_rows else 0.0,
            "reduce_rows": reduce_rows, "tracker_rows": sum(t for t, _ in rows)}


def batch_schedule(batch, tracker: bool, padding: str) -> tuple[dict[str, np.ndarray], dict, dict[str, float]]:
    """A pair batch's schedule, of its premises then its hypotheses, as :func:`level_arrays` makes it padded as
    ``padding`` says; what a loop over it computes (:func:`level_row_counts`: a runner's ``last_rows``); and the
    seconds the host took to make them (``{"schedule": seconds}``: a runner's ``last_phases``)."""
    start = time.perf_counter()
    levels, _ = level_arrays(sentences_transitions(batch), np.shape(batch.premise_tokens)[1], tracker, padding)
    counts = level_row_counts(levels)
    return levels, counts, {"schedule": time.perf_counter() - start}
