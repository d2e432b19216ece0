"""One command at a time per output folder (two appending to one ``--out`` would interleave their records): filelock's
lock on ``OUT/.lock``, a ``flock`` the kernel releases however its holder exits, so a dead holder never blocks. The file
names its holder, for the one-line refusal and the note on taking over. A command refused after taking the lock removes
the lock file and the folders it made, once nothing else is in them, while still holding it (filelock then treats the
removed file as not held, and ``acquire`` locks the file the path names now).
"""

from __future__ import annotations

import json
import os
import sys
import time
from itertools import takewhile
from pathlib import Path

LOCK_NAME = ".lock"
ATTEMPTS = 3  # tries at a held lock whose file names no holder (being removed, or not written yet)


class FolderLocked(RuntimeError):
    """Another live process holds the folder's lock."""


def _describe(holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"`{holder.get('command', '?')}` (process {holder.get('pid', '?')}, started {when})"


def _holder(read) -> dict:
    """The record a lock file holds (``read``: its bytes), or {}."""
    try:
        holder = json.loads(read().decode("utf-8", errors="replace").strip() or "{}")
    except (OSError, json.JSONDecodeError):
        return {}
    return holder if isinstance(holder, dict) else {}


class FolderLock:
    """Exclusive lock on an output folder, from ``acquire`` until ``release`` (or the process's exit)."""

    def __init__(self, folder: str | os.PathLike, command: str):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command
        self.took_over: dict | None = None  # what a dead holder had written, if anything
        self._lock = None  # filelock's, while held
        self._fd: int | None = None  # its file, while held
        self._created: list[Path] = []  # the folders acquire made, deepest first
        self._created_file = False  # whether acquire made the lock file
        self._announced = False

    def acquire(self) -> "FolderLock":
        from filelock import FileLock, Timeout

        for attempt in range(ATTEMPTS):
            # The folder and those of its parents that do not exist yet, deepest first; kept if a retry finds them made.
            self._created = list(takewhile(lambda path: not path.exists(), (self.folder, *self.folder.parents))) \
                or self._created
            try:
                before = os.stat(self.path)
            except FileNotFoundError:
                before = None
            lock = FileLock(self.path, blocking=False, on_acquired=lambda fd: self._hold(fd, before))
            try:
                lock.acquire()
            except Timeout:
                holder = _holder(lambda: self.path.read_bytes())
                if holder or attempt == ATTEMPTS - 1:
                    raise FolderLocked(f"{self.folder} is in use by {_describe(holder)}: wait for it to finish, "
                                       f"or give another --out") from None
            else:
                self._lock = lock
                return self

    def _hold(self, fd: int, before: os.stat_result | None) -> None:
        """Just locked (filelock's on_acquired): whether this command made the file, who held it last, and now us."""
        held = os.fstat(fd)
        self._created_file = before is None or (before.st_dev, before.st_ino) != (held.st_dev, held.st_ino)
        previous = _holder(lambda: os.pread(fd, 4096, 0))
        if previous.get("pid") and previous.get("pid") != os.getpid():
            self.took_over = previous  # the lock was free: its last holder has exited
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": self.command, "started": time.time()}).encode()
                  + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        if self._lock is None:
            return
        os.ftruncate(self._fd, 0)  # nobody holds it now
        try:
            alone = [entry.name for entry in os.scandir(self.folder)] == [LOCK_NAME]
        except OSError:
            alone = False
        if self._created_file and alone:
            self.path.unlink(missing_ok=True)  # still held: nobody can lock this file meanwhile
            for folder in self._created:  # deepest first; one that holds anything stays
                try:
                    folder.rmdir()
                except OSError:
                    break
        self._lock.release()
        self._lock = self._fd = None

    def announce(self) -> None:
        """Say on stderr (once, when the command is going to run) that the lock was taken over from a dead holder."""
        if self.took_over and not self._announced:
            self._announced = True
            import psutil

            pid = self.took_over.get("pid")
            state = "still running, but no longer holding it" if isinstance(pid, int) and psutil.pid_exists(pid) \
                else "gone"
            print(f"note: {self.folder} was last locked by {_describe(self.took_over)}, {state}; taking over",
                  file=sys.stderr)

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
