"""The records a document may quote: the folders of results/manifest.toml, each read once."""

from __future__ import annotations

import json
from pathlib import Path

from bench import reproduce
from bench.benchmark.record import Measurement
from bench.records import read_records
from bench.render.values import QuoteError
from bench.training.metrics import read_metrics


class Results:
    """The manifest's folders under ``root/results``, read on demand; ``used`` names those read."""

    def __init__(self, root: Path = reproduce.ROOT):
        self.root = Path(root)
        self.entries = {e.name: e for e in reproduce.load_manifest(self.root)}
        self.used: set[str] = set()
        self._cache: dict = {}

    def folder(self, name: str) -> Path:
        if name not in self.entries:
            where = "history (results/archive/), never quoted" if name.split("/")[0] == reproduce.ARCHIVE else \
                "not in results/manifest.toml"
            raise QuoteError(f"results/{name} is {where}")
        self.used.add(name)
        return self.entries[name].folder(self.root)

    def _read(self, key, reader):
        if key not in self._cache:
            self._cache[key] = reader()
        return self._cache[key]

    def measurements(self, name: str) -> list[Measurement]:
        """A benchmark folder's records, typed (bench/benchmark/record.py)."""
        return self._read(("measurements", name), lambda: [Measurement.from_dict(r) for r in self.records(name)])

    def records(self, name: str) -> list[dict]:
        """A benchmark or scaling folder's results.jsonl, as the dicts it holds."""
        path = self.folder(name) / "results.jsonl"

        def read():
            if not path.exists():
                raise QuoteError(f"no records at {path.relative_to(self.root)}")
            return read_records(path)

        return self._read(("records", name), read)

    def metrics(self, name: str, run: str) -> list[dict]:
        """A training run's metrics.jsonl, ``run`` its sub-folder."""
        path = self.folder(name) / run / "metrics.jsonl"

        def read():
            if not path.exists():
                raise QuoteError(f"no training run at {path.parent.relative_to(self.root)}")
            return read_metrics(path)

        return self._read(("metrics", name, run), read)

    def json(self, name: str, file: str) -> dict:
        path = self.folder(name) / file

        def read():
            try:
                return json.loads(path.read_text())
            except FileNotFoundError:
                raise QuoteError(f"no {path.relative_to(self.root)}") from None

        return self._read(("json", name, file), read)

    def stamp(self, name: str) -> dict:
        """What ``bench reproduce`` recorded of the folder: commands, commit, wall time."""
        return self.json(name, reproduce.STAMP)

    def run_dir(self, name: str, run: str) -> Path:
        path = self.folder(name) / run
        if not (path / "metrics.jsonl").exists():
            raise QuoteError(f"no training run at {path.relative_to(self.root)}")
        return path
