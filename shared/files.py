"""Writing files durably, the suite's one module for it: a failure leaves nothing half-written and says, in one line,
which file it was.

A write can fail part way: the disk fills (ENOSPC), a file-size limit is reached (EFBIG), the folder is read-only
(EACCES, EROFS). Python's own error for a failed ``write()`` does not name the file, and a file written in place would
be left cut short. Three ways to write, each turning a failure into an ``OSError`` that names the file:

* :func:`written_aside` replaces a file whole: a temporary file in the same folder, renamed over the destination only
  when every byte is out (a rename within a folder is atomic);
* :func:`append` adds whole records to a file that grows (JSON lines), cutting it back to where it ended if a write
  fails; ``sync=True`` has them on disk (fsync) before it returns;
* :func:`synced` writes a file that must be on disk before the next step (a checkpoint's), and :func:`sync_folder`
  makes a folder's new entries (a renamed file or folder) durable.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import BinaryIO, Iterator


def write_error(err: OSError, path: str | os.PathLike, what: str = "") -> OSError:
    """An OSError with ``err``'s errno whose message is one line naming ``path``
    (``what`` is added after the reason: what the failure left as it was)."""
    # From errno when there is one: ``err`` may itself be one of these (a
    # nested write), whose text already names a file.
    reason = os.strerror(err.errno) if err.errno else (str(err) or type(err).__name__)
    return OSError(err.errno, f"cannot write {os.fspath(path)}: {reason}{what}")


@contextlib.contextmanager
def written_aside(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it replaces
    ``path``, on any failure it is removed (an OSError is re-raised naming
    ``path``; anything else, a KeyboardInterrupt say, as it was)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not tempfile.mkstemp: its files are private (0600); this one gets
        # the mode any new file gets (0666 less the umask).
        tmp = str(path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"))
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as err:
        raise write_error(err, path) from err
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as err:
        _remove(tmp)
        raise write_error(err, path) from err
    except BaseException:
        _remove(tmp)
        raise


def open_to_append(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened unbuffered for appending bytes (:func:`append`), or an OSError naming it."""
    try:
        return open(path, "ab", buffering=0)
    except OSError as err:
        raise write_error(err, path) from err


def append(file: BinaryIO, data: bytes, path: str | os.PathLike, *, sync: bool = False) -> None:
    """Append ``data`` to ``file`` (:func:`open_to_append`'s, of ``path``) whole: if a write fails (a full disk), cut
    the file back to where it ended and raise an OSError naming ``path``, so a file only ever holds whole records.
    ``sync``: on disk (fsync) before returning."""
    start = file.seek(0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[file.write(view):]
    except OSError as err:
        with contextlib.suppress(OSError):
            file.truncate(start)
        raise write_error(err, path) from err
    if sync:
        try:
            os.fsync(file.fileno())
        except OSError as err:
            raise write_error(err, path) from err


@contextlib.contextmanager
def synced(path: str | os.PathLike, mode: str = "wb") -> Iterator:
    """``path`` opened for writing; once the block has written it, flushed and on disk (fsync)."""
    with open(path, mode) as file:
        yield file
        file.flush()
        os.fsync(file.fileno())


def sync_folder(path: str | os.PathLike) -> None:
    """A folder's entries on disk (fsync), so a file or folder renamed into it stays there; nothing where the platform
    does not open folders."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
