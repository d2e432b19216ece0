"""What a record measured: the source files that ran, and whether they are still today's (docs/spec.md §6, "Decision:
provenance": ``measured``, ``measured_digest``, ``git_commit``, ``measured_clean``)."""

from __future__ import annotations

import ast
import hashlib
import os
import platform as host
import subprocess
import sys
import time
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Iterable

from bench import ROOT

PINS = "constraints.txt"
KEYS = ("git_commit", "measured_clean", "measured", "measured_digest")
_SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()


def loaded(root: Path = ROOT) -> list[str]:
    """The repository's source files among this interpreter's imported modules (relative, sorted), this one aside."""
    files = {_in_repository(getattr(module, "__file__", None), root) for module in list(sys.modules.values())}
    return sorted(files - {None, _SELF})


def _in_repository(path: str | None, root: Path) -> str | None:
    if not path or not path.endswith(".py") or not os.path.isabs(path):  # torch names a few modules "_ops.py"
        return None
    try:
        rel = Path(path).resolve().relative_to(root)
    except ValueError:
        return None
    if any(part.startswith(".") or part == "site-packages" for part in rel.parts):  # a virtual environment inside
        return None
    return rel.as_posix()


def normalized(data: bytes, rel: str) -> str:
    """What of a file counts (docs/spec.md §6, "How it is compared"): for Python its syntax tree without docstrings."""
    if rel.endswith(".py"):
        try:
            return _canonical(ast.parse(data))
        except SyntaxError:  # not Python a process could have run: its bytes, so any edit counts
            return data.decode("utf-8", "replace")
    text = data.decode("utf-8", "replace")
    if rel == PINS:
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        return "\n".join(line for line in lines if line)
    return text


def _is_text(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _canonical(node) -> str:
    if isinstance(node, ast.JoinedStr):  # an f-string: adjacent text merged, as 3.12 splits it differently
        parts = []
        for text, values in groupby(node.values, _is_text):
            parts += [repr("".join(v.value for v in values))] if text else [_canonical(v) for v in values]
        return "(JoinedStr [" + ",".join(parts) + "])"
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]  # fields newer Pythons add are left empty
        return "(" + " ".join([type(node).__name__, *fields]) + ")"
    if isinstance(node, list):  # a statement that is only a string (a docstring) does nothing: left out
        return "[" + ",".join(_canonical(v) for v in node if not (isinstance(v, ast.Expr) and _is_text(v.value))) + "]"
    return repr(node)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@lru_cache(maxsize=4096)
def _file_digest(path: str, mtime_ns: int, size: int, rel: str) -> str:
    return _hash(normalized(Path(path).read_bytes(), rel))


def file_digest(rel: str, root: Path = ROOT) -> str | None:
    """The SHA-256 of one file's normalized form in the work tree (None where it does not exist)."""
    path = root / rel
    try:
        stat = path.stat()
    except OSError:
        return None
    return _file_digest(str(path), stat.st_mtime_ns, stat.st_size, rel)


def digest(files: Iterable[str], root: Path = ROOT, commit: str | None = None) -> str:
    """The digest of a measured list, of the work tree's files or as ``commit`` has them."""
    digests = digests_at(files, commit, root) if commit else {rel: file_digest(rel, root) for rel in files}
    h = hashlib.sha256()
    for rel in sorted(digests):
        h.update(f"{rel}\0{digests[rel]}\n".encode())
    return h.hexdigest()


def digests_at(files: Iterable[str], commit: str, root: Path = ROOT) -> dict[str, str | None]:
    """Each file's normalized digest as ``commit`` has it, read from git's objects in one call of git (None: a file
    it does not have)."""
    files = list(files)
    try:
        done = subprocess.run(["git", "cat-file", "--batch"], input="".join(f"{commit}:{f}\n" for f in files).encode(),
                              capture_output=True, cwd=root, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        raise ValueError("git cannot read its objects here") from None
    if done.returncode != 0:
        raise ValueError(f"git cannot read commit {commit!r} here")
    out, at, digests = done.stdout, 0, {}
    for rel in files:
        end = out.index(b"\n", at)
        header, at = out[at:end].split(), end + 1
        size = int(header[2]) if len(header) == 3 else None  # None: "<name> missing"
        digests[rel] = None if size is None else _hash(normalized(out[at:at + size], rel))
        at += 0 if size is None else size + 1
    return digests


def resolve_commit(commit: str, root: Path = ROOT) -> str:
    """A commit's full hash; a ValueError in one line where git does not know it."""
    out = _output(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], root)
    if not out:
        raise ValueError(f"no commit {commit!r} in this repository")
    return out.strip()


