"""Shared fixtures: the embedded sample, model configurations, reference results
(the helpers test modules import are in tests/helpers.py).

Device and precision settings for the tests live here, not in the models:
threads are capped at one per framework pool, JAX gets float64 enabled (the
float64 gradient checks need it; float32 arrays stay float32), and reduced
precision matmul modes (TF32) are off in every framework, so float32 tests
compare real float32 against the float64 reference.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # as impl_tensorflow/platform.py sets it for the commands
# One intra-op thread: on a small shared machine the tests run faster and with
# fewer stalls than with every framework's pool competing for the same cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
# XLA (JAX, and TensorFlow with xla=True) compiles without its slower
# optimisations: the tests compare numbers with the float64 reference, never
# speeds, and compiling is most of what the compiled implementations' tests
# cost. The optimisation level and JAX's switch below take about a third off;
# XLA's CPU backend emitting its fusions with its older loop emitters instead
# of the MLIR fusion emitters takes about half of what is left (a JAX encode
# and gradient over six shapes: 16.6 s of CPU time with, 7.3 s without; three
# TensorFlow + XLA contract tests: 24.5 s, 13.5 s). The benchmark never sets
# any of them. Two host devices, so the data-parallel tests (test_train_replicas.py)
# shard a batch over a JAX mesh in this process; everything else uses the first.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                                   "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import numpy as np
import pytest

from shared import reference
from shared.batching import make_batches, make_pair_batch
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, Pair, read_snli
from shared.transitions import Sentence
from shared.vocab import Vocabulary
from tests.helpers import shaped_sentence, small_config_for

# Tests run on the CPU unless SPINN_TEST_DEVICE=gpu (used on GPU machines).
TEST_DEVICE = os.environ.get("SPINN_TEST_DEVICE", "cpu")
# pytest-xdist's workers for ``-n auto`` (pyproject.toml): one per core, but
# each worker imports all three frameworks (about 2 GB), so at most this many.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def pytest_itemcollected(item) -> None:
    """The work units of pytest-xdist's ``--dist loadgroup`` (pyproject.toml),
    marked on each test as it is collected (pytest_collection_modifyitems
    below names them).

    Tests that share a module- or class-scoped fixture run on one worker, so
    it is built once; so do the full-size checks (marked slow), which share
    the session's float64 reference outputs. A module may name its own groups
    (test_contract.py: one per framework, whose runners and compiled programs its tests share).
    Every other test is a unit of its own, and xdist hands the largest units
    out first, so the workers stay busy to the end.
    """
    if item.get_closest_marker("xdist_group"):
        return
    if item.get_closest_marker("slow"):
        item.add_marker(pytest.mark.xdist_group("full-size"))
    elif hasattr(item, "_fixtureinfo") and any(defs[-1].scope in ("class", "module", "package")
                                               for defs in item._fixtureinfo.name2fixturedefs.values()):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Name each grouped test ``nodeid@group``, as xdist's loadgroup scheduler
    expects. pytest-xdist 3.8 does it by setting ``Item._nodeid``, which
    pytest 9 no longer reads (it keeps a structured ``Item._id``), so without
    this every test was a unit of its own and a module fixture was built
    once per worker that ran one of its tests."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own naming works
        return
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(names))}")


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """Each test worker keeps JAX's executables in a persistent cache of its own.

    Many tests build a fresh runner for a program and batch shape another
    test has compiled; its jit is a new function, so JAX compiles again, and
    loading the executable from disk instead costs a fraction of that. The
    numbers are the same executable's. Compile counts are the runner's own
    (tests/test_jax.py checks the cache itself, in a folder of its own, and
    turns it off afterwards)."""
    from impl_jax.compilation_cache import disable_compilation_cache, enable_compilation_cache

    enable_compilation_cache(tmp_path_factory.mktemp("jax-cache"))
    yield
    disable_compilation_cache()


@pytest.fixture(scope="session", autouse=True)
def tensorflow_graph_optimizer_off():
    """TensorFlow runs each new graph as traced, without Grappler's rewrites.

    Grappler optimises every graph a ``tf.function`` traces, on the first call
    of each trace, and the tests trace hundreds of small graphs that run a few
    times each: the TensorFlow graph implementation's contract tests take 30 s
    without it where they took 48 s with it. The tests compare TensorFlow's
    numbers with the float64 reference, never its speed; the benchmark and
    every command leave Grappler on. A machine without TensorFlow (the lent
    GPU machines, which run tests/test_variants_pytorch.py) has nothing to switch off."""
    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    if tf is not None:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    yield


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
def full_size_batches(sample_pairs, vocab):
    """The first of the embedded sample's bucketed batches of 32 pairs at
    each token width: every bucket's shapes, 124 pairs (each further batch of
    a width already seen, or a wider batch, would only repeat the work: the
    full-size model's float64 reference is the costliest fixture here)."""
    batches = make_batches(sample_pairs, vocab, batch_size=32)
    first = {}
    for batch in batches:
        first.setdefault(batch.premise_tokens.shape[1], batch)
    return list(first.values())


@pytest.fixture(scope="session")
def full_reference(full_params, full_config, full_size_batches):
    """Float64 reference outputs of the full-size model on those batches
    (computed once per session; every framework is compared with them)."""
    return [reference.forward(full_params, full_config, batch) for batch in full_size_batches]


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


@pytest.fixture(scope="session")
def small_params(small_config):
    """Float64 weights of the small model without a head."""
    return init_params(small_config, seed=3, dtype=np.float64)


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
