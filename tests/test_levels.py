"""The level scheduler alone (shared/levels.py): the schedule, its one format and the padding of each framework."""

import numpy as np
import pytest

from shared.levels import (LEVEL_ARRAYS, MIN_ROWS, OCTAVES, PADDINGS, PER_OCTAVE, level_arrays, level_row_counts,
                           level_rows, reduce_classes, schedule, static_shape, width_classes)
from shared.transitions import PAD, plain_transitions


def _batch(shapes_and_lengths, N):
    T = 2 * N - 1
    rows = []
    for shape, n in shapes_and_lengths:
        tr = plain_transitions(n, shape)
        rows.append(tr + [PAD] * (T - len(tr)))
    return np.array(rows, np.int32)


def _check(sched, S, N):
    computed_at = {}
    for lv, level in enumerate(sched.levels):
        for k in range(level.used):
            for child in (level.left[k], level.right[k]):
                if child > S * N:  # row S * N is the zero row
                    assert computed_at[int(child)] < lv  # child computed earlier
            assert level.offset + k not in computed_at  # computed once
            computed_at[level.offset + k] = lv
    assert sorted(sched.roots.tolist()) == sorted(set(sched.roots.tolist()))
    return computed_at


SHAPES = [("left", 7), ("right", 5), ("balanced", 6), ("left", 1)]


@pytest.mark.parametrize("tracker", [False, True])
def test_every_node_once_children_first(tracker):
    N = 7
    sched = schedule(_batch(SHAPES, N), N, tracker)
    computed = _check(sched, 4, N)
    assert len(computed) == 6 + 4 + 5 + 0  # n - 1 reduces per sentence
    assert sched.roots[3] == 3 * N  # one word: its leaf is its root
    assert sched.n_rows == 4 * N + 1 + len(computed)  # packed: no padding row


def test_levels_by_height_hand_checked():
    # ((a b)(c d)) and (e (f g)): heights 2 and 2 -> two levels
    N = 4
    sched = schedule(_batch([("balanced", 4), ("right", 3)], N), N, False)
    assert sched.n_levels == 2
    first, second = sched.levels
    assert first.used == 3  # (a b), (c d), (f g)
    assert first.left.tolist() == [0, 2, 5] and first.right.tolist() == [1, 3, 6]
    assert second.offset == 9 + 3  # right after the first block
    assert second.left.tolist() == [9, 4] and second.right.tolist() == [10, 11]
    assert sched.roots.tolist() == [12, 13]


def test_levels_by_step_compacts_reduces():
    N = 3
    batch = _batch([("left", 3), ("right", 3)], N)  # S S R S R / S S S R R
    sched = schedule(batch, N, True)
    assert sched.n_levels == 5
    assert [lv.used for lv in sched.levels] == [0, 0, 1, 1, 2]
    step2 = sched.levels[2]
    assert step2.active[step2.reducing[0]] == 0 and (step2.left[0], step2.right[0]) == (0, 1)
    assert sched.levels[4].buffer_front.tolist() == [6, 6]  # both buffers empty: the zero row


def test_tallest_tree_sets_levels_not_steps():
    N = 16
    sched = schedule(_batch([("balanced", 16)] * 8, N), N, False)
    assert sched.n_levels == 4  # log2(16), not 2n-1 = 31


def test_width_classes_pad_a_level_by_at_most_the_step_of_their_ladder():
    assert width_classes(1) == (0, 1) and width_classes(9)[-1] == 12
    assert width_classes(20) == (0, 1, 2, 3, 4, 6, 8, 12, 16, 24)
    assert width_classes(20, per_octave=1) == (0, 1, 2, 4, 8, 16, 32)
    for per_octave, step in ((1, 2.0), (2, 1.5), (4, 1.25)):
        for n in (3, 17, 255, 256, 1000, 5000):
            classes = width_classes(n, per_octave)
            assert classes[-1] >= n > classes[-2]
            assert all(b <= step * a for a, b in zip(classes[4:], classes[5:]))


def test_reduce_classes_span_the_window_s_last_doublings():
    """A window's ladder: 0 with the tracker (a step may reduce nothing), then its width classes from W / 2**OCTAVES
    and MIN_ROWS up (a narrower level pads up to the first; a window that narrow is one class)."""
    assert (OCTAVES, MIN_ROWS) == (3, 4)
    assert reduce_classes(256, True) == (0, 32, 48, 64, 96, 128, 192, 256)
    assert reduce_classes(256, False) == (32, 64, 128, 256)
    assert reduce_classes(16, True) == (0, 4, 6, 8, 12, 16) and reduce_classes(16, False) == (4, 8, 16)
    assert reduce_classes(2, True) == (0, 2) and reduce_classes(2, False) == (2,)
    for S in (2, 6, 24, 200, 256, 1024):
        for tracker in (True, False):
            W = width_classes(S, PER_OCTAVE[tracker])[-1]  # a window is a class (the padding's)
            classes = reduce_classes(W, tracker)
            ladder = [c for c in width_classes(W, PER_OCTAVE[tracker]) if c]
            first = classes[1] if tracker else classes[0]
            assert classes[-1] == W and (classes[0] == 0) == tracker and set(classes) - {0} <= set(ladder)
            assert first == min(c for c in ladder if c * 2 ** OCTAVES >= W and c >= min(MIN_ROWS, W))
            assert classes[classes.index(first):] == tuple(ladder[ladder.index(first):])  # no class left out above


