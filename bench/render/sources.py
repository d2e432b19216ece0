"""The one reader of what documents and figures quote: the folders of results/manifest.toml, each file read once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import ROOT, reproduce
from bench.config import quiet_frameworks
from bench.explain.views import COMMAND, parse_args, run as explain
from bench.run.measurement import Measurement
from bench.records import read_records

FIGURES_DIR = Path("docs") / "figures"  # the figures, figures.json and explain.json, under the root
EXPLAIN_JSON = "explain.json"


class QuoteError(ValueError):
    """A marker that cannot be rendered: an unknown source, table, record or key (said in one line)."""


class Results:
    """The manifest's folders under ``root/results`` (never results/archive/ nor a user's run), and explain results."""

    def __init__(self, root: Path = ROOT):
        self.root = Path(root)
        self.entries = {e.name: e for e in reproduce.load_manifest(self.root)}
        self._cache: dict = {}

    def _read(self, key, reader):
        if key not in self._cache:
            self._cache[key] = reader()
        return self._cache[key]

    def folder(self, name: str) -> Path:
        if name not in self.entries:
            raise QuoteError(f"results/{name} is " + ("history (results/archive/), never quoted" if name.split("/")[0]
                                                      == reproduce.ARCHIVE else "not in results/manifest.toml"))
        return self.entries[name].folder(self.root)

    def locate(self, path: Path) -> tuple[str, str | None]:
        """(manifest folder, the file inside it or None) of a path under results/."""
        rel = path.resolve().relative_to((self.root / "results").resolve()).as_posix()
        name = max((n for n in self.entries if rel == n or rel.startswith(n + "/")), key=len, default=rel)
        self.folder(name)
        return name, rel[len(name) + 1:] or None

    def file(self, name: str, rel: str) -> Path:
        if not (self.folder(name) / rel).exists():
            raise QuoteError(f"no results/{name}/{rel}")
        return self.folder(name) / rel

    def records(self, name: str, rel: str = "results.jsonl") -> list[dict]:
        """A JSON-lines file of the folder (results.jsonl; RUN/metrics.jsonl of a training run)."""
        return self._read(("records", name, rel), lambda: read_records(self.file(name, rel)))

    def measurements(self, name: str) -> list[Measurement]:
        return self._read(("measurements", name), lambda: [Measurement.from_dict(r) for r in self.records(name)])

    def metrics(self, name: str, run: str) -> list[dict]:
        return self.records(name, f"{run}/metrics.jsonl")

    def json(self, name: str, rel: str) -> dict:
        if ("json", name, rel) not in self._cache:
            try:
                self._cache["json", name, rel] = json.loads(self.file(name, rel).read_text())
            except ValueError as err:
                raise QuoteError(f"results/{name}/{rel} is not JSON ({err})") from None
        return self._cache["json", name, rel]

    def run_dir(self, name: str, run: str) -> Path:
        return self.file(name, f"{run}/metrics.jsonl").parent

    def runs(self) -> list[str]:
        """The benchmark folders of the manifest (their results.jsonl holds bench run's records), by name."""
        return sorted(n for n, e in self.entries.items() if (e.folder(self.root) / "results.jsonl").exists()
                      and "implementation" in (read_records(e.folder(self.root) / "results.jsonl")[:1] or [{}])[0])

    def explained(self) -> dict:
        """explain.json: {id: {guide, command, result, and its id and how figures.json names it: source}}."""
        path = self.root / FIGURES_DIR / EXPLAIN_JSON
        if not path.exists():
            raise QuoteError(f"no {path}: python -m bench render writes it")
        return self._read("explained", lambda: {k: {**v, "id": k, "source": f"{v['guide']} #{k} ($ {v['command']})"}
                                                for k, v in json.loads(path.read_text()).items()})

    def explained_entry(self, fig: str) -> dict | None:
        """explain.json's entry of one explain block, None if it has none (or there is no explain.json yet)."""
        return self.explained().get(fig) if (self.root / FIGURES_DIR / EXPLAIN_JSON).exists() else None

    def forget_explained(self) -> None:
        """After explain.json is written: the next read reads the new file."""
        self._cache.pop("explained", None)

    def explain(self, command: str, timing: bool) -> dict:
        """The result of ``python -m bench explain ...``, run in this process once per command (and timing)."""
        def run():
            if not command.startswith(COMMAND + " ") and command != COMMAND:
                raise QuoteError(f"an explain block's query starts with {COMMAND.split()[-1]!r}, not {command!r}")
            print(f"render: running {command}" + ("" if timing else " (untimed)"), file=sys.stderr, flush=True)
            quiet_frameworks()
            try:
                args = parse_args(command[len(COMMAND):].split())
            except SystemExit:  # argparse said why, above
                raise QuoteError(f"{command!r}: not a command explain takes") from None
            args.no_timing = args.no_timing or not timing
            return json.loads(json.dumps(explain(args)))

        return self._read(("explain", command, timing), run)
