"""JSON lines: one record a line, appended as soon as it exists, whole or not at all (shared/files.py); a line cut short
by a kill is ignored on reading. A training run's kinds: "run" (its settings), "train" (mean loss every --log-every
steps), "eval", "checkpoint", "resume" (a resumed part's first line) and "end" (what the run or part ran).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from shared.files import append, open_to_append, written_aside


def read_records(path: str | os.PathLike) -> list[dict]:
    """Records of a JSON-lines file; a line cut short by an interruption is ignored."""
    records = []
    for line in Path(path).read_text().splitlines() if Path(path).exists() else ():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The records of a training run's metrics.jsonl, or of the run folder holding one."""
    path = Path(path)
    return read_records(path / "metrics.jsonl" if path.is_dir() else path)


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record and make it durable (fsync) before returning."""
    with open_to_append(path) as file:
        append(file, (json.dumps(record) + "\n").encode(), path, sync=True)


class RecordWriter:
    """An open JSON-lines file, every record written through as it comes."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = open_to_append(self.path)

    def write(self, record: dict) -> None:
        append(self._file, (json.dumps(record) + "\n").encode(), self.path)

    def close(self) -> None:
        self._file.close()


def rewrite_records(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Replace the file's records at once (written aside, then renamed)."""
    with written_aside(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_json(path: str | os.PathLike, value, indent: int = 1) -> None:
    """One JSON document, written aside and renamed into place."""
    with written_aside(path) as tmp:
        tmp.write_text(json.dumps(value, indent=indent) + "\n")
