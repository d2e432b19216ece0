"""The output-folder lock, with real processes holding it (bench/lock.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lock import FolderLock, FolderLocked
from tests.helpers import dead_holder, started

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from bench.lock import FolderLock
held = FolderLock(sys.argv[1], "bench run --out X").acquire()
print("locked", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def holder_of(folder: Path):
    """A process holding the folder's lock, for the block (tests/helpers.py's ``started``)."""
    with started([sys.executable, "-c", HOLDER, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "locked"
        yield proc


def test_second_command_is_refused_with_the_holders_pid(tmp_path):
    with holder_of(tmp_path) as holder:
        with pytest.raises(FolderLocked) as err:
            FolderLock(tmp_path, "bench train --out X").acquire()
    message = str(err.value)
    assert f"process {holder.pid}" in message
    assert "bench run --out X" in message and "started 20" in message
    assert "\n" not in message


def test_lock_of_a_killed_process_is_taken_over(tmp_path, capsys):
    with holder_of(tmp_path) as holder:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    lock = FolderLock(tmp_path, "bench run --out X").acquire()
    lock.announce()
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
from bench.lock import FolderLock
held = FolderLock(sys.argv[1], "bench run --out X").acquire()
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
print(worker.pid, flush=True)
time.sleep(60)
"""


def test_workers_do_not_inherit_the_lock(tmp_path):
    """A worker started while the lock is held (even with close_fds=False) must
    not keep the folder locked once the command that took the lock is gone."""
    with started([sys.executable, "-c", PARENT_WITH_WORKER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                 text=True) as parent:  # the block's end kills the worker too: it is in the parent's group
        worker_pid = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        os.kill(worker_pid, 0)  # the worker is still alive...
        FolderLock(tmp_path, "next").acquire().release()  # ...and the folder is free


def test_a_folder_the_lock_made_goes_with_it_when_nothing_else_was_written(tmp_path):
    """A command refused after taking the lock leaves no folder (parents it made included) and no lock file."""
    with FolderLock(tmp_path / "a" / "b" / "run", "refused"):
        assert (tmp_path / "a" / "b" / "run" / ".lock").is_file()
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_stays_and_loses_only_the_lock_file_it_was_given(tmp_path):
    with FolderLock(tmp_path, "refused"):
        pass
    assert list(tmp_path.iterdir()) == []  # as it was: empty, still there
    (tmp_path / ".lock").write_text("")  # a lock file from before this command is not its to remove
    with FolderLock(tmp_path, "refused"):
        pass
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_a_folder_that_was_written_keeps_its_files_and_the_lock(tmp_path):
    out = tmp_path / "run"
    with FolderLock(out, "ran"):
        (out / "results.jsonl").write_text("{}\n")
    assert sorted(p.name for p in out.iterdir()) == [".lock", "results.jsonl"]


def test_the_lock_file_removed_by_its_holder_is_never_held_twice(tmp_path, monkeypatch):
    """A command that opened the lock file just before its holder removed it (a refused command leaving the folder as
    it found it) locks the file the path names now, which the next command is refused."""
    first = FolderLock(tmp_path / "run", "first").acquire()
    path, real_open, opened = os.fspath(first.path), os.open, []

    def open_then_release(name, flags, *args, **kwargs):
        fd = real_open(name, flags, *args, **kwargs)
        if os.fspath(name) == path and not opened:
            opened.append(fd)  # the file the first holds, open here...
            first.release()  # ...which removes it (and the folder) as it lets go
        return fd

    monkeypatch.setattr(os, "open", open_then_release)
    late = FolderLock(tmp_path / "run", "late").acquire()
    monkeypatch.undo()
    try:
        assert opened and late.path.is_file()  # the removed file was let go, the path's own file locked
        with pytest.raises(FolderLocked) as err:
            FolderLock(tmp_path / "run", "next").acquire()
        assert "`late`" in str(err.value)
    finally:
        late.release()
    assert not (tmp_path / "run").exists()  # made again by the late command, and removed by it


def test_taking_over_is_said_only_when_the_command_says_it_runs(tmp_path, capsys):
    with holder_of(tmp_path) as holder:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    lock = FolderLock(tmp_path, "bench train --out X").acquire()
    try:
        assert capsys.readouterr().err == ""
        lock.announce()
        lock.announce()
        assert capsys.readouterr().err.count(f"process {holder.pid}") == 1
    finally:
        lock.release()


@pytest.mark.parametrize("command", [
    ["run", "--quick", "--implementations", "pytorch"],
    ["scale", "--frameworks", "pytorch", "--replicas", "1"],
], ids=["run", "scale"])
def test_a_run_refused_for_its_results_says_only_why(command, tmp_path, capsys):
    """A folder that already holds results, locked last by a process that died: the refusal is the one line
    on stderr, with no note that the lock was taken over, and the folder is left as it was."""
    from bench.cli import main

    (tmp_path / "results.jsonl").write_text('{"implementation": "pytorch"}\n')
    (tmp_path / ".lock").write_text(dead_holder("bench run --out X"))
    code = main([*command, "--out", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: ") and "results.jsonl" in lines[0], lines
    assert (tmp_path / "results.jsonl").read_text() == '{"implementation": "pytorch"}\n'
