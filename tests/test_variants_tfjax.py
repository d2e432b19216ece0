"""The algorithm apart from the framework: tensorflow-eager and jax-vmap against the float64 reference.

``tensorflow-eager`` runs the define-by-run algorithm (impl_tensorflow/eager.py),
``jax-vmap`` SPINN written for one sentence and batched by ``jax.vmap``
(impl_jax/vmap.py). Each must give the reference's numbers (docs/spec.md §3),
its decisions (§7), its gradients and its training steps, whatever the
padding and the batch mates. Parametrized with ids naming the variant; every
comparison is with shared/reference.py, never with another framework.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from bench.explain.arguments import parse_args
from bench.explain.report import explain, format_text
from bench.frameworks import IMPLEMENTATIONS, OPT_IN, make_runner, resolve
from shared import optimizers, parsing, reference
from shared.batching import PairBatch, make_batches, make_pair_batch
from shared.compare import (ENCODING_TOL_F32, GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, LOGITS_TOL_F32,
                            grad_rel_errs, max_abs_err)
from shared.params import init_params, param_shapes
from shared.transitions import PAD, check_transitions

from conftest import assert_one_host_read_per_choice_step, small_config_for
from test_parse_equivalence import (LOGPROB_TOL_F32, assert_alone_equals_inside, assert_parsed_close, head_config,
                                    head_params, uniforms)

VARIANTS = ("tensorflow-eager", "jax-vmap")
variant = pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
F64_TOL = 1e-12
HEAD_KERNEL = "tracker.transition.kernel"
TRANSITION_WEIGHT = 0.5


@pytest.fixture(scope="module")
def runners(device):
    """Runners made once per module: (variant, key) -> Runner. JAX compiles
    per runner, so tests that can share one do."""
    cache = {}

    def get(variant, key, params, config, dtype="float64", **options):
        if (variant, key) not in cache:
            cache[variant, key] = make_runner(variant, params, config, dtype=dtype, device=device, **options)
        return cache[variant, key]

    return get


@pytest.fixture(scope="module")
def plain(small_config):
    """Float64 weights of the small model without a head."""
    return init_params(small_config, seed=3, dtype=np.float64)


@pytest.fixture(scope="module")
def headed(vocab):
    """A model with a transition head whose decisions are mixed (test_parse_equivalence.py)."""
    config = head_config(len(vocab))
    return config, head_params(config, seed=5)


def assert_encodes_like_reference(runner, params, config, batch, enc_tol, logit_tol):
    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    assert max_abs_err(premise, ref.premise) <= enc_tol
    assert max_abs_err(hypothesis, ref.hypothesis) <= enc_tol
    assert max_abs_err(logits, ref.logits) <= logit_tol
    return premise, hypothesis, logits


def assert_grads_like_reference(runner, params, config, batch, tol, transition_weight=0.0):
    loss, grads = runner.loss_and_grads(batch)
    ref_loss, ref_grads = reference.loss_and_grads(params, config, batch, transition_weight=transition_weight)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    return grads


def with_pads(batch: PairBatch, every: int) -> PairBatch:
    """The batch with a PAD step inserted after every ``every``-th step of
    every row, at other places in premise and hypothesis (docs/spec.md §1 allows PAD anywhere)."""

    def spread(transitions, offset):
        B, T = transitions.shape
        out = np.full((B, T + T // every + 1), PAD, np.int32)
        for b in range(B):
            steps = []
            for t, op in enumerate(transitions[b]):
                if (t + offset + b) % every == 0:
                    steps.append(PAD)
                steps.append(op)
            out[b, :len(steps)] = steps
        return out

    return PairBatch(batch.premise_tokens, spread(batch.premise_transitions, 0), batch.hypothesis_tokens,
                     spread(batch.hypothesis_transitions, 1), batch.labels, batch.pair_ids)


def test_registered_as_opt_in_variants_of_their_family(plain, small_config):
    assert resolve("tensorflow-eager") == ("tensorflow", {"algorithm": "eager"})
    assert resolve("jax-vmap") == ("jax", {"algorithm": "vmap"})
    assert {"tensorflow-eager", "jax-vmap"} <= OPT_IN and {"tensorflow-eager", "jax-vmap"} <= set(IMPLEMENTATIONS)
    with pytest.raises(ValueError, match="xla"):
        make_runner("tensorflow-eager", plain, small_config, xla=True)
    with pytest.raises(ValueError, match="layout"):
        make_runner("jax-vmap", plain, small_config, dtype="float64", layout="padded")


# --------------------------------------------------------------------------
# Gold transitions: forward, gradients, padding
# --------------------------------------------------------------------------


@variant
def test_float64_encode_and_gradients_match_reference(runners, variant, plain, small_config, small_batch):
    runner = runners(variant, "plain64", plain, small_config)
    premise, _, _ = assert_encodes_like_reference(runner, plain, small_config, small_batch, F64_TOL, F64_TOL)
    assert premise.dtype == np.float64
    grads = assert_grads_like_reference(runner, plain, small_config, small_batch, GRAD_REL_TOL_F64)
    assert {name: g.shape for name, g in grads.items()} == param_shapes(small_config)


@variant
def test_float32_encode_and_gradients_within_tolerances(runners, variant, small_config, small_batch):
    params = init_params(small_config, seed=3, dtype=np.float32)
    runner = runners(variant, "plain32", params, small_config, dtype="float32")
    premise, _, logits = assert_encodes_like_reference(runner, params, small_config, small_batch,
                                                       ENCODING_TOL_F32, LOGITS_TOL_F32)
    assert premise.dtype == logits.dtype == np.float32
    assert_grads_like_reference(runner, params, small_config, small_batch, GRAD_REL_TOL_F32)


@variant
def test_without_tracker_or_mlp_matches_reference(runners, variant, vocab, edge_pairs):
    """D = 0 (no tracker: Reduce has no third input) and L = 0, on one-word
    and 60-word sentences."""
    config = small_config_for(len(vocab), tracker_dim=0, mlp_layers=0)
    params = init_params(config, seed=4, dtype=np.float64)
    batch = make_pair_batch(edge_pairs, vocab)
    runner = runners(variant, "bare64", params, config)
    assert_encodes_like_reference(runner, params, config, batch, F64_TOL, F64_TOL)
    assert_grads_like_reference(runner, params, config, batch, GRAD_REL_TOL_F64)


@variant
def test_padding_and_batch_mates_change_nothing(runners, variant, plain, small_config, sample_pairs, vocab):
    """A pair's numbers are the same alone, with more token slots and PAD
    steps, among other pairs, and in another order (docs/spec.md §3). For
    jax-vmap: one sentence encoded alone (a map over one) and inside a batch."""
    runner = runners(variant, "plain64", plain, small_config)
    pairs = sample_pairs[10:16]
    together = runner.encode(make_pair_batch(pairs, vocab, num_tokens=32))
    for k in (0, 3, 5):
        alone = runner.encode(make_pair_batch([pairs[k]], vocab, num_tokens=40, num_steps=90))
        for got, want in zip(alone, together):
            assert max_abs_err(got[0], want[k]) <= F64_TOL
    reordered = runner.encode(make_pair_batch(pairs[::-1], vocab, num_tokens=32))
    for got, want in zip(reordered, together):
        assert max_abs_err(got[::-1], want) <= F64_TOL


@variant
def test_pad_steps_anywhere_change_nothing(runners, variant, plain, small_config, small_batch):
    """PAD inside the sequences, at other steps for every sentence: the
    numbers are the reference's for the batch without them."""
    runner = runners(variant, "plain64", plain, small_config)
    padded = with_pads(small_batch, every=4)
    assert np.sum(padded.premise_transitions[:, :20] == PAD) > 0  # PADs inside, not only at the end
    ref = reference.forward(plain, small_config, small_batch)
    premise, hypothesis, logits = runner.encode(padded)
    assert max_abs_err(premise, ref.premise) <= F64_TOL
    assert max_abs_err(hypothesis, ref.hypothesis) <= F64_TOL
    assert max_abs_err(logits, ref.logits) <= F64_TOL


