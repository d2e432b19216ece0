"""REINFORCE (docs/spec.md §7) in every framework, against the float64 reference.

Parametrized over frameworks with ids, so a failure names its framework.
The uniform numbers come from shared.parsing, so a framework and the
reference sample the same parses: in float64 the trajectories are identical
and every number agrees to rounding; in float32 the weights and uniforms are
those of tests/test_parse_equivalence.py whose decision margins clear the
float32 rounding, so the trajectories are still identical.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.frameworks import FRAMEWORKS, runner_class
from shared import reference
from shared import reinforce as shared_reinforce
from shared.batching import make_pair_batch
from shared.compare import GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, grad_rel_errs, max_abs_err
from shared.params import init_params
from shared.reference_runner import Runner as ReferenceRunner
from shared.snli import Pair
from shared.transitions import REDUCE, SHIFT, Sentence
from test_parse_equivalence import (F64_TOL, HEAD_BIAS, HEAD_KERNEL, LOGPROB_TOL_F32, head_config,
                                          head_params, make_runner, uniforms)

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)

BASELINE = -1.2
WEIGHTS = {"reinforce_weight": 0.8, "entropy_weight": 0.05}
HEAD = (HEAD_KERNEL, HEAD_BIAS)


@pytest.fixture(scope="module")
def config(vocab):
    return head_config(len(vocab))


def reference_step(params, config, batch, u, baseline):
    """The reference's (loss, grads, rewards) and its sampled parse."""
    out = reference.reinforce_loss_and_grads(params, config, batch, u, baseline, **WEIGHTS)
    return out, reference.parse(params, config, batch, "sampled", uniforms=u)


@framework
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectories_logprob_and_entropy(framework, device, dtype, config, small_batch):
    """Same uniforms, same parses as the reference; per-pair logprob and
    entropy within rounding (float32: 1e-5), and the reduce share real."""
    np_dtype = np.float64 if dtype == "float64" else np.float32
    params = head_params(config, seed=6, dtype=np_dtype)
    u = uniforms(small_batch, seed=3)
    runner = make_runner(framework, params, config, device, dtype=dtype, **WEIGHTS)
    runner.set_optimizer("sgd", lr=0.0)  # a step that moves nothing: only its record is read
    record = runner.reinforce_step(small_batch, u, BASELINE)
    _, ref = reference_step(params, config, small_batch, u, BASELINE)
    tol = F64_TOL if dtype == "float64" else LOGPROB_TOL_F32
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(record[f"{side}_transitions"], getattr(ref, f"{side}_transitions"),
                                      err_msg=f"{side}: a different trajectory from the same uniforms")
    assert max_abs_err(record["logprobs"], ref.premise_logprob + ref.hypothesis_logprob) <= tol
    assert max_abs_err(record["entropies"], ref.premise_entropy + ref.hypothesis_entropy) <= tol
    assert 0.0 < record["choice_reduce_share"] < 1.0
    assert runner.steps == 1


@framework
@pytest.mark.parametrize("dtype,tol", [("float64", GRAD_REL_TOL_F64), ("float32", GRAD_REL_TOL_F32)])
def test_loss_and_gradients_match_reference(framework, device, dtype, tol, config, small_batch):
    params = head_params(config, seed=6, dtype=np.float64 if dtype == "float64" else np.float32)
    u = uniforms(small_batch, seed=3)
    runner = make_runner(framework, params, config, device, dtype=dtype, **WEIGHTS)
    loss, grads, rewards = runner.reinforce_loss_and_grads(small_batch, u, BASELINE)
    (ref_loss, ref_grads, ref_rewards), _ = reference_step(params, config, small_batch, u, BASELINE)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    assert max_abs_err(rewards, ref_rewards) <= tol * max(1.0, float(np.max(np.abs(ref_rewards))))
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    assert np.any(grads[HEAD_KERNEL] != 0)  # the score term reaches the head


