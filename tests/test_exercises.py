"""The worked answers of lessons/README.md's exercises (lessons/answers/) run as a learner runs them, and each
finds what its exercise says it will: the mask agrees with the reference, jit refuses a Python `if` on a tracer,
jax.grad refuses a while_loop and the fixes give the analytic gradient, torch.compile breaks the list model's
graph and recompiles it for other trees yet agrees, AutoGraph turns the `if` into a tf.cond."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lessons.setup import TOLERANCE, lesson_batches, lesson_inputs

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = sorted(p.stem for p in (ROOT / "lessons" / "answers").glob("*.py") if not p.stem.startswith("_"))


def test_every_answer_is_listed_under_its_exercise_and_short():
    readme = (ROOT / "lessons" / "README.md").read_text()
    exercises = readme[readme.index("## Exercises"):]
    listed = re.findall(r"answer: `(?:\.venv/bin/)?python -m lessons\.answers\.(\w+)`", exercises)
    assert sorted(set(listed)) == ANSWERS
    items = re.findall(r"^\d+\. ", exercises, re.M)
    assert len(re.findall(r"answer: `", exercises)) == len(items) >= 5  # every exercise has its answer
    for name in ANSWERS:
        assert len((ROOT / "lessons" / "answers" / f"{name}.py").read_text().splitlines()) < 100, name


def test_exercise_1_the_masks_agree_with_the_reference(capsys):
    from lessons.answers import mask

    _config, params, batches = lesson_batches()
    for tokens, transitions, expected in batches:  # the premises' trees and the hypotheses'
        assert np.max(np.abs(mask.encode(params, tokens, transitions) - expected)) <= TOLERANCE
    is_shift, is_reduce, active = mask.masks(np.array([0, 1, 2]))
    assert is_shift.tolist() == [False, True, False] and is_reduce.tolist() == [False, False, True]
    assert active.tolist() == [False, True, True]
    assert mask.main() <= TOLERANCE and "agrees" in capsys.readouterr().out


def test_exercise_6_the_tracker_on_pad_steps_changes_nothing_only_while_pad_comes_last():
    from lessons.answers import mask

    _config, params, tokens, transitions, _expected = lesson_inputs()
    plain = mask.encode(params, tokens, transitions)
    assert np.array_equal(mask.encode(params, tokens, transitions, track_pad=True), plain)
    moved = mask.left_padded(transitions)
    assert np.array_equal(mask.encode(params, tokens, moved), plain)  # PAD first, but PAD does nothing
    assert np.max(np.abs(mask.encode(params, tokens, moved, track_pad=True) - plain)) > 1e-4


def test_exercise_2_jit_refuses_a_python_if_on_a_tracer_and_the_masks_answer():
    import jax

    from lessons.answers import tracer_if

    err, where, conds, expected = tracer_if.main()
    assert isinstance(err, jax.errors.TracerBoolConversionError)
    assert isinstance(err, jax.errors.ConcretizationTypeError)
    assert where.tolist() == conds.tolist() == expected.tolist() and len(set(expected.tolist())) == 2
    assert tracer_if.python_if(np.int32(1)) == 1  # without jit the same `if` runs


def test_exercise_3_grad_refuses_while_loop_and_the_fixes_give_the_analytic_gradient():
    from lessons.answers import grad_loop

    found, forward, static, masked = grad_loop.main()
    for err in found.values():
        assert isinstance(err, ValueError) and "Reverse-mode differentiation does not work" in str(err)
    assert forward == static == 4 * 2.0 ** 3
    assert masked == {k: k * 2.0 ** (k - 1) for k in range(1, grad_loop.MAX_STEPS + 1)}


def test_exercise_4_torch_compile_breaks_the_list_model_recompiles_for_other_trees_and_agrees(capfd):
    from lessons.answers import compile_lists

    found = compile_lists.explain()
    assert found.graph_break_count >= 1 and found.graph_count >= 2
    (first, expected_1, breaks, recompiles, _), (second, expected_2, _, again, _) = compile_lists.compile_two_batches()
    assert np.max(np.abs(first - expected_1)) <= TOLERANCE and np.max(np.abs(second - expected_2)) <= TOLERANCE
    assert breaks and any("Tensor.item()" in message for message in breaks)  # int(tensor): Python reads a value
    assert recompiles and again  # the second batch's trees, at the same shapes, recompile again
    # Why explain's count is not the log's (the answer's one line): explain calls every graph after the first a
    # break, the log names each place where a trace broke.
    assert found.graph_break_count == found.graph_count - 1 > len(breaks)
    captured = capfd.readouterr()
    assert "Graph break" not in captured.err + captured.out and "Recompiling" not in captured.err + captured.out


def test_exercise_4_worth_waiting_for_is_the_backend_whose_compiling_pays_back_soonest():
    from lessons.answers import compile_lists

    plain = 1.0  # seconds for the two batches, uncompiled; per backend: (first time, compiling included; after)
    times = {"eager": (3.0, 0.95), "inductor": (11.0, 0.5), "slow": (2.0, 1.5)}
    assert compile_lists.worth_waiting(plain, times) == ("inductor", 2 * 10.0 / 0.5)  # 40 batches repay 10 s
    assert compile_lists.worth_waiting(plain, {"eager": (3.0, 0.95)}) == (None, None)  # 5 % faster: not worth it
    first, later = compile_lists.passes(rounds=1)  # uncompiled: nothing to wait for
    assert first > 0 and later > 0


def test_exercise_5_autograph_turns_the_if_into_a_cond_and_autograph_off_refuses_it():
    import tensorflow as tf

    from lessons import tensorflow_while
    from lessons.answers import autograph_if

    encodings, expected, refused = autograph_if.main()
    assert np.max(np.abs(encodings - expected)) <= TOLERANCE
    _config, params, tokens, transitions, _ = lesson_inputs()
    masked = tensorflow_while.build_encoder(params)(tf.constant(tokens), tf.constant(transitions)).numpy()
    assert np.max(np.abs(encodings - masked)) <= TOLERANCE  # the mask version's numbers
    assert isinstance(refused, tf.errors.OperatorNotAllowedInGraphError)
    assert "StatelessIf" in autograph_if.graph_ops(autograph_if.build_encoder(params))
    choose = tf.function(autograph_if.choose)
    for op in (1, 2):
        assert float(choose(tf.constant(op), 10.0, 20.0)) == float(tf.where(op == 1, 10.0, 20.0))
