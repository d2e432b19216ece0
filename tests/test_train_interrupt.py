"""Nothing lost when a run is interrupted: ``bench train`` stopped by SIGINT
(Ctrl-C) or SIGTERM mid-epoch finishes the step under way, writes a
checkpoint and says in one line how to continue; ``--resume`` then ends on
the weights of the run that was never interrupted. The run is a real
process and a real signal, sent when the run's metrics show it training
(an event, not a clock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shared.params import load_params
from tests.helpers import HANG, run, started

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--framework", "pytorch", "--size", "small", "--num-pairs", "200", "--batch-size", "4", "--epochs", "2",
        "--log-every", "2", "--checkpoint-every", "20", "--keep-checkpoints", "10", "--train-eval-pairs", "0",
        "--quiet"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "bench", "train", *ARGS, "--out", str(out), *extra], cwd=ROOT, env=ENV)


def _train_records(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[:-1] + ([lines[-1]] if lines and lines[-1].endswith("}") else [])
            if line.strip()]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The run nobody interrupted."""
    out = tmp_path_factory.mktemp("straight") / "run"
    done = _train(out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("how", [signal.SIGINT], ids=["SIGINT"])  # SIGTERM takes the same handler
def test_an_interrupted_run_checkpoints_and_resumes_to_the_same_weights(tmp_path, how, straight):
    out = tmp_path / "interrupted"
    with started([sys.executable, "-m", "bench", "train", *ARGS, "--out", str(out)], cwd=ROOT, env=ENV,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as training:
        while not any(r.get("kind") == "train" for r in _train_records(out)):  # wait until it trains
            assert training.poll() is None, training.communicate()
            time.sleep(0.05)
        training.send_signal(how)
        _, err = training.communicate(timeout=HANG)
    lines = [line for line in err.splitlines() if line.strip() and "rows read" not in line]  # loading's report aside
    assert training.returncode == 130 and len(lines) == 1, err  # one line, no traceback
    assert lines[0].startswith(f"interrupted: {how.name} at step ") and "add --resume" in lines[0], err
    stopped = int(lines[0].split(" at step ")[1].split(";")[0].replace(",", ""))
    state = json.loads((out / "checkpoints" / f"step-{stopped:08d}" / "state.json").read_text())
    assert state["step"] == stopped and 0 < state["batch_in_epoch"]  # mid-epoch, where it stopped
    resumed = _train(out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    mine, theirs = load_params(out / "model.npz"), load_params(straight / "model.npz")
    assert mine.params.keys() == theirs.params.keys()
    for name, value in theirs.params.items():
        assert np.array_equal(mine.params[name], value), name


def test_a_checkpoint_every_n_steps_inside_an_epoch(straight):
    """--checkpoint-every 20: inside each epoch too, besides the epoch ends (the newest ten kept)."""
    per_epoch = next(r for r in _train_records(straight) if r["kind"] == "run")["steps_per_epoch"]
    steps = [json.loads((p / "state.json").read_text())["step"] for p in sorted((straight / "checkpoints").iterdir())]
    inside = [k for k in range(20, 2 * per_epoch, 20) if k % per_epoch]
    assert steps == sorted(set(inside + [per_epoch, 2 * per_epoch]))[-10:], (steps, per_epoch)


def test_resume_without_a_checkpoint_says_it_starts_again(straight, tmp_path):
    """A run stopped before its first checkpoint: --resume starts from step 0 and says so."""
    out = tmp_path / "early"
    out.mkdir()
    (out / "run.json").write_text((straight / "run.json").read_text())
    done = _train(out, "--resume", "--steps", "2")
    assert done.returncode == 0, done.stderr
    assert "--resume: " + str(out) + " holds no checkpoint yet" in done.stderr and "from step 0" in done.stderr
