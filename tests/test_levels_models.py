"""The level-scheduled encoders: their paths that the runners do not take on a CPU, held to the float64
reference, and the registry's levels runners' own bookkeeping (what they refuse, how many programs, the schedule
in ``last_rows``).

The runners' own paths are in the contract (tests/test_contract.py, pytorch-levels, jax-levels and
tensorflow-levels: values, gradients and head logits in gold mode, with and without the tracker). What is left is
checked here, in float64, values and gradients, against shared/reference.py (never against the framework's own
masked model): TensorFlow's level loop with the dense container, which the runner picks on a GPU and under XLA (on a
CPU graph it picks the TensorArray, which the contract runs).
"""

import numpy as np
import pytest

from shared.params import ModelConfig, init_params

from .helpers import assert_encodes_like_reference, assert_grads_like_reference, make_runner, small_config_for


@pytest.mark.parametrize("tracker_dim", [0, 3])
def test_tensorflow_levels_with_the_dense_container_match_reference(tracker_dim, device, vocab, small_batch):
    config = small_config_for(len(vocab), tracker_dim=tracker_dim)
    params = init_params(config, seed=9, dtype=np.float64)
    runner = make_runner("tensorflow-levels", params, config, dtype="float64", device=device, container="dense")
    assert runner.container == "dense"
    assert_encodes_like_reference(runner, params, config, small_batch, "float64")
    assert_grads_like_reference(runner, params, config, small_batch, "float64")


# --------------------------------------------------------------------------
# Through the runner: the registry's jax-levels and tensorflow-levels
# --------------------------------------------------------------------------


def test_registered_as_opt_in_levels_variants():
    from bench import frameworks

    assert frameworks.resolve("jax-levels") == ("jax", {"family": "levels"})
    assert frameworks.resolve("tensorflow-levels") == ("tensorflow", {"family": "levels"})
    assert {"jax-levels", "tensorflow-levels"} <= frameworks.OPT_IN
    assert frameworks.matrix()[frameworks.LEVELS, "jax"] == ["jax-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "tensorflow"] == ["tensorflow-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "dynet"].startswith("not built")


@pytest.mark.parametrize("name", ["jax-levels", "tensorflow-levels"])
def test_levels_runner_bounds_its_programs_and_records_the_schedule(name, device, sample_pairs, vocab):
    """Decided parses are refused by the runner (the framework's own runner
    keeps them); batches of one (B, N, T) meet one program (JAX, with the
    tracker; TensorFlow: one trace for all); the last batch's level count
    and padding are in ``last_rows``."""
    from bench import frameworks
    from shared.batching import make_batches
    from shared.levels import LEVELS_UNSUPPORTED  # the reasons both frameworks give, in one wording
    from shared.params import init_params

    from .helpers import head_config

    config = head_config(len(vocab))
    params = init_params(config, seed=3, dtype=np.float32)
    runner = frameworks.make_runner(name, params, config, dtype="float32", device=device)
    family = frameworks.make_runner(name.split("-")[0], params, config, dtype="float32", device=device)
    assert family.supports("predicted parse") and not runner.supports("predicted parse")
    assert {key: runner.unsupported[key] for key in LEVELS_UNSUPPORTED} == LEVELS_UNSUPPORTED
    assert type(runner).supports("sampled parse")  # the class answers for the framework, the runner for its variant
    batches = [b for b in make_batches(sample_pairs, vocab, batch_size=4) if b.num_tokens == 16 and b.size == 4]
    assert len(batches) >= 3
    with pytest.raises(NotImplementedError, match="no predicted parse: .*gold"):
        runner.parse(batches[0], "predicted")
    with pytest.raises(NotImplementedError, match="no reinforce: "):
        runner.reinforce_loss_and_grads(batches[0], None, 0.0)
    for batch in batches:
        runner.encode(batch)
        assert runner.last_rows["levels"] > 0 and 0 <= runner.last_rows["level_padding_pct"] < 100
        assert runner.last_phases["schedule"] > 0
    stats = runner.compile_stats()
    if name == "tensorflow-levels":
        assert stats.traces == 1
    else:
        # a program per (B, N, T) and level count (shared.levels.static_shape: the levels rounded up to a class,
        # S = 2B = 8 tracker rows a level, a window of 8 Reduce rows), as the runner's program_shape says
        assert stats.traces == len(set(stats.shapes)) < len(batches)
        assert {shape[1:] for shape in stats.shapes} == {runner.program_shape(b) for b in batches}
        assert all(shape[1:4] == (4, 16, 31) and shape[5:] == (8, 8) for shape in stats.shapes)


def test_the_benchmarks_warm_up_compiles_every_program_of_the_jax_tree_lstm_levels(sample_pairs, vocab):
    """A JAX levels program compiles per level count too (rounded up to a class: impl_jax/levels.py), which
    (B, N, T) does not tell: the runner's ``program_shape`` does, so the warm-up meets every program and the
    timed calls compile nothing (here without the tracker, the Tree-LSTM workload)."""
    from bench import frameworks
    from bench.run.worker import warm_up
    from shared.batching import make_batches

    config = ModelConfig(vocab_size=len(vocab), embed_dim=6, hidden_dim=5, tracker_dim=0, mlp_dim=7, mlp_layers=1)
    runner = frameworks.make_runner("jax-levels", init_params(config, seed=3, dtype=np.float32), config,
                                    dtype="float32", device="cpu")
    batches = [b for b in make_batches(sample_pairs, vocab, batch_size=4) if b.num_tokens == 16 and b.size == 4]
    warm = warm_up(runner, batches, runner.encode)
    assert warm["warmup_shapes"] == warm["traces"] > len({(b.size, b.num_tokens, b.num_steps) for b in batches})
    before = runner.compile_stats().traces
    for batch in batches:
        runner.encode(batch)
    assert runner.compile_stats().traces == before
