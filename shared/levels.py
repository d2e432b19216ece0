"""Gold transitions -> a level schedule for host-scheduled batching (NumPy only).

The node table holds the leaves first (row ``s * N + i`` is word i of sentence
s), then a zero row (row ``S * N``: what an absent stack item or an empty
buffer reads), then one contiguous block per level of computed nodes. A level
gathers its children's rows, runs one batched Reduce, and appends its block.
Widths are rounded up to a few sizes so the compiled shapes stay few; padding
rows read the zero row and are never read back.

Without the tracker a level is a tree height (a batch takes as many levels as
its tallest tree). With the tracker a level is a transition step: the tracker
runs on the sentences still active, Reduce only on the sentences that reduce.

What the runners feed their programs: :func:`class_arrays` (with the
tracker: every step packed, its Reduce width one of a few classes chosen
inside the program: a JAX scan with a switch), :func:`doubling_runs`
(without the tracker: runs of 1, 2, 4, ... levels, each its own width: a
JAX scan per run) and :func:`ragged_arrays` (each level exactly its own
width: a tf.while_loop, whose shapes may change per level).
:func:`program_arrays`, one width for every level, is the simplest form;
no runner uses it (at H=300 it padded 77% of the Reduce rows with the
tracker, 85% without).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.transitions import PAD, REDUCE, SHIFT, reduce_heights

DEFAULT_WIDTHS = (8, 16, 32, 64, 128, 256, 512)

# What a level schedule cannot do, made on the host before the program runs, from gold transitions: the
# reasons every runner of the levels algorithm gives (shared.runner.Runner sets its ``unsupported``).
_ON_HOST = "the level schedule is made on the host from gold transitions; a {} parse is known only inside the loop"
LEVELS_UNSUPPORTED = {"predicted parse": _ON_HOST.format("decided"), "sampled parse": _ON_HOST.format("sampled"),
                      "reinforce": "REINFORCE follows sampled parses, which the host cannot schedule ahead"}


def round_width(n: int, widths=DEFAULT_WIDTHS) -> int:
    """The smallest width >= n, or n rounded up to a multiple of the largest."""
    for w in widths:
        if n <= w:
            return int(w)
    last = int(widths[-1])
    return -(-n // last) * last


@dataclass(frozen=True, eq=False)
class Level:
    """One level: Reduce on ``width`` rows whose block starts at ``offset``."""

    offset: int
    left: np.ndarray  # <int32>[width] table rows of the left children
    right: np.ndarray  # <int32>[width]
    used: int  # rows that are real nodes (the rest is padding)
    # tracker levels only (None without the tracker):
    active: np.ndarray | None = None  # <int32>[tracker width] sentences that step
    active_used: int = 0
    stack_top: np.ndarray | None = None  # <int32>[tracker width] table rows
    stack_below: np.ndarray | None = None
    buffer_front: np.ndarray | None = None
    reducing: np.ndarray | None = None  # <int32>[width] positions in ``active`` that reduce

    @property
    def width(self) -> int:
        return int(self.left.shape[0])


@dataclass(frozen=True, eq=False)
class Schedule:
    n_leaves_rows: int  # S * N; the zero row follows
    levels: tuple[Level, ...]
    roots: np.ndarray  # <int32>[S] table row of each sentence's root

    @property
    def n_rows(self) -> int:
        return self.n_leaves_rows + 1 + sum(level.width for level in self.levels)

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    @property
    def padded_share(self) -> float:
        """Share of computed Reduce rows that are padding."""
        total = sum(level.width for level in self.levels)
        return 0.0 if total == 0 else 1.0 - sum(level.used for level in self.levels) / total


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


def schedule_by_height(transitions, N: int, widths=DEFAULT_WIDTHS) -> Schedule:
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
    zero = S * N
    levels, offset = [], zero + 1
    for h in range(len(by_level)):
        nodes = by_level[h]
        width = round_width(len(nodes), widths)
        left = np.full(width, zero, np.int32)
        right = np.full(width, zero, np.int32)
        for k, (l, r, node) in enumerate(nodes):
            left[k], right[k] = row[l], row[r]
            row[node] = offset + k
        levels.append(Level(offset, left, right, len(nodes)))
        offset += width
    roots = np.array([row[root] for _, _, root in sims], np.int32)
    return Schedule(S * N, tuple(levels), roots)


def schedule_by_step(transitions, N: int, widths=DEFAULT_WIDTHS) -> Schedule:
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
        aw = round_width(len(active), widths)
        act = np.full(aw, S, np.int32)  # padding steps a spare tracker row S
        top = np.full(aw, zero, np.int32)
        below = np.full(aw, zero, np.int32)
        front = np.full(aw, zero, np.int32)
        reducing = []
        for k, s in enumerate(active):
            st = stacks[s]
            act[k] = s
            top[k] = st[-1] if st else zero
            below[k] = st[-2] if len(st) > 1 else zero
            front[k] = s * N + buffers[s] if buffers[s] < n_words[s] else zero
            if transitions[s, t] == REDUCE:
                reducing.append(k)
        width = round_width(len(reducing), widths) if reducing else 0
        left = np.full(width, zero, np.int32)
        right = np.full(width, zero, np.int32)
        red = np.full(width, aw - 1 if len(active) < aw else 0, np.int32)
        for j, k in enumerate(reducing):
            s = active[k]
            right[j], left[j] = stacks[s].pop(), stacks[s].pop()
            red[j] = k
            stacks[s].append(offset + j)
        for s in active:
            if transitions[s, t] == SHIFT:
                stacks[s].append(s * N + buffers[s])
                buffers[s] += 1
        levels.append(Level(offset, left, right, len(reducing), act, len(active), top, below, front, red))
        offset += width
    for s, st in enumerate(stacks):
        if len(st) != 1:
            raise ValueError(f"sentence {s}: ends with {len(st)} items on the stack, not 1")
    roots = np.array([st[0] for st in stacks], np.int32)
    return Schedule(S * N, tuple(levels), roots)


def schedule(transitions, N: int, tracker: bool, widths=DEFAULT_WIDTHS) -> Schedule:
    return (schedule_by_step if tracker else schedule_by_height)(transitions, N, widths)


def uniform(sched: Schedule, widths=DEFAULT_WIDTHS) -> dict:
    """The schedule with every level padded to one width, stacked for a loop
    over levels (lax.scan, tf.while_loop): arrays [L, W] (and [L, A] for the
    tracker), level l's block at rows ``base + l * W``."""
    W = round_width(max([lv.used for lv in sched.levels] + [1]), widths)
    L, zero = sched.n_levels, sched.n_leaves_rows
    out = {"base": zero + 1, "width": W,
           "left": np.full((L, W), zero, np.int32), "right": np.full((L, W), zero, np.int32)}
    remap = {}  # old table row -> new
    for l, lv in enumerate(sched.levels):
        for k in range(lv.width):
            remap[lv.offset + k] = zero + 1 + l * W + k if k < W else zero

    def fix(rows):
        return np.array([remap.get(int(r), int(r)) for r in rows], np.int32)

    for l, lv in enumerate(sched.levels):
        out["left"][l, :lv.used] = fix(lv.left[:lv.used])
        out["right"][l, :lv.used] = fix(lv.right[:lv.used])
    if sched.levels and sched.levels[0].active is not None:
        A = round_width(max(lv.active_used for lv in sched.levels), widths)
        S = len(sched.roots)
        for name, fill in (("active", S), ("top", zero), ("below", zero), ("front", zero)):
            out[name] = np.full((L, A), fill, np.int32)
        out["reducing"] = np.full((L, W), A - 1, np.int32)
        for l, lv in enumerate(sched.levels):
            n = lv.active_used
            out["active"][l, :n] = lv.active[:n]
            out["top"][l, :n] = fix(lv.stack_top[:n])
            out["below"][l, :n] = fix(lv.stack_below[:n])
            out["front"][l, :n] = fix(lv.buffer_front[:n])
            out["reducing"][l, :lv.used] = lv.reducing[:lv.used]
    out["roots"] = fix(sched.roots)
    out["n_rows"] = zero + 1 + L * W
    return out


