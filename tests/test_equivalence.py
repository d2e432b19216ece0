"""Every framework against the float64 NumPy reference (never against itself).

Parametrized over frameworks with ids, so a failure names its framework. A
framework that cannot be imported fails here: in CI all three are installed
and none may be skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.frameworks import FRAMEWORKS, runner_class
from shared import reference
from shared.batching import make_pair_batch
from shared.compare import (ENCODING_TOL_F32, GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, LOGITS_TOL_F32,
                            grad_rel_errs, max_abs_err)
from shared.params import init_params

from conftest import small_config_for

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)


def make_runner(framework, params, config, device, dtype="float32", **kw):
    return runner_class(framework)(params, config, dtype=dtype, device=device, **kw)


def assert_float64_matches_reference(runner, params, config, batch):
    """Encodings and logits within 1e-12, gradients within GRAD_REL_TOL_F64 relative."""
    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    assert max_abs_err(premise, ref.premise) <= 1e-12
    assert max_abs_err(hypothesis, ref.hypothesis) <= 1e-12
    assert max_abs_err(logits, ref.logits) <= 1e-12
    _, grads = runner.loss_and_grads(batch)
    _, ref_grads = reference.loss_and_grads(params, config, batch)
    errors = grad_rel_errs(grads, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors


@pytest.mark.slow
@framework
def test_full_size_float32_agreement(framework, device, full_params, full_config, sample_batches, full_reference):
    runner = make_runner(framework, full_params, full_config, device)
    enc_err = logit_err = 0.0
    for batch, ref in zip(sample_batches, full_reference):
        premise, hypothesis, logits = runner.encode(batch)
        assert premise.dtype == np.float32 and logits.shape == (batch.size, 3)
        enc_err = max(enc_err, max_abs_err(premise, ref.premise), max_abs_err(hypothesis, ref.hypothesis))
        logit_err = max(logit_err, max_abs_err(logits, ref.logits))
    print(f"{framework}: max abs err encodings {enc_err:.2e}, logits {logit_err:.2e}")
    assert enc_err <= ENCODING_TOL_F32
    assert logit_err <= LOGITS_TOL_F32


@framework
@pytest.mark.parametrize("dtype,tol", [("float64", GRAD_REL_TOL_F64), ("float32", GRAD_REL_TOL_F32)])
def test_gradients_match_reference(framework, device, dtype, tol, small_config, small_batch):
    params = init_params(small_config, seed=3, dtype=np.float64 if dtype == "float64" else np.float32)
    ref_loss, ref_grads = reference.loss_and_grads(params, small_config, small_batch)
    runner = make_runner(framework, params, small_config, device, dtype=dtype)
    loss, grads = runner.loss_and_grads(small_batch)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    for name, grad in grads.items():
        assert grad.shape == ref_grads[name].shape, name


@framework
@pytest.mark.parametrize("tracker_dim,mlp_layers", [(0, 2), (3, 0), (0, 1)], ids=["no-tracker", "no-mlp", "bare"])
def test_variants_match_reference(framework, device, vocab, small_batch, tracker_dim, mlp_layers):
    config = small_config_for(len(vocab), tracker_dim=tracker_dim, mlp_layers=mlp_layers)
    params = init_params(config, seed=4, dtype=np.float64)
    assert_float64_matches_reference(make_runner(framework, params, config, device, dtype="float64"),
                                     params, config, small_batch)


@framework
def test_sgd_step_matches_reference_update(framework, device, small_config, small_batch):
    params = init_params(small_config, seed=5, dtype=np.float64)
    lr = 0.5
    ref_loss, ref_grads = reference.loss_and_grads(params, small_config, small_batch)
    expected = reference.sgd_step(params, ref_grads, lr)
    runner = make_runner(framework, params, small_config, device, dtype="float64")
    runner.set_optimizer("sgd", lr=lr)
    loss = runner.train_step(small_batch)
    assert abs(loss - ref_loss) <= 1e-10
    updated = runner.get_params()
    assert set(updated) == set(expected)
    for name in expected:
        assert max_abs_err(updated[name], expected[name]) <= 1e-10, name
    # The update really moved the weights (a no-op step would fail here).
    assert max_abs_err(updated["reduce.left.kernel"], params["reduce.left.kernel"]) > 1e-6


@framework
def test_adam_training_reduces_loss(framework, device, small_config, small_batch):
    params = init_params(small_config, seed=6, dtype=np.float32)
    runner = make_runner(framework, params, small_config, device)
    runner.set_optimizer("adam", lr=0.01)
    losses = [runner.train_step(small_batch) for _ in range(15)]
    assert losses[-1] < 0.8 * losses[0], losses
    # and the loss reported matches the reference on the weights it started from
    ref_loss = reference.loss(params, small_config, small_batch)
    assert abs(losses[0] - ref_loss) <= 1e-5


@framework
def test_batch_and_padding_invariance(framework, device, small_config, sample_pairs, edge_pairs, vocab):
    """An example's result is the same alone, in any batch, with any padding."""
    params = init_params(small_config, seed=7, dtype=np.float64)
    runner = make_runner(framework, params, small_config, device, dtype="float64")
    pairs = sample_pairs[10:16] + edge_pairs
    together = runner.encode(make_pair_batch(pairs, vocab))
    for k, pair in enumerate(pairs):
        width = max(len(pair.premise), len(pair.hypothesis))
        for num_tokens, num_steps in ((width, 2 * width - 1), (width + 7, 2 * width + 20)):
            alone = runner.encode(make_pair_batch([pair], vocab, num_tokens=num_tokens, num_steps=num_steps))
            for got, want in zip(alone, together):
                assert max_abs_err(got[0], want[k]) <= 1e-12, (pair.pair_id, num_tokens, num_steps)
    reversed_batch = runner.encode(make_pair_batch(pairs[::-1], vocab, num_tokens=70, num_steps=150))
    for got, want in zip(reversed_batch, together):
        assert max_abs_err(got[::-1], want) <= 1e-12


@framework
def test_edge_cases_match_reference(framework, device, small_config, edge_pairs, vocab):
    params = init_params(small_config, seed=8, dtype=np.float64)
    batch = make_pair_batch(edge_pairs, vocab)
    assert_float64_matches_reference(make_runner(framework, params, small_config, device, dtype="float64"),
                                     params, small_config, batch)


@framework
def test_params_round_trip_bit_identical(framework, device, full_params, full_config):
    runner = make_runner(framework, full_params, full_config, device)
    out = runner.get_params()
    assert set(out) == set(full_params)
    for name, value in full_params.items():
        assert out[name].dtype == value.dtype, name
        assert out[name].shape == value.shape, name
        assert np.array_equal(out[name], value), name
