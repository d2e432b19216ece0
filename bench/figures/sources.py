"""Where the figures' numbers come from: committed benchmark runs and the guides' ``explain`` blocks.

Records are read with the report's own helpers (bench/benchmark/report.py),
so a figure and ``report.md`` can never read a run differently. The guides'
figure blocks are found with the guide checker's pattern
(bench/guide_sync.py): they hold real ``python -m bench explain`` output that
``explain --check-guide`` keeps true, so reading them here costs no framework
start-up. Every source is named relative to the repository, as figures.json
cites it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from bench import guide_sync, reproduce
from bench.benchmark import report

ROOT = guide_sync.ROOT
RESULTS = ROOT / "results"
FIGURES_DIR = ROOT / "docs" / "figures"


@dataclass
class Block:
    """One ``<!-- figure: ID -->`` block of a guide, cut into its sections.

    ``header`` holds the lines before the first blank line (batch, model,
    versions); ``sections`` maps a section's name (the word before the colon
    of its first line: ``pytorch``, ``tensorflow``...) to its lines.
    """

    id: str
    guide: str  # the guide's path, relative to the repository
    command: str
    header: list[str]
    sections: dict[str, list[str]]

    def source(self) -> str:
        return f"{self.guide} <!-- figure: {self.id} --> ($ {self.command})"


_SECTION_RE = re.compile(r"^(?P<name>[\w.-]+): ")  # "pytorch: define-by-run, ...", not indented


def cut_block(body: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header lines, {section name: lines}) of an explain output.

    The header is the first paragraph; after it, a section starts at every
    unindented ``name: ...`` line (``explain --parse`` puts no blank line
    between its sections) and runs to the next one. Lines before the first
    section (a column heading) belong to none.
    """
    lines = body.strip("\n").splitlines()
    blank = next((k for k, line in enumerate(lines) if not line.strip()), len(lines))
    header, sections, current = lines[:blank], {}, None
    for line in lines[blank:]:
        match = _SECTION_RE.match(line)
        if match:
            current = sections.setdefault(match["name"], [])
        if current is not None and line.strip():
            current.append(line)
    return header, sections


def field_text(lines: list[str], label: str) -> str | None:
    """What follows ``label`` on the line that starts with it (indentation aside), or None."""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(label):
            return stripped[len(label):].strip()
    return None


def first_int(text: str | None) -> int | None:
    match = re.search(r"\d[\d,]*", text or "")
    return int(match.group().replace(",", "")) if match else None


@dataclass
class Sources:
    """The inputs of one drawing: the results folder and the guides, read once each."""

    results: Path = RESULTS
    guides: tuple[Path, ...] = guide_sync.GUIDES
    _records: dict = field(default_factory=dict)
    _blocks: list | None = None

    def run_names(self) -> list[str]:
        """The committed benchmark runs: the folders of ``results/manifest.toml`` that hold a results.jsonl,
        sorted by name. Only these: a user's own run under results/, or history under results/archive/, never
        changes a figure."""
        if not self.results.is_dir():
            raise FileNotFoundError(f"no results folder at {self.results}")
        entries = reproduce.read_manifest(self.results / "manifest.toml")
        return sorted(e.name for e in entries if (self.results / e.name / "results.jsonl").exists())

    def records(self, run: str) -> list[dict]:
        """The records of one run (``results/RUN/results.jsonl``); a clear error if it is missing or empty."""
        if run not in self._records:
            if not self.results.is_dir():
                raise FileNotFoundError(f"no results folder at {self.results}")
            records = report.load([self.results / run])
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
        """Every explain figure block of the guides, in guide order."""
        if self._blocks is None:
            self._blocks = []
            for guide in self.guides:
                if not guide.exists():
                    raise FileNotFoundError(f"no guide at {guide}")
                name = str(guide.resolve().relative_to(ROOT)) if guide.resolve().is_relative_to(ROOT) else str(guide)
                for figure in guide_sync.guide_figures(guide.read_text()):
                    header, sections = cut_block(figure.body)
                    self._blocks.append(Block(figure.id, name, figure.command, header, sections))
        return self._blocks

    def block(self, block_id: str) -> Block:
        for block in self.blocks():
            if block.id == block_id:
                return block
        raise ValueError(f"no figure block {block_id!r} in {', '.join(str(g.name) for g in self.guides)}")
