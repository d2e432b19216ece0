"""``bench run`` as a process: its workers die with it, its output folder is
locked while it runs, and a missing GPU is refused before anything is measured.

Real subprocesses, kept small: one PyTorch worker, the quick model; each started by tests/helpers.py's
``started``, so SIGINT reaches it however the tests were started, and nothing it started outlives its test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.cli import main
from bench.lock import FolderLock
from tests.helpers import HANG, run, started

ROOT = Path(__file__).resolve().parents[1]

# Long enough to be interrupted: many rounds of the cheapest measurement.
RUN = ["-m", "bench", "run", "--quick", "--implementations", "pytorch", "--modes", "infer",
       "--transitions", "gold", "--batch-sizes", "1", "--rounds", "100000"]


def command_line(process: psutil.Process) -> str:
    """The process's command line, or "" once it has exited (short-lived children, such as a
    device probe, can be zombies or gone between listing and reading)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def still_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def measuring_worker(parent: subprocess.Popen, out: Path) -> psutil.Process:
    """The benchmark's worker, once it has answered (it is measuring)."""
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        workers = [p for p in psutil.Process(parent.pid).children(recursive=True)
                   if "bench.run.worker" in command_line(p)]
        if workers and (out / "agreement").is_dir():  # started, and past its agreement check
            return workers[0]
        assert parent.poll() is None, parent.stderr.read()
        time.sleep(0.2)
    raise AssertionError(f"the worker did not start within {HANG} s: a hang")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"])
def test_worker_dies_with_the_harness(tmp_path, how):
    with started([sys.executable, *RUN, "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True) as parent:
        worker = measuring_worker(parent, tmp_path)
        assert (tmp_path / ".scratch" / "pytorch" / "private").is_dir()  # the worker's caches: in the run's folder
        os.kill(parent.pid, how)
        parent.wait(timeout=HANG)
        worker.wait(timeout=HANG)  # returns once the worker is gone; TimeoutExpired only if it outlives its parent
        assert not worker.is_running()
        if how == signal.SIGINT:  # the parent ends its workers, and removes their scratch folders
            assert parent.returncode == 130 and "interrupted" in parent.stderr.read()
            assert not (tmp_path / ".scratch").exists()


def test_worker_ends_with_a_finished_run(tmp_path):
    out = tmp_path / "run"
    seen = set()
    with started([sys.executable, *RUN[:-2], "--rounds", "2", "--out", str(out)], cwd=ROOT,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        while proc.poll() is None:
            try:
                seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        proc.wait(timeout=HANG)
    assert proc.returncode == 0
    assert seen, "no worker was seen"
    assert not any(still_alive(pid) for pid in seen)
    assert not (out / ".scratch").exists()


def test_a_second_run_on_the_same_folder_is_refused(tmp_path, capsys):
    with FolderLock(tmp_path, "bench run --out elsewhere"):
        code = main(["run", "--quick", "--implementations", "pytorch", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"process {os.getpid()}" in err and "bench run --out elsewhere" in err
    assert not (tmp_path / "results.jsonl").exists()


def test_a_second_training_run_on_the_same_folder_is_refused(tmp_path, capsys):
    with FolderLock(tmp_path, "bench train --out x"):
        code = main(["train", "--framework", "reference", "--data", "synthetic", "--num-pairs", "8",
                     "--size", "small", "--steps", "1", "--out", str(tmp_path)])
    assert code == 2
    assert "bench train --out x" in capsys.readouterr().err


def test_gpu_asked_for_without_one_is_refused_before_measuring(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal cannot happen here")
    code = main(["run", "--quick", "--device", "gpu", "--implementations", "pytorch,jax", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if "sees no GPU" in line]
    assert len(lines) == 2 and any("pytorch" in l for l in lines) and any("jax" in l for l in lines)
    assert not (tmp_path / "results.jsonl").exists()


def test_an_interrupted_run_keeps_what_finished_reports_it_and_says_how_to_finish(tmp_path):
    out = tmp_path / "run"
    first = run([sys.executable, *RUN[:-2], "--rounds", "2", "--out", str(out)], cwd=ROOT)
    assert first.returncode == 0, first.stderr
    shutil.rmtree(out / "agreement")  # made again as the second run starts measuring: the event waited on below
    # The same run asked for one more batch size, measured for ever, and stopped as a terminal's Ctrl-C stops a
    # command: SIGINT to its whole process group, the workers included.
    words = ["run", "--quick", "--implementations", "pytorch", "--modes", "infer", "--transitions", "gold",
             "--batch-sizes", "1,2", "--rounds", "100000", "--out", str(out), "--resume"]
    with started([sys.executable, "-m", "bench", *words], cwd=ROOT, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True) as parent:
        deadline = time.monotonic() + HANG
        while not (out / "agreement").is_dir():
            assert parent.poll() is None and time.monotonic() < deadline, parent.stderr.read()
            time.sleep(0.2)
        os.killpg(parent.pid, signal.SIGINT)
        err = parent.communicate(timeout=HANG)[1]
    assert parent.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    said = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(said) == 1 and "1 of 2 measurements finished" in said[0] and "--resume" in said[0]
    report = (out / "report.md").read_text()
    assert "Partial: interrupted" in report
    assert len((out / "results.jsonl").read_text().splitlines()) == 1
