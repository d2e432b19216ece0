"""A job of several processes (``--processes P``, on one host or several), joined before JAX touches a
device: what the runner does first when it runs data-parallel replicas (replicas.py) across processes."""

from __future__ import annotations

import os

_JOINED: list[int] = []


def join_processes() -> int:
    """Join the job of several processes that the environment describes
    (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID: what
    impl_jax/platform.py's process_env writes), once per process, before any
    device is touched; the job's process count (1: no job)."""
    processes = int(os.environ.get("JAX_NUM_PROCESSES", "1"))
    if processes > 1 and not _JOINED:
        import jax

        # The CPU's collectives between processes (the GPU's go over NCCL whatever this says).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], processes,
                                   int(os.environ["JAX_PROCESS_ID"]))
        _JOINED.append(processes)
    return processes
