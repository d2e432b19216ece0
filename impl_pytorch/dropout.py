"""Dropout's randomness (docs/spec.md §3): drawn as a function of (seed, step) only.

``nn.Dropout`` draws from PyTorch's global generator. So that a run is
repeatable from the Runner's ``seed`` without touching the caller's random
state, a training step runs inside :func:`seeded`, which forks the generator
and seeds it from (seed, step number). A data-parallel replica (replicas.py)
computes its rows of a global batch inside :func:`replica_shard` too, and
:class:`ShardDropout` then draws the masks of the whole global batch and keeps
its rows, so a pair gets the mask it would get in one process.

The classifier (classifier.py) holds two ShardDropout modules; train.py,
reinforce.py and replicas.py open the two contexts.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
from torch import nn

# A data-parallel replica's share of the global batch while it takes a step:
# (pairs in the global batch, this replica's pair rows), else None.
_SHARD: tuple[int, np.ndarray] | None = None


@contextlib.contextmanager
def seeded(seed: int, step: int, device: torch.device) -> Iterator[None]:
    """Run the block with the generator of ``device`` seeded from (seed,
    step); the caller's random state is restored afterwards."""
    step_seed = int(np.random.SeedSequence([seed, step]).generate_state(1)[0])
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(step_seed)
        yield


@contextlib.contextmanager
def replica_shard(total: int, rows: np.ndarray) -> Iterator[None]:
    """Inside the block, dropout draws the masks of a global batch of ``total``
    pairs and keeps those of ``rows`` (the pairs this replica computes)."""
    global _SHARD
    before, _SHARD = _SHARD, (total, np.asarray(rows, dtype=np.int64))
    try:
        yield
    finally:
        _SHARD = before


class ShardDropout(nn.Dropout):
    """``nn.Dropout``, except inside :func:`replica_shard`: there the mask is
    drawn for the whole global batch, exactly as nn.Dropout draws it on a CPU
    (``bernoulli_`` on a tensor of the global shape, then ``/ (1 - p)``), and
    cut to this replica's rows. ``rows`` says what the tensor's first axis
    holds: "sentences" (premises then hypotheses, 2B rows) or "pairs" (B rows)."""

    def __init__(self, p: float, rows: str):
        super().__init__(p)
        self.rows = rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _SHARD is None or not self.training or self.p == 0.0:
            return super().forward(x)
        total, pairs = _SHARD
        if self.rows == "sentences":
            total, pairs = 2 * total, np.concatenate([pairs, total + pairs])
        noise = torch.empty((total,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device).bernoulli_(1 - self.p)
        noise.div_(1 - self.p)
        return x * noise[torch.as_tensor(pairs, device=x.device)]
