"""Data parallelism for the JAX SPINN: one process, a mesh of K devices
(``bench train --replicas K``; docs/data-parallel.md).

:func:`replica_devices` is the mesh, one axis ("data") of K devices. The
data-parallel step is not a program of its own: it is the one-device
training step (train.py), jitted by the runner as always, given inputs laid
out on the mesh by :func:`replica_train_step`: the weights, the optimizer
state and the scalars replicated on every device, the batch's rows split
along "data". jit compiles the step for that layout (GSPMD): each device runs
the scan over its rows, and the gradient's sum over the batch becomes an
all-reduce the compiler inserts. The loss is still the mean over the global
batch, and the dropout masks are drawn for the global arrays, as on one device.

Several processes (``--processes P``, on one host or several):
distributed.join_processes joins the job the environment describes
(``jax.distributed.initialize``; on a CPU the all-reduce goes over Gloo)
before JAX touches a device, and the mesh is then made of every process's
devices. Each process places the same global batch (every process reads the
same data in the same order); jit runs the same program in all of them, each
on its own rows.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def replica_devices(device: str, replicas: int) -> Mesh:
    """A one-axis mesh ("data") of the first ``replicas`` JAX devices of the
    kind ``device`` ("cpu" or "gpu"), every process's in a job of several;
    a ValueError where there are fewer."""
    devices = jax.devices(device)
    if len(devices) < replicas:
        where = f"the job's {jax.process_count()} processes have" if jax.process_count() > 1 else "this process has"
        raise ValueError(f"--replicas {replicas} needs {replicas} JAX {device} devices, {where} "
                         f"{len(devices)} (on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=K/P "
                         "before JAX is imported; bench train --replicas sets it)")
    return Mesh(np.array(devices[:replicas]), ("data",))


def replica_train_step(mesh: Mesh) -> tuple[NamedSharding, NamedSharding]:
    """One data-parallel training step of K replicas, as JAX has it: where the
    step's inputs live. Returns (replicated, rows): the sharding of the
    weights, the optimizer state and the scalars (a copy on every device of
    ``mesh``), and that of a per-pair array [B, ...] (its rows split along
    "data", B / K on each device)."""
    # The piece of the step that is data-parallel is the layout, not the
    # function: the runner places the arguments with these shardings and
    # calls the same jitted train step it runs on one device; jit compiles
    # it for the mesh and inserts the all-reduce of the gradients.
    return NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
