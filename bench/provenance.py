"""What a record measured: the commit, and whether the measured code was that commit's.

A record (a benchmark measurement, a training run's settings, a scaling run,
``bench data``'s statistics) is only worth quoting if one can tell which
code produced it. ``git status`` of the whole tree cannot: an edited README
would mark a run dirty, an untracked scratch file too. So every record
names the *measured files* of what it measured (docs/spec.md §6, "Provenance"):

* the framework-free front end (``shared/``) and the harness's own modules
  (``bench/*.py``), less what only reads, renders or checks records;
* the harness of its kind: ``bench/benchmark/`` for a benchmark
  measurement, ``bench/training/`` for a training or scaling run (their
  report and curve modules excepted), neither for ``bench data``;
* the package of each implementation it ran (``impl_jax/`` for ``jax`` and
  ``jax-vmap``; none for the float64 reference, which lives in ``shared/``),
  its ``explain.py`` excepted;
* the pinned versions, ``constraints.txt``.

A record of the lessons (``python -m lessons.today``, kind ``lessons``)
measures no harness: its set is ``shared/`` (the lessons' inputs and
reference), ``lessons/`` and the pins, without ``bench/*.py``.

Only ``*.py`` files count (and the pins). A record keeps ``git_commit``
(HEAD when it was made), ``measured_clean`` (True when no measured file
differed from that commit, None outside a git checkout), ``measured``
(which set: ``"benchmark impl_jax"``) and ``measured_digest``, a SHA-256 over
the set's paths and bytes. ``bench reproduce --check`` recomputes the digest
of today's files for the same set: a record whose digest differs measured
other code, and its folder is listed as stale.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parent.parent

PINS = "constraints.txt"
KINDS = {
    # kind -> the folders of its own harness (walked for *.py, beside shared/ and bench/*.py)
    "benchmark": ("bench/benchmark",),
    "training": ("bench/training",),
    "data": ("bench/benchmark/flops.py",),  # bench data counts the masked step's FLOPs with it
    "lessons": ("lessons",),  # python -m lessons.today: the lessons and their answers, run as a learner runs them
}
# Kinds whose records the harness (bench/*.py) does not make: their set leaves bench/*.py out.
WITHOUT_HARNESS = ("lessons",)
# What measures nothing: dispatch, reports, figures, the guides' and the results' own checks, explain.
NOT_MEASURED = (
    "bench/cli.py", "bench/guide_sync.py", "bench/provenance.py", "bench/reproduce.py", "bench/render",
    "bench/figures", "bench/explain", "bench/benchmark/report.py", "bench/benchmark/compare.py",
    "bench/benchmark/stats.py", "bench/benchmark/targets.py", "bench/benchmark/markdown.py", "bench/benchmark/plots.py",
    "bench/training/curves.py", "bench/training/reinforce_curves.py", "bench/training/parse_summary.py",
    "shared/explaining.py",
)
NOT_MEASURED_IN_PACKAGES = ("explain.py",)
KEYS = ("git_commit", "measured_clean", "measured", "measured_digest")


def selector(kind: str, packages: Iterable[str] = ()) -> str:
    """The name of a measured set, as records keep it: ``"benchmark impl_jax"``."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of measurement {kind!r}; choose from {', '.join(KINDS)}")
    chosen = sorted({p for p in packages if p and p != "shared"})
    return " ".join([kind, *chosen])


def parse_selector(text: str) -> tuple[str, tuple[str, ...]]:
    kind, *packages = text.split()
    if kind not in KINDS:
        raise ValueError(f"unknown measured set {text!r}")
    return kind, tuple(packages)


def _skipped(rel: str, packages: tuple[str, ...]) -> bool:
    if any(rel == p or rel.startswith(p + "/") for p in NOT_MEASURED):
        return True
    top, _, rest = rel.partition("/")
    return top in packages and rest in NOT_MEASURED_IN_PACKAGES


def _walk(root: Path, rel: str) -> Iterable[str]:
    path = root / rel
    if path.is_file():
        yield rel
        return
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder, name).relative_to(root).as_posix()


def measured_files(text: str, root: Path = ROOT) -> list[str]:
    """The measured files of a set (``selector``'s text), relative to ``root``, sorted."""
    kind, packages = parse_selector(text)
    files = set()
    for rel in ("shared", *KINDS[kind], *packages):
        files.update(f for f in _walk(root, rel) if not _skipped(f, packages))
    if kind not in WITHOUT_HARNESS:
        files.update(f.relative_to(root).as_posix() for f in (root / "bench").glob("*.py"))
    files = {f for f in files if not _skipped(f, packages)}
    if (root / PINS).exists():
        files.add(PINS)
    return sorted(files)


