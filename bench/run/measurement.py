"""One benchmark measurement: the record type of ``results.jsonl`` (docs/spec.md §6), and what a run's records say
when read together. Every reader reads records with :func:`load` and these statistics; an older record's missing
fields read as the defaults below, never as an error.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from bench import frameworks
from bench.records import read_records


KEY_COLUMNS = ["device", "mode", "transitions", "batch", "implementation"]  # Measurement.key, as tables head it


@dataclass
class Measurement:
    # What was measured
    implementation: str
    framework: str
    mode: str  # "infer" or "train"
    batch_size: int
    transitions: str = "gold"  # "gold", "predicted" or "sampled" (docs/spec.md §7); older records: gold
    framework_version: str = ""
    device: str = "cpu"
    device_name: str = ""
    dtype: str = "float32"
    options: dict = field(default_factory=dict)  # the variant's Runner options
    data: str | None = None
    model: dict = field(default_factory=dict)  # ModelConfig sizes
    optimizer: str | None = None
    batching: str | None = None  # "sentences" or "pairs" (docs/spec.md §2)
    buckets: list = field(default_factory=list)
    compilation_cache: str | None = None
    # Speed: the steady state, and each interleaved round
    pairs_per_s: float = 0.0
    step_s_median: float = 0.0
    step_s_p10: float = 0.0
    step_s_p90: float = 0.0
    rounds: int = 0
    batches_per_round: int = 0
    round_pairs_per_s: list = field(default_factory=list)
    round_step_s: list = field(default_factory=list)
    round_load: list = field(default_factory=list)  # the 1-minute load average as each round's batches ended
    round_cpu_share: list = field(default_factory=list)  # CPU seconds per wall second of each round
    cpu_count: int | None = None
    interleaved_with: list = field(default_factory=list)
    timed_batches: int = 0
    timed_pairs: int = 0
    run_id: str | None = None  # the run whose rounds a ratio may be taken in
    # Compilation (timed once, not interleaved)
    compile_s: float = 0.0
    traces: int = 0
    compile_detail: dict = field(default_factory=dict)
    first_call_s: float = 0.0
    warmup_shapes: int = 0
    traces_total: int = 0
    retraces_while_timed: int = 0
    cached_compile: dict | None = None  # the train step compiled again from a persistent cache
    # Work and the device
    useful_flops: int = 0
    useful_flops_per_s: float = 0.0
    matmul_peak_flops_per_s: float = 0.0
    matmul_peak_n: int = 0
    flops_fraction_of_peak: float = 0.0
    device_peak_flops_per_s: float | None = None
    device_peak_implementation: str | None = None
    useful_fraction_of_device_peak: float | None = None
    # The limit and where the time goes (docs/spec.md §6; bench/run/limit.py), seconds per timed batch
    limit_pairs_per_s: float | None = None
    limit_matmul: str | None = None
    limit_kernel: str | None = None
    limit_flops_per_s: float | None = None
    limit_sample: dict | None = None
    fraction_of_limit: float | None = None
    useful_s: float | None = None
    computed_s: float | None = None
    own_computed_s: float | None = None
    step_s: float | None = None
    computed_flops: int | None = None
    computed_kind: str | None = None  # which products those are (bench/run/limit.py, KINDS)
    dispatches_per_batch: float | None = None  # operations the framework dispatched per batch (a hook to come)
    peak_mem_bytes: int | None = None
    peak_rss_bytes: int | None = None
    padding_waste: float | None = None  # the PAD share of the slots this implementation computes
    padding_waste_arrays: float | None = None
    padding_waste_loop: float | None = None
    # Agreement with the float64 reference, before any timing
    max_abs_err_encoding: float = 0.0
    max_abs_err_logits: float = 0.0
    max_rel_err_grads: float | None = None
    agreement_pairs: int | None = None
    parse_agreement: float | None = None
    max_abs_err_logits_predicted: float | None = None
    agreement_ok: bool | None = None
    # Define-by-run extras
    host_syncs_per_batch: float | None = None
    phase_s_per_batch: dict | None = None
    graph_per_batch: dict | None = None
    # The machine and the code (bench/provenance.py)
    python: str | None = None
    numpy: str | None = None
    platform: str | None = None
    cpu: str | None = None
    threads: dict = field(default_factory=dict)
    precision_modes: dict = field(default_factory=dict)
    load_avg_1min: list = field(default_factory=list)
    git_commit: str | None = None
    measured_clean: bool | None = None
    measured: list | str | None = None  # the source files that ran (a list); a str in records made before
    measured_digest: str | None = None
    timestamp: str | None = None

    @classmethod
    def from_dict(cls, values: dict) -> "Measurement":
        """A record as read from results.jsonl; keys this type does not know are dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known and (v is not None or k in _REQUIRED)})

    def to_dict(self) -> dict:
        """The JSON object results.jsonl holds (the optional fields left out where they are unset)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k not in _OPTIONAL}

    def key(self) -> tuple:
        """What it measured (KEY_COLUMNS); records sort by it."""
        return (self.device, self.mode, self.transitions, self.batch_size, self.implementation)

    def get(self, name: str, default: Any = None) -> Any:
        """A field, or a dotted path into a dict field (``compile_detail.trace_s``); ``default`` if absent."""
        head, _, rest = name.partition(".")
        return dotted(getattr(self, head, default), rest, default) if rest else getattr(self, head, default)


def dotted(value, key: str, default: Any = None) -> Any:
    """A dotted path into dicts and lists (``batch.num_steps``, ``round_step_s.0``); ``default`` if absent."""
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return default
    return value


_REQUIRED = ("implementation", "framework", "mode", "batch_size")
_OPTIONAL = ("cached_compile", "host_syncs_per_batch", "phase_s_per_batch", "graph_per_batch", "limit_pairs_per_s",
             "limit_matmul", "limit_kernel", "limit_flops_per_s", "limit_sample", "fraction_of_limit", "useful_s",
             "computed_s", "own_computed_s", "step_s", "computed_flops", "computed_kind", "dispatches_per_batch")


def load(paths: Iterable[str | os.PathLike]) -> list[Measurement]:
    """The records of results.jsonl files, or of folders holding one; a missing file is a FileNotFoundError."""
    records = []
    for path in map(Path, paths):
        file = path / "results.jsonl" if path.is_dir() else path
        if not file.exists():
            raise FileNotFoundError(f"no results at {file}")
        records.extend(Measurement.from_dict(r) for r in read_records(file))
    return records


def round_ratios(records: list[Measurement], baseline: str | None = None) -> list[dict]:
    """Each implementation's speed over the baseline's, round by round where both are of one run's interleaved rounds
    (median, quartiles, range), else of the overall figures (``rounds`` 0)."""
    baseline = baseline or frameworks.BASELINE
    base = {r.key()[:-1]: r for r in records if r.implementation == baseline}
    own = run_share(records)
    rows = []
    for r in sorted(records, key=Measurement.key):
        key = r.key()[:-1]  # the same measurement of the baseline
        if r.implementation == baseline or (b := base.get(key)) is None:
            continue
        same_run = (r.run_id == b.run_id and r.round_pairs_per_s
                    and len(r.round_pairs_per_s) == len(b.round_pairs_per_s))
        ratios = (np.array(r.round_pairs_per_s) / np.array(b.round_pairs_per_s) if same_run
                  else np.array([r.pairs_per_s / b.pairs_per_s]))
        q1, median, q3 = np.percentile(ratios, [25, 50, 75])
        mine, theirs = busy_rounds(r, own), busy_rounds(b, own)  # a round is busy where either side's was
        rows.append({"device": key[0], "mode": key[1], "transitions": key[2], "batch_size": key[3],
                     "implementation": r.implementation, "median": float(median), "q1": float(q1),
                     "q3": float(q3), "min": float(ratios.min()), "max": float(ratios.max()),
                     "rounds": len(ratios) if same_run else 0, "data": r.data,
                     "round_ratios": ratios.tolist(), "busy": [x or y for x, y in zip(mine, theirs)]
                     if same_run and mine is not None and theirs is not None else None})
    return rows


def breakdown(r: Measurement) -> dict[str, float] | None:
    """A record's step per timed batch in parts that sum to it (docs/spec.md §6, "Decision: where the time goes");
    None for a record without them."""
    if r.useful_s is None or r.computed_s is None or not r.step_s:
        return None
    blas = max((r.own_computed_s or 0.0) - r.computed_s, 0.0)
    return {"useful": r.useful_s, "waste": r.computed_s - r.useful_s, "slow_blas": blas,
            "overhead": r.step_s - r.computed_s - blas}


PARTS = {"useful": "useful", "waste": "waste", "slow_blas": "slow BLAS", "overhead": "overhead"}  # in words


def device_fraction(r: Measurement) -> float:
    """Useful FLOP/s over the best matmul of the device in the run (in older records, its own framework's)."""
    return r.useful_flops_per_s / (r.device_peak_flops_per_s or r.matmul_peak_flops_per_s)


def other_work_limit(cores: int) -> float:
    """How many cores' worth of other work makes a machine busy: one core, or a quarter of them on a larger machine."""
    return max(1.0, cores / 4)


def is_busy(load: float, cores: int, own: float = 0.0) -> bool:
    """The rule that marks a round as measured on a busy machine (docs/spec.md §6, "Decision: load in every round")."""
    return load - own > other_work_limit(cores)


def run_share(records: list[Measurement]) -> float:
    """The cores a run's own timed processes kept busy: the median CPU share of every round (0 where none was kept)."""
    shares = [share for r in records for share in r.round_cpu_share]
    return float(np.median(shares)) if shares else 0.0


def busy_rounds(record: Measurement, own: float) -> list[bool] | None:
    """Which of a record's rounds ran on a busy machine; None where it has no load figures (older runs)."""
    if not record.round_load or not record.cpu_count:
        return None
    return [is_busy(load, record.cpu_count, own) for load in record.round_load]


def busy_count(row: dict) -> int:
    """How many rounds of a ratio row (round_ratios) were busy."""
    return sum(row.get("busy") or [])


def round_flags(records: list[Measurement]) -> list[bool]:
    """Every timed round of a run: busy or not."""
    own = run_share(records)
    return [flag for r in records for flag in (busy_rounds(r, own) or [])]
