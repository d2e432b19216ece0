"""A new framework is one package and one registry entry (tests/toy_framework).

The toy framework registers itself in a process whose environment names its
plugin module (``SPINN_PLUGINS``), so the commands and the benchmark's worker
processes see it without a line of bench/ or shared/ changed. The contract
tests (test_contract.py) run it beside the real implementations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import frameworks
from shared import reference
from shared.batching import make_pair_batch
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32, max_abs_err
from shared.params import init_params, save_params
from tests.helpers import run, small_config_for, write_jsonl
from tests import toy_framework

ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str) -> subprocess.CompletedProcess:
    """``python -m bench ARGS`` from the repository root, with the toy plugin named."""
    env = {**os.environ, "SPINN_PLUGINS": toy_framework.PLUGIN, "PYTHONPATH": str(ROOT)}
    result = run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture
def toy():
    """The toy framework registered in this process, for one test."""
    was_registered = toy_framework.NAME in frameworks.FRAMEWORKS
    entry = toy_framework.register()
    yield entry
    if not was_registered:
        frameworks.unregister(toy_framework.NAME)


def test_registering_is_all_it_takes(toy):
    """The registry's views, the platform and the runner come from the one entry."""
    assert frameworks.FRAMEWORKS[-1] == toy_framework.NAME and toy_framework.NAME in frameworks.NAMES
    assert frameworks.IMPLEMENTATIONS[toy_framework.NAME] == (toy_framework.NAME, {})
    assert toy_framework.NAME in frameworks.EAGER and toy_framework.NAME in frameworks.explained()
    assert frameworks.matrix()[frameworks.LISTS, toy_framework.NAME] == [toy_framework.NAME]
    assert frameworks.matrix()[frameworks.MASKED, toy_framework.NAME] == "not built: a toy"
    assert frameworks.platform(toy_framework.NAME).version() == np.__version__
    assert frameworks.platform(toy_framework.NAME).check_device("auto") == "cpu"
    assert frameworks.installed(toy_framework.NAME)
    assert frameworks.runner_class(toy_framework.NAME).framework == toy_framework.NAME  # it imports and loads
    assert frameworks.BASELINE == frameworks.FRAMEWORKS_BY_NAME[frameworks.FRAMEWORKS[0]].implementations[0].name
    frameworks.unregister(toy_framework.NAME)
    assert toy_framework.NAME not in frameworks.NAMES and (frameworks.LISTS, toy_framework.NAME) not in frameworks.matrix()
    toy_framework.register()  # the fixture's teardown finds it registered, as it left it


def test_contract_tests_include_it():
    from tests import test_contract

    assert toy_framework.NAME in test_contract.NAMES


def test_encode_command(tmp_path, vocab, sample_pairs):
    """``bench encode --framework toy`` writes the reference's encodings (float32)."""
    config = small_config_for(len(vocab))
    params = init_params(config, seed=1, dtype=np.float32)
    save_params(tmp_path / "model.npz", params, config, vocab.to_array())
    pairs = sample_pairs[:5]
    write_jsonl(pairs, tmp_path / "pairs.jsonl")
    run_bench("encode", "--framework", toy_framework.NAME, "--params", str(tmp_path / "model.npz"),
              "--data", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path / "enc.npz"))
    ref = reference.forward(params, config, make_pair_batch(pairs, vocab))
    with np.load(tmp_path / "enc.npz") as enc:
        assert list(enc["pair_id"]) == [p.pair_id for p in pairs]
        assert enc["premise"].dtype == np.float32
        assert max_abs_err(enc["premise"], ref.premise) <= ENCODING_TOL_F32
        assert max_abs_err(enc["hypothesis"], ref.hypothesis) <= ENCODING_TOL_F32
        assert max_abs_err(enc["logits"], ref.logits) <= LOGITS_TOL_F32


def test_benchmark_round(tmp_path):
    """A quick benchmark round measures the toy framework beside the baseline,
    its worker process registering it from the inherited environment."""
    out = tmp_path / "run"
    run_bench("run", "--quick", "--implementations", f"{toy_framework.NAME},pytorch", "--modes", "infer",
              "--batch-sizes", "1", "--rounds", "1", "--out", str(out))
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    measured = {r["implementation"] for r in records}
    assert {toy_framework.NAME, "pytorch"} <= measured, measured
