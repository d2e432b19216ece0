"""One implementation's measurements, in a process of its own.

``python -m bench run`` starts ``python -m bench.benchmark.worker SPEC.json``
once per implementation, so frameworks cannot disturb each other and memory
figures are the implementation's own. The worker appends one JSON record per
(mode, batch size) to ``results.jsonl`` as soon as it is measured, so an
interrupted run keeps everything finished before the interruption.

Exit codes: 0 ok, 3 measured but disagrees with the reference beyond the
tolerances of the tests (records written, marked ``agreement_ok: false``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.benchmark import devices
from bench.benchmark.measure import RssSampler, check_agreement, measure
from bench.config import quiet_frameworks
from bench.datasets import load_dataset
from bench.frameworks import runner_class
from bench.progress import Progress
from bench.records import append_record
from shared.batching import DEFAULT_BUCKETS, make_batches, padding_report
from shared.params import ModelConfig, init_params
from shared.vocab import Vocabulary


@dataclass
class WorkerSpec:
    implementation: str  # e.g. "tensorflow-xla"
    framework: str  # "pytorch", "tensorflow", "jax"
    options: dict  # extra Runner options of the variant
    out_dir: str
    device: str = "cpu"  # "cpu" or "gpu"
    dtype: str = "float32"
    modes: list = field(default_factory=lambda: ["infer", "train"])
    batch_sizes: list = field(default_factory=lambda: [1, 32, 128])
    data: dict = field(default_factory=lambda: {"data": "sample"})  # bench.datasets arguments
    sizes: dict = field(default_factory=dict)  # ModelConfig sizes
    repeats: int = 10  # timed batches at least
    min_time: float = 1.0  # and at least this many seconds of timed batches
    max_batches: int = 200  # never more timed batches than this
    agreement_pairs: int = 32  # pairs checked against the float64 reference
    seed: int = 0
    buckets: list | None = None  # token-count bucket boundaries (None: shared.batching.DEFAULT_BUCKETS)
    skip: list = field(default_factory=list)  # [mode, batch size] pairs already measured (--resume)
    git_commit: str = "unknown"
    run_id: str = ""


def build_workload(spec: WorkerSpec):
    """Pairs, vocabulary, config and initial weights: identical in every worker."""
    args = argparse.Namespace(split="train", num_pairs=None, shape="random", length=20, data_seed=0)
    vars(args).update(spec.data)
    dataset = load_dataset(args)
    vocab = Vocabulary.from_pairs(dataset.pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), **spec.sizes)
    params = init_params(config, seed=spec.seed)
    return dataset, vocab, config, params


def environment(spec: WorkerSpec) -> dict:
    """The machine and software state every record carries."""
    return {
        "framework": spec.framework,
        "framework_version": devices.framework_version(spec.framework),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": devices.cpu_name(),
        "threads": devices.thread_counts(spec.framework),
        "precision_modes": devices.precision_modes(spec.framework),
        "git_commit": spec.git_commit,
        "run_id": spec.run_id,
    }


def run(spec: WorkerSpec) -> int:
    devices.set_full_precision(spec.framework)
    runner_cls = runner_class(spec.framework)
    if spec.device == "auto":
        spec.device = "gpu" if devices.gpu_available(spec.framework) else "cpu"
    dataset, vocab, config, params = build_workload(spec)
    todo = [(mode, b) for mode in spec.modes for b in spec.batch_sizes if [mode, b] not in spec.skip]
    progress = Progress(spec.implementation, len(todo), unit="measurements", interval=None)
    progress.write(f"{len(dataset.pairs)} pairs of {dataset.name}; model {config.to_json()}; device {spec.device}")

    def new_runner():
        return runner_cls(params, config, dtype=spec.dtype, device=spec.device, **spec.options)

    progress.status("agreement with the float64 reference")
    labelled = [p for p in dataset.pairs if p.label >= 0]
    agreement = check_agreement(new_runner(), labelled[:spec.agreement_pairs], vocab, config, params, spec.dtype,
                                Path(spec.out_dir), spec.implementation)
    status = "ok" if agreement["agreement_ok"] else "DISAGREES WITH THE REFERENCE"
    progress.write(f"agreement: encodings {agreement['max_abs_err_encoding']:.1e}, logits "
                   f"{agreement['max_abs_err_logits']:.1e}, grads {agreement['max_rel_err_grads']:.1e} (rel): {status}")
    progress.status("dense matmul peak")
    peak = devices.matmul_peak_flops(spec.framework, spec.device, spec.dtype)
    progress.write(f"dense matmul peak {peak['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s "
                   f"(n={peak['matmul_peak_n']})")

    env = environment(spec)
    results = Path(spec.out_dir) / "results.jsonl"
    for mode in spec.modes:
        for batch_size in spec.batch_sizes:
            if [mode, batch_size] in spec.skip:
                progress.write(f"{mode} B={batch_size}: already in {results}, skipped (--resume)")
                continue
            pairs = labelled if mode == "train" else dataset.pairs
            batches = make_batches(pairs, vocab, batch_size, buckets=spec.buckets or DEFAULT_BUCKETS,
                                   shuffle=True, seed=spec.seed, drop_last=True)
            if not batches:
                progress.write(f"{mode} B={batch_size}: fewer pairs than one batch, skipped")
                progress.update(1)
                continue
            runner = new_runner()
            if mode == "train":
                runner.set_optimizer("adam", lr=1e-3)
            if spec.device == "gpu":
                devices.reset_device_peak(spec.framework)
            load_before = os.getloadavg()[0]
            with RssSampler() as rss:
                numbers = measure(runner, batches, mode, config, repeats=spec.repeats, min_time=spec.min_time,
                                  max_batches=spec.max_batches, framework=spec.framework, device=spec.device,
                                  status=progress.status)
            record = {
                "implementation": spec.implementation,
                "mode": mode,
                "device": spec.device,
                "dtype": spec.dtype,
                "batch_size": batch_size,
                **numbers,
                "matmul_peak_flops_per_s": peak["matmul_peak_flops_per_s"],
                "matmul_peak_n": peak["matmul_peak_n"],
                "peak_mem_bytes": (devices.device_peak_bytes(spec.framework) if spec.device == "gpu"
                                   else rss.peak),
                "peak_rss_bytes": rss.peak,
                "padding_waste": padding_report(batches).waste,
                "buckets": list(spec.buckets or DEFAULT_BUCKETS),
                # Other work on the machine skews timings: the 1-minute load average around the measurement.
                "load_avg_1min": [load_before, os.getloadavg()[0]],
                "data": dataset.name,
                "model": json.loads(config.to_json()),
                "optimizer": "adam" if mode == "train" else None,
                "options": spec.options,
                **agreement,
                **env,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            record["flops_fraction_of_peak"] = record["useful_flops_per_s"] / record["matmul_peak_flops_per_s"]
            append_record(results, record)
            progress.write(f"{mode:5s} B={batch_size:<4d} {numbers['pairs_per_s']:9.1f} pairs/s  "
                           f"step {numbers['step_s_median'] * 1e3:8.1f} ms  compile {numbers['compile_s']:.2f} s  "
                           f"traces {numbers['traces']}  {record['flops_fraction_of_peak'] * 100:.1f}% of peak")
            progress.update(1)
    progress.close()
    return 0 if agreement["agreement_ok"] else 3


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m bench.benchmark.worker SPEC.json", file=sys.stderr)
        return 2
    quiet_frameworks()  # before any framework is imported
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    return run(spec)


if __name__ == "__main__":
    raise SystemExit(main())