@framework
def test_forced_steps_contribute_nothing(framework, device, vocab, config):
    """Sentences of one and two words have no choice step: logprob and
    entropy are zero, the head gets no gradient, and the REINFORCE loss and
    gradient are the plain cross-entropy's, whatever the baseline and weights."""
    words = vocab.words[2:6]
    one = Sentence((words[0],), (SHIFT,))
    two = Sentence((words[1], words[2]), (SHIFT, SHIFT, REDUCE))
    batch = make_pair_batch([Pair(one, two, 0, "a"), Pair(two, two, 2, "b"), Pair(two, one, 1, "c")], vocab)
    params = head_params(config, seed=12)
    u = uniforms(batch, seed=5)
    runner = make_runner(framework, params, config, device, **WEIGHTS)
    loss, grads, _ = runner.reinforce_loss_and_grads(batch, u, baseline=3.0)
    plain_loss, plain_grads = reference.loss_and_grads(params, config, batch)
    assert abs(loss - plain_loss) <= F64_TOL
    for name in HEAD:
        np.testing.assert_array_equal(grads[name], 0.0, err_msg=name)
    errors = grad_rel_errs(grads, plain_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64
    runner.set_optimizer("sgd", lr=0.0)
    record = runner.reinforce_step(batch, u, baseline=-3.0)
    np.testing.assert_array_equal(record["logprobs"], 0.0)
    np.testing.assert_array_equal(record["entropies"], 0.0)


@framework
def test_one_sgd_step_matches_reference_update(framework, device, config, small_batch):
    params = head_params(config, seed=10)
    u = uniforms(small_batch, seed=7)
    runner = make_runner(framework, params, config, device, **WEIGHTS)
    runner.set_optimizer("sgd", lr=0.1)
    record = runner.reinforce_step(small_batch, u, BASELINE)
    (ref_loss, ref_grads, ref_rewards), _ = reference_step(params, config, small_batch, u, BASELINE)
    assert abs(record["loss"] - ref_loss) <= F64_TOL
    assert abs(record["reward"] - ref_rewards.mean()) <= F64_TOL
    updated = runner.get_params()
    for name, value in params.items():
        assert max_abs_err(updated[name], value - 0.1 * ref_grads[name]) <= 1e-10, name
    assert runner.steps == 1


@framework
def test_baseline_changes_only_the_score_term(framework, device, config, small_batch):
    """A new b leaves the samples, the rewards and the classifier's gradients
    as they were, moves the loss by reinforce_weight x Δb x mean logprob, and
    moves the other gradients as the reference's do."""
    params = head_params(config, seed=9)
    u = uniforms(small_batch, seed=2)
    runner = make_runner(framework, params, config, device, **WEIGHTS)
    loss_a, grads_a, rewards_a = runner.reinforce_loss_and_grads(small_batch, u, 0.0)
    loss_b, grads_b, rewards_b = runner.reinforce_loss_and_grads(small_batch, u, -2.5)
    ref = reference.parse(params, config, small_batch, "sampled", uniforms=u)
    mean_logprob = float(np.mean(ref.premise_logprob + ref.hypothesis_logprob))
    assert max_abs_err(rewards_a, rewards_b) == 0.0
    assert abs((loss_b - loss_a) - WEIGHTS["reinforce_weight"] * (-2.5) * mean_logprob) <= 1e-10
    for name in grads_a:
        if name.startswith(("mlp.", "output.")):  # the classifier does not touch the parse
            assert max_abs_err(grads_a[name], grads_b[name]) <= F64_TOL, name
    _, ref_a, _ = reference.reinforce_loss_and_grads(params, config, small_batch, u, 0.0, **WEIGHTS)
    _, ref_b, _ = reference.reinforce_loss_and_grads(params, config, small_batch, u, -2.5, **WEIGHTS)
    moved = {name: grads_b[name] - grads_a[name] for name in grads_a}
    ref_moved = {name: ref_b[name] - ref_a[name] for name in ref_a}
    assert np.any(moved[HEAD_KERNEL] != 0)
    errors = grad_rel_errs({n: moved[n] for n in HEAD}, {n: ref_moved[n] for n in HEAD})
    assert max(errors.values()) <= GRAD_REL_TOL_F64


@framework
def test_compiles_once_per_program_and_shape(framework, device, config, small_batch, sample_pairs, vocab):
    """TensorFlow: one trace for every shape; JAX: one compilation per shape;
    a new baseline or new uniforms never retrace or recompile."""
    params = head_params(config, seed=4)
    runner = make_runner(framework, params, config, device)
    runner.set_optimizer("sgd", lr=0.01)
    other = make_pair_batch(sample_pairs[:4], vocab)
    for batch in (small_batch, small_batch, other):
        for baseline, seed in ((0.0, 1), (-1.0, 2)):
            runner.reinforce_loss_and_grads(batch, uniforms(batch, seed), baseline)
            runner.reinforce_step(batch, uniforms(batch, seed), baseline)
    for program in ("reinforce_loss_and_grads", "reinforce_step"):
        stats = runner.compile_stats(program)
        expected = {"pytorch": 0, "tensorflow": 1, "jax": 2}[framework]
        assert stats.traces == expected, (program, stats)
    assert runner.steps == 6


@framework
def test_weights_checked_and_head_required(framework, device, config, small_config, small_batch):
    no_head = init_params(small_config, seed=0, dtype=np.float64)
    cls = runner_class(framework)
    with pytest.raises(ValueError, match="tracker.transition.kernel"):
        cls(no_head, small_config, dtype="float64", device=device, entropy_weight=0.1)
    with pytest.raises(ValueError, match="tracker.transition.kernel"):
        cls(no_head, small_config, dtype="float64", device=device).reinforce_loss_and_grads(
            small_batch, uniforms(small_batch), 0.0)
    for bad in ({"reinforce_weight": -1.0}, {"entropy_weight": float("nan")}):
        with pytest.raises(ValueError, match="weight"):
            make_runner(framework, head_params(config, seed=1), config, device, **bad)
    runner = make_runner(framework, head_params(config, seed=1), config, device)
    with pytest.raises(ValueError, match="uniforms"):
        runner.reinforce_loss_and_grads(small_batch, None, 0.0)
    with pytest.raises(RuntimeError, match="set_optimizer"):
        runner.reinforce_step(small_batch, uniforms(small_batch), 0.0)


def test_reference_runner_step_is_the_reference_update(config, small_batch):
    params = head_params(config, seed=10)
    u = uniforms(small_batch, seed=7)
    runner = ReferenceRunner(params, config, **WEIGHTS)
    runner.set_optimizer("sgd", lr=0.1)
    record = runner.reinforce_step(small_batch, u, BASELINE)
    value, grads, rewards = reference.reinforce_loss_and_grads(params, config, small_batch, u, BASELINE, **WEIGHTS)
    assert record["loss"] == value and record["reward"] == rewards.mean()
    updated = runner.get_params()
    for name in params:
        np.testing.assert_array_equal(updated[name], params[name] - 0.1 * grads[name])
    assert runner.steps == 1


def test_baseline_moving_average():
    b = shared_reinforce.update_baseline(None, -1.0)
    assert b == -1.0
    assert shared_reinforce.update_baseline(b, -0.5) == pytest.approx(0.9 * -1.0 + 0.1 * -0.5)


def test_parse_shape_stats():
    left = [SHIFT, SHIFT, REDUCE, SHIFT, REDUCE, 0]
    right = [SHIFT, SHIFT, SHIFT, REDUCE, REDUCE, 0]
    stats = shared_reinforce.parse_shape_stats(np.array([left, right]))
    # One choice each (buffer not empty, two items on the stack): step 2, which
    # the left-branching tree REDUCEs and the right-branching one SHIFTs.
    assert stats == {"choice_reduce_share": 0.5, "left_share": 0.5, "right_share": 0.5}
