"""The products of a batch (bench/run/limit.py): its useful ones, no more and no fewer, in as few dependent
products as its trees allow; those each algorithm computes, never fewer; and their times on the fastest routine."""

from __future__ import annotations

import types

import numpy as np
import pytest

from bench import frameworks
from bench.run import limit
from bench.run.driver import fastest, harness_share
from bench.run.limit import batch_flops, flops, products
from shared.batching import make_pair_batch
from shared.levels import level_rows
from shared.params import ModelConfig
from shared.platform import Platform
from shared.snli import Pair
from shared.transitions import Sentence, plain_transitions


def _batch(shapes):
    """A pair batch whose premises and hypotheses have the given (length, shape) trees."""
    pairs = []
    for k, ((n, shape), (m, other)) in enumerate(shapes):
        words = [f"w{i}" for i in range(max(n, m))]
        pairs.append(Pair(Sentence(tuple(words[:n]), tuple(plain_transitions(n, shape))),
                          Sentence(tuple(words[:m]), tuple(plain_transitions(m, other))), 0, str(k)))
    from shared.vocab import Vocabulary
    return make_pair_batch(pairs, Vocabulary.from_pairs(pairs))


BATCH = _batch([((5, "left"), (3, "balanced")), ((8, "balanced"), (1, "left")), ((2, "right"), (7, "right"))])


@pytest.mark.parametrize("tracker_dim", [4, 0], ids=["tracker", "no-tracker"])
@pytest.mark.parametrize("mode", ["infer", "train"])
def test_the_limit_computes_the_useful_flops_exactly(tracker_dim, mode):
    config = ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim, mlp_dim=7, mlp_layers=2)
    listed = products(config, BATCH)
    pairs = limit.operands(listed, mode, limit.arrays(config, [listed, products(config, BATCH, "arrays")], "float32"))
    assert sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in pairs) == batch_flops(config, BATCH, mode)
    assert flops(config, products(config, BATCH), mode) == batch_flops(config, BATCH, mode)


def test_steps_with_the_tracker_and_heights_without():
    """With the tracker every step of the loop is a tracker product (its active sentences) and, where some
    sentence reduces, a Reduce product; without it one Reduce product per tree height."""
    with_tracker = ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=7, mlp_layers=1)
    products = limit.products(with_tracker, BATCH)
    T = BATCH.premise_transitions.shape[1]
    assert products[0] == ("projection", 5 + 8 + 2 + 3 + 1 + 7)
    assert [role for role, _ in products].count("tracker") == T  # the longest sentence (8 words) runs 15 steps
    assert products[1] == ("tracker", 6)  # every sentence shifts its first word
    assert products[-2:] == [("mlp.0", 3), ("output", 3)]
    plain = limit.products(ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=0, mlp_dim=7,
                                       mlp_layers=1), BATCH)
    reduces = [rows for role, rows in plain if role == "reduce"]
    # 7-word right-branching and 5-word left-branching trees are 6 and 4 high; the other trees are lower.
    assert len(reduces) == 6 and sum(reduces) == (4 + 7 + 1 + 2 + 0 + 6) and reduces[-1] == 1


def test_every_kind_is_timed_in_turn_on_a_routine_and_the_fastest_routine_is_kept():
    config = ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=7, mlp_layers=1)
    matmuls, _ = limit.routine(Platform())  # a framework without its own: NumPy's
    seconds = limit.time_kinds(matmuls, "cpu", config, [BATCH, BATCH], ["useful", "loop"], "infer", "float32",
                               repeats=2)
    assert set(seconds) == {"useful", "loop"} and all(len(s) == 2 and min(s) > 0 for s in seconds.values())
    assert matmuls([], "gpu") is None  # NumPy's routine is the host's
    # Of the routines that timed a measurement's products on its device: the fastest useful time and whose it was,
    # the fastest computed one (never below the useful one), and the framework's own.
    reply = lambda useful, loop, kernel: {"useful": {"s": useful, "flops": 10, "flops_per_s": [1.0, 2.0]},  # noqa
                                          "loop": {"s": loop, "flops": 17, "flops_per_s": [1.0, 2.0]},
                                          "kernel": kernel, "sampled": 5}
    found = fastest("loop", "slow", [("numpy", reply(1.0, 2.0, "openblas")), ("slow", reply(3.0, 4.0, "mkl"))])
    assert (found["useful"], found["matmul"], found["kernel"], found["computed"], found["own"], found["flops"]) == (
        1.0, "numpy", "openblas", 2.0, 4.0, 17)
    assert fastest("loop", "numpy", [("numpy", reply(1.0, 0.9, "openblas"))])["computed"] == 1.0
    assert fastest("arrays", "numpy", [("numpy", reply(1.0, 2.0, "openblas"))]) is None
    said = harness_share({"start-up": 10.0, "time": 70.0, "products": 12.0}, 100.0)
    assert said.startswith("harness: the products timed for the limit and the breakdown took 12 s of the run's "
                           "1 min 40 s (12.0 %)") and said.endswith("the rest 8 s")


def _kind_config(tracker_dim: int = 4) -> ModelConfig:
    return ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim, mlp_dim=7, mlp_layers=1)


