"""One implementation's measurements, in a process of its own.

``python -m bench run`` starts ``python -m bench.worker SPEC.json`` once per
implementation, so frameworks cannot disturb each other and memory figures
are the implementation's own. The worker appends one JSON record per
(mode, batch size) to ``results.jsonl`` as soon as it is measured, so an
interrupted run keeps everything finished before the interruption.

Exit codes: 0 ok, 3 measured but disagrees with the reference beyond the
tolerances of the tests (records written, marked ``agreement_ok: false``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


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


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[1], timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                   text=True, cwd=Path(__file__).resolve().parents[1], timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown"


class RssSampler:
    """Peak resident memory of this process over a window, sampled every few ms."""

    def __init__(self, interval: float = 0.005):
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self):
        self.peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def log(spec: WorkerSpec, message: str) -> None:
    print(f"[{spec.implementation}] {message}", file=sys.stderr, flush=True)


def build_workload(spec: WorkerSpec):
    """Pairs, vocabulary, config and initial weights: identical in every worker."""
    import argparse

    from bench.datasets import load_dataset
    from shared.params import ModelConfig, init_params
    from shared.vocab import Vocabulary

    args = argparse.Namespace(split="train", num_pairs=None, shape="random", length=20, data_seed=0)
    vars(args).update(spec.data)
    dataset = load_dataset(args)
    vocab = Vocabulary.from_pairs(dataset.pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), **spec.sizes)
    params = init_params(config, seed=spec.seed)
    return dataset, vocab, config, params


def check_agreement(spec: WorkerSpec, runner_cls, dataset, vocab, config, params) -> dict:
    """This implementation against the float64 reference on the same weights:
    encodings and logits on ``agreement_pairs`` pairs, gradients on a few."""
    from shared import reference
    from shared.batching import make_pair_batch, pair_length
    from shared.compare import (ENCODING_TOL_F32, GRAD_REL_TOL_F32, LOGITS_TOL_F32, grad_rel_errs,
                                max_abs_err)

    pairs = [p for p in dataset.pairs if p.label >= 0][:spec.agreement_pairs]
    batch = make_pair_batch(pairs, vocab)
    runner = runner_cls(params, config, dtype=spec.dtype, device=spec.device, **spec.options)
    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    grad_batch = batch.select(np.argsort([pair_length(p) for p in pairs])[:4])  # the cheapest four
    _, grads = runner.loss_and_grads(grad_batch)
    _, ref_grads = reference.loss_and_grads(params, config, grad_batch)
    result = {
        "max_abs_err_encoding": max(max_abs_err(premise, ref.premise), max_abs_err(hypothesis, ref.hypothesis)),
        "max_abs_err_logits": max_abs_err(logits, ref.logits),
        "max_rel_err_grads": max(grad_rel_errs(grads, ref_grads).values()),
        "agreement_pairs": len(pairs),
    }
    if spec.dtype == "float32":
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= ENCODING_TOL_F32
                                      and result["max_abs_err_logits"] <= LOGITS_TOL_F32
                                      and result["max_rel_err_grads"] <= GRAD_REL_TOL_F32)
    else:
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= 1e-10
                                      and result["max_abs_err_logits"] <= 1e-10)
    # Kept for the pairwise comparison between implementations.
    agreement_dir = Path(spec.out_dir) / "agreement"
    agreement_dir.mkdir(parents=True, exist_ok=True)
    np.savez(agreement_dir / f"{spec.implementation}.npz", premise=premise, hypothesis=hypothesis, logits=logits,
             pair_id=np.array(batch.pair_ids))
    return result


def measure(spec: WorkerSpec, runner, batches, mode: str, config) -> dict:
    """Warm up on every shape the timed batches use, then time them."""
    from bench import devices
    from bench.flops import batch_flops

    step = runner.encode if mode == "infer" else runner.train_step
    plan = [batches[k % len(batches)] for k in range(spec.max_batches)]
    before = runner.compile_stats()
    first_call_s = 0.0
    seen = set()
    for batch in plan[:max(spec.repeats, 1)] + batches:
        shape = (batch.size, batch.num_tokens, batch.num_steps)
        if shape in seen:
            continue
        seen.add(shape)
        t0 = time.perf_counter()
        step(batch)
        first_call_s += time.perf_counter() - t0
    after_warmup = runner.compile_stats()
    step(plan[0])  # one more warm batch: caches, allocator, thread pools
    times, pairs, flops = [], 0, 0
    started = time.perf_counter()
    for batch in plan:
        t0 = time.perf_counter()
        step(batch)  # encode returns NumPy and train_step a float: both wait for the device
        times.append(time.perf_counter() - t0)
        pairs += batch.size
        flops += batch_flops(config, batch, mode)
        if len(times) >= spec.repeats and time.perf_counter() - started >= spec.min_time:
            break
    after = runner.compile_stats()
    total = float(np.sum(times))
    warm = after_warmup.since(before)
    # The parts of the warm-up (trace, lowering, XLA, first calls, cache), the same keys for every framework.
    detail = {key: value for key, value in warm.to_dict().items() if key not in ("traces", "compile_s", "shapes")}
    return {
        "compile_detail": detail,
        "pairs_per_s": pairs / total,
        "step_s_median": float(np.median(times)),
        "step_s_p10": float(np.percentile(times, 10)),
        "step_s_p90": float(np.percentile(times, 90)),
        "timed_batches": len(times),
        "timed_pairs": pairs,
        "compile_s": warm.compile_s,
        "first_call_s": first_call_s,
        "warmup_shapes": len(seen),
        "traces": after.traces - before.traces,
        "traces_total": after.traces,
        "retraces_while_timed": after.traces - after_warmup.traces,
        "useful_flops": flops,
        "useful_flops_per_s": flops / total,
        "device_name": devices.device_name(spec.framework, spec.device),
    }


def run(spec: WorkerSpec) -> int:
    from bench import devices
    from bench.frameworks import runner_class
    from shared.batching import DEFAULT_BUCKETS, make_batches, padding_report

    devices.set_full_precision(spec.framework)
    runner_cls = runner_class(spec.framework)
    if spec.device == "auto":
        spec.device = "gpu" if devices.gpu_available(spec.framework) else "cpu"
    dataset, vocab, config, params = build_workload(spec)
    log(spec, f"{len(dataset.pairs)} pairs of {dataset.name}; model {config.to_json()}; device {spec.device}")

    agreement = check_agreement(spec, runner_cls, dataset, vocab, config, params)
    status = "ok" if agreement["agreement_ok"] else "DISAGREES WITH THE REFERENCE"
    log(spec, f"agreement: encodings {agreement['max_abs_err_encoding']:.1e}, logits "
              f"{agreement['max_abs_err_logits']:.1e}, grads {agreement['max_rel_err_grads']:.1e} (rel): {status}")
    peak = devices.matmul_peak_flops(spec.framework, spec.device, spec.dtype)
    log(spec, f"dense matmul peak {peak['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s (n={peak['matmul_peak_n']})")

    environment = {
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
    results = Path(spec.out_dir) / "results.jsonl"
    for mode in spec.modes:
        for batch_size in spec.batch_sizes:
            if [mode, batch_size] in spec.skip:
                log(spec, f"{mode} B={batch_size}: already in {results}, skipped (--resume)")
                continue
            labelled = [p for p in dataset.pairs if p.label >= 0] if mode == "train" else dataset.pairs
            batches = make_batches(labelled, vocab, batch_size, buckets=spec.buckets or DEFAULT_BUCKETS,
                                   shuffle=True, seed=spec.seed, drop_last=True)
            if not batches:
                log(spec, f"{mode} B={batch_size}: fewer pairs than one batch, skipped")
                continue
            runner = runner_cls(params, config, dtype=spec.dtype, device=spec.device, **spec.options)
            if mode == "train":
                runner.set_optimizer("adam", lr=1e-3)
            if spec.device == "gpu":
                devices.reset_device_peak(spec.framework)
            load_before = os.getloadavg()[0]
            with RssSampler() as rss:
                numbers = measure(spec, runner, batches, mode, config)
            padding = padding_report(batches)
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
                "padding_waste": padding.waste,
                "buckets": list(spec.buckets or DEFAULT_BUCKETS),
                # Other work on the machine skews timings: the 1-minute load average around the measurement.
                "load_avg_1min": [load_before, os.getloadavg()[0]],
                "data": dataset.name,
                "model": json.loads(config.to_json()),
                "optimizer": "adam" if mode == "train" else None,
                "options": spec.options,
                **agreement,
                **environment,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            record["flops_fraction_of_peak"] = record["useful_flops_per_s"] / record["matmul_peak_flops_per_s"]
            with open(results, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
            log(spec, f"{mode:5s} B={batch_size:<4d} {numbers['pairs_per_s']:9.1f} pairs/s  "
                      f"step {numbers['step_s_median'] * 1e3:8.1f} ms  compile {numbers['compile_s']:.2f} s  "
                      f"traces {numbers['traces']}  {record['flops_fraction_of_peak'] * 100:.1f}% of peak")
    return 0 if agreement["agreement_ok"] else 3


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m bench.worker SPEC.json", file=sys.stderr)
        return 2
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    return run(spec)


if __name__ == "__main__":
    raise SystemExit(main())