def _output(argv: list[str], cwd: Path | None = None) -> str | None:
    """What a command prints, or None where it cannot run, fails or takes longer than 30 s."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@lru_cache(maxsize=None)
def git_commit(root: Path = ROOT) -> str:
    """HEAD's full hash, or "unknown" outside a git checkout."""
    return (_output(["git", "rev-parse", "HEAD"], root) or "unknown").strip()


def measured_clean(files: Iterable[str], root: Path = ROOT) -> bool | None:
    """Whether every file of the list, normalized, is as HEAD has it (None outside a git checkout)."""
    # The paths that differ from HEAD: staged or not, both sides of a rename, untracked and not ignored.
    listed = [_output(["git", *args, "-z"], root) for args in (("diff", "--name-only", "--no-renames", "HEAD"),
                                                                ("ls-files", "--others", "--exclude-standard"))]
    head = git_commit(root)
    if None in listed or head == "unknown":
        return None
    changed = set(filter(None, "".join(listed).split("\0")))
    edited = [rel for rel in files if rel in changed]
    if not edited:
        return True
    at_head = digests_at(edited, head, root)
    return all(at_head[rel] is not None and at_head[rel] == file_digest(rel, root) for rel in edited)


def provenance(files: Iterable[str] | None = None, root: Path = ROOT) -> dict:
    """The provenance keys of a record whose processes ran ``files`` (this process's :func:`loaded` without)."""
    measured = sorted(set(loaded(root) if files is None else files) | ({PINS} if (root / PINS).exists() else set()))
    return {"git_commit": git_commit(root), "measured_clean": measured_clean(measured, root), "measured": measured,
            "measured_digest": digest(measured, root)}


def stale_reason(record: dict, root: Path = ROOT, digests: dict | None = None) -> str | None:
    """Why a record cannot be quoted as a measurement of today's code, or None when it can. ``digests``
    (optional) keeps what was computed between calls: many records share a list."""
    if missing := [k for k in KEYS if k not in record]:
        return f"no {', '.join(missing)} (recorded before provenance was)"
    files, commit = record["measured"], str(record["git_commit"])
    if not isinstance(files, list):
        return "its measured set names folders, not the files that ran (recorded before provenance was read " \
               "from what ran)"
    if record["measured_clean"] is not True:
        return f"measured files differed from commit {commit[:12]} when it ran"
    digests, key = {} if digests is None else digests, tuple(files)
    if key not in digests:
        digests[key] = digest(files, root)
    if digests[key] == record["measured_digest"]:
        return None
    if gone := [rel for rel in files if not (root / rel).is_file()]:
        return f"measured files gone since commit {commit[:12]}: {', '.join(gone)}"
    try:
        then = digests_at(files, commit, root)
    except ValueError:
        return f"the measured files changed since commit {commit[:12]} (a commit git does not have here)"
    changed = [rel for rel in files if then[rel] != file_digest(rel, root)]
    return f"measured files changed since commit {commit[:12]}: {', '.join(changed) or 'the list itself'}"


def timestamp() -> str:
    """The local time of a record, as every record gives it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def machine() -> dict:
    """The machine a record was made on (Python and NumPy versions, OS, CPU, cores, load average)."""
    import numpy as np

    from shared.platform import cpu_name

    return {"python": host.python_version(), "numpy": np.__version__, "platform": host.platform(),
            "cpu": cpu_name(), "cpu_count": os.cpu_count(), "load_avg_1min": os.getloadavg()[0]}


def gpus() -> list[str]:
    """The NVIDIA GPUs this machine has, as nvidia-smi names them ([] where it has none, or no nvidia-smi)."""
    out = _output(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]) or ""
    return [line.strip() for line in out.splitlines() if line.strip()]