def test_jax_vmap_compiles_once_per_program_and_shape(runners, small_config, sample_pairs, vocab):
    params = init_params(small_config, seed=3, dtype=np.float32)
    runner = runners("jax-vmap", "plain32", params, small_config, dtype="float32")
    batches = make_batches(sample_pairs, vocab, batch_size=4)  # (4, N, T): shapes no other test uses
    first, second = [b for b in batches if b.num_tokens == 16][:2]
    other = next(b for b in batches if b.num_tokens != 16)
    assert first.pair_ids != second.pair_ids
    before = runner.compile_stats()
    runner.encode(first)
    runner.encode(second)  # same (B, N, T): the executable is reused
    assert runner.compile_stats().since(before).traces == 1
    runner.encode(other)  # a new shape: one more program
    new = runner.compile_stats().since(before)
    assert new.traces == new.xla_compilations == 2
    assert new.shapes == [("encode", 4, 16, 31), ("encode", other.size, other.num_tokens, other.num_steps)]
    everything = runner.compile_stats()
    assert max(collections.Counter(everything.shapes).values()) == 1  # never twice for one program and shape
    assert everything.compile_s > 0 and everything.trace_s > 0


def test_tensorflow_eager_traces_nothing(runners, plain, small_config, small_batch):
    runner = runners("tensorflow-eager", "plain64", plain, small_config)
    runner.encode(small_batch)
    runner.loss_and_grads(small_batch)
    stats = runner.compile_stats()
    assert stats.traces == 0 and stats.compile_s == 0.0 and stats.shapes == []
    with pytest.raises(ValueError, match="eager"):
        runner.traced_function("encode")


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


