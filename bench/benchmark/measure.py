"""The measurements of one implementation: agreement with the reference, warm-up, memory, and what it runs on.

Used inside a worker process (bench/benchmark/worker.py); ``pairwise_agreement`` by the parent that collects the
results. Every figure of the framework and device is read through its ``shared.platform.Platform``: nothing here knows
which framework it measures.
"""

from __future__ import annotations

import platform as host
import threading
import time
from itertools import combinations
from pathlib import Path

import numpy as np

from shared.platform import Platform, cpu_name


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


def check_agreement(runner, pairs, vocab, config, params, dtype: str, out_dir: Path, name: str, parse_modes=()) -> dict:
    """``runner`` against the float64 reference on the same weights: encodings and logits, gradients on the cheapest
    four pairs, and the predicted parses; its outputs kept for the pairwise comparison."""
    from shared import parse_metrics, reference
    from shared.batching import make_pair_batch, pair_length
    from shared.compare import ENCODING_TOL_F32, GRAD_REL_TOL_F32, LOGITS_TOL_F32, grad_rel_errs, max_abs_err

    batch = make_pair_batch(pairs, vocab)
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
    for mode in parse_modes:
        if mode != "predicted":
            continue  # sampled parses follow the shared uniforms; their agreement is a test's business
        mine, theirs = runner.parse(batch, mode), reference.parse(params, config, batch, mode)
        result["parse_agreement"] = float(np.mean([
            parse_metrics.parse_agreement(mine.premise_transitions, theirs.premise_transitions),
            parse_metrics.parse_agreement(mine.hypothesis_transitions, theirs.hypothesis_transitions)]))
        result["max_abs_err_logits_predicted"] = max_abs_err(mine.logits, theirs.logits)
    if dtype == "float32":
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= ENCODING_TOL_F32
                                      and result["max_abs_err_logits"] <= LOGITS_TOL_F32
                                      and result["max_rel_err_grads"] <= GRAD_REL_TOL_F32)
    else:
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= 1e-10 and result["max_abs_err_logits"] <= 1e-10)
    agreement_dir = Path(out_dir) / "agreement"
    agreement_dir.mkdir(parents=True, exist_ok=True)
    np.savez(agreement_dir / f"{name}.npz", premise=premise, hypothesis=hypothesis, logits=logits,
             pair_id=np.array(batch.pair_ids))
    return result


def pairwise_agreement(out_dir: Path, names: list[str]) -> dict:
    """Max abs differences of encodings and logits between implementations."""
    paths = {name: Path(out_dir) / "agreement" / f"{name}.npz" for name in names}
    loaded = {name: np.load(path) for name, path in sorted(paths.items()) if path.exists()}
    diff = lambda a, b, key: float(np.abs(loaded[a][key] - loaded[b][key]).max())  # noqa: E731
    return {f"{a} vs {b}": {"max_abs_diff_encoding": max(diff(a, b, "premise"), diff(a, b, "hypothesis")),
                            "max_abs_diff_logits": diff(a, b, "logits")} for a, b in combinations(loaded, 2)}


def warm_up(runner, batches, step) -> dict:
    """Run ``step`` on every shape among ``batches``, ``runner.warmup_calls`` times each (the tracing and compiling
    counted by the runner's statistics, all the time in ``first_call_s``)."""
    before = runner.compile_stats()
    seen, first_call_s = set(), 0.0
    for batch in batches:
        shape = (batch.size, batch.num_tokens, batch.num_steps)
        if shape in seen:
            continue
        seen.add(shape)
        for _ in range(runner.warmup_calls):
            t0 = time.perf_counter()
            step(batch)
            first_call_s += time.perf_counter() - t0
    warm = runner.compile_stats().since(before)
    # The parts of the warm-up (trace, lowering, XLA, first calls, cache), the same keys for every framework.
    detail = {key: value for key, value in warm.to_dict().items() if key not in ("traces", "compile_s", "shapes")}
    return {"compile_s": warm.compile_s, "traces": warm.traces, "compile_detail": detail,
            "first_call_s": first_call_s, "warmup_shapes": len(seen)}


def environment(platform: Platform, device: str) -> dict:
    """The software and hardware a worker measures on (recorded with every measurement)."""
    return {
        "device_name": platform.device_name(device),
        "framework_version": platform.version(),
        "python": host.python_version(),
        "numpy": np.__version__,
        "platform": host.platform(),
        "cpu": cpu_name(),
        "threads": platform.thread_counts(),
        "precision_modes": platform.precision_modes(),
    }


def matmul_peak_flops(platform: Platform, device: str, dtype: str = "float32", n: int | None = None,
                      min_time: float = 0.5) -> dict:
    """Best FLOP/s of a square matmul (after a warm-up), and the size used."""
    if n is None:
        n = 8192 if device == "gpu" else 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    run = platform.matmul(a, b, device)
    run()  # warm-up: allocation, compilation, thread start-up
    best = float("inf")
    start = time.perf_counter()
    count = 0
    while count < 3 or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        count += 1
        if count >= 200:
            break
    return {"matmul_peak_flops_per_s": 2.0 * n**3 / best, "matmul_peak_n": n}
