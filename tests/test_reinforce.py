"""REINFORCE (docs/spec.md §7) beyond the contract: what each framework
compiles for it, the reference runner's step, the baseline and the parse
statistics. The agreement of every implementation with the reference (losses,
gradients, trajectories, steps) is in test_contract.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench import frameworks
from shared import reference
from shared import reinforce as shared_reinforce
from shared.batching import make_pair_batch
from shared.reference.runner import Runner as ReferenceRunner
from shared.transitions import REDUCE, SHIFT
from tests.helpers import checked_dtype, head_config, head_params, make_runner, uniforms

framework = pytest.mark.parametrize("framework", frameworks.FRAMEWORKS, ids=frameworks.FRAMEWORKS)

BASELINE = -1.2
WEIGHTS = {"reinforce_weight": 0.8, "entropy_weight": 0.05}


@pytest.fixture(scope="module")
def config(vocab):
    return head_config(len(vocab))


@framework
def test_compiles_once_per_program_and_shape(framework, device, config, small_batch, sample_pairs, vocab):
    """TensorFlow: one trace for every shape; JAX: one compilation per shape;
    a new baseline or new uniforms never retrace or recompile."""
    params = head_params(config, seed=4)
    runner = make_runner(framework, params, config, dtype=checked_dtype(framework), device=device)
    runner.set_optimizer("sgd", lr=0.01)
    other = make_pair_batch(sample_pairs[:4], vocab)
    for batch in (small_batch, small_batch, other):
        for baseline, seed in ((0.0, 1), (-1.0, 2)):
            runner.reinforce_loss_and_grads(batch, uniforms(batch, seed), baseline)
            runner.reinforce_step(batch, uniforms(batch, seed), baseline)
    for program in ("reinforce_loss_and_grads", "reinforce_step"):
        stats = runner.compile_stats(program)
        expected = {"pytorch": 0, "tensorflow": 1, "jax": 2, "dynet": 0}[framework]
        assert stats.traces == expected, (program, stats)
    assert runner.steps == 6


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
