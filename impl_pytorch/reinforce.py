"""REINFORCE (docs/spec.md §7), define-by-run.

With the lists family (lists.py, the default) the sampled parse is ordinary
Python: at every step where a sentence has a choice, the head's logits come
back to the host, Python compares each with its uniform number from the
front end and takes the branch. The graph autograd records is the one these
samples made, so ``backward()`` walks exactly the trees that were followed;
the decisions themselves are Python booleans and carry no gradient. (The
masked family decides the same way with masks on the device; the levels
family cannot sample, and its runner refuses REINFORCE.) Gradients reach the
head only through the sampled actions' log-probabilities and the entropies,
which stay tensors.

The rewards r_i = -CE_i are detached: the score-function term treats them
as constants, as the reference does.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from shared import parsing
from shared import reinforce as shared_reinforce

from .classifier import SNLIClassifier
from .dropout import seeded
from .params import trainable
from .train import Optimizer


def reinforce_loss(model: SNLIClassifier, batch, uniforms, baseline: float, *, training: bool = False,
                   seed: int = 0, step: int = 0, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0) -> tuple[torch.Tensor, dict]:
    """The REINFORCE loss (a 0-d tensor with its graph) and the step's numbers
    for the record (NumPy, detached). ``batch``: a BatchArrays (train.py);
    ``uniforms``: (premise_u, hypothesis_u) <float>[B, T] each. ``training``:
    the model in training mode, dropout masks from (seed, step), as
    train.batch_loss draws them; else eval mode."""
    model.train(training)
    device = model.output.bias.device
    with seeded(seed, step, device) if training else contextlib.nullcontext():
        parses, logits = model.parse(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                                     batch.hypothesis_transitions, mode="sampled", uniforms=uniforms)
    labels = torch.as_tensor(np.asarray(batch.labels, dtype=np.int64), device=device)
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


def loss_and_grads(model: SNLIClassifier, batch, uniforms, baseline: float, *, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0) -> tuple[float, dict[str, torch.Tensor | None], np.ndarray]:
    """Eval mode: (loss, the ``.grad`` of every parameter by PyTorch name, as
    train.loss_and_grads returns them, rewards <float>[B]); the model is left unchanged."""
    model.zero_grad(set_to_none=True)
    loss, numbers = reinforce_loss(model, batch, uniforms, baseline, reinforce_weight=reinforce_weight,
                                   entropy_weight=entropy_weight)
    loss.backward()
    grads = {name: param.grad for name, param in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads, numbers["rewards"]


def train_step(model: SNLIClassifier, optimizer: Optimizer, batch, uniforms, baseline: float, *, seed: int = 0,
               step: int = 0, reinforce_weight: float = 1.0, entropy_weight: float = 0.0) -> dict:
    """One optimizer step on the REINFORCE loss, in training mode (dropout
    masks from (seed, step), as train.train_step draws them; the optimizer's
    frozen parameters get no gradient); returns shared.reinforce.step_record
    of the numbers computed before the update."""
    optimizer.torch_optimizer.zero_grad(set_to_none=True)
    with trainable(model, optimizer.frozen):
        loss, numbers = reinforce_loss(model, batch, uniforms, baseline, training=True, seed=seed, step=step,
                                       reinforce_weight=reinforce_weight, entropy_weight=entropy_weight)
        loss.backward()  # through the trees these samples built
    optimizer.torch_optimizer.step()
    return shared_reinforce.step_record(loss.item(), **numbers)
