"""The PyTorch variants of the algorithm matrix against the float64 reference.

``pytorch-masked`` runs the JAX algorithm (padded arrays, pointers, masks;
impl_pytorch/masked.py) in PyTorch eager; ``pytorch-compiled`` runs it under
torch.compile (impl_pytorch/compiled.py). Inductor needs tens of seconds per
program and shape on a small CPU, so the checks parametrized over variants
run the compiled variant with the ``aot_eager`` backend (id
``pytorch-compiled-aot``): TorchDynamo captures the same step graph and
AOTAutograd differentiates it, without generating code. The Inductor build
itself, the benchmark's ``pytorch-compiled``, has its own check below, on one
tiny shape. Every check compares with the float64 NumPy reference, never a
framework with itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.frameworks import IMPLEMENTATIONS, OPT_IN, make_runner as make_named_runner
from impl_pytorch.runner import Runner
from shared import parsing, reference
from shared.batching import make_pair_batch
from shared.compare import (ENCODING_TOL_F32, GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, LOGITS_TOL_F32,
                            grad_rel_errs, max_abs_err)
from shared.params import init_params

from conftest import small_config_for
from test_parse_equivalence import (F64_TOL, LOGPROB_TOL_F32, assert_parsed_close, head_config, head_params,
                                    uniforms)

VARIANTS = {
    "pytorch-masked": {"algorithm": "masked"},
    "pytorch-compiled-aot": {"algorithm": "masked", "compile": "aot_eager"},
}
variant = pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))


def make_runner(variant, params, config, device, dtype="float64", **kw):
    return Runner(params, config, dtype=dtype, device=device, **VARIANTS[variant], **kw)


@pytest.fixture(scope="module")
def config(vocab):
    return head_config(len(vocab))


@pytest.fixture(scope="module")
def params64(config):
    return head_params(config, seed=5)


@pytest.fixture(scope="module")
def runners64(config, params64, device):
    """One float64 runner per variant, shared so the compiled one builds each program once."""
    return {name: make_runner(name, params64, config, device) for name in VARIANTS}


def test_registered_as_opt_in_variants():
    assert IMPLEMENTATIONS["pytorch-masked"] == ("pytorch", {"algorithm": "masked"})
    assert IMPLEMENTATIONS["pytorch-compiled"] == ("pytorch", {"algorithm": "masked", "compile": True})
    assert {"pytorch-masked", "pytorch-compiled"} <= OPT_IN


def test_option_errors_are_clear(small_config):
    params = init_params(small_config, seed=0)
    with pytest.raises(ValueError, match="compile=True needs algorithm='masked'"):
        Runner(params, small_config, compile=True)
    with pytest.raises(ValueError, match="unknown algorithm 'stacks'"):
        Runner(params, small_config, algorithm="stacks")
    with pytest.raises(TypeError, match="known: algorithm, compile"):
        Runner(params, small_config, layout="thin")


@variant
def test_float64_forward_and_gradients_match_reference(variant, runners64, config, params64, small_batch):
    runner = runners64[variant]
    premise, hypothesis, logits = runner.encode(small_batch)
    ref = reference.forward(params64, config, small_batch)
    assert max_abs_err(premise, ref.premise) <= F64_TOL
    assert max_abs_err(hypothesis, ref.hypothesis) <= F64_TOL
    assert max_abs_err(logits, ref.logits) <= F64_TOL
    loss, grads = runner.loss_and_grads(small_batch)
    ref_loss, ref_grads = reference.loss_and_grads(params64, config, small_batch)
    assert abs(loss - ref_loss) <= 1e-12
    errors = grad_rel_errs(grads, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors
    assert np.any(grads["reduce.left.kernel"] != 0)


@variant
@pytest.mark.parametrize("mode", ["gold", "predicted", "sampled"])
def test_float64_parse_matches_reference(variant, mode, runners64, config, params64, small_batch):
    u = uniforms(small_batch) if mode == "sampled" else None
    parsed = runners64[variant].parse(small_batch, mode, uniforms=u)
    ref = reference.parse(params64, config, small_batch, mode, uniforms=u)
    assert_parsed_close(parsed, ref, tol=F64_TOL, logit_tol=F64_TOL, logprob_tol=F64_TOL)
    if mode != "gold":  # the model really chose: not the gold trees everywhere
        followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
        gold = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
        assert parsing.parse_agreement(followed, gold) < 0.9
    assert runners64[variant].last_host_syncs == 0  # no decision was read back during the loop
    if VARIANTS[variant].get("compile"):
        # Dynamo captured the step with the decision inside: a host read
        # (.item(), .tolist(), a Python `if` on a tensor) would be a graph break.
        stats = runners64[variant].compile_stats(f"parse:{mode}")
        assert stats.traces >= 1 and stats.graph_breaks == 0


@variant
def test_float32_matches_reference(variant, device, config, small_batch):
    """Encodings, logits, gradients and both decided parses in float32."""
    params = head_params(config, seed=6, dtype=np.float32)
    runner = make_runner(variant, params, config, device, dtype="float32")
    premise, _, logits = runner.encode(small_batch)
    ref = reference.forward(params, config, small_batch)
    assert premise.dtype == np.float32
    assert max_abs_err(premise, ref.premise) <= ENCODING_TOL_F32
    assert max_abs_err(logits, ref.logits) <= LOGITS_TOL_F32
    _, grads = runner.loss_and_grads(small_batch)
    errors = grad_rel_errs(grads, reference.loss_and_grads(params, config, small_batch)[1])
    assert max(errors.values()) <= GRAD_REL_TOL_F32, errors
    for mode in ("predicted", "sampled"):
        u = uniforms(small_batch, seed=3) if mode == "sampled" else None
        assert_parsed_close(runner.parse(small_batch, mode, uniforms=u),
                            reference.parse(params, config, small_batch, mode, uniforms=u),
                            tol=ENCODING_TOL_F32, logit_tol=LOGITS_TOL_F32, logprob_tol=LOGPROB_TOL_F32)


@variant
def test_supervised_train_step_matches_reference(variant, device, config, small_batch):
    """One SGD step of the supervised loss (transition_weight > 0) moves every
    weight, the head's included, as the reference's gradient says."""
    params = head_params(config, seed=10)
    runner = make_runner(variant, params, config, device, transition_weight=0.5)
    runner.set_optimizer("sgd", lr=0.1)
    loss = runner.train_step(small_batch)
    ref_loss, ref_grads = reference.loss_and_grads(params, config, small_batch, transition_weight=0.5)
    assert abs(loss - ref_loss) <= 1e-10
    updated = runner.get_params()
    for name, value in params.items():
        assert max_abs_err(updated[name], value - 0.1 * ref_grads[name]) <= 1e-10, name
    assert max_abs_err(updated["tracker.transition.kernel"], params["tracker.transition.kernel"]) > 1e-6
    state = runner.optimizer_state()
    assert int(state["step"]) == 1
    runner.load_optimizer_state(state)  # the shared layout goes back in


@variant
def test_padding_and_batch_mates_change_nothing(variant, device, vocab, runners64, sample_pairs, edge_pairs):
    """Gold mode without a tracker head and predicted mode with one: a pair
    alone (with extra token slots and PAD steps) equals itself in a batch."""
    runner = runners64[variant]
    pairs = sample_pairs[20:24] + edge_pairs[:2]
    together = make_pair_batch(pairs, vocab, num_tokens=64)
    encoded = runner.encode(together)
    parsed = runner.parse(together, "predicted")
    for i in (0, 4):
        width = max(len(pairs[i].premise), len(pairs[i].hypothesis))
        alone = make_pair_batch([pairs[i]], vocab, num_tokens=width + 3, num_steps=2 * width + 9)
        for got, want in zip(runner.encode(alone), encoded):
            assert max_abs_err(got[0], want[i]) <= F64_TOL
        single = runner.parse(alone, "predicted")
        T = 2 * width + 9
        np.testing.assert_array_equal(single.premise_transitions[0], parsed.premise_transitions[i, :T])
        assert not np.any(parsed.premise_transitions[i, T:])
        assert max_abs_err(single.logits[0], parsed.logits[i]) <= F64_TOL


@variant
def test_without_tracker_and_bad_transitions(variant, device, vocab, small_batch):
    """D = 0 follows the reference too; an invalid REDUCE is refused on the
    host before the loop (the loop itself never looks)."""
    config = small_config_for(len(vocab), tracker_dim=0, mlp_layers=2)
    params = init_params(config, seed=4, dtype=np.float64)
    runner = make_runner(variant, params, config, device)
    premise, _, logits = runner.encode(small_batch)
    ref = reference.forward(params, config, small_batch)
    assert max_abs_err(premise, ref.premise) <= F64_TOL and max_abs_err(logits, ref.logits) <= F64_TOL
    bad = make_pair_batch(small_batch_pairs(vocab), vocab)
    bad.premise_transitions[0, :3] = (1, 2, 1)  # SHIFT, then REDUCE with one item
    with pytest.raises(ValueError, match="REDUCE with fewer than two items"):
        runner.encode(bad)


def small_batch_pairs(vocab):
    from shared.snli import SAMPLE_PATH, read_snli

    return read_snli(SAMPLE_PATH)[0][:2]


def test_compiled_with_inductor_reports_its_compilation(device, vocab, sample_pairs):
    """The benchmark's pytorch-compiled (Inductor), float32 on one tiny shape:
    agrees with the reference; compiling shows in compile_stats; a second
    batch of the same shape compiles nothing; no graph breaks (no host reads)."""
    config = small_config_for(len(vocab), tracker_dim=3, mlp_layers=1)
    params = init_params(config, seed=12, dtype=np.float32)
    runner = make_named_runner("pytorch-compiled", params, config, dtype="float32", device=device)
    assert runner.compile_stats().traces == 0
    short = [p for p in sample_pairs if max(len(p.premise), len(p.hypothesis)) <= 8]
    first, second = (make_pair_batch(short[k:k + 2], vocab, num_tokens=8) for k in (0, 2))
    for batch in (first, second):
        premise, hypothesis, logits = runner.encode(batch)
        ref = reference.forward(params, config, batch)
        assert max_abs_err(premise, ref.premise) <= ENCODING_TOL_F32
        assert max_abs_err(hypothesis, ref.hypothesis) <= ENCODING_TOL_F32
        assert max_abs_err(logits, ref.logits) <= LOGITS_TOL_F32
        if batch is first:
            after_first = runner.compile_stats("encode")
    after_second = runner.compile_stats("encode")
    assert after_first.traces >= 1 and after_first.compile_s > 0
    assert after_first.shapes == [("encode", 2, 8, 15)]
    assert after_first.graph_breaks == 0
    assert after_second.since(after_first).traces == 0  # same shape: no recompile
    assert after_second.compile_s == after_first.compile_s
    assert runner.compile_stats().to_dict()["shapes"] == [["encode", 2, 8, 15]]
