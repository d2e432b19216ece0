"""Loss, gradients, optimizers and the training step (PyTorch).

Define-by-run training is the plain loop: run the model (which records a
graph shaped by this batch's trees), ``loss.backward()`` walks that graph
once and frees it, ``optimizer.step()`` updates the weights in place. There
is nothing to trace or compile, so a new tree shape costs nothing extra.
The same functions serve every family (the classifier's encoder: lists.py,
masked.py, levels.py).

``batch`` is a ``shared.batching.BatchArrays`` of NumPy arrays (a PairBatch's
``arrays()``): the transitions stay on the host, where Python reads them;
the tokens and labels go to the model's device (the device of its
parameters). Its ``levels`` is the level schedule for levels.py's classifier
(made on the host by the runner), empty for the other families.

The supervised loss of docs/spec.md §7 (``transition_weight`` > 0) adds
the transition head's cross-entropy against the gold actions, the model
following the gold transitions (teacher forcing); :func:`parse` runs the
model in any of the three modes.

Dropout, in training, draws its masks from (seed, step) only
(dropout.seeded), so a resumed run draws the masks the uninterrupted one
draws.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from shared import optimizers
from shared.params import param_shapes
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE

from . import convert
from .classifier import SNLIClassifier
from .dropout import seeded
from .params import canonical_parameters, trainable

OPTIMIZERS = optimizers.OPTIMIZERS


def transition_loss(parses: SentenceParses) -> torch.Tensor:
    """The mean, over every non-PAD step of every sentence, of the two-way
    cross-entropy of softmax(t) against the action followed (in gold mode the
    gold action). No validity mask: the head is trained at every step, forced
    or not (docs/spec.md §7)."""
    rows, columns = np.nonzero(parses.transitions != PAD)  # the steps run (host arrays)
    device = parses.transition_logits.device
    logits = parses.transition_logits[torch.as_tensor(rows, device=device), torch.as_tensor(columns, device=device)]
    target = parses.transitions[rows, columns] == REDUCE  # column 1 (REDUCE) or 0 (SHIFT)
    return F.cross_entropy(logits, torch.as_tensor(target.astype(np.int64), device=device))  # log-softmax inside


def batch_loss(model: SNLIClassifier, batch, *, training: bool = False, seed: int = 0, step: int = 0,
               transition_weight: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy of the batch (a 0-d tensor with its graph), plus
    ``transition_weight`` times the supervised transition loss when it is
    positive. ``training``: the model in training mode, dropout on with the
    masks of (seed, step); else eval mode."""
    model.train(training)
    with seeded(seed, step, _device(model)) if training else contextlib.nullcontext():
        labels = torch.as_tensor(np.asarray(batch.labels, dtype=np.int64), device=_device(model))
        if not transition_weight:
            _, _, logits = model(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                                 batch.hypothesis_transitions, **_schedule(batch))
            return F.cross_entropy(logits, labels)  # mean over the batch
        # Teacher forcing: the gold transitions, with the head scored at every step.
        parses, logits = model.parse(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                                     batch.hypothesis_transitions, mode="gold", **_schedule(batch))
        return F.cross_entropy(logits, labels) + transition_weight * transition_loss(parses)


