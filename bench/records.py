"""JSON lines: one record a line, appended as soon as it exists.

The benchmark's ``results.jsonl`` and training's ``metrics.jsonl`` are both
written and read here. A line cut short by a kill is ignored on reading, so
a file stays readable whatever happened to the process writing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable


def read_records(path: str | os.PathLike) -> list[dict]:
    """Records of a JSON-lines file; a line cut short by an interruption is ignored."""
    path = Path(path)
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record and make it durable (fsync) before returning."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


class RecordWriter:
    """An open JSON-lines file, every record flushed as it is written."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file = open(self.path, "a")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def rewrite_records(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Replace the file's records at once (written aside, then renamed)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.replace(tmp, path)


def write_json(path: str | os.PathLike, value, indent: int = 1) -> None:
    """One JSON document, written aside and renamed into place."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=indent) + "\n")
    os.replace(tmp, path)
