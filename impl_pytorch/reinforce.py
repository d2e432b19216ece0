"""REINFORCE (docs/spec.md §7), define-by-run.

The sampled parse is ordinary Python: at every step where a sentence has a
choice, the head's logits come back to the host (model.py), Python compares
each with its uniform number from the front end and takes the branch. The
graph autograd records is the one these samples made, so ``backward()``
walks exactly the trees that were followed; the decisions themselves are
Python booleans and carry no gradient. Gradients reach the head only through
the sampled actions' log-probabilities and the entropies, which stay tensors.

The rewards r_i = -CE_i are detached: the score-function term treats them
as constants, as the reference does.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from shared import parsing
from shared import reinforce as shared_reinforce
from shared.batching import PairBatch

from . import convert
from .classifier import SNLIClassifier
from .train import _dropout_randomness, _labels_tensor, _model_inputs, _trainable


def reinforce_loss(model: SNLIClassifier, batch: PairBatch, device: torch.device, uniforms, baseline: float,
                   reinforce_weight: float, entropy_weight: float) -> tuple[torch.Tensor, dict]:
    """The REINFORCE loss (a 0-d tensor with its graph) and the step's numbers
    for the record (NumPy, detached); train or eval mode is the model's."""
    labels = _labels_tensor(batch, device)
    parses, logits = model.parse(*_model_inputs(batch, device), mode="sampled", uniforms=uniforms)
    B = len(labels)
    ce = F.cross_entropy(logits, labels, reduction="none")  # [B]
    rewards = -ce.detach()  # a constant for the gradient
    logprob = parses.logprob[:B] + parses.logprob[B:]  # [B]: premise + hypothesis
    entropy = parses.entropy[:B] + parses.entropy[B:]
    loss = (ce.mean() - reinforce_weight * ((rewards - baseline) * logprob).mean()
            - entropy_weight * entropy.mean())
    # The step record's per-side numbers, from the one split of a parse into pairs.
    parsed = parsing.split_pairs(parses, logits, lambda t: t.detach().cpu().numpy() if torch.is_tensor(t) else t)
    numbers = {"rewards": rewards.cpu().numpy(),
               **{f"{side}_{name}": getattr(parsed, f"{side}_{name}")
                  for name in ("logprob", "entropy", "transitions") for side in ("premise", "hypothesis")}}
    return loss, numbers


def loss_and_grads(model: SNLIClassifier, batch: PairBatch, device: torch.device, uniforms, baseline: float,
                   reinforce_weight: float, entropy_weight: float) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """Eval mode: (loss, canonical gradients, rewards <float>[B]); the model is left unchanged."""
    model.eval()
    model.zero_grad(set_to_none=True)
    loss, numbers = reinforce_loss(model, batch, device, uniforms, baseline, reinforce_weight, entropy_weight)
    loss.backward()
    grads = convert.grads_to_canonical(model)
    model.zero_grad(set_to_none=True)
    return loss.item(), grads, numbers["rewards"]


def train_step(model: SNLIClassifier, optimizer: torch.optim.Optimizer, batch: PairBatch, device: torch.device,
               uniforms, baseline: float, reinforce_weight: float, entropy_weight: float, *, seed: int, step: int,
               frozen=()) -> dict:
    """One optimizer step on the REINFORCE loss, in training mode (dropout
    masks from (seed, step), as train.train_step draws them); returns
    shared.reinforce.step_record of the numbers computed before the update."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with _dropout_randomness(seed, step, device), _trainable(model, frozen):
        loss, numbers = reinforce_loss(model, batch, device, uniforms, baseline, reinforce_weight, entropy_weight)
        loss.backward()  # through the trees these samples built
    optimizer.step()
    return shared_reinforce.step_record(loss.item(), **numbers)
