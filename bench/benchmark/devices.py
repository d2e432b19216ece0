"""What the harness needs from each framework besides the model.

Versions, device names, GPU detection, device memory peaks, precision modes,
and the dense matmul peak that useful FLOP/s are compared with (measured with
the same framework, device and dtype, in the same process). The framework is
imported only when its function is called.
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def framework_version(framework: str) -> str:
    if framework == "reference":
        return np.__version__
    module = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}[framework]
    return __import__(module).__version__


def gpu_available(framework: str) -> bool:
    if framework == "pytorch":
        import torch
        return torch.cuda.is_available()
    if framework == "tensorflow":
        import tensorflow as tf
        return bool(tf.config.list_physical_devices("GPU"))
    if framework == "jax":
        import jax
        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False
    return False


def gpu_missing_reason(framework: str) -> str:
    """Why ``gpu_available`` said no, in the framework's own terms (one line)."""
    return {
        "pytorch": "torch.cuda.is_available() is False",
        "tensorflow": "tf.config.list_physical_devices('GPU') is empty; the tensorflow-cpu wheel has no GPU "
                      "support (install tensorflow[and-cuda])",
        "jax": "jax.devices('gpu') found none; install a CUDA build of jaxlib (jax[cuda12])",
    }.get(framework, "this implementation runs on the CPU only")


def device_name(framework: str, device: str) -> str:
    if device == "cpu":
        return cpu_name()
    if framework == "pytorch":
        import torch
        return torch.cuda.get_device_name(0)
    if framework == "jax":
        import jax
        return jax.devices("gpu")[0].device_kind
    if framework == "tensorflow":
        import tensorflow as tf
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        return details.get("device_name", "GPU")
    return device


def precision_modes(framework: str) -> dict:
    """Reduced-precision matmul switches in force (all off unless asked for)."""
    modes: dict = {"NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE")}
    if framework == "pytorch":
        import torch
        modes["torch.backends.cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        modes["torch.float32_matmul_precision"] = torch.get_float32_matmul_precision()
    elif framework == "tensorflow":
        import tensorflow as tf
        modes["tf.tensor_float_32_execution"] = tf.config.experimental.tensor_float_32_execution_enabled()
    elif framework == "jax":
        import jax
        modes["jax_default_matmul_precision"] = jax.config.jax_default_matmul_precision
    return modes


def set_full_precision(framework: str) -> None:
    """Turn TF32 and similar modes off, so float32 means float32."""
    if framework == "pytorch":
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    elif framework == "tensorflow":
        import tensorflow as tf
        tf.config.experimental.enable_tensor_float_32_execution(False)
    elif framework == "jax":
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")


def thread_counts(framework: str) -> dict:
    counts: dict = {"cpu_count": os.cpu_count()}
    if framework == "pytorch":
        counts["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "")
        import torch
        counts["torch_intra_op"] = torch.get_num_threads()
        counts["torch_inter_op"] = torch.get_num_interop_threads()
    elif framework == "tensorflow":
        import tensorflow as tf
        counts["tf_intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
        counts["tf_inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
    return counts


# --------------------------------------------------------------------------
# Device memory (GPU); on the CPU the harness samples resident memory instead
# --------------------------------------------------------------------------


def reset_device_peak(framework: str) -> None:
    if framework == "pytorch":
        import torch
        torch.cuda.reset_peak_memory_stats()
    elif framework == "tensorflow":
        import tensorflow as tf
        tf.config.experimental.reset_memory_stats("GPU:0")
    # JAX exposes no reset: its peak is process-wide (recorded as such).


def device_peak_bytes(framework: str) -> int | None:
    if framework == "pytorch":
        import torch
        return int(torch.cuda.max_memory_allocated())
    if framework == "tensorflow":
        import tensorflow as tf
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    if framework == "jax":
        import jax
        stats = jax.devices("gpu")[0].memory_stats() or {}
        return stats.get("peak_bytes_in_use")
    return None


# --------------------------------------------------------------------------
# Dense matmul peak
# --------------------------------------------------------------------------


def _matmul_fn(framework: str, device: str, dtype: str, n: int):
    """A zero-argument function doing one n x n @ n x n product and waiting for it."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    if framework == "pytorch":
        import torch
        dev = torch.device("cuda" if device == "gpu" else "cpu")
        ta, tb = torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)

        def run():
            out = ta @ tb
            if dev.type == "cuda":
                torch.cuda.synchronize()
            return out
        return run
    if framework == "tensorflow":
        import tensorflow as tf
        with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
            ta, tb = tf.constant(a), tf.constant(b)

        @tf.function
        def product():
            return tf.reduce_sum(tf.linalg.matmul(ta, tb)[0, :1])

        return lambda: product().numpy()
    if framework == "jax":
        import jax
        dev = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        ja, jb = jax.device_put(a, dev), jax.device_put(b, dev)
        product = jax.jit(lambda x, y: x @ y)
        return lambda: product(ja, jb).block_until_ready()
    if framework == "reference":
        return lambda: a @ b
    raise ValueError(f"unknown framework {framework!r}")


def matmul_peak_flops(framework: str, device: str, dtype: str = "float32", n: int | None = None,
                      min_time: float = 0.5) -> dict:
    """Best FLOP/s of a square matmul (after a warm-up), and the size used."""
    if n is None:
        n = 8192 if device == "gpu" else 1024
    run = _matmul_fn(framework, device, dtype, n)
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
