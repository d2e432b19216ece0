"""The limit of a batch (bench/benchmark/limit.py): its useful products, no more and no fewer, in as few
dependent products as its trees allow, timed on the fastest routine."""

from __future__ import annotations

import numpy as np
import pytest

from bench.benchmark import limit
from bench.benchmark.limit import batch_flops
from shared.batching import make_pair_batch
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
    pairs = limit.operands(config, BATCH, mode, "float32", np.random.default_rng(0))
    assert sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in pairs) == batch_flops(config, BATCH, mode)


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


def test_the_fastest_routine_is_kept_per_batch():
    class Slow(Platform):
        name = "slow"

        def matmuls(self, pairs, device):
            def run():
                for a, b in pairs:
                    for _ in range(20):
                        a @ b
            return run

    config = ModelConfig(vocab_size=30, embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=7, mlp_layers=1)
    seconds, by = limit.time_batches({"numpy": Platform(), "slow": Slow()}, "cpu", config, [BATCH, BATCH],
                                     "infer", "float32", repeats=2)
    assert by == ["numpy", "numpy"] and all(s > 0 for s in seconds)
    assert Platform().matmuls([], "gpu") is None  # NumPy's routine is the host's


def test_numpy_runs_a_product_of_a_few_rows_in_its_faster_form_with_the_same_values():
    """A row or two may run as one matrix-vector product per row (shared/platform.py): the same products, whichever
    form a shape gets, for a weight laid out either way."""
    from shared.platform import GEMV_ROWS, _fastest_form, _gemv_rows
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4))
    for a, b in [(rng.standard_normal((2, 6)), w), (rng.standard_normal((3, 4)), w.T)]:
        np.testing.assert_allclose(np.stack(_gemv_rows(a, b, {})()), a @ b)
        result = _fastest_form(a, b, {})()
        np.testing.assert_allclose(np.stack(result) if isinstance(result, list) else result, a @ b)
    many = rng.standard_normal((GEMV_ROWS + 1, 6))
    np.testing.assert_allclose(_fastest_form(many, w, {})(), many @ w)  # more rows: one matrix product
