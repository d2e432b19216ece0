"""Data parallelism (bench train --replicas K) on each framework's own engine.

K replicas over a global batch of B pairs take the step one process takes
over those B pairs: the same loss curve (relative 1e-5 over 20 steps) and the
same weights (relative 1e-5), dropout on, its masks drawn per pair. JAX shards
the batch over a mesh of the two host devices conftest.py gives this process;
PyTorch runs two processes under its elastic launcher, and TensorFlow a
MirroredStrategy over two logical CPUs, both started from the command line
as a user starts them. JAX and TensorFlow also run as two processes of one
job over the loopback address (--processes 2), as on two hosts. A replica
killed mid-run ends the job (no wait at the all-reduce), and the job
resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.train.checkpoints import list_checkpoints
from bench.records import read_metrics
from bench.scale import summarize
from bench.train.config import TrainConfig
from bench.train.trainer import Trainer
from shared.compare import rel_err
from shared.params import ModelConfig, ParamFile, init_params, load_params, save_params
from shared.platform import first_cause
from shared.synthetic import synthetic_pairs
from shared.vocab import Vocabulary
from tests.helpers import HANG, curve_rel_err, run, started

PAIRS = synthetic_pairs(64, seed=0)  # what --data synthetic --num-pairs 64 reads
VOCAB = Vocabulary.from_pairs(PAIRS, lowercase=True)
CONFIG = ModelConfig(vocab_size=len(VOCAB), embed_dim=8, hidden_dim=6, tracker_dim=3, mlp_dim=8, mlp_layers=1)
INIT = ParamFile(init_params(CONFIG, seed=0), CONFIG, VOCAB.to_array())
STEPS = 20
# Adam, dropout on; batches of 8 from one bucket (N=16), so 8 steps an epoch.
SETTINGS = dict(optimizer="adam", lr=0.02, dropout=0.1, batch_size=8, buckets=(16,), steps=STEPS, log_every=1,
                train_eval_pairs=0)
ARGV = ["train", "--data", "synthetic", "--num-pairs", "64", "--dev", "none", "--optimizer", "adam", "--lr", "0.02",
        "--dropout", "0.1", "--batch-size", "8", "--buckets", "16", "--steps", str(STEPS), "--log-every", "1",
        "--train-eval-pairs", "0", "--quiet"]
TOL = 1e-5
# One worker runs the whole module, one job after another. A job's processes wait for each other at every step,
# and while they wait they keep a core busy; two jobs at once on two cores (one from each worker) starve each
# other and the rest of the suite.
pytestmark = pytest.mark.xdist_group("replicas")
# SGD, dropout on, float32: the processes' check (docs: Training past one device).
SGD_SETTINGS = {**SETTINGS, "optimizer": "sgd", "lr": 0.5}
SGD_ARGV = [a if a != "adam" else "sgd" for a in ARGV]
SGD_ARGV[SGD_ARGV.index("--lr") + 1] = "0.5"
LOOPBACK_STEPS = 8  # one epoch of batches of 8 (64 pairs)


def _curve(out: Path) -> np.ndarray:
    return np.array([r["loss"] for r in read_metrics(out) if r["kind"] == "train"])


def _one_replica(framework: str, out: Path):
    cfg = TrainConfig(framework=framework, **SETTINGS)
    return Trainer(cfg, out, PAIRS, init=INIT, progress=False).run()


def _assert_same_steps(out_k: Path, out_1: Path, steps: int = STEPS) -> None:
    curve_k, curve_1 = _curve(out_k), _curve(out_1)
    assert len(curve_k) == len(curve_1) == steps
    assert curve_rel_err(curve_k, curve_1) < TOL
    weights_k, weights_1 = load_params(out_k / "model.npz").params, load_params(out_1 / "model.npz").params
    errors = {name: rel_err(weights_k[name], weights_1[name]) for name in weights_1}
    assert max(errors.values()) < TOL, errors
    # Not a vacuous check: the steps moved the weights far beyond the tolerance.
    assert rel_err(weights_1["output.kernel"], INIT.params["output.kernel"]) > 100 * TOL


def test_jax_replicas_shard_the_batch_over_a_mesh(tmp_path):
    """Two devices of one process: the same 20 steps as one device."""
    cfg = TrainConfig(framework="jax", replicas=2, **SETTINGS)
    result = Trainer(cfg, tmp_path / "k2", PAIRS, init=INIT, progress=False).run()
    _one_replica("jax", tmp_path / "k1")
    _assert_same_steps(tmp_path / "k2", tmp_path / "k1")
    assert result.steps == STEPS


def _bench(*argv: str) -> subprocess.CompletedProcess:
    """A ``bench`` command run to its end (tests/helpers.py's ``run``: nothing it starts outlives the test)."""
    return run([sys.executable, "-m", "bench", *argv])


def _started(*argv: str, token: str):
    """A ``bench`` command started in the background, its environment marked with ``token``."""
    return started([sys.executable, "-m", "bench", *argv], env={**os.environ, "SPINN_TEST_JOB": token},
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_pytorch_replicas_from_the_command_line(tmp_path):
    """`bench train --replicas 2`: two processes under PyTorch's elastic
    launcher, DistributedDataParallel between them; the same 20 steps as one
    process, and one folder written (by replica 0)."""
    init = tmp_path / "init.npz"
    save_params(init, INIT.params, CONFIG, INIT.vocab)
    job = _bench(*ARGV, "--framework", "pytorch", "--replicas", "2", "--init", str(init), "--out", str(tmp_path / "k2"))
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, err
    assert out.count("trained pytorch") == 1  # the summary of replica 0 only
    _one_replica("pytorch", tmp_path / "k1")
    _assert_same_steps(tmp_path / "k2", tmp_path / "k1")
    # Each replica's compute and all-reduce wait per step, as bench scale reads them.
    summary = summarize(tmp_path / "k2", warmup=1)
    assert summary["steps"] == STEPS - 1 and len(summary["replica_allreduce_wait_s"]) == 2
    assert all(w >= 0 for w in summary["replica_allreduce_wait_s"]) and min(summary["replica_compute_s"]) > 0
    assert 0 <= summary["straggler_gap_share"] < 1


def test_tensorflow_replicas_from_the_command_line(tmp_path):
    """`bench train --replicas 2`: one process, MirroredStrategy over two
    logical CPU devices (made before TensorFlow's runtime starts, so in a
    process of its own); the same 20 steps as one device.

    In float64: in float32 these Adam steps amplify rounding in one entry of
    tracker.kernel_input whose first gradient (2.6e-8) is near eps, to 4e-5
    of the weights in 2 replicas against 1, and as much in one process with
    oneDNN on against off; in float64 every difference is below 1e-14."""
    init = tmp_path / "init.npz"
    save_params(init, INIT.params, CONFIG, INIT.vocab)
    job = _bench(*ARGV, "--framework", "tensorflow", "--replicas", "2", "--dtype", "float64", "--init", str(init),
                 "--out", str(tmp_path / "k2"))
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, err
    assert out.count("trained tensorflow") == 1
    Trainer(TrainConfig(framework="tensorflow", dtype="float64", **SETTINGS), tmp_path / "k1", PAIRS, init=INIT,
            progress=False).run()
    _assert_same_steps(tmp_path / "k2", tmp_path / "k1")


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_processes_over_loopback_take_the_steps_of_one(tmp_path, framework):
    """`bench train --replicas 2 --processes 2`: two processes of one job over
    127.0.0.1, started by bench as each ecosystem starts them on a cluster
    (jax.distributed from JAX_COORDINATOR_ADDRESS and its two siblings;
    MultiWorkerMirroredStrategy from TF_CONFIG). SGD with dropout, float32:
    the same steps as one process (one epoch: the processes wait for each
    other at every step, which on two busy cores is most of the test's time),
    one folder written (by process 0)."""
    init = tmp_path / "init.npz"
    save_params(init, INIT.params, CONFIG, INIT.vocab)
    argv = list(SGD_ARGV)
    argv[argv.index("--steps") + 1] = str(LOOPBACK_STEPS)
    job = _bench(*argv, "--framework", framework, "--replicas", "2", "--processes", "2", "--init", str(init),
                 "--out", str(tmp_path / "p2"))
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, err
    assert out.count(f"trained {framework}") == 1
    assert "[Gloo]" not in out + err and "Traceback" not in err, err
    Trainer(TrainConfig(framework=framework, **{**SGD_SETTINGS, "steps": LOOPBACK_STEPS}), tmp_path / "p1", PAIRS,
            init=INIT, progress=False).run()
    _assert_same_steps(tmp_path / "p2", tmp_path / "p1", LOOPBACK_STEPS)


# How each engine's launcher tells a process its rank: the variable, and what its value holds for rank 1.
RANK_ONE = {"pytorch": ("RANK", lambda value: value == "1"), "jax": ("JAX_PROCESS_ID", lambda value: value == "1"),
            "tensorflow": ("TF_CONFIG", lambda value: json.loads(value)["task"]["index"] == 1)}


def _replica_pid(token: str, framework: str) -> int | None:
    """The process of rank 1 in the job whose environment holds ``token``."""
    variable, is_one = RANK_ONE[framework]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = dict(e.split("=", 1) for e in (entry / "environ").read_text().split("\0") if "=" in e)
        except (OSError, UnicodeDecodeError):
            continue
        if environ.get("SPINN_TEST_JOB") == token and variable in environ and is_one(environ[variable]):
            return int(entry.name)
    return None


def _kill_when_checkpointed(job: subprocess.Popen, out: Path, token: str, framework: str) -> None:
    """Wait for the run's first checkpoint, then SIGKILL the job's process of rank 1."""
    deadline = time.monotonic() + HANG
    while not list_checkpoints(out) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    victim = _replica_pid(token, framework)
    assert job.poll() is None and victim is not None, job.stderr.read() if job.poll() is not None else "no victim"
    os.kill(victim, signal.SIGKILL)


def _resumes_from_the_last_checkpoint(argv: list[str], framework: str, out: Path) -> None:
    """Resumed with another K (one process): from the last checkpoint to the end."""
    done_before = list_checkpoints(out)[-1].name
    assert main(argv[:-1] + ["--framework", framework, "--epochs", "400", "--out", str(out), "--resume",
                             "--steps", str(int(done_before[len("step-"):]) + 8), "--quiet"]) == 0
    resume = [r for r in read_metrics(out) if r["kind"] == "resume"]
    assert resume and resume[-1]["from"].endswith(done_before)


def test_the_cause_named_is_the_killed_process_not_a_peer_that_aborted_or_exited():
    """Whom both launchers name when several processes are found failed at one poll: a replica's SIGKILL and
    Gloo's abort of its peer (which lost the connection) can be found together, and the abort is not the cause."""
    kill, abort, fault = -signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV
    assert first_cause([(0, abort), (1, kill)]) == (1, kill)
    assert first_cause([(0, 1), (1, abort)]) == (1, abort)
    assert first_cause([(0, 1), (1, fault), (2, kill)]) == (1, fault)  # of equals, the earliest given
    assert first_cause([(1, 3), (0, 1)]) == (1, 3)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the process through /proc")
def test_a_killed_process_ends_the_job_in_one_line_and_the_run_resumes(tmp_path):
    """bench's launcher of a job's processes (bench/train/launch.py; the same for JAX and TensorFlow, whose
    processes it starts alike), on TensorFlow's, which start fastest."""
    framework = "tensorflow"
    token = uuid.uuid4().hex
    out = tmp_path / "run"
    argv = [a for a in ARGV if a not in ("--steps", str(STEPS))]
    with _started(*argv, "--framework", framework, "--replicas", "2", "--processes", "2", "--epochs", "400",
                  "--out", str(out), token=token) as job:
        _kill_when_checkpointed(job, out, token, framework)
        _, err = job.communicate(timeout=HANG)  # the job ends: no wait at the all-reduce for a peer that is gone
    assert job.returncode == 1
    assert err.strip().splitlines() == [
        f"error: process 1 of 2 ({framework}) was killed by SIGKILL; the others were stopped. The run folder holds "
        "the last checkpoint: the same command with --resume goes on from it"], err
    _resumes_from_the_last_checkpoint(argv, framework, out)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the replica's process through /proc")
def test_a_killed_replica_stops_the_job_and_the_run_resumes(tmp_path):
    token = uuid.uuid4().hex
    out = tmp_path / "run"
    argv = [a for a in ARGV if a not in ("--steps", str(STEPS))]
    with _started(*argv, "--framework", "pytorch", "--replicas", "2", "--epochs", "400", "--out", str(out),
                  token=token) as job:
        _kill_when_checkpointed(job, out, token, "pytorch")
        _, err = job.communicate(timeout=HANG)  # the job ends: no hang at the all-reduce
    assert job.returncode == 1
    assert "error: replica 1 of 2 was killed by SIGKILL" in err and "--resume" in err, err
    _resumes_from_the_last_checkpoint(argv, "pytorch", out)


@pytest.mark.parametrize("framework,message", [
    ("dynet", "DyNet has no data-parallel engine"),
    ("reference", "one process on one device"),
])
def test_frameworks_without_an_engine_say_so(tmp_path, capsys, framework, message):
    assert main(ARGV + ["--framework", framework, "--replicas", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --replicas: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_batch_that_does_not_split_is_refused(tmp_path, capsys):
    assert main(ARGV + ["--framework", "jax", "--replicas", "3", "--out", str(tmp_path)]) == 2
    assert "--batch-size 8 does not split into 3 replicas" in capsys.readouterr().err
