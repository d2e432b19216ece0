"""DyNet trained as its users train it (``trainer="native"``, the benchmark's
``dynet`` rows): its own trainers update its weights in C++, no gradient is
read and no weight written through Python, and how far that is from the
shared update rules is measured here, step by step, against the shared rule
run in the same framework on the same batches (the shared rule itself is
held to the float64 reference by test_contract.py and test_train.py).

Also the heuristic DyNet groups an autobatched graph by (``dynet-depth``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import frameworks
from impl_dynet.runner import Runner
from shared.batching import make_pair_batch
from shared.params import init_params
from tests.helpers import small_config_for

STEPS = 20
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def config(vocab):
    return small_config_for(len(vocab))


@pytest.fixture(scope="module")
def batches(sample_pairs, vocab):
    """Twenty batches of eight real pairs, each its own words."""
    return [make_pair_batch(sample_pairs[8 * k:8 * k + 8], vocab) for k in range(STEPS)]


def _train(config, batches, trainer: str, name: str, lr: float, frozen=(), **hyper) -> dict[str, np.ndarray]:
    runner = Runner(init_params(config, seed=4), config, trainer=trainer)
    runner.set_optimizer(name, lr=lr, frozen=frozen, **hyper)
    for batch in batches:
        runner.train_step(batch)
    return runner.get_params()


def _largest_rel_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> tuple[float, str]:
    """The largest |a - b| of an entry over that entry's largest |b|, and its name."""
    diffs = {name: float(np.max(np.abs(a[name] - b[name])) / max(float(np.max(np.abs(b[name]))), 1e-30))
             for name in b}
    name = max(diffs, key=diffs.get)
    return diffs[name], name


def test_native_sgd_is_the_shared_rule(config, batches):
    """SimpleSGDTrainer with clipping off computes p - lr g, the shared rule:
    after 20 steps the weights differ by float32 rounding alone (DyNet's copy
    of a forget bias is b - 1, read back as (b - 1) + 1)."""
    shared = _train(config, batches, "shared", "sgd", 0.5)
    native = _train(config, batches, "native", "sgd", 0.5)
    start = init_params(config, seed=4)
    assert any(not np.array_equal(native[n], start[n]) for n in start)  # it trained
    diff, name = _largest_rel_diff(native, shared)
    assert diff < 1e-5, (name, diff)


def test_native_adam_differs_by_its_epsilon_and_sparse_rows(config, batches):
    """AdamTrainer adds epsilon to sqrt(v) before v's bias correction (the
    shared rule after it), which is the shared rule with epsilon / sqrt(1 -
    beta2^t): up to 32 times the epsilon in the first step. With the
    embedding frozen that is the only difference: with an epsilon too small
    to matter the two agree to float32 rounding after 20 steps; with Adam's
    1e-8 the weights whose gradients are as small as epsilon move visibly
    otherwise. Trained, the embedding differs as well: DyNet updates only
    the rows a batch looked up, the shared rule every row its moments remember."""
    frozen = ("embed.embedding",)
    tiny, name = _largest_rel_diff(_train(config, batches, "native", "adam", 1e-3, frozen, eps=1e-12),
                                   _train(config, batches, "shared", "adam", 1e-3, frozen, eps=1e-12))
    assert tiny < 1e-5, (name, tiny)
    usual, name = _largest_rel_diff(_train(config, batches, "native", "adam", 1e-3, frozen),
                                    _train(config, batches, "shared", "adam", 1e-3, frozen))
    assert 10 * tiny < usual < 1e-2, (name, usual, tiny)
    last = set(np.unique(np.concatenate([batches[-1].premise_tokens, batches[-1].hypothesis_tokens])))
    seen = set(np.unique(np.concatenate([np.concatenate([b.premise_tokens, b.hypothesis_tokens]).ravel()
                                         for b in batches[:-1]])))
    earlier = sorted(seen - last - {0})  # rows looked up before the last step only (0 is PAD)
    assert earlier
    for trainer, moves in (("native", False), ("shared", True)):
        runner = Runner(init_params(config, seed=4), config, trainer=trainer)
        runner.set_optimizer("adam", lr=1e-3)
        for batch in batches[:-1]:
            runner.train_step(batch)
        before = runner.get_params()["embed.embedding"][earlier]
        runner.train_step(batches[-1])
        assert (not np.array_equal(runner.get_params()["embed.embedding"][earlier], before)) == moves, trainer


def test_native_steps_read_no_gradient_and_keep_no_state_in_python(config, batches):
    """The timed step is DyNet's: build, evaluate (forward and backward) and
    update; no ``grads`` phase. Its trainer's state lives in C++: asking for
    it, or for what the shared rules have and DyNet's trainers compute
    otherwise, is one line."""
    runner = Runner(init_params(config, seed=4), config, trainer="native")
    runner.set_optimizer("adam", lr=1e-3)
    runner.train_step(batches[0])
    assert set(runner.last_phases) == {"build", "evaluate", "update"}
    for call in (runner.optimizer_state, lambda: runner.load_optimizer_state({})):
        with pytest.raises(ValueError, match="^DyNet's own trainers keep their state in C\\+\\+[^\n]+trainer='shared'$"):
            call()
    with pytest.raises(ValueError, match="momentum and weight decay"):
        runner.set_optimizer("sgd", lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="freeze only embed.embedding"):
        runner.set_optimizer("sgd", lr=0.1, frozen=["output.kernel"])
    with pytest.raises(ValueError, match="trainer must be one of shared, native"):
        Runner(init_params(config, seed=4), config, trainer="dynet")


def test_the_benchmark_times_dynet_with_its_own_trainer():
    """The registry's DyNet rows are timed training natively; bench train and the checkpoints keep the shared
    rules (the runner's default), so only the benchmark's plan reads the native option."""
    for name in ("dynet", "dynet-unbatched", "dynet-depth"):
        assert frameworks.implementation(name).timed_options == {"trainer": "native"}
        assert "trainer" not in frameworks.implementation(name).options
    assert frameworks.implementation("dynet-depth").env == {"SPINN_DYNET_AUTOBATCH": "depth"}


def test_the_heuristic_is_read_when_dynet_is_imported():
    """SPINN_DYNET_AUTOBATCH picks DyNet's process-wide heuristic (2: by depth);
    an unknown name is one line before DyNet starts."""
    code = "import impl_dynet.library, dynet_config; print(dynet_config.get()['autobatch'])"
    env = {**os.environ, "SPINN_DYNET_AUTOBATCH": "depth"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split()[-1] == "2", out.stderr
    env["SPINN_DYNET_AUTOBATCH"] = "sideways"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0 and "SPINN_DYNET_AUTOBATCH must be one of agenda, depth, got 'sideways'" in out.stderr
