"""Parses decided by the model (docs/spec.md §7): every framework against the float64 reference.

Parametrized over frameworks with ids, so a failure names its framework. The
reference (shared/reference.py) decides every step in float64, one sentence
at a time; a framework running in float64 must take exactly the same
decisions and reach the same numbers. In float32 the decisions may differ
only where the two actions' logits are within rounding of each other, which
random weights do not produce on these batches.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.frameworks import FRAMEWORKS, runner_class
from shared import parsing, reference
from shared.batching import make_pair_batch
from shared.compare import (ENCODING_TOL_F32, GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, LOGITS_TOL_F32,
                            grad_rel_errs, max_abs_err)
from shared.params import ModelConfig, init_params
from shared.snli import Pair
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, check_transitions

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)

F64_TOL = 1e-12
LOGPROB_TOL_F32 = 1e-5  # logprob and entropy, float32 against float64
HEAD_KERNEL, HEAD_BIAS = "tracker.transition.kernel", "tracker.transition.bias"


def head_config(vocab_size: int, tracker_dim: int = 4) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim,
                       mlp_dim=7, mlp_layers=1, transition_head=True)


def head_params(config: ModelConfig, seed: int, dtype=np.float64) -> dict[str, np.ndarray]:
    """Random weights whose head makes real choices: its kernel is scaled up so
    that both actions win at some steps (checked by ``test_decisions_are_mixed``)."""
    params = init_params(config, seed=seed, dtype=dtype)
    params[HEAD_KERNEL] = (params[HEAD_KERNEL] * 8.0).astype(dtype)
    return params


def make_runner(framework, params, config, device, dtype="float64", **kw):
    return runner_class(framework)(params, config, dtype=dtype, device=device, **kw)


def uniforms(batch, seed: int = 11):
    return parsing.uniforms_for(batch, rows=list(range(batch.size)), seed=seed, epoch=0)


def assert_parsed_close(parsed: parsing.Parsed, ref: parsing.Parsed, *, tol: float, logit_tol: float,
                        logprob_tol: float) -> None:
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(getattr(parsed, f"{side}_transitions"), getattr(ref, f"{side}_transitions"),
                                      err_msg=f"{side} transitions differ from the reference's")
        assert max_abs_err(getattr(parsed, side), getattr(ref, side)) <= tol, side
        assert max_abs_err(getattr(parsed, f"{side}_transition_logits"),
                           getattr(ref, f"{side}_transition_logits")) <= logit_tol, f"{side} transition logits"
        assert max_abs_err(getattr(parsed, f"{side}_logprob"), getattr(ref, f"{side}_logprob")) <= logprob_tol
        assert max_abs_err(getattr(parsed, f"{side}_entropy"), getattr(ref, f"{side}_entropy")) <= logprob_tol
    assert max_abs_err(parsed.logits, ref.logits) <= logit_tol


@pytest.fixture(scope="module")
def config(vocab) -> ModelConfig:
    return head_config(len(vocab))


@pytest.fixture(scope="module")
def params64(config):
    return head_params(config, seed=5)


def test_decisions_are_mixed(config, params64, small_batch):
    """The weights used below make the reference choose both actions and
    leave the gold parse: otherwise the tests would prove little."""
    ref = reference.parse(params64, config, small_batch, "predicted")
    followed = np.concatenate([ref.premise_transitions, ref.hypothesis_transitions])
    gold = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
    assert parsing.parse_agreement(followed, gold) < 0.9
    first_reduce = [list(row).index(REDUCE) for row in followed if REDUCE in row]
    assert len(set(first_reduce)) > 2  # sentences reduce first at different steps


@framework
@pytest.mark.parametrize("mode", ["gold", "predicted", "sampled"])
def test_float64_parse_matches_reference(framework, device, mode, config, params64, small_batch):
    runner = make_runner(framework, params64, config, device)
    u = uniforms(small_batch) if mode == "sampled" else None
    parsed = runner.parse(small_batch, mode, uniforms=u)
    ref = reference.parse(params64, config, small_batch, mode, uniforms=u)
    assert_parsed_close(parsed, ref, tol=F64_TOL, logit_tol=F64_TOL, logprob_tol=F64_TOL)
    for side in ("premise", "hypothesis"):
        lengths = parsing.sentence_lengths(getattr(small_batch, f"{side}_transitions"))
        for row, n in zip(getattr(parsed, f"{side}_transitions"), lengths):
            steps = [int(op) for op in row if op != PAD]
            assert len(steps) == 2 * n - 1 and all(op == PAD for op in row[2 * n - 1:])
            check_transitions(steps, int(n))


@framework
@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_float32_parse_matches_reference(framework, device, mode, config, small_batch):
    params = head_params(config, seed=6, dtype=np.float32)
    runner = make_runner(framework, params, config, device, dtype="float32")
    u = uniforms(small_batch, seed=3) if mode == "sampled" else None
    parsed = runner.parse(small_batch, mode, uniforms=u)
    ref = reference.parse(params, config, small_batch, mode, uniforms=u)
    assert parsed.premise.dtype == np.float32
    assert_parsed_close(parsed, ref, tol=ENCODING_TOL_F32, logit_tol=LOGITS_TOL_F32, logprob_tol=LOGPROB_TOL_F32)


@framework
def test_edge_cases_and_ties(framework, device, vocab, edge_pairs):
    """One-word, two-word and 60-word sentences; then a head whose logits tie
    at every step (kernel and bias zero): a tie SHIFTs, so every sentence
    shifts all its words, then reduces (a right-branching tree)."""
    config = head_config(len(vocab))
    two = Pair(Sentence(("a", "b"), (SHIFT, SHIFT, REDUCE)), edge_pairs[0].hypothesis, 0, "two-one")
    batch = make_pair_batch(list(edge_pairs) + [two], vocab)
    params = head_params(config, seed=8)
    runner = make_runner(framework, params, config, device)
    for mode in ("predicted", "sampled"):
        u = uniforms(batch, seed=4) if mode == "sampled" else None
        assert_parsed_close(runner.parse(batch, mode, uniforms=u),
                            reference.parse(params, config, batch, mode, uniforms=u),
                            tol=F64_TOL, logit_tol=F64_TOL, logprob_tol=F64_TOL)

    tied = dict(params)
    tied[HEAD_KERNEL] = np.zeros_like(params[HEAD_KERNEL])
    tied[HEAD_BIAS] = np.zeros_like(params[HEAD_BIAS])
    parsed = make_runner(framework, tied, config, device).parse(batch, "predicted")
    for side in ("premise", "hypothesis"):
        lengths = parsing.sentence_lengths(getattr(batch, f"{side}_transitions"))
        for row, n in zip(getattr(parsed, f"{side}_transitions"), lengths):
            expected = [SHIFT] * n + [REDUCE] * (n - 1)
            assert list(row[:2 * n - 1]) == expected


def assert_alone_equals_inside(single, together, i: int) -> None:
    """Pair ``i`` of the batch ``together`` took the decisions of ``single`` (the
    pair parsed alone, its only row), PAD after them, and got its numbers."""
    T = single.premise_transitions.shape[1]
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(getattr(together, f"{side}_transitions")[i, :T],
                                      getattr(single, f"{side}_transitions")[0])
        assert not np.any(getattr(together, f"{side}_transitions")[i, T:])
        assert max_abs_err(getattr(together, side)[i], getattr(single, side)[0]) <= F64_TOL
        assert max_abs_err(getattr(together, f"{side}_logprob")[i],
                           getattr(single, f"{side}_logprob")[0]) <= F64_TOL
    assert max_abs_err(together.logits[i], single.logits[0]) <= F64_TOL


@framework
@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_independent_of_batch_mates_and_padding(framework, device, mode, vocab, config, params64, sample_pairs):
    """A pair parsed alone, and inside a batch of others with extra token
    slots and PAD steps, gets the same decisions and numbers."""
    pairs = sample_pairs[20:28]
    runner = make_runner(framework, params64, config, device)
    big = make_pair_batch(pairs, vocab, num_tokens=48)
    u_big = parsing.uniforms_for(big, rows=list(range(20, 28)), seed=2) if mode == "sampled" else None
    together = runner.parse(big, mode, uniforms=u_big)
    for i in (0, 5):
        alone = make_pair_batch([pairs[i]], vocab)
        u = parsing.uniforms_for(alone, rows=[20 + i], seed=2) if mode == "sampled" else None
        single = runner.parse(alone, mode, uniforms=u)
        assert_alone_equals_inside(single, together, i)


@framework
@pytest.mark.parametrize("dtype,tol", [("float64", GRAD_REL_TOL_F64), ("float32", GRAD_REL_TOL_F32)])
def test_supervised_loss_gradients(framework, device, dtype, tol, config, small_batch):
    params = head_params(config, seed=9, dtype=np.float64 if dtype == "float64" else np.float32)
    ref_loss, ref_grads = reference.loss_and_grads(params, config, small_batch, transition_weight=0.7)
    runner = make_runner(framework, params, config, device, dtype=dtype, transition_weight=0.7)
    loss, grads = runner.loss_and_grads(small_batch)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    assert set(grads) == set(ref_grads)
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    assert np.any(grads[HEAD_KERNEL] != 0)


@framework
def test_supervised_train_step_matches_reference(framework, device, config, small_batch):
    """One SGD step with the supervised loss moves every weight, the head
    included, as the reference's gradient says."""
    params = head_params(config, seed=10)
    runner = make_runner(framework, params, config, device, transition_weight=0.5)
    runner.set_optimizer("sgd", lr=0.1)
    runner.train_step(small_batch)
    _, ref_grads = reference.loss_and_grads(params, config, small_batch, transition_weight=0.5)
    updated = runner.get_params()
    for name, value in params.items():
        assert max_abs_err(updated[name], value - 0.1 * ref_grads[name]) <= 1e-10, name