def segments(sched: Schedule) -> list[dict]:
    """The schedule as runs of consecutive levels of one width (and one
    tracker width), each stacked for its own loop: a run's level l writes rows
    ``base + l * width``. Fewer padded rows than :func:`uniform`, at the cost
    of one loop per run; the table layout is the schedule's own."""
    runs: list[list[Level]] = []
    for lv in sched.levels:
        key = (lv.width, 0 if lv.active is None else len(lv.active))
        if runs and (runs[-1][0].width, 0 if runs[-1][0].active is None else len(runs[-1][0].active)) == key:
            runs[-1].append(lv)
        else:
            runs.append([lv])
    out = []
    for run in runs:
        seg = {"base": run[0].offset, "width": run[0].width,
               "left": np.stack([lv.left for lv in run]), "right": np.stack([lv.right for lv in run])}
        if run[0].active is not None:
            seg.update(active=np.stack([lv.active for lv in run]), top=np.stack([lv.stack_top for lv in run]),
                       below=np.stack([lv.stack_below for lv in run]),
                       front=np.stack([lv.buffer_front for lv in run]),
                       reducing=np.stack([lv.reducing for lv in run]))
        out.append(seg)
    return out


LEVEL_MULTIPLE = 4  # a program's level count is the batch's, rounded up to a multiple of this
PROGRAM_ARRAYS = ("left", "right", "active", "top", "below", "front", "reducing", "roots")


