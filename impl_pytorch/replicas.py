"""Data parallelism for the PyTorch SPINN: DistributedDataParallel over K
processes (``bench train --replicas K``; docs/data-parallel.md).

:func:`_launch` (the platform's ``launch``) starts K copies of ``python -m
bench train ...`` under PyTorch's elastic launcher (what ``torchrun`` runs),
with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` set; with no restarts allowed, it stops the others as soon as
one fails, and ``--resume`` goes on from the last checkpoint. In each
process, :func:`replica_devices` is this process's device, and
:func:`replica_train_step` its part of a step: replica r computes the mean
loss of its rows of the global batch, with the dropout masks its pairs get in
one process (classifier._ShardDropout), inside ``DistributedDataParallel``,
whose ``backward()`` averages the K gradients; every replica's optimizer then
takes the step one process takes over the whole batch.

Several hosts: each host runs
``torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m bench train ... --replicas N*K``;
the processes find their ranks from torchrun's variables just as here.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from shared.batching import PairBatch

from . import train
from .classifier import _replica_shard

# How long a replica waits for the others at a collective before giving up.
# Long, because replica 0 evaluates and checkpoints while the others wait at
# the next step's all-reduce; a replica that dies is caught by the launcher.
COLLECTIVE_TIMEOUT = timedelta(hours=2)


def _rank_and_world(replicas: int) -> tuple[int, int]:
    """(rank, world size) from the launcher's variables, checked against ``replicas``."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise ValueError(f"replicas={replicas}: this process was not started by a launcher (bench train "
                         "--replicas K, or torchrun), so it has no replicas to share its steps with")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != replicas:
        raise ValueError(f"replicas={replicas}, but the launcher started {world} processes (WORLD_SIZE)")
    return rank, world


def replica_devices(device: torch.device, replicas: int) -> torch.device:
    """This process's device, as one of ``replicas`` started by the launcher:
    on GPUs each process of a host takes its own (LOCAL_RANK), on a CPU
    ``device`` itself. A ValueError where no launcher started this process as
    one of ``replicas``."""
    # One device, not K: PyTorch's engine is one process per replica, so a
    # process knows only its own device (the others' are their processes').
    _rank_and_world(replicas)
    if device.type == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


class _ShardLoss(nn.Module):
    """The module DDP wraps: a shard of a pair batch -> its mean loss."""

    def __init__(self, model: nn.Module, device: torch.device, transition_weight: float):
        super().__init__()
        self.model = model
        self.device = device
        self.transition_weight = transition_weight

    def forward(self, batch: PairBatch | None) -> torch.Tensor:
        if batch is None:  # no rows for this replica (a batch smaller than K): nothing to add to the gradient
            return self.model.output.bias.sum() * 0.0
        return train.batch_loss(self.model, batch, self.device, self.transition_weight)


class _Wait:
    """What the communication hook saw in the last step. Replicas whose trees
    differ finish their backward passes at different times and the fast ones
    wait at the all-reduce: ``last_phases["allreduce_wait"]`` is that wait,
    from this replica's last bucket ready to the averaged gradients back."""

    def __init__(self):
        self.ready = 0.0  # when this replica's latest bucket was ready
        self.done = 0.0  # when the latest averaged bucket came back


def _timed_mean(state, bucket):
    """DDP's default all-reduce (sum, then divide by the world size), timed.
    (No annotations: DDP checks them, and this module's are strings.)"""
    state.ready = time.perf_counter()
    tensor = bucket.buffer().div_(dist.get_world_size())
    future = dist.all_reduce(tensor, async_op=True).get_future()

    def finished(fut):
        state.done = time.perf_counter()
        return fut.value()[0]

    return future.then(finished)


