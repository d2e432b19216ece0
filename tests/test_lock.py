"""The output-folder lock, with real processes holding it (bench/lock.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lock import FolderLock, FolderLocked, lock_output

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from bench.lock import lock_output
lock_output(sys.argv[1], "bench run --out X")
print("locked", flush=True)
time.sleep(60)
"""


def start_holder(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_command_is_refused_with_the_holders_pid(tmp_path):
    holder = start_holder(tmp_path)
    try:
        with pytest.raises(FolderLocked) as err:
            lock_output(tmp_path, "bench train --out X")
        message = str(err.value)
        assert f"process {holder.pid}" in message
        assert "bench run --out X" in message and "started 20" in message
        assert "\n" not in message
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_a_killed_process_is_taken_over(tmp_path, capsys):
    holder = start_holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lock = lock_output(tmp_path, "bench run --out X")
    try:
        assert lock.took_over["pid"] == holder.pid
        assert f"process {holder.pid}" in capsys.readouterr().err
    finally:
        lock.release()


def test_released_lock_is_free_and_leaves_no_holder(tmp_path, capsys):
    with FolderLock(tmp_path, "first"):
        with pytest.raises(FolderLocked):  # another open file description in this process is refused too
            FolderLock(tmp_path, "second").acquire()
    with FolderLock(tmp_path, "third") as lock:
        assert lock.took_over is None
    assert capsys.readouterr().err == ""


PARENT_WITH_WORKER = """
import subprocess, sys, time
from bench.lock import lock_output
lock_output(sys.argv[1], "bench run --out X")
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
print(worker.pid, flush=True)
time.sleep(60)
"""


def test_workers_do_not_inherit_the_lock(tmp_path):
    """A worker started while the lock is held (even with close_fds=False) must
    not keep the folder locked once the command that took the lock is gone."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT_WITH_WORKER, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    worker_pid = int(parent.stdout.readline())
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        os.kill(worker_pid, 0)  # the worker is still alive (this test kills it below)...
        FolderLock(tmp_path, "next").acquire().release()  # ...and the folder is free
    finally:
        try:
            os.kill(worker_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
