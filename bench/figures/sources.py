"""Where the figures' numbers come from: committed benchmark runs and the guides' ``explain`` blocks.

Records are read as the report reads them (bench/benchmark/record.py),
so a figure and ``report.md`` can never read a run differently. The guides'
figure blocks are read as structured results, never as their display text:
``explain --sync-guide`` keeps each block's ``python -m bench explain --json``
result in docs/figures/explain.json and ``--check-guide`` holds it to a fresh
run, so reading them here costs no framework start-up. Every source is named
relative to the repository, as figures.json cites it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench import guide_sync, reproduce
from bench.benchmark import record
from bench.records import read_records

ROOT = guide_sync.ROOT
RESULTS = ROOT / "results"
FIGURES_DIR = ROOT / "docs" / "figures"


@dataclass
class Block:
    """One ``<!-- figure: ID -->`` block of a guide: its command and its result, as
    ``python -m bench explain --json`` gives it (kept in docs/figures/explain.json
    by ``explain --sync-guide``, so reading it starts no framework)."""

    id: str
    guide: str  # the guide's path, relative to the repository
    command: str
    result: dict

    def source(self) -> str:
        return f"{self.guide} <!-- figure: {self.id} --> ($ {self.command})"


def _benchmark_run(path: Path) -> bool:
    """Whether ``path`` holds bench run's records (bench scale writes a results.jsonl of another kind)."""
    first = read_records(path)[:1] if path.exists() else []
    return bool(first) and "implementation" in first[0]


@dataclass
class Sources:
    """The inputs of one drawing: the results folder and the guides, read once each."""

    results: Path = RESULTS
    guides: tuple[Path, ...] = guide_sync.GUIDES
    explain_json: Path = guide_sync.EXPLAIN_JSON
    _records: dict = field(default_factory=dict)
    _blocks: list | None = None

    def run_names(self) -> list[str]:
        """The committed benchmark runs: the folders of ``results/manifest.toml`` that hold a results.jsonl,
        sorted by name. Only these: a user's own run under results/, or history under results/archive/, never
        changes a figure."""
        if not self.results.is_dir():
            raise FileNotFoundError(f"no results folder at {self.results}")
        entries = reproduce.read_manifest(self.results / "manifest.toml")
        return sorted(e.name for e in entries if _benchmark_run(self.results / e.name / "results.jsonl"))

    def records(self, run: str) -> list[dict]:
        """The records of one run (``results/RUN/results.jsonl``); a clear error if it is missing or empty."""
        if run not in self._records:
            if not self.results.is_dir():
                raise FileNotFoundError(f"no results folder at {self.results}")
            records = record.load([self.results / run])
            if not records:
                raise ValueError(f"no records in {self.results / run / 'results.jsonl'}")
            self._records[run] = records
        return self._records[run]

    def record_file(self, run: str) -> str:
        """How figures.json names a run's records: relative to the repository where it lies inside it."""
        path = self.results / run / "results.jsonl"
        try:
            return str(path.resolve().relative_to(ROOT))
        except ValueError:
            return str(path)

    def blocks(self) -> list[Block]:
        """Every explain figure block of the guides, in guide order (from docs/figures/explain.json)."""
        if self._blocks is None:
            try:
                entries = json.loads(self.explain_json.read_text())
            except FileNotFoundError:
                raise FileNotFoundError(f"no {self.explain_json}: python -m bench explain --sync-guide writes it") \
                    from None
            self._blocks = [Block(fig, e["guide"], e["command"], e["result"]) for fig, e in entries.items()]
            order = {str(g.resolve().relative_to(ROOT)): k for k, g in enumerate(self.guides)
                     if g.resolve().is_relative_to(ROOT)}
            self._blocks.sort(key=lambda b: order.get(b.guide, len(order)))
        return self._blocks

    def block(self, block_id: str) -> Block:
        for block in self.blocks():
            if block.id == block_id:
                return block
        raise ValueError(f"no figure block {block_id!r} in {', '.join(str(g.name) for g in self.guides)}")