@variant
@pytest.mark.parametrize("mode", ["gold", "predicted", "sampled"])
def test_float64_parse_matches_reference(runners, variant, mode, headed, small_batch):
    config, params = headed
    runner = runners(variant, "head64", params, config, transition_weight=TRANSITION_WEIGHT)
    u = uniforms(small_batch) if mode == "sampled" else None
    parsed = runner.parse(small_batch, mode, uniforms=u)
    ref = reference.parse(params, config, small_batch, mode, uniforms=u)
    assert_parsed_close(parsed, ref, tol=F64_TOL, logit_tol=F64_TOL, logprob_tol=F64_TOL)
    if mode != "gold":  # the decisions are the model's, not the data's, and valid
        gold = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
        followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
        assert parsing.parse_agreement(followed, gold) < 0.9
        for row, n in zip(followed, parsing.sentence_lengths(gold)):
            check_transitions([int(op) for op in row if op != PAD], int(n))
    if mode == "sampled":
        assert np.all(parsed.premise_logprob < 0) and np.all(parsed.premise_entropy > 0)


@variant
@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_float32_parse_matches_reference(runners, variant, mode, headed, small_batch):
    config, _ = headed
    params = head_params(config, seed=6, dtype=np.float32)
    runner = runners(variant, "head32", params, config, dtype="float32")
    u = uniforms(small_batch, seed=3) if mode == "sampled" else None
    parsed = runner.parse(small_batch, mode, uniforms=u)
    assert parsed.premise.dtype == np.float32
    assert_parsed_close(parsed, reference.parse(params, config, small_batch, mode, uniforms=u),
                        tol=ENCODING_TOL_F32, logit_tol=LOGITS_TOL_F32, logprob_tol=LOGPROB_TOL_F32)


@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_tensorflow_eager_reads_one_decision_per_step_with_a_choice(runners, mode, headed, small_batch):
    """Define-by-run in TensorFlow pays PyTorch's round trip: one host copy of
    the logits per step where some sentence chooses; none in gold mode."""
    config, params = headed
    runner = runners("tensorflow-eager", "head64", params, config, transition_weight=TRANSITION_WEIGHT)
    u = uniforms(small_batch) if mode == "sampled" else None
    assert_one_host_read_per_choice_step(runner, small_batch, mode, u)


@variant
def test_sampled_parse_alone_equals_inside_a_batch(runners, variant, headed, sample_pairs, vocab):
    """A pair's uniform numbers follow its row, not its batch: alone, or among
    other pairs with extra token slots and PAD steps, it takes the same
    decisions and gets the same numbers (and the reference's)."""
    config, params = headed
    runner = runners(variant, "head64", params, config, transition_weight=TRANSITION_WEIGHT)
    pairs = sample_pairs[20:28]
    big = make_pair_batch(pairs, vocab, num_tokens=48)
    u_big = parsing.uniforms_for(big, rows=list(range(20, 28)), seed=2)
    together = runner.parse(big, "sampled", uniforms=u_big)
    assert_parsed_close(together, reference.parse(params, config, big, "sampled", uniforms=u_big),
                        tol=F64_TOL, logit_tol=F64_TOL, logprob_tol=F64_TOL)
    for i in (0, 5):
        alone = make_pair_batch([pairs[i]], vocab, num_tokens=40)
        single = runner.parse(alone, "sampled", uniforms=parsing.uniforms_for(alone, rows=[20 + i], seed=2))
        assert_alone_equals_inside(single, together, i)


