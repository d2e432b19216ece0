"""Shared fixtures: the embedded sample, model configurations, reference results.

Device and precision settings for the tests live here, not in the models:
threads are capped at one per framework pool, JAX gets float64 enabled (the
float64 gradient checks need it; float32 arrays stay float32), and reduced
precision matmul modes (TF32) are off in every framework, so float32 tests
compare real float32 against the float64 reference.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One intra-op thread: on a small shared machine the tests run faster and with
# fewer stalls than with every framework's pool competing for the same cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")

import numpy as np
import pytest

from shared import reference
from shared.batching import make_batches, make_pair_batch
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, Pair, read_snli
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, plain_transitions
from shared.vocab import Vocabulary

# Tests run on the CPU unless SPINN_TEST_DEVICE=gpu (used on GPU machines).
TEST_DEVICE = os.environ.get("SPINN_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def device() -> str:
    return TEST_DEVICE


@pytest.fixture(scope="session")
def sample_pairs() -> list[Pair]:
    pairs, _ = read_snli(SAMPLE_PATH)
    return pairs


@pytest.fixture(scope="session")
def vocab(sample_pairs) -> Vocabulary:
    return Vocabulary.from_pairs(sample_pairs, lowercase=True)


@pytest.fixture(scope="session")
def full_config(vocab) -> ModelConfig:
    """The full-size model of the agreement checks: H=300, D=64, M=1024, L=2."""
    return ModelConfig(vocab_size=len(vocab), embed_dim=300, hidden_dim=300, tracker_dim=64,
                       mlp_dim=1024, mlp_layers=2)


@pytest.fixture(scope="session")
def full_params(full_config) -> dict[str, np.ndarray]:
    return init_params(full_config, seed=0, dtype=np.float32)


@pytest.fixture(scope="session")
def sample_batches(sample_pairs, vocab):
    """The whole embedded sample in bucketed batches of 128 pairs."""
    return make_batches(sample_pairs, vocab, batch_size=128)


@pytest.fixture(scope="session")
def full_reference(full_params, full_config, sample_batches):
    """Float64 reference outputs of the full-size model on every sample batch
    (computed once per session; every framework is compared with them)."""
    return [reference.forward(full_params, full_config, batch) for batch in sample_batches]


def small_config_for(vocab_size: int, tracker_dim: int = 3, mlp_layers: int = 2) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim,
                       mlp_dim=7, mlp_layers=mlp_layers)


@pytest.fixture(scope="session")
def small_config(vocab) -> ModelConfig:
    return small_config_for(len(vocab))


@pytest.fixture(scope="session")
def small_batch(sample_pairs, vocab):
    """Twelve real SNLI pairs of mixed lengths and shapes, padded to 32 tokens."""
    chosen = sample_pairs[:6] + sorted(sample_pairs, key=lambda p: -len(p.premise))[:3] \
        + sorted(sample_pairs, key=lambda p: len(p.hypothesis))[:3]
    return make_pair_batch(chosen, vocab, num_tokens=max(32, max(
        max(len(p.premise), len(p.hypothesis)) for p in chosen)))


def shaped_sentence(words: list[str], shape: str) -> Sentence:
    return Sentence(tuple(words), tuple(plain_transitions(len(words), shape)))


@pytest.fixture(scope="session")
def edge_pairs(vocab) -> list[Pair]:
    """One-word sentences, 60-word left- and right-branching trees, mixed."""
    words = [w for w in vocab.words[2:62]]
    one = Sentence((words[0],), (1,))
    left = shaped_sentence(words, "left")
    right = shaped_sentence(words[::-1], "right")
    return [
        Pair(one, shaped_sentence(words[:1], "left"), 0, "one-one"),
        Pair(left, right, 1, "left-right"),
        Pair(right, one, 2, "right-one"),
        Pair(one, left, 1, "one-left"),
    ]


def assert_npz_files_identical(first, second) -> None:
    """Two .npz files hold the same entries with the same dtype, shape and bytes."""
    with np.load(first, allow_pickle=False) as a, np.load(second, allow_pickle=False) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            assert a[name].dtype == b[name].dtype, name
            assert a[name].shape == b[name].shape, name
            assert a[name].tobytes() == b[name].tobytes(), name


def steps_with_a_choice(transitions: np.ndarray) -> int:
    """Steps t at which at least one of these sentences <int>[S, T] could
    both SHIFT and REDUCE, replayed from the transitions alone."""
    n = (transitions == SHIFT).sum(axis=1)
    buffered, stacked = n.copy(), np.zeros_like(n)
    steps = 0
    for column in transitions.T:
        acting = column != PAD
        steps += bool(np.any(acting & (buffered > 0) & (stacked >= 2)))
        shift, reduce = column == SHIFT, column == REDUCE
        buffered -= shift
        stacked += shift.astype(stacked.dtype) - reduce
    return steps


def assert_one_host_read_per_choice_step(runner, batch, mode: str, uniforms=None):
    """Define-by-run pays one device-to-host copy per step where some sentence
    chooses (``runner.last_host_syncs``); gold mode and encode pay none.
    Returns the transitions followed <int>[2B, T] and the count, for the
    caller's own checks."""
    parsed = runner.parse(batch, mode, uniforms=uniforms)
    followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
    expected = steps_with_a_choice(followed)
    assert expected > 0
    assert runner.last_host_syncs == expected
    runner.parse(batch, "gold")
    assert runner.last_host_syncs == 0
    runner.parse(batch, mode, uniforms=uniforms)
    runner.encode(batch)
    assert runner.last_host_syncs == 0
    return followed, expected