def _sentences():
    rows = [plain_transitions(n, s) for n, s in ((9, "balanced"), (7, "left"), (3, "right"), (1, "left"))]
    rows[1][3:3] = [PAD]  # a PAD inside a sequence changes nothing
    T = max(len(r) for r in rows) + 2
    return np.array([r + [PAD] * (T - len(r)) for r in rows], np.int32), 9


@pytest.mark.parametrize("tracker", [False, True])
def test_exact_arrays_pack_the_schedule_level_after_level(tracker):
    transitions, N = _sentences()
    arrays, sched = level_arrays(transitions, N, tracker)
    assert list(arrays) == list(LEVEL_ARRAYS) and all(a.dtype == np.int32 for a in arrays.values())
    L = sched.n_levels
    assert int(arrays["n_levels"]) == len(arrays["widths"]) == L and np.array_equal(arrays["roots"], sched.roots)
    for l, lv in enumerate(sched.levels):
        lo, hi = arrays["offsets"][l], arrays["offsets"][l + 1]
        assert arrays["widths"][l] == hi - lo == lv.used and lv.offset == 4 * N + 1 + lo  # the table's layout
        assert np.array_equal(arrays["left"][lo:hi], lv.left) and np.array_equal(arrays["right"][lo:hi], lv.right)
        start, stop = arrays["active_offsets"][l], arrays["active_offsets"][l + 1]
        assert stop - start == lv.active_used
        if tracker:
            assert np.array_equal(arrays["reducing"][lo:hi], lv.reducing)
            assert np.array_equal(arrays["active"][start:stop], lv.active)
            assert np.array_equal(arrays["parser"][3 * start:3 * stop],
                                  np.concatenate([lv.buffer_front, lv.stack_top, lv.stack_below]))
    assert level_rows(transitions, N, tracker, "exact") == [(lv.active_used, lv.used) for lv in sched.levels]
    assert level_row_counts(arrays) == {"levels": L, "level_padding_pct": 0.0, "reduce_rows": 8 + 6 + 2,
                                        "tracker_rows": int(np.sum(transitions != PAD)) if tracker else 0}


@pytest.mark.parametrize("tracker", [False, True])
def test_static_padding_fixes_every_shape_but_the_level_count(tracker):
    """S tracker rows a level (the spare row S and the zero row for padding); a window of W rows, S rounded up to
    a class, a wider level split into sub-levels of W nodes; each level's Reduce width rounded up to its class; the
    level count to a class (T at most); the nodes padded to the most T steps hold and a window's tail: each
    level's nodes kept at their offsets, the levels past the batch's own computing nothing."""
    transitions, N = _sentences()
    S, T = transitions.shape
    exact, sched = level_arrays(transitions, N, tracker)
    arrays, _ = level_arrays(transitions, N, tracker, "static")
    L, A, W = static_shape(arrays)
    assert (A, W) == (S if tracker else 0, width_classes(S, PER_OCTAVE[tracker])[-1])
    # the nodes level after level, in sub-levels of at most W: each level's in order, none left out
    parts = [(lv, k) for lv in sched.levels for k in range(0, max(lv.used, 1), W)]
    n = int(arrays["n_levels"])
    assert n == len(parts) <= L == min(T, width_classes(n)[-1]) and (not tracker or n == sched.n_levels)
    assert arrays["widths"].shape == (L,) and arrays["offsets"].shape == arrays["active_offsets"].shape == (L + 1,)
    assert arrays["left"].shape == (S * ((T - 1) // 2) + W,) and arrays["active"].shape == (L * A,)
    zero = S * N
    for l, (lv, k) in enumerate(parts):
        lo, used = arrays["offsets"][l], min(W, lv.used - k)
        assert lo == lv.offset - (S * N + 1) + k and np.array_equal(arrays["left"][lo:lo + used], lv.left[k:k + used])
        classes = reduce_classes(W, tracker)
        k = classes.index(arrays["widths"][l])  # the narrowest class that holds the level's nodes
        assert classes[k] >= used and (k == 0 or classes[k - 1] < used)
        assert arrays["widths"][l] <= W and lo + W <= len(arrays["left"])  # the window holds it, inside the arrays
        rows = slice(arrays["active_offsets"][l], arrays["active_offsets"][l + 1])
        assert rows.stop - rows.start == A
        if tracker:
            m = lv.active_used
            assert np.array_equal(arrays["active"][rows][:m], lv.active)
            parser = arrays["parser"][3 * rows.start:3 * rows.stop].reshape(3, A)
            assert np.array_equal(parser[:, :m], np.stack([lv.buffer_front, lv.stack_top, lv.stack_below]))
            assert np.all(arrays["active"][rows][m:] == S) and np.all(parser[:, m:] == zero)
    if not tracker:
        assert any(lv.used > W for lv in sched.levels)  # the split is exercised
    assert np.all(arrays["widths"][n:] == 0)
    assert np.all(arrays["left"][exact["offsets"][-1]:] == zero)  # the padding and the tail read the zero row
    rows = level_rows(transitions, N, tracker, "static")
    assert rows == [(A, int(w)) for w in arrays["widths"][:n]]  # the padding levels run nothing
    counts = level_row_counts(arrays)
    assert counts["reduce_rows"] == sum(r for _, r in rows) and counts["tracker_rows"] == A * n
    assert counts["level_padding_pct"] == pytest.approx(100 * (1 - exact["offsets"][-1] / counts["reduce_rows"]))


def test_an_unknown_padding_is_refused():
    transitions, N = _sentences()
    assert PADDINGS == ("exact", "static")
    with pytest.raises(ValueError, match="unknown padding 'ragged'"):
        level_arrays(transitions, N, True, "ragged")
