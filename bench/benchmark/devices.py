"""What a worker records of its framework and device, read through the framework's platform.

Versions, device names, thread counts, precision modes, and the dense matmul peak that useful FLOP/s are compared with
(measured with the same framework, device and dtype, in the same process). Every figure comes from a
``shared.platform.Platform`` (``bench.frameworks.platform(name)``): nothing here knows which framework it measures.
"""

from __future__ import annotations

import platform as host
import time

import numpy as np

from shared.platform import Platform, cpu_name


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
