"""``metrics.jsonl`` of a training run: one JSON record a line.

Kinds: "run" (the settings, first line), "train" (the mean loss every --log-every steps), "eval" (dev and train accuracy
at every epoch end), "checkpoint", "resume" (a resumed part's first line), "end" (the last line of the run or of a part
of it: the source files it ran, bench/provenance.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.records import RecordWriter, read_records, rewrite_records


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The records of a metrics.jsonl (or of the run folder holding one); a line cut short by a kill is ignored."""
    path = Path(path)
    return read_records(path / "metrics.jsonl" if path.is_dir() else path)


class Metrics(RecordWriter):
    """Appends records to ``metrics.jsonl``, each flushed at once."""

    @staticmethod
    def truncate(path: str | os.PathLike, step: int) -> None:
        """Drop the records a killed run wrote after its last checkpoint (step
        ``step``), so the resumed run's metrics read like an uninterrupted run's."""
        rewrite_records(path, [r for r in read_metrics(path) if r.get("step", 0) <= step])