def program_arrays(transitions, N: int, tracker: bool, level_multiple: int = LEVEL_MULTIPLE,
                   widths=DEFAULT_WIDTHS, n_levels: int | None = None) -> tuple[dict[str, np.ndarray], Schedule]:
    """What a compiled level loop takes for sentences ``transitions`` <int>[S, T]
    (gold, checked): :func:`uniform`'s int32 arrays alone (no Python ints: the
    table's layout follows from their shapes, ``base = S * N + 1``, level l's
    block at ``base + l * W``), the level count padded to ``n_levels`` if
    given (with the tracker, T: levels are steps), else rounded up to a
    multiple of ``level_multiple``, so that a batch shape meets few program
    shapes. Added levels read the zero row, step the spare tracker row S and
    write rows no root reads. Returns (arrays, the schedule), the schedule
    for its ``n_levels`` and ``padded_share``.

    Arrays: left, right, reducing <int32>[L, W]; roots <int32>[S]; with the
    tracker also active, top, below, front <int32>[L, A]."""
    sched = schedule(transitions, N, tracker, widths)
    u = uniform(sched, widths)
    L = sched.n_levels
    Lp = max(level_multiple, -(-L // level_multiple) * level_multiple) if n_levels is None else n_levels
    if Lp < L:
        raise ValueError(f"the schedule has {L} levels, more than n_levels={n_levels}")
    S, zero = len(sched.roots), sched.n_leaves_rows
    out = {}
    for name in PROGRAM_ARRAYS:
        if name not in u:
            continue
        a = u[name]
        if name != "roots":
            fill = {"active": S, "reducing": (u["active"].shape[1] - 1) if tracker else 0}.get(name, zero)
            a = np.concatenate([a, np.full((Lp - L,) + a.shape[1:], fill, np.int32)])
        out[name] = np.ascontiguousarray(a, np.int32)
    if not tracker:
        out.pop("reducing", None)
    return out, sched


def program_padding(sched: Schedule, computed: int) -> float:
    """Share of the ``computed`` Reduce rows of a program running ``sched`` that are padding."""
    return 0.0 if computed == 0 else 1.0 - sum(lv.used for lv in sched.levels) / computed


def doubling_runs(transitions, N: int, widths=DEFAULT_WIDTHS) -> tuple[list[dict[str, np.ndarray]], Schedule]:
    """The schedule without the tracker as runs of 1, 2, 4, 8, ... levels, each
    run padded to the width of its widest level: a tree's levels narrow fast
    (level 0 holds most nodes), so each run pads little, and since the run
    lengths are fixed only the widths (from ``widths``) and the number of runs
    (the tallest tree's height, log2) shape the program. The last run is
    padded to its full length with levels that read the zero row. Layout: the
    leaves, the zero row, then run r's level j at ``base_r + j * W_r``, the
    runs one after another. Returns ([{"left", "right"} <int32>[L_r, W_r] per
    run, then {"roots"} <int32>[S] as the last entry], the schedule)."""
    sched = schedule_by_height(transitions, N, widths)
    zero = sched.n_leaves_rows
    spans, start, length = [], 0, 1
    while start < max(sched.n_levels, 1):
        spans.append((start, length))
        start, length = start + length, 2 * length
    remap, base, shapes = {}, zero + 1, []
    for start, length in spans:
        run = sched.levels[start:start + length]
        W = round_width(max([lv.used for lv in run] + [1]), widths)
        for j, lv in enumerate(run):
            for k in range(lv.used):
                remap[lv.offset + k] = base + j * W + k
        shapes.append((start, length, W))
        base += length * W
    runs = []
    for start, length, W in shapes:
        run = {"left": np.full((length, W), zero, np.int32), "right": np.full((length, W), zero, np.int32)}
        for j, lv in enumerate(sched.levels[start:start + length]):
            run["left"][j, :lv.used] = [remap.get(int(r), int(r)) for r in lv.left[:lv.used]]
            run["right"][j, :lv.used] = [remap.get(int(r), int(r)) for r in lv.right[:lv.used]]
        runs.append(run)
    runs.append({"roots": np.array([remap.get(int(r), int(r)) for r in sched.roots], np.int32)})
    return runs, sched


RAGGED_ARRAYS = ("left", "right", "offsets", "active", "top", "below", "front", "reducing", "active_offsets",
                 "roots")


def ragged_arrays(transitions, N: int, tracker: bool) -> tuple[dict[str, np.ndarray], Schedule]:
    """The schedule with no padding at all, for a loop whose shapes may change
    from level to level (a tf.while_loop): every level exactly as wide as
    its nodes, the levels' index arrays concatenated. Layout: the leaves, the
    zero row, then level l's block at ``S * N + 1 + offsets[l]``.

    Arrays (int32): left, right, reducing [R] (R nodes; level l's are
    ``offsets[l]:offsets[l + 1]``), offsets [L + 1], roots [S]; with the
    tracker active, top, below, front [Q] (level l's sentences
    ``active_offsets[l]:active_offsets[l + 1]``; ``reducing`` indexes them
    within the level) and active_offsets [L + 1]; without it those are empty
    and active_offsets zeros."""
    sched = schedule(transitions, N, tracker, widths=(1,))
    levels, base = sched.levels, sched.n_leaves_rows + 1

    def cat(parts):
        return np.ascontiguousarray(np.concatenate([np.asarray(p, np.int32) for p in parts] or
                                                   [np.zeros(0, np.int32)]), np.int32)

    def bounds(sizes):
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)

    out = {"left": cat([lv.left[:lv.used] for lv in levels]), "right": cat([lv.right[:lv.used] for lv in levels]),
           "offsets": bounds([lv.used for lv in levels]), "roots": np.asarray(sched.roots, np.int32)}
    assert all(lv.offset - base == o for lv, o in zip(levels, out["offsets"]))  # the schedule is packed already
    if tracker:
        out.update(active=cat([lv.active[:lv.active_used] for lv in levels]),
                   top=cat([lv.stack_top[:lv.active_used] for lv in levels]),
                   below=cat([lv.stack_below[:lv.active_used] for lv in levels]),
                   front=cat([lv.buffer_front[:lv.active_used] for lv in levels]),
                   reducing=cat([lv.reducing[:lv.used] for lv in levels]),
                   active_offsets=bounds([lv.active_used for lv in levels]))
    else:
        empty = np.zeros(0, np.int32)
        out.update(active=empty, top=empty, below=empty, front=empty, reducing=np.zeros(len(out["left"]), np.int32),
                   active_offsets=np.zeros(len(levels) + 1, np.int32))
    return {k: out[k] for k in RAGGED_ARRAYS}, sched


CLASS_LADDER = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # doubling: at most half a level padding


def width_classes(S: int) -> tuple[int, ...]:
    """The Reduce widths a step of S sentences may take (a step reduces at most
    one node per sentence): CLASS_LADDER up to the first width >= S."""
    out = []
    for w in CLASS_LADDER:
        out.append(w)
        if w >= S:
            return tuple(out)
    return tuple(out[:-1]) + (round_width(S, CLASS_LADDER[1:]),)


def class_arrays(transitions, N: int, n_levels: int | None = None,
                 n_nodes: int | None = None) -> tuple[dict[str, np.ndarray], Schedule]:
    """The tracker's schedule (levels are steps) for a loop of fixed shapes
    whose Reduce width is chosen per level from :func:`width_classes` (a
    lax.switch): each level's nodes packed exactly (level l's block at
    ``S * N + 1 + offsets[l]``), its Reduce run on the smallest class width
    that holds them. A level's rows past its own spill into the next
    levels' blocks, which those levels write afterwards, or into a tail of
    max-class rows: the table has ``S * N + 1 + R + max(classes)`` rows.
    ``n_levels`` (T) pads the level count with empty levels, ``n_nodes``
    (S * (N - 1), the most a batch can have) the node count R, so that the
    shapes depend on (S, N, T) and A alone.

    Arrays (int32): left, right, reducing [R + max(classes)] (flat; reducing
    indexes the level's tracker rows), offsets, cls [L]; active, top, below,
    front [L, A] (A from DEFAULT_WIDTHS, padding steps the spare row S);
    roots [S]."""
    transitions = np.asarray(transitions)
    S = transitions.shape[0]
    sched = schedule_by_step(transitions, N, widths=(1,))
    classes = width_classes(S)
    zero, base = sched.n_leaves_rows, sched.n_leaves_rows + 1
    L = sched.n_levels if n_levels is None else n_levels
    if L < sched.n_levels:
        raise ValueError(f"the schedule has {sched.n_levels} levels, more than n_levels={n_levels}")
    A = round_width(max(lv.active_used for lv in sched.levels))
    R = sum(lv.used for lv in sched.levels)
    if n_nodes is not None:
        if n_nodes < R:
            raise ValueError(f"the schedule has {R} nodes, more than n_nodes={n_nodes}")
        R = n_nodes
    tail = classes[-1]
    out = {"left": np.full(R + tail, zero, np.int32), "right": np.full(R + tail, zero, np.int32),
           "reducing": np.zeros(R + tail, np.int32), "offsets": np.full(L, R, np.int32),
           "cls": np.zeros(L, np.int32)}
    for name, fill in (("active", S), ("top", zero), ("below", zero), ("front", zero)):
        out[name] = np.full((L, A), fill, np.int32)
    for l, lv in enumerate(sched.levels):
        o, n, m = lv.offset - base, lv.used, lv.active_used
        out["left"][o:o + n], out["right"][o:o + n], out["reducing"][o:o + n] = (lv.left[:n], lv.right[:n],
                                                                                 lv.reducing[:n])
        out["offsets"][l] = o
        out["cls"][l] = next(k for k, w in enumerate(classes) if w >= n)
        out["active"][l, :m], out["top"][l, :m] = lv.active[:m], lv.stack_top[:m]
        out["below"][l, :m], out["front"][l, :m] = lv.stack_below[:m], lv.buffer_front[:m]
    out["roots"] = np.asarray(sched.roots, np.int32)
    return out, sched
