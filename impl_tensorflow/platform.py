"""What the harness needs from tensorflow besides the model (shared/platform.py).

The library is imported inside the methods only: the process settings are
read before it is imported.
"""

from __future__ import annotations

from shared.platform import Platform as PlatformBase


def _tf_config() -> dict:
    """TF_CONFIG, the cluster of a multi-worker job as TensorFlow reads it ({} where unset);
    a ValueError in one line where it is not JSON."""
    import json
    import os
    text = os.environ.get("TF_CONFIG", "")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ValueError(f"TF_CONFIG is not JSON ({err}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {text[:80]!r}")
    return value


class Platform(PlatformBase):
    name = "tensorflow"
    library = "tensorflow"
    explain_module = "impl_tensorflow.explain"  # what `bench explain` reads from its graphs
    # --replicas K: one process, tf.distribute.MirroredStrategy over K devices
    # (runner.py). Nothing to set before import: the K logical CPU devices are
    # configured when the runner is made, before TensorFlow's runtime starts.
    # --processes P: MultiWorkerMirroredStrategy over P workers described by TF_CONFIG.
    data_parallel = "devices"
    multi_process = True

    def process_env(self, rank: int, addresses: list[str]) -> dict[str, str]:
        import json
        return {"TF_CONFIG": json.dumps({"cluster": {"worker": list(addresses)},
                                         "task": {"type": "worker", "index": rank}})}

    def job_processes(self) -> int:
        workers = _tf_config().get("cluster", {}).get("worker", [])
        return len(workers) if len(workers) > 1 else 1

    def replica_rank(self) -> int | None:
        return int(_tf_config().get("task", {}).get("index", 0)) if self.job_processes() > 1 else None
    # Python-side warnings (absl's handler among them): only errors reach the terminal.
    loggers = ("tensorflow", "absl")
    # What the C++ side writes to file descriptor 2 while the library loads, before its logging reads
    # TF_CPP_MIN_LOG_LEVEL (seen with 2.21, once per shared library that logs): absl's line that nothing called
    # absl::InitializeLog(), and oneDNN's notice that its custom operations are on. No switch silences them but
    # TF_ENABLE_ONEDNN_OPTS=0, which changes the computation, so the import drops them (bench.config).
    native_noise = (
        b"All log messages before absl::InitializeLog() is called",
        b"oneDNN custom operations are on",
    )

    def default_env(self) -> dict[str, str]:
        # TensorFlow's own switch for its C++ log: 3 keeps INFO, WARNING and ERROR lines off the terminal, among them
        # the CPU-feature notice and oneDNN's ERROR-level notice that it supports DT_INT32 only with AVX-512 (a
        # fallback, not a failure). An error that stops the work still reaches Python as an exception with its
        # message; TF_CPP_MIN_LOG_LEVEL=2 in the environment shows the ERROR lines again. It only hides messages:
        # TF_ENABLE_ONEDNN_OPTS, which changes numerics, is left as the environment has it.
        return {"TF_CPP_MIN_LOG_LEVEL": "3"}

    def gpu_available(self) -> bool:
        import tensorflow as tf
        return bool(tf.config.list_physical_devices("GPU"))

    def gpu_missing_reason(self) -> str:
        return ("tf.config.list_physical_devices('GPU') is empty; the tensorflow-cpu wheel has no GPU support "
                "(install tensorflow[and-cuda])")

    def device_name(self, device: str) -> str:
        if device == "gpu":
            import tensorflow as tf
            details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
            return details.get("device_name", "GPU")
        return super().device_name(device)

    def precision_modes(self) -> dict:
        import tensorflow as tf
        return {**super().precision_modes(),
                "tf.tensor_float_32_execution": tf.config.experimental.tensor_float_32_execution_enabled()}

    def set_full_precision(self) -> None:
        import tensorflow as tf
        tf.config.experimental.enable_tensor_float_32_execution(False)

    def thread_counts(self) -> dict:
        import tensorflow as tf
        return {**super().thread_counts(),
                "tf_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "tf_inter_op": tf.config.threading.get_inter_op_parallelism_threads()}

    def reset_device_peak(self) -> None:
        import tensorflow as tf
        tf.config.experimental.reset_memory_stats("GPU:0")

    def device_peak_bytes(self) -> int | None:
        import tensorflow as tf
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])

    def matmul(self, a, b, device):
        # A reduction of one element brings the product's completion back to
        # the host without copying the whole result.
        import tensorflow as tf
        with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
            ta, tb = tf.constant(a), tf.constant(b)

        @tf.function
        def product():
            return tf.reduce_sum(tf.linalg.matmul(ta, tb)[0, :1])

        return lambda: product().numpy()