@framework
def test_head_survives_load_and_get_params(framework, device, config, params64):
    got = make_runner(framework, params64, config, device).get_params()
    for name in (HEAD_KERNEL, HEAD_BIAS):
        np.testing.assert_array_equal(got[name], params64[name])


@framework
def test_errors(framework, device, vocab, small_batch, small_config, config, params64):
    """No head: predicted mode names the missing entry; sampled mode needs uniforms."""
    runner = make_runner(framework, init_params(small_config, seed=0, dtype=np.float64), small_config, device)
    with pytest.raises(ValueError, match="tracker.transition.kernel"):
        runner.parse(small_batch, "predicted")
    with pytest.raises(ValueError, match="tracker.transition.kernel"):
        make_runner(framework, init_params(small_config, seed=0, dtype=np.float64), small_config, device,
                    transition_weight=1.0)
    with_head = make_runner(framework, params64, config, device)
    with pytest.raises(ValueError, match="uniform"):
        with_head.parse(small_batch, "sampled")
    with pytest.raises(ValueError, match="mode"):
        with_head.parse(small_batch, "guessed")


@framework
def test_uniforms_only_in_sampled_mode(framework, device, config, params64, small_batch):
    """Every runner refuses uniforms where nothing is drawn, so a caller that
    passes them by mistake learns it in every framework alike."""
    runner = make_runner(framework, params64, config, device)
    for mode in ("gold", "predicted"):
        with pytest.raises(ValueError, match="sampled mode only"):
            runner.parse(small_batch, mode, uniforms=uniforms(small_batch))
