"""jax-vmap, beyond the contract: SPINN written for one sentence and batched by ``jax.vmap`` (impl_jax/vmap.py).

Its agreement with the float64 reference (numbers, decisions, gradients,
training steps, host reads) is in test_contract.py; here: its registry
entry, that it compiles once per program and shape, and what ``explain``
shows of the vmap program beside the hand-batched one. (tensorflow-eager,
once tested beside it here, is in test_tensorflow.py.)
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


def test_registered_as_an_opt_in_variant_of_its_family(small_params, small_config):
    assert frameworks.resolve("jax-vmap") == ("jax", {"family": "vmap"})
    variants = {"jax-vmap"}
    assert variants <= frameworks.OPT_IN and variants <= set(frameworks.IMPLEMENTATIONS)
    with pytest.raises(ValueError, match="layout"):
        frameworks.make_runner("jax-vmap", small_params, small_config, dtype="float64", layout="padded")


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
