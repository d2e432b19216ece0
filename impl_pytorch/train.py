"""Loss, gradients, optimizers and the training step (PyTorch).

Define-by-run training is the plain loop: run the model (which records a
graph shaped by this batch's trees), ``loss.backward()`` walks that graph
once and frees it, ``optimizer.step()`` updates the weights in place. There
is nothing to trace or compile, so a new tree shape costs nothing extra.

Dropout: ``nn.Dropout`` draws from PyTorch's global generator. So that a
run is repeatable from the Runner's ``seed`` without touching the caller's
random state, each training step forks the generator
(:func:`dropout_randomness`) and seeds it from (seed, step number).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from shared.batching import PairBatch

from . import convert
from .model import SNLIClassifier

OPTIMIZERS = ("sgd", "adam")


def model_inputs(batch: PairBatch, device: torch.device):
    """The four model arguments: token ids go to the device as int64; the
    transitions stay NumPy on the host, where Python reads them."""
    def tokens(array):
        return torch.as_tensor(np.asarray(array, dtype=np.int64), device=device)

    return (tokens(batch.premise_tokens), batch.premise_transitions,
            tokens(batch.hypothesis_tokens), batch.hypothesis_transitions)


def labels_tensor(batch: PairBatch, device: torch.device) -> torch.Tensor:
    labels = np.asarray(batch.labels)
    if np.any(labels < 0) or np.any(labels > 2):
        raise ValueError("loss needs labels 0..2 on every row (unlabeled rows must be filtered out)")
    return torch.as_tensor(labels.astype(np.int64), device=device)


def batch_loss(model: SNLIClassifier, batch: PairBatch, device: torch.device) -> torch.Tensor:
    """Mean cross-entropy of the batch (a 0-d tensor with its graph);
    train or eval mode is whatever the model is in."""
    labels = labels_tensor(batch, device)
    _, _, logits = model(*model_inputs(batch, device))
    return F.cross_entropy(logits, labels)  # mean over the batch


def loss_and_grads(model: SNLIClassifier, batch: PairBatch, device: torch.device
                   ) -> tuple[float, dict[str, np.ndarray]]:
    """Eval mode: the loss and its gradient for every canonical parameter
    (canonical names, [in, out] kernels). Leaves the model unchanged."""
    model.eval()
    model.zero_grad(set_to_none=True)
    loss = batch_loss(model, batch, device)
    loss.backward()
    grads = convert.grads_to_canonical(model)
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def make_optimizer(name: str, model: SNLIClassifier, lr: float, **kwargs) -> torch.optim.Optimizer:
    """torch.optim.SGD or torch.optim.Adam over all parameters; ``kwargs``
    go to the optimizer (momentum, betas, eps, weight_decay, ...)."""
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, **kwargs)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, **kwargs)
    raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")


@contextlib.contextmanager
def dropout_randomness(seed: int, step: int, device: torch.device) -> Iterator[None]:
    """Run the block with the generator of ``device`` seeded from (seed,
    step); the caller's random state is restored afterwards."""
    step_seed = int(np.random.SeedSequence([seed, step]).generate_state(1)[0])
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(step_seed)
        yield


def train_step(model: SNLIClassifier, optimizer: torch.optim.Optimizer, batch: PairBatch,
               device: torch.device, *, seed: int = 0, step: int = 0) -> float:
    """One optimizer step in training mode (dropout on, if the model has a
    rate); returns the loss computed before the update."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with dropout_randomness(seed, step, device):
        loss = batch_loss(model, batch, device)
    loss.backward()  # the graph of this batch, walked once and freed
    optimizer.step()
    return loss.item()
