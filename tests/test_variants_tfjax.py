"""The algorithm apart from the framework: tensorflow-eager and jax-vmap, beyond the contract.

``tensorflow-eager`` runs the define-by-run algorithm (impl_tensorflow/lists.py),
``jax-vmap`` SPINN written for one sentence and batched by ``jax.vmap``
(impl_jax/vmap.py). Their agreement with the float64 reference (numbers,
decisions, gradients, training steps, host reads) is in test_contract.py;
here: their registry entries, what each compiles (nothing; once per
program and shape), and what ``explain`` shows of the vmap program.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from bench import frameworks
from bench.explain.views import parse_args
from bench.explain.views import explain, format_text
from shared.batching import make_batches
from shared.params import init_params


@pytest.fixture(scope="module")
def plain(small_config):
    """Float64 weights of the small model without a head."""
    return init_params(small_config, seed=3, dtype=np.float64)


def test_registered_as_opt_in_variants_of_their_family(plain, small_config):
    assert frameworks.resolve("tensorflow-eager") == ("tensorflow", {"family": "lists"})
    assert frameworks.resolve("jax-vmap") == ("jax", {"family": "vmap"})
    variants = {"tensorflow-eager", "jax-vmap"}
    assert variants <= frameworks.OPT_IN and variants <= set(frameworks.IMPLEMENTATIONS)
    with pytest.raises(ValueError, match="xla"):
        frameworks.make_runner("tensorflow-eager", plain, small_config, xla=True)
    with pytest.raises(ValueError, match="layout"):
        frameworks.make_runner("jax-vmap", plain, small_config, dtype="float64", layout="padded")


def test_jax_vmap_compiles_once_per_program_and_shape(device, small_config, sample_pairs, vocab):
    params = init_params(small_config, seed=3, dtype=np.float32)
    runner = frameworks.make_runner("jax-vmap", params, small_config, dtype="float32", device=device)
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


def test_tensorflow_eager_traces_nothing(device, plain, small_config, small_batch):
    runner = frameworks.make_runner("tensorflow-eager", plain, small_config, dtype="float64", device=device)
    runner.encode(small_batch)
    runner.loss_and_grads(small_batch)
    stats = runner.compile_stats()
    assert stats.traces == 0 and stats.compile_s == 0.0 and stats.shapes == []
    for hook in (lambda: runner.trace("encode"), lambda: runner.program_args("encode", small_batch)):
        with pytest.raises(NotImplementedError, match="eagerly"):  # explain's hooks: no program to trace
            hook()


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