def digest(text: str, root: Path = ROOT) -> str:
    """SHA-256 over the set's paths and contents: equal exactly when the measured files are."""
    h = hashlib.sha256()
    for rel in measured_files(text, root):
        data = (root / rel).read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def digest_at(text: str, commit: str, root: Path = ROOT) -> str:
    """``digest`` of the set as ``commit`` has it, read from git's objects (not the work tree)."""
    listed = _git(root, "ls-tree", "-r", "--name-only", "-z", commit)
    if listed is None:
        raise ValueError(f"git cannot list commit {commit!r} here")
    kind, packages = parse_selector(text)
    files = sorted(rel for rel in listed.split("\0") if rel and _counts(rel, kind, packages))
    h = hashlib.sha256()
    for rel in files:
        data = subprocess.run(["git", "show", f"{commit}:{rel}"], capture_output=True, cwd=root, check=True).stdout
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def resolve_commit(commit: str, root: Path = ROOT) -> str:
    """A commit's full hash; a ValueError in one line where git does not know it."""
    out = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not out:
        raise ValueError(f"no commit {commit!r} in this repository")
    return out.strip()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=root, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@lru_cache(maxsize=None)
def _head(root: Path) -> str | None:
    out = _git(root, "rev-parse", "HEAD")
    return out.strip() if out else None


def git_commit(root: Path = ROOT) -> str:
    """HEAD's full hash, or "unknown" outside a git checkout."""
    return _head(root) or "unknown"


def changed_files(root: Path = ROOT) -> set[str] | None:
    """The paths that differ from HEAD (staged, unstaged, untracked and not ignored), or None without git."""
    out = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    if out is None:
        return None
    changed, entries = set(), iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        changed.add(path)
        if "R" in status or "C" in status:  # a rename names its source next
            changed.add(next(entries, ""))
    return changed


def measured_clean(text: str, root: Path = ROOT) -> bool | None:
    """Whether every measured file of the set is as HEAD has it (None outside a git checkout)."""
    changed = changed_files(root)
    if changed is None or _head(root) is None:
        return None
    kind, packages = parse_selector(text)
    if not changed:
        return True
    files = set(measured_files(text, root))
    # A measured file deleted from the work tree is no longer listed: look at the changed paths themselves.
    return not any(path in files or _counts(path, kind, packages) for path in changed)


def _counts(rel: str, kind: str, packages: tuple[str, ...]) -> bool:
    """Whether a path (existing or not) would belong to the set."""
    if not (rel.endswith(".py") or rel == PINS) or _skipped(rel, packages):
        return False
    if rel == PINS or (kind not in WITHOUT_HARNESS and rel.startswith("bench/") and rel.count("/") == 1):
        return True
    return any(rel == p or rel.startswith(p + "/") for p in ("shared", *KINDS[kind], *packages))


def provenance(kind: str, packages: Iterable[str] = (), root: Path = ROOT) -> dict:
    """The provenance keys of a record of ``kind`` that ran the implementation packages ``packages``."""
    text = selector(kind, packages)
    return {"git_commit": git_commit(root), "measured_clean": measured_clean(text, root), "measured": text,
            "measured_digest": digest(text, root)}


def machine() -> dict:
    """The machine a record was made on, as every record keeps it: Python and NumPy versions, OS, CPU model,
    core count, and the 1-minute load average when the record was made."""
    import platform as host

    import numpy as np

    from shared.platform import cpu_name

    return {"python": host.python_version(), "numpy": np.__version__, "platform": host.platform(),
            "cpu": cpu_name(), "cpu_count": os.cpu_count(), "load_avg_1min": os.getloadavg()[0]}


def gpus() -> list[str]:
    """The NVIDIA GPUs this machine has, as nvidia-smi names them ([] where it has none, or no nvidia-smi)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def stale_reason(record: dict, root: Path = ROOT, digests: dict | None = None) -> str | None:
    """Why a record cannot be quoted as a measurement of today's code, or None when it can."""
    missing = [k for k in KEYS if k not in record]
    if missing:
        return f"no {', '.join(missing)} (recorded before provenance was)"
    if record["measured_clean"] is not True:
        return f"measured files differed from commit {record['git_commit'][:12]} when it ran"
    digests = {} if digests is None else digests
    text = record["measured"]
    if text not in digests:
        digests[text] = digest(text, root)
    if digests[text] != record["measured_digest"]:
        return f"the measured files ({text}) changed since commit {record['git_commit'][:12]}"
    return None