def loss_and_grads(model: SNLIClassifier, batch, *,
                   transition_weight: float = 0.0) -> tuple[float, dict[str, torch.Tensor | None]]:
    """Eval mode: the loss and the ``.grad`` of every parameter by PyTorch
    name (None where the backward pass did not reach it); convert.grads_to_canonical
    turns them into canonical arrays. Leaves the model's ``.grad`` empty."""
    model.zero_grad(set_to_none=True)
    loss = batch_loss(model, batch, transition_weight=transition_weight)
    loss.backward()
    grads = {name: param.grad for name, param in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


@dataclass(eq=False)
class Optimizer:
    """torch.optim's SGD, Adam or RMSprop (``torch_optimizer``) with the
    shared rules' ``name``, hyperparameters (``hyper``, shared.optimizers.resolve'd)
    and ``frozen`` parameters (canonical names, never given to it)."""

    name: str
    hyper: dict[str, float]
    frozen: tuple[str, ...]
    torch_optimizer: torch.optim.Optimizer


def make_optimizer(name: str, model: SNLIClassifier, lr: float, *, frozen: Sequence[str] = (),
                   **hyper) -> Optimizer:
    """torch.optim.SGD, Adam or RMSprop over the trainable parameters.

    ``hyper`` takes the shared names of shared/optimizers.py (``momentum``,
    ``beta1``, ``beta2``, ``rho``, ``eps``, ``weight_decay``) with the shared
    defaults, mapped onto PyTorch's (``betas``, ``alpha``, ...). ``frozen``
    names canonical parameters the optimizer leaves alone (they are not given
    to it, and the training steps turn their gradient off: params.trainable).

    PyTorch's ``weight_decay`` is the coupled L2 term of the shared definition
    (``g + wd * p``). Its RMSprop adds ``eps`` outside the square root
    (``g / (sqrt(v) + eps)``), where the shared definition, Keras and optax
    add it inside: the one place where PyTorch's update differs by design.
    """
    hyper = optimizers.resolve(name, hyper)
    frozen = optimizers.check_frozen(frozen, convert.name_map(model.config))
    params = [param for canonical, param in canonical_parameters(model).items() if canonical not in frozen]
    wd = hyper["weight_decay"]
    if name == "sgd":
        inner = torch.optim.SGD(params, lr=lr, momentum=hyper["momentum"], weight_decay=wd)
    elif name == "adam":
        inner = torch.optim.Adam(params, lr=lr, betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                                 weight_decay=wd)
    else:
        inner = torch.optim.RMSprop(params, lr=lr, alpha=hyper["rho"], eps=hyper["eps"], weight_decay=wd)
    return Optimizer(name, hyper, tuple(frozen), inner)


def set_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """The rate of the following steps (torch.optim reads it from its param groups at every step)."""
    for group in optimizer.torch_optimizer.param_groups:
        group["lr"] = lr


# Canonical slot (shared/optimizers.py) -> the key of torch.optim's per-parameter state.
_TORCH_SLOTS = {
    "sgd": {"momentum": "momentum_buffer"},
    "adam": {"m": "exp_avg", "v": "exp_avg_sq"},
    "rmsprop": {"v": "square_avg"},
}


def optimizer_state(model: SNLIClassifier, optimizer: Optimizer, step: int) -> dict[str, np.ndarray]:
    """The optimizer's state in the shared layout: ``step`` and ``{slot}/{param}``
    arrays with canonical names and [in, out] kernels (zeros before the first step)."""
    name, inner = optimizer.name, optimizer.torch_optimizer
    names = {id(param): torch_name for torch_name, param in model.named_parameters()}
    params = canonical_parameters(model)
    out: dict[str, np.ndarray] = {optimizers.STEP: np.array(step, dtype=np.int64)}
    wanted = optimizers.state_shapes(name, optimizer.hyper, param_shapes(model.config), optimizer.frozen)
    for slot in optimizers.slots(name, optimizer.hyper):
        # torch.optim keeps a slot per parameter object; laid out as the parameters, it converts as gradients do.
        tensors = {names[id(param)]: inner.state.get(param, {}).get(_TORCH_SLOTS[name][slot])
                   for param in params.values()}
        arrays = convert.grads_to_canonical(model, tensors)
        out.update({key: arrays[key.split("/", 1)[1]] for key in wanted if key.startswith(f"{slot}/")})
    return out


def load_optimizer_state(model: SNLIClassifier, optimizer: Optimizer, state: Mapping[str, np.ndarray]) -> None:
    """Put a shared-layout state into ``optimizer``, in place (the runner reads
    the step count, ``int(state["step"])``)."""
    name, hyper, frozen = optimizer.name, optimizer.hyper, optimizer.frozen
    optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(model.config), frozen))
    mapping = convert.name_map(model.config)
    step = int(state[optimizers.STEP])
    slots = optimizers.slots(name, hyper)
    inner = optimizer.torch_optimizer
    inner.state.clear()
    for canonical, param in canonical_parameters(model).items():
        if canonical in frozen:
            continue
        entry = {}
        for slot in slots:
            value = np.asarray(state[f"{slot}/{canonical}"])
            value = np.ascontiguousarray(value.T) if mapping[canonical][1] else value
            entry[_TORCH_SLOTS[name][slot]] = torch.tensor(value, dtype=param.dtype, device=param.device)
        if name in ("adam", "rmsprop"):
            # torch keeps a step per parameter: a float tensor on the CPU, as its own _init_group makes it.
            entry["step"] = torch.tensor(float(step), dtype=torch.get_default_dtype())
        if entry and (name != "sgd" or step > 0):
            inner.state[param] = entry


def train_step(model: SNLIClassifier, optimizer: Optimizer, batch, *, seed: int = 0, step: int = 0,
               transition_weight: float = 0.0) -> float:
    """One optimizer step in training mode (dropout on, if the model has a
    rate); returns the loss computed before the update. The dropout masks are
    a function of (seed, step) only, so a resumed run draws the same ones; the
    optimizer's frozen parameters get no gradient."""
    optimizer.torch_optimizer.zero_grad(set_to_none=True)
    with trainable(model, optimizer.frozen):
        loss = batch_loss(model, batch, training=True, seed=seed, step=step, transition_weight=transition_weight)
        loss.backward()  # the graph of this batch, walked once and freed
    optimizer.torch_optimizer.step()
    return loss.item()


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def parse(model: SNLIClassifier, batch, mode: str = "predicted",
          uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[SentenceParses, torch.Tensor]:
    """Eval mode, no graph: the batch in ``mode`` -> (SentenceParses of the 2B
    sentences, premises first, its transitions NumPy on the host; logits
    <float>[B, 3]). The encoder's ``last_host_syncs`` counts the
    device-to-host reads of decisions this parse made.

    The inputs are those shared.contract.check_parse accepted: ``uniforms``
    (premise_u, hypothesis_u), each <float>[B, T] as
    shared.parsing.batch_uniforms lays them out, in sampled mode, else None.
    """
    model.eval()
    with torch.inference_mode():
        return model.parse(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                           batch.hypothesis_transitions, mode=mode, uniforms=uniforms, **_schedule(batch))


def _schedule(batch) -> dict:
    """The model's keyword inputs beyond the four arrays: the level schedule, for levels.py's classifier."""
    return {"levels": batch.levels} if batch.levels else {}


def _device(model: SNLIClassifier) -> torch.device:
    """Where the model's parameters are, and so its computation."""
    return model.output.bias.device
