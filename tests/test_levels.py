"""The level scheduler alone (shared/levels.py)."""

import numpy as np
import pytest

from shared.levels import round_width, schedule
from shared.transitions import PAD, plain_transitions


def _batch(shapes_and_lengths, N):
    T = 2 * N - 1
    rows = []
    for shape, n in shapes_and_lengths:
        tr = plain_transitions(n, shape)
        rows.append(tr + [PAD] * (T - len(tr)))
    return np.array(rows, np.int32)


def _check(sched, S, N, widths):
    computed_at = {}
    for lv, level in enumerate(sched.levels):
        assert level.width in widths or level.width == 0 or level.width % widths[-1] == 0
        assert level.used <= level.width
        for k in range(level.used):
            for child in (level.left[k], level.right[k]):
                if child > S * N:  # row S * N is the zero row
                    assert computed_at[int(child)] < lv  # child computed earlier
            assert level.offset + k not in computed_at  # computed once
            computed_at[level.offset + k] = lv
    assert sorted(sched.roots.tolist()) == sorted(set(sched.roots.tolist()))
    return computed_at


@pytest.mark.parametrize("tracker", [False, True])
def test_every_node_once_children_first(tracker):
    N = 7
    batch = _batch([("left", 7), ("right", 5), ("balanced", 6), ("left", 1)], N)
    widths = (2, 4)
    sched = schedule(batch, N, tracker, widths)
    computed = _check(sched, 4, N, widths)
    assert len(computed) == 6 + 4 + 5 + 0  # n - 1 reduces per sentence
    assert sched.roots[3] == 3 * N  # one word: its leaf is its root
    assert 0.0 <= sched.padded_share < 1.0


def test_levels_by_height_hand_checked():
    # ((a b)(c d)) and (e (f g)): heights 2 and 2 -> two levels
    N = 4
    batch = _batch([("balanced", 4), ("right", 3)], N)
    sched = schedule(batch, N, False, (4,))
    assert sched.n_levels == 2
    first, second = sched.levels
    assert first.used == 3  # (a b), (c d), (f g)
    assert first.left[:3].tolist() == [0, 2, 5] and first.right[:3].tolist() == [1, 3, 6]
    assert first.left[3] == 8  # padding reads the zero row
    assert second.used == 2
    assert second.left[:2].tolist() == [9, 4] and second.right[:2].tolist() == [10, 11]
    assert sched.roots.tolist() == [13, 14]
    assert sched.padded_share == pytest.approx(1 - 5 / 8)


def test_levels_by_step_compacts_reduces():
    N = 3
    batch = _batch([("left", 3), ("right", 3)], N)  # S S R S R / S S S R R
    sched = schedule(batch, N, True, (1, 2))
    assert sched.n_levels == 5
    assert [lv.used for lv in sched.levels] == [0, 0, 1, 1, 2]
    assert [lv.width for lv in sched.levels] == [0, 0, 1, 1, 2]
    step2 = sched.levels[2]
    assert step2.active[step2.reducing[0]] == 0 and (step2.left[0], step2.right[0]) == (0, 1)
    assert sched.levels[4].buffer_front.tolist() == [6, 6]  # both buffers empty: the zero row


def test_tallest_tree_sets_levels_not_steps():
    N = 16
    batch = _batch([("balanced", 16)] * 8, N)
    sched = schedule(batch, N, False)
    assert sched.n_levels == 4  # log2(16), not 2n-1 = 31


def test_round_width():
    assert round_width(3, (4, 8)) == 4
    assert round_width(9, (4, 8)) == 16


def test_doubling_runs_cover_the_schedule_with_its_own_widths():
    """Runs of 1, 2, 4, ... levels: every real node kept, in a layout whose
    rows never collide, each run as wide as its widest level (rounded)."""
    from shared.levels import doubling_runs, program_padding, schedule_by_height
    from shared.transitions import plain_transitions

    rows = [plain_transitions(n, s) for n, s in ((9, "balanced"), (7, "left"), (3, "right"), (1, "left"))]
    T = max(len(r) for r in rows)
    tr = np.array([r + [PAD] * (T - len(r)) for r in rows], np.int32)
    runs, sched = doubling_runs(tr, 9, (2, 4))
    assert [run["left"].shape[0] for run in runs[:-1]] == [1, 2, 4, 8][:len(runs) - 1]
    assert sum(run["left"].shape[0] for run in runs[:-1]) >= sched.n_levels
    for run, start in zip(runs[:-1], (0, 1, 3, 7)):
        used = [lv.used for lv in sched.levels[start:start + run["left"].shape[0]]]
        assert run["left"].shape[1] == round_width(max(used), (2, 4))
    assert len(set(runs[-1]["roots"])) == len(rows)
    assert 0 <= program_padding(sched, sum(run["left"].size for run in runs[:-1])) < 1
    assert schedule_by_height(tr, 9, (2, 4)).n_levels == sched.n_levels


def test_class_arrays_pack_each_step_and_pick_its_width_class():
    """With the tracker: each step's Reduce rows packed at its offset, the
    smallest class that holds them, the step count and node count padded to
    the given bounds (the program's shapes then depend on S, N, T and A alone)."""
    from shared.levels import class_arrays, schedule_by_step, width_classes

    rows = [plain_transitions(n, s) for n, s in ((9, "balanced"), (7, "left"), (3, "right"), (1, "left"))]
    T = max(len(r) for r in rows)
    tr = np.array([r + [PAD] * (T - len(r)) for r in rows], np.int32)
    S, N = tr.shape[0], 9
    arrays, sched = class_arrays(tr, N, n_levels=T + 3, n_nodes=S * (N - 1))
    classes = width_classes(S)
    assert classes == (0, 8)
    assert arrays["cls"].shape == arrays["offsets"].shape == (T + 3,)
    assert arrays["left"].shape == (S * (N - 1) + classes[-1],)
    assert arrays["active"].shape[0] == T + 3
    exact = schedule_by_step(tr, N, widths=(1,))
    for l, lv in enumerate(exact.levels):
        assert classes[arrays["cls"][l]] >= lv.used and (arrays["cls"][l] == 0 or classes[arrays["cls"][l] - 1] < lv.used)
        o = arrays["offsets"][l]
        assert list(arrays["left"][o:o + lv.used]) == list(lv.left[:lv.used])
    assert np.all(arrays["cls"][exact.n_levels:] == 0)
    assert width_classes(256) == (0, 8, 16, 32, 64, 128, 256) and width_classes(100000)[-1] >= 100000
    with pytest.raises(ValueError, match="n_levels"):
        class_arrays(tr, N, n_levels=2)