# --------------------------------------------------------------------------
# The supervised loss and training (the family's machinery, on this model)
# --------------------------------------------------------------------------


@variant
def test_supervised_gradients_match_reference(runners, variant, headed, small_batch):
    config, params = headed
    runner = runners(variant, "head64", params, config, transition_weight=TRANSITION_WEIGHT)
    grads = assert_grads_like_reference(runner, params, config, small_batch, GRAD_REL_TOL_F64,
                                        transition_weight=TRANSITION_WEIGHT)
    assert np.any(grads[HEAD_KERNEL] != 0)


@variant
def test_training_steps_and_optimizer_state_match_reference(runners, variant, headed, small_batch):
    """Two SGD-with-momentum steps on the supervised loss move every weight
    as the reference's optimizer does, with the same state; a loaded state
    (zeros) is the one the next step continues from."""
    config, params = headed
    runner = runners(variant, "train64", params, config, transition_weight=TRANSITION_WEIGHT)
    hyper = optimizers.resolve("sgd", {"momentum": 0.5})
    runner.set_optimizer("sgd", lr=0.1, momentum=0.5)
    expected, state = dict(params), optimizers.zero_state("sgd", hyper, param_shapes(config), dtype=np.float64)
    for step in range(2):
        ref_loss, ref_grads = reference.loss_and_grads(expected, config, small_batch,
                                                       transition_weight=TRANSITION_WEIGHT)
        loss = runner.train_step(small_batch)
        assert abs(loss - ref_loss) <= 1e-10
        expected = optimizers.apply("sgd", hyper, 0.1, expected, ref_grads, state)
        updated = runner.get_params()
        for name in params:
            assert max_abs_err(updated[name], expected[name]) <= 1e-10, (step, name)
    got = runner.optimizer_state()
    assert set(got) == set(state) and int(got[optimizers.STEP]) == 2
    for key in state:
        assert max_abs_err(got[key], state[key]) <= 1e-10, key
    assert max_abs_err(updated[HEAD_KERNEL], params[HEAD_KERNEL]) > 1e-6  # the head trained too

    zeros = optimizers.zero_state("sgd", hyper, param_shapes(config), dtype=np.float64)
    runner.load_optimizer_state(zeros)
    assert runner.steps == 0 and all(not np.any(v) for v in runner.optimizer_state().values())
    _, ref_grads = reference.loss_and_grads(expected, config, small_batch, transition_weight=TRANSITION_WEIGHT)
    runner.train_step(small_batch)
    expected = optimizers.apply("sgd", hyper, 0.1, expected, ref_grads, zeros)  # from b = 0: b = g
    updated = runner.get_params()
    for name in params:
        assert max_abs_err(updated[name], expected[name]) <= 1e-10, name


# --------------------------------------------------------------------------
# bench explain: what vmap generated, beside the hand-batched program
# --------------------------------------------------------------------------


def test_explain_compares_the_vmap_program_with_the_hand_batched_one():
    tiny = ["--embed-dim", "4", "--hidden-dim", "4", "--tracker-dim", "2", "--mlp-dim", "4", "--mlp-layers", "1"]
    result = explain(parse_args(tiny + ["--framework", "jax-vmap", "--shape", "random", "--length", "5",
                                        "--no-timing"]))
    r = result["jax-vmap"]
    for program in ("encode", "loss_and_grads"):
        vmap, batched = r["vmap"][program], r["batched"][program]
        for stats in (vmap, batched):
            assert stats["eqns"] > 0 and all(n > 0 for n in stats["scan_body_eqns"])
        # vmap adds no loop: one scan forward, and one more for the gradient
        assert vmap["scans"] == batched["scans"] == (1 if program == "encode" else 2)
        assert r["ratio"][program]["scan_body_eqns"] == pytest.approx(
            vmap["scan_body_eqns"][0] / batched["scan_body_eqns"][0])
    # the loop state: the same things, the batch axis added by vmap (4 sentences)
    assert r["vmap"]["loop_state"]["carry"] and r["batched"]["loop_state"]["carry"]
    text = format_text(result)
    assert "jax-vmap" in text and "scan body" in text
