"""One command at a time per output folder.

``bench run`` and ``bench train`` append to files in their ``--out`` folder
(results.jsonl, metrics.jsonl, checkpoints). Two commands writing the same
folder would interleave their records and the report would read them as one
run, so each command holds an exclusive lock on the folder while it runs.

The lock is ``fcntl.flock`` on ``OUT/.lock``: the kernel releases it when
the holding process exits, however it exits (SIGKILL included), so a lock
left by a dead process is never "stale" in a way that needs guessing: the
next command simply gets it. The file also records who holds it (process id,
command, start time), which is what the refusal message quotes; that text is
information only, never what decides.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

LOCK_NAME = ".lock"


class FolderLocked(RuntimeError):
    """Another live process holds the folder's lock."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _describe(holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"`{holder.get('command', '?')}` (process {holder.get('pid', '?')}, started {when})"


class FolderLock:
    """Exclusive lock on an output folder, held from ``acquire`` until ``release``
    (or the process's exit). Usable as a context manager."""

    def __init__(self, folder: str | os.PathLike, command: str):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command
        self._fd: int | None = None
        self.took_over: dict | None = None  # what a dead holder had written, if anything

    def acquire(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by workers
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            raise FolderLocked(f"{self.folder} is in use by {_describe(holder)}: wait for it to finish, "
                               f"or give another --out") from None
        previous = self._read(fd)
        if previous.get("pid") and previous.get("pid") != os.getpid():
            # The lock was free, so its last holder has exited; the file only
            # still names it because nobody cleans up after a killed process.
            self.took_over = previous
        record = {"pid": os.getpid(), "command": self.command, "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            data = os.pread(fd, 4096, 0).decode("utf-8", errors="replace").strip()
            holder = json.loads(data) if data else {}
            return holder if isinstance(holder, dict) else {}
        except (OSError, json.JSONDecodeError):
            return {}

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # nobody holds it now
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output(folder: str | os.PathLike, command: str) -> FolderLock:
    """Take the folder's lock for the rest of this process (or until released),
    saying so on stderr when it takes over from a process that died holding it."""
    lock = FolderLock(folder, command).acquire()
    if lock.took_over:
        pid = lock.took_over.get("pid")
        state = "still running, but no longer holding it" if isinstance(pid, int) and _pid_alive(pid) else "gone"
        print(f"note: {folder} was last locked by {_describe(lock.took_over)}, {state}; taking over",
              file=sys.stderr)
    return lock
