"""One command at a time per output folder: two commands appending to the same ``--out`` folder would interleave their
records, and a report would read them as one run.

The lock is ``fcntl.flock`` on ``OUT/.lock``: the kernel releases it when the holding process exits, however it exits
(SIGKILL included), so a lock left by a dead process is never "stale": the next command simply gets it. The file also
records who holds it, for the refusal message only. A command refused after taking the lock leaves the folder as it
found it (``release`` removes the lock file and folders it created, once nothing else is in them); a lock file is only
ever removed by its holder, before it lets go, and ``acquire`` locks only the file its path still names, so a removal
never lets two commands hold the same folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from itertools import takewhile
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
    """Exclusive lock on an output folder, from ``acquire`` until ``release`` (or the process's exit)."""

    def __init__(self, folder: str | os.PathLike, command: str):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command
        self._fd: int | None = None
        self.took_over: dict | None = None  # what a dead holder had written, if anything
        self._created: list[Path] = []  # the folders acquire made, deepest first
        self._created_file = False  # whether acquire made the lock file
        self._announced = False

    def acquire(self) -> "FolderLock":
        while True:
            # The folder and those of its parents that do not exist yet, deepest first; kept if a retry finds them made.
            self._created = list(takewhile(lambda path: not path.exists(), (self.folder, *self.folder.parents))) \
                or self._created
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, self._created_file = _open_lock_file(self.path)
            if fd is None:  # the folder went between mkdir and open (its last holder removed it): again
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read(fd)
                os.close(fd)
                raise FolderLocked(f"{self.folder} is in use by {_describe(holder)}: wait for it to finish, "
                                   f"or give another --out") from None
            if _names(self.path, fd):
                break
            os.close(fd)  # a holder removed this file before letting go of it: lock the path's file instead
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
            if self._created_file and _holds_only_the_lock(self.folder):
                self.path.unlink(missing_ok=True)  # still held: nobody can lock this file meanwhile
                for folder in self._created:  # deepest first; one that holds anything stays
                    try:
                        folder.rmdir()
                    except OSError:
                        break
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def announce(self) -> None:
        """Say on stderr (once) that this lock was taken over from a process
        that died holding it: a command calls it once it is going to run."""
        if self.took_over and not self._announced:
            self._announced = True
            pid = self.took_over.get("pid")
            state = "still running, but no longer holding it" if isinstance(pid, int) and _pid_alive(pid) else "gone"
            print(f"note: {self.folder} was last locked by {_describe(self.took_over)}, {state}; taking over",
                  file=sys.stderr)

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output(folder: str | os.PathLike, command: str, *, announce: bool = True) -> FolderLock:
    """Take the folder's lock, saying so when it takes over from a dead process (``announce=False``: once the caller
    calls ``announce``, sure to run)."""
    lock = FolderLock(folder, command).acquire()
    if announce:
        lock.announce()
    return lock


def _open_lock_file(path: Path) -> tuple[int | None, bool]:
    """The lock file's descriptor and whether this call created it; (None, False) when its folder is gone."""
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
        except FileNotFoundError:
            return None, False
        try:
            return os.open(path, os.O_RDWR), False
        except FileNotFoundError:  # removed in between by its holder: create it
            continue


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _holds_only_the_lock(folder: Path) -> bool:
    try:
        return [entry.name for entry in os.scandir(folder)] == [LOCK_NAME]
    except OSError:
        return False