class _Replicas:
    """This process's part in a data-parallel job: the process group, and the
    module that computes its shard's loss wrapped in DistributedDataParallel,
    with a communication hook that times the wait at the all-reduce."""

    def __init__(self, model: nn.Module, replicas: int, device: torch.device, transition_weight: float):
        self.rank, self.world = _rank_and_world(replicas)
        self.model = model
        self.device = device
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
        # find_unused_parameters: a batch may leave a parameter without a
        # gradient (the transition head without its loss, a frozen embedding).
        self.module = DistributedDataParallel(_ShardLoss(model, device, transition_weight),
                                              find_unused_parameters=True)
        self.wait = _Wait()
        self.module.register_comm_hook(self.wait, _timed_mean)

    def rows(self, batch_size: int) -> np.ndarray:
        """This replica's rows of a global batch: an equal share, or for a
        batch that does not split evenly (a bucket's last one) one more row
        for the first replicas; none for the last ones if it is smaller than K."""
        return np.array_split(np.arange(batch_size), self.world)[self.rank]


# Takes the process's _Replicas rather than the model: DDP's wrapper, the process
# group and the hook's timings live across steps, built once by the Runner.
def replica_train_step(engine: _Replicas, batch: PairBatch, optimizer: torch.optim.Optimizer, *, seed: int,
                       step: int, frozen) -> tuple[float, dict, dict]:
    """One synchronous step over the global ``batch``: (its mean loss, this
    replica's phases in seconds, each replica's compute and all-reduce wait).

    DDP averages the K replicas' gradients, so replica r's loss is its
    mean over its b_r rows times K b_r / B: the average is then the
    gradient of the mean over all B pairs, however unevenly they split.
    """
    total = len(batch.labels)
    rows = engine.rows(total)
    start = time.perf_counter()
    engine.model.train()
    optimizer.zero_grad(set_to_none=True)
    with train._dropout_randomness(seed, step, engine.device), _replica_shard(total, rows), \
            train._trainable(engine.model, frozen):
        mean = engine.module(batch.select(rows) if len(rows) else None)
        loss = mean * (engine.world * len(rows) / total)
        loss.backward()  # DDP's hooks all-reduce the gradients as they are made
    backward_done = time.perf_counter()
    optimizer.step()
    wait = max(engine.wait.done - engine.wait.ready, 0.0)
    phases = {"compute": backward_done - start - wait, "allreduce_wait": wait,
              "update": time.perf_counter() - backward_done}
    # One small all-gather for the record: each replica's loss sum (the
    # batch's loss is their total / B) and seconds, so replica 0, which
    # writes the metrics, can show who waited for whom.
    mine = torch.tensor([mean.item() * len(rows), phases["compute"], wait], dtype=torch.float64)
    gathered = [torch.zeros_like(mine) for _ in range(engine.world)]
    dist.all_gather(gathered, mine)
    table = torch.stack(gathered).numpy()
    per_replica = {"compute": table[:, 1].tolist(), "allreduce_wait": table[:, 2].tolist()}
    return float(table[:, 0].sum()) / total, phases, per_replica


def _launch(replicas: int, argv: list[str]) -> int:
    """``python -m bench *argv`` as ``replicas`` processes under PyTorch's
    elastic launcher; 0 when all end well, else one line on stderr and the
    failed replica's exit status (1 if it was killed by a signal)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its own account of a failure: ours is one line
    # K processes on a host's cores: each gets its share of threads, as torchrun does.
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // replicas))
    # DDP's once-only notice that find_unused_parameters costs a graph traversal
    # (it does, and is needed: see _Replicas) would be printed by every replica.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=replicas, run_id=f"spinn-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.2,
                          start_method="spawn")
    try:
        elastic_launch(config, sys.executable)("-m", "bench", *argv)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        code = failure.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.Signals._value2member_map_
               else f"ended with exit status {code}")
        print(f"error: replica {rank} of {replicas} {how}; the others were stopped. The run folder holds the last "
              "checkpoint: the same command with --resume goes on from it", file=sys.stderr)
        return code if code > 0 else 1
    return 0
