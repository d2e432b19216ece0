"""Data parallelism for the PyTorch SPINN: DistributedDataParallel over K
processes (``bench train --replicas K``; docs/data-parallel.md).

The platform's ``launch`` (platform.py) starts K copies of ``python -m bench
train ...`` under PyTorch's elastic launcher (what ``torchrun`` runs), with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
set. In each process, :func:`replica_devices` is this process's device (it
joins the process group), and :func:`replica_train_step` its part of a step:
replica r computes the mean loss of its rows of the global batch, with the
dropout masks its pairs get in one process (dropout.ShardDropout), inside
``DistributedDataParallel``, whose ``backward()`` averages the K gradients;
every replica's optimizer then takes the step one process takes over the
whole batch.

Several hosts: each host runs
``torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m bench train ... --replicas N*K``;
the processes find their ranks from torchrun's variables just as here.
"""

from __future__ import annotations

import atexit
import os
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from shared.batching import BatchArrays

from . import train
from .dropout import replica_shard
from .params import trainable

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
    ``device`` itself; the process joins the job's process group (NCCL on
    GPUs, Gloo on CPUs). A ValueError where no launcher started this process
    as one of ``replicas``."""
    # One device, not K: PyTorch's engine is one process per replica, so a
    # process knows only its own device (the others' are their processes').
    _rank_and_world(replicas)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=COLLECTIVE_TIMEOUT)
        atexit.register(_tear_down)
    return device


def _tear_down() -> None:
    """At exit, while the interpreter still runs. A Gloo worker thread drops its
    last collective's tensors after the caller's wait() has returned, and
    dropping a tensor Python made takes the GIL: a thread that asks for it once
    the interpreter's teardown has begun ends the process ("terminate called
    without an active exception", SIGABRT), as a replica that exits right
    after its last step did now and then. The pause lets the workers finish
    first; the group is then destroyed before the teardown, not in it."""
    time.sleep(0.2)  # the GIL released: the workers finish with what they hold
    if dist.is_initialized():
        dist.destroy_process_group()


class _ShardLoss(nn.Module):
    """The module DDP wraps: a shard of a pair batch -> its mean loss, in training mode."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: BatchArrays | None, seed: int, step: int, transition_weight: float) -> torch.Tensor:
        if batch is None:  # no rows for this replica (a batch smaller than K): nothing to add to the gradient
            return self.model.output.bias.sum() * 0.0
        return train.batch_loss(self.model, batch, training=True, seed=seed, step=step,
                                transition_weight=transition_weight)


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
    """This process's part in a data-parallel job: the module that computes
    its shard's loss wrapped in DistributedDataParallel, with a communication
    hook that times the wait at the all-reduce. Built at a model's first
    replica_train_step (the process group is replica_devices')."""

    def __init__(self, model: nn.Module):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.model = model
        # find_unused_parameters: a batch may leave a parameter without a
        # gradient (the transition head without its loss, a frozen embedding).
        self.module = DistributedDataParallel(_ShardLoss(model), find_unused_parameters=True)
        self.wait = _Wait()
        self.module.register_comm_hook(self.wait, _timed_mean)

    def rows(self, batch_size: int) -> np.ndarray:
        """This replica's rows of a global batch: an equal share, or for a
        batch that does not split evenly (a bucket's last one) one more row
        for the first replicas; none for the last ones if it is smaller than K."""
        return np.array_split(np.arange(batch_size), self.world)[self.rank]


# id(model) -> its DDP engine. DDP's wrapper and the hook's timings live
# across steps, built once per model (a process trains one).
_ENGINES: dict[int, _Replicas] = {}


def replica_train_step(model: nn.Module, optimizer: train.Optimizer, batch: BatchArrays, *, seed: int = 0,
                       step: int = 0, transition_weight: float = 0.0) -> tuple[float, dict, dict]:
    """One synchronous step over the global ``batch`` (as train.train_step
    takes it): (its mean loss, this replica's phases in seconds, each
    replica's compute and all-reduce wait).

    DDP averages the K replicas' gradients, so replica r's loss is its
    mean over its b_r rows times K b_r / B: the average is then the
    gradient of the mean over all B pairs, however unevenly they split.
    """
    engine = _ENGINES.get(id(model))
    if engine is None or engine.model is not model:
        engine = _ENGINES[id(model)] = _Replicas(model)
    total = len(batch.labels)
    rows = engine.rows(total)
    start = time.perf_counter()
    optimizer.torch_optimizer.zero_grad(set_to_none=True)
    with replica_shard(total, rows), trainable(model, optimizer.frozen):
        shard = BatchArrays(*(np.asarray(array)[rows] for array in batch[:5])) if len(rows) else None
        mean = engine.module(shard, seed, step, transition_weight)
        loss = mean * (engine.world * len(rows) / total)
        loss.backward()  # DDP's hooks all-reduce the gradients as they are made
    backward_done = time.perf_counter()
    optimizer.torch_optimizer.step()
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
