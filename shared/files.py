"""Writing files so that a failure leaves nothing half-written and says, in
one line, which file it was.

A write can fail part way: the disk fills (ENOSPC), a file-size limit is
reached (EFBIG), the folder is read-only (EACCES, EROFS). Python's own error
for a failed ``write()`` does not name the file, and a file written in place
would be left cut short. :func:`written_aside` writes to a temporary file in
the same folder and renames it over the destination only when every byte is
out (a rename within a folder is atomic), and turns any failure into an
``OSError`` that names the destination.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator


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


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
