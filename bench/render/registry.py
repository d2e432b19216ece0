"""The registry of quote functions (bench/render/quotes.py says what a quote is), and how a key is read."""

from __future__ import annotations

from typing import Callable

from bench.benchmark.record import Measurement
from bench.render.values import QuoteError, Value

QUOTES: dict[str, Callable[..., Value]] = {}
_MISSING = object()


def quote(name: str):
    def register(fn):
        QUOTES[name] = fn
        return fn
    return register


# Keys that are not stored but computed from a record, and the kind of every key a document quotes.
DERIVED = {
    "compile_per_shape": lambda r: r.compile_s / max(r.warmup_shapes or 1, 1),
    "cached_compile_per_shape": lambda r: r.cached_compile["compile_s"] / max(r.cached_compile["shapes"], 1),
}


def kind(key: str) -> str:
    last = key.split(".")[-1]
    if last in ("pairs_per_s", "host_syncs_per_batch"):
        return "number"
    if last in ("useful_fraction_of_device_peak", "flops_fraction_of_peak", "parse_agreement") or \
            last.startswith("padding_waste"):
        return "percent"
    if last.startswith("max_abs_err") or last.startswith("max_rel_err"):
        return "relative"
    if last in ("useful_flops_per_s", "matmul_peak_flops_per_s", "device_peak_flops_per_s"):
        return "gflops"
    if last.endswith("_bytes"):
        return "mib"
    if last.endswith("_s") or last.endswith("_s_median") or last == "compile_per_shape" or \
            last == "cached_compile_per_shape" or last.startswith("step_s"):
        return "seconds"
    if last in ("traces", "warmup_shapes", "batches_per_round", "timed_batches", "rounds", "cache_hits",
                "cpu_count", "agreement_pairs", "batch_size", "timed_pairs", "matmul_peak_n"):
        return "count"
    return "number"


def lookup(record, key: str):
    """A dotted key of a record: a Measurement's field (or a key computed from it, DERIVED), or a dict's."""
    if key in DERIVED:
        return DERIVED[key](record)
    if isinstance(record, Measurement):
        value = record.get(key, _MISSING)
        if value is _MISSING or value is None:
            raise QuoteError(f"no {key!r} in the record of {record.implementation}")
        return value
    value = record
    for part in key.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise QuoteError(f"no {key!r} in the record of {record.get('implementation', '?')}")
    return value