@pytest.mark.parametrize("tracker_dim", [4, 0], ids=["tracker", "no-tracker"])
def test_what_each_algorithm_computes_is_never_less_than_the_useful_products(tracker_dim):
    """Masked loops run every sentence's tracker and composition at each step they run (up to the batch's last real
    step, or all T); levels each level's rows; a loop over active rows those rows; every kind but the useful one
    projects every token slot, padded ones included."""
    config = _kind_config(tracker_dim)
    useful = flops(config, products(config, BATCH), "infer")
    S, N, T = 6, BATCH.premise_tokens.shape[1], BATCH.premise_transitions.shape[1]
    padded_tokens = S * N - (5 + 8 + 2 + 3 + 1 + 7)
    leaf = 2 * 6 * 10  # x[E] @ [E, 2H]
    tracker, reduce = (2 * (3 * 5 + 4) * 16 if tracker_dim else 0), 2 * (2 * 5 + tracker_dim) * 25
    classifier = 3 * 2 * (20 * 7 + 7 * 3)
    every_step = S * (tracker + reduce)
    assert flops(config, products(config, BATCH, "arrays"), "infer") == S * N * leaf + T * every_step + classifier
    # Two more PAD steps at the end of every sentence: a loop that stops at the batch's last real step skips them.
    longer = types.SimpleNamespace(**{**vars(BATCH), "size": BATCH.size, **{f"{side}_transitions": np.pad(
        getattr(BATCH, f"{side}_transitions"), ((0, 0), (0, 2))) for side in ("premise", "hypothesis")}})
    arrays = S * N * leaf + (T + 2) * every_step + classifier
    assert flops(config, products(config, longer, "arrays"), "infer") == arrays
    assert flops(config, products(config, longer, "loop"), "infer") == S * N * leaf + T * every_step + classifier
    assert flops(config, products(config, BATCH, "lists"), "infer") == useful + padded_tokens * leaf
    assert flops(config, products(config, BATCH, "levels-exact"), "infer") == useful + padded_tokens * leaf
    from shared.levels import PADDINGS
    assert [kind for kind in limit.KINDS if kind.startswith("levels-")] == [f"levels-{p}" for p in PADDINGS]
    for kind in limit.KINDS:
        assert flops(config, products(config, BATCH, kind), "train") == 3 * flops(config, products(config, BATCH, kind),
                                                                                  "infer")
        assert flops(config, products(config, BATCH, kind), "infer") >= useful, kind
    with pytest.raises(ValueError, match="unknown kind of products 'sometimes'"):
        products(config, BATCH, "sometimes")


def test_a_loop_over_active_rows_computes_the_useful_products_where_no_token_slot_is_padding():
    config = _kind_config()
    even = _batch([((4, "left"), (4, "balanced")), ((4, "right"), (4, "left"))])
    assert products(config, even, "lists") == products(config, even)
    assert products(config, BATCH, "lists")[1:] == products(config, BATCH)[1:]  # all but the projection


def test_a_level_computes_its_rows_as_the_schedule_lays_them_out():
    """The levels kinds are shared.levels.level_rows of the framework's padding: exact, a level with the tracker is a
    step (its active sentences and those that reduce), and the pytorch-levels runner reports the same rows; static
    (JAX's), every level at least as wide as exact's, and the products at least the exact ones'."""
    config = _kind_config()
    transitions = np.concatenate([BATCH.premise_transitions, BATCH.hypothesis_transitions])
    rows = level_rows(transitions, BATCH.premise_tokens.shape[1], True, "exact")
    assert [active for active, _ in rows] == (transitions != 0).sum(axis=0).tolist()
    assert [reduces for _, reduces in rows] == (transitions == 2).sum(axis=0).tolist()
    listed = products(config, BATCH, "levels-exact")
    assert [r for role, r in listed if role == "reduce"] == [r for _, r in rows if r]
    static = products(config, BATCH, "levels-static")
    assert limit.flops(config, static, "infer") >= limit.flops(config, listed, "infer")
    from shared.params import init_params

    runner = frameworks.make_runner("pytorch-levels", init_params(config, seed=0), config, dtype="float32")
    runner.encode(BATCH)
    assert runner.last_rows["tracker_rows"] == sum(active for active, _ in rows)
    assert runner.last_rows["reduce_rows"] == sum(reduces for _, reduces in rows)


def test_the_products_an_implementation_computes_follow_its_registry_entry():
    kinds = {(name, mode): limit.computed_kind(name, mode) for name in frameworks.IMPLEMENTATIONS
             for mode in ("infer", "train")}
    assert kinds["pytorch", "infer"] == "lists" and kinds["dynet", "train"] == "useful"
    assert kinds["pytorch-masked", "infer"] == "arrays" and kinds["tensorflow", "train"] == "loop"
    assert (kinds["jax", "infer"], kinds["jax", "train"]) == ("loop", "arrays")  # its training step runs all T
    # The levels: the padding of the framework's loop (its levels.PADDING, read from the module the runner loads).
    assert [kinds[name, "infer"] for name in ("pytorch-levels", "tensorflow-levels", "jax-levels")] == [
        "levels-exact", "levels-exact", "levels-static"]


def test_numpy_runs_a_product_of_a_few_rows_in_its_faster_form_with_the_same_values():
    """A row or two may run as one matrix-vector product per row (NumPy's routine, bench/run/limit.py): the same
    products, whichever form a shape gets, for a weight laid out either way."""
    from bench.run.limit import GEMV_ROWS, _fastest_form, _gemv_rows
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4))
    for a, b in [(rng.standard_normal((2, 6)), w), (rng.standard_normal((3, 4)), w.T)]:
        np.testing.assert_allclose(np.stack(_gemv_rows(a, b, {})()), a @ b)
        result = _fastest_form(a, b, {})()
        np.testing.assert_allclose(np.stack(result) if isinstance(result, list) else result, a @ b)
    many = rng.standard_normal((GEMV_ROWS + 1, 6))
    np.testing.assert_allclose(_fastest_form(many, w, {})(), many @ w)  # more rows: one matrix product
