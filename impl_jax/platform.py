"""What the harness needs from jax besides the model (shared/platform.py).

The library is imported inside the methods only: the process settings are
read before it is imported (64-bit mode, in particular, is decided at import).
The persistent compilation cache's switch is compilation_cache.py's.
"""

from __future__ import annotations

import os

from shared.platform import Platform as PlatformBase

from . import compilation_cache


class Platform(PlatformBase):
    name = "jax"
    library = "jax"
    explain_module = "impl_jax.explain"  # what `bench explain` reads from its graphs
    # The "no GPU/TPU found, falling back to CPU" notice at the first device query.
    loggers = ("jax._src.xla_bridge",)
    # Gloo's line per process of a job (--processes) as its peers connect: a notice, never an error.
    native_noise = (b"[Gloo] Rank ",)
    has_compilation_cache = True
    # --replicas K: a mesh of K devices, the batch sharded under jit (replicas.py); the devices of one process,
    # or (--processes P) of P processes joined by jax.distributed, K / P each.
    data_parallel = "devices"
    multi_process = True

    def replica_env(self, replicas: int) -> dict[str, str]:
        # On a CPU, XLA shows one device unless told to split the host into this process's share of K.
        flags = os.environ.get("XLA_FLAGS", "")
        flags = " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))
        share = max(1, replicas // self.job_processes())
        return {"XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={share}".strip()}

    def process_env(self, rank: int, addresses: list[str]) -> dict[str, str]:
        # JAX reads the coordinator's address itself (jax.distributed.initialize); the other two are the
        # arguments it needs outside a cluster it detects (Slurm, Open MPI), passed on by replicas.py.
        return {"JAX_COORDINATOR_ADDRESS": addresses[0], "JAX_NUM_PROCESSES": str(len(addresses)),
                "JAX_PROCESS_ID": str(rank)}

    def job_processes(self) -> int:
        return int(os.environ.get("JAX_NUM_PROCESSES", "1"))

    def replica_rank(self) -> int | None:
        return int(os.environ["JAX_PROCESS_ID"]) if self.job_processes() > 1 else None

    def forced_env(self, dtype: str = "float32") -> dict[str, str]:
        env = {
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # take GPU memory as needed, so its peak is the model's
            "JAX_DEFAULT_MATMUL_PRECISION": "highest",  # float32 matmuls in float32, never TF32 or bfloat16 passes
        }
        if dtype == "float64":
            env["JAX_ENABLE_X64"] = "1"  # read once, when jax is imported
        return env

    def gpu_available(self) -> bool:
        import jax
        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False

    def gpu_missing_reason(self) -> str:
        return "jax.devices('gpu') found none; install a CUDA build of jaxlib (jax[cuda12])"

    def device_name(self, device: str) -> str:
        if device == "gpu":
            import jax
            return jax.devices("gpu")[0].device_kind
        return super().device_name(device)

    def precision_modes(self) -> dict:
        import jax
        return {**super().precision_modes(), "jax_default_matmul_precision": jax.config.jax_default_matmul_precision}

    def set_full_precision(self) -> None:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")

    def device_peak_bytes(self) -> int | None:
        # JAX keeps no resettable peak: this one is the process's (recorded as such).
        import jax
        return (jax.devices("gpu")[0].memory_stats() or {}).get("peak_bytes_in_use")

    def matmul(self, a, b, device):
        import jax
        target = jax.devices("gpu" if device == "gpu" else "cpu")[0]
        ja, jb = jax.device_put(a, target), jax.device_put(b, target)
        product = jax.jit(lambda x, y: x @ y)
        return lambda: product(ja, jb).block_until_ready()

    def matmuls(self, pairs, device):
        """On a GPU, JAX's eager products back to back (dispatched in order, the last waited for): a batch's
        limit. On the host NumPy's routine serves (each new shape here would first compile a program)."""
        if device != "gpu":
            return None
        import jax
        import jax.numpy as jnp
        target = jax.devices("gpu")[0]
        placed = [(jax.device_put(a, target), jax.device_put(b, target)) for a, b in pairs]

        def run():
            out = None
            for a, b in placed:
                out = jnp.matmul(a, b)
            if out is not None:
                out.block_until_ready()
        return run

    def matmul_kernel(self, device: str) -> str:
        return f"XLA on {self.device_name(device)}"

    def enable_compilation_cache(self, path: str) -> None:
        compilation_cache.enable_compilation_cache(path)

    def clear_caches(self) -> None:
        import jax
        jax.clear_caches()

