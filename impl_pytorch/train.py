"""Loss, gradients, optimizers and the training step (PyTorch).

Define-by-run training is the plain loop: run the model (which records a
graph shaped by this batch's trees), ``loss.backward()`` walks that graph
once and frees it, ``optimizer.step()`` updates the weights in place. There
is nothing to trace or compile, so a new tree shape costs nothing extra.

The supervised loss of docs/spec.md §7 (``transition_weight`` > 0) adds
the transition head's cross-entropy against the gold actions, the model
following the gold transitions (teacher forcing); :func:`parse` runs the
model in any of the three modes and returns the shared ``Parsed`` record.

Dropout: ``nn.Dropout`` draws from PyTorch's global generator. So that a
run is repeatable from the Runner's ``seed`` without touching the caller's
random state, each training step forks the generator
(:func:`_dropout_randomness`) and seeds it from (seed, step number).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from shared import optimizers, parsing
from shared.batching import PairBatch
from shared.transitions import PAD, REDUCE

from . import convert
from .classifier import SNLIClassifier

OPTIMIZERS = optimizers.OPTIMIZERS


def _model_inputs(batch: PairBatch, device: torch.device):
    """The four model arguments: token ids go to the device as int64; the
    transitions stay NumPy on the host, where Python reads them."""
    def tokens(array):
        return torch.as_tensor(np.asarray(array, dtype=np.int64), device=device)

    return (tokens(batch.premise_tokens), batch.premise_transitions,
            tokens(batch.hypothesis_tokens), batch.hypothesis_transitions)


def _labels_tensor(batch: PairBatch, device: torch.device) -> torch.Tensor:
    """The labels as int64 on the device (the Runner has checked them: 0..2 on every row)."""
    return torch.as_tensor(np.asarray(batch.labels, dtype=np.int64), device=device)


def transition_loss(parses: parsing.SentenceParses) -> torch.Tensor:
    """The mean, over every non-PAD step of every sentence, of the two-way
    cross-entropy of softmax(t) against the action followed (in gold mode the
    gold action). No validity mask: the head is trained at every step, forced
    or not (docs/spec.md §7)."""
    rows, columns = np.nonzero(parses.transitions != PAD)  # the steps run (host arrays)
    device = parses.transition_logits.device
    logits = parses.transition_logits[torch.as_tensor(rows, device=device), torch.as_tensor(columns, device=device)]
    target = parses.transitions[rows, columns] == REDUCE  # column 1 (REDUCE) or 0 (SHIFT)
    return F.cross_entropy(logits, torch.as_tensor(target.astype(np.int64), device=device))  # log-softmax inside


def batch_loss(model: SNLIClassifier, batch: PairBatch, device: torch.device,
               transition_weight: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy of the batch (a 0-d tensor with its graph), plus
    ``transition_weight`` times the supervised transition loss when it is
    positive; train or eval mode is whatever the model is in."""
    labels = _labels_tensor(batch, device)
    if not transition_weight:
        _, _, logits = model(*_model_inputs(batch, device))
        return F.cross_entropy(logits, labels)  # mean over the batch
    # Teacher forcing: the gold transitions, with the head scored at every step.
    parses, logits = model.parse(*_model_inputs(batch, device), mode="gold")
    return F.cross_entropy(logits, labels) + transition_weight * transition_loss(parses)


def loss_and_grads(model: SNLIClassifier, batch: PairBatch, device: torch.device,
                   transition_weight: float = 0.0) -> tuple[float, dict[str, np.ndarray]]:
    """Eval mode: the loss and its gradient for every canonical parameter
    (canonical names, [in, out] kernels). Leaves the model unchanged."""
    model.eval()
    model.zero_grad(set_to_none=True)
    loss = batch_loss(model, batch, device, transition_weight)
    loss.backward()
    grads = convert.grads_to_canonical(model)
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def make_optimizer(name: str, model: SNLIClassifier, lr: float, *, frozen: Sequence[str] = (),
                   **hyper) -> torch.optim.Optimizer:
    """torch.optim.SGD, Adam or RMSprop over the trainable parameters.

    ``hyper`` takes the shared names of shared/optimizers.py (``momentum``,
    ``beta1``, ``beta2``, ``rho``, ``eps``, ``weight_decay``) with the shared
    defaults, mapped onto PyTorch's (``betas``, ``alpha``, ...). ``frozen``
    names canonical parameters the optimizer leaves alone (they are not given
    to it, and _trainable turns their gradient off in training).

    PyTorch's ``weight_decay`` is the coupled L2 term of the shared definition
    (``g + wd * p``). Its RMSprop adds ``eps`` outside the square root
    (``g / (sqrt(v) + eps)``), where the shared definition, Keras and optax
    add it inside: the one place where PyTorch's update differs by design.
    """
    hyper = optimizers.resolve(name, hyper)
    frozen = set(optimizers.check_frozen(frozen, convert.name_map(model.config)))
    params = [param for canonical, param in _canonical_parameters(model).items() if canonical not in frozen]
    wd = hyper["weight_decay"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=hyper["momentum"], weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                                weight_decay=wd)
    return torch.optim.RMSprop(params, lr=lr, alpha=hyper["rho"], eps=hyper["eps"], weight_decay=wd)


def _canonical_parameters(model: SNLIClassifier) -> dict[str, torch.nn.Parameter]:
    """canonical name -> the PyTorch parameter that holds it (maybe transposed)."""
    parameters = dict(model.named_parameters())
    return {name: parameters[torch_name] for name, (torch_name, _) in convert.name_map(model.config).items()}


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


# Canonical slot (shared/optimizers.py) -> the key of torch.optim's per-parameter state.
_TORCH_SLOTS = {
    "sgd": {"momentum": "momentum_buffer"},
    "adam": {"m": "exp_avg", "v": "exp_avg_sq"},
    "rmsprop": {"v": "square_avg"},
}


def optimizer_state(model: SNLIClassifier, optimizer: torch.optim.Optimizer, name: str, hyper: dict,
                    frozen: Sequence[str], step: int) -> dict[str, np.ndarray]:
    """The optimizer's state in the shared layout: ``step`` and ``{slot}/{param}``
    arrays with canonical names and [in, out] kernels (zeros before the first step)."""
    mapping = convert.name_map(model.config)
    params = _canonical_parameters(model)
    out: dict[str, np.ndarray] = {optimizers.STEP: np.array(step, dtype=np.int64)}
    for key in optimizers.state_shapes(name, hyper, _param_shapes(model), frozen):
        if key == optimizers.STEP:
            continue
        slot, canonical = key.split("/", 1)
        param = params[canonical]
        tensor = optimizer.state.get(param, {}).get(_TORCH_SLOTS[name][slot])
        if tensor is None:
            tensor = torch.zeros_like(param)
        out[key] = convert._to_numpy(tensor, mapping[canonical][1])
    return out


def load_optimizer_state(model: SNLIClassifier, optimizer: torch.optim.Optimizer, name: str, hyper: dict,
                         frozen: Sequence[str], state: Mapping[str, np.ndarray]) -> int:
    """Put a shared-layout state into ``optimizer``; returns its step count."""
    optimizers.check_state(state, optimizers.state_shapes(name, hyper, _param_shapes(model), frozen))
    mapping = convert.name_map(model.config)
    params = _canonical_parameters(model)
    step = int(state[optimizers.STEP])
    slots = optimizers.slots(name, hyper)
    optimizer.state.clear()
    for canonical, param in params.items():
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
            optimizer.state[param] = entry
    return step


def _param_shapes(model: SNLIClassifier) -> dict[str, tuple[int, ...]]:
    from shared.params import param_shapes as shapes

    return shapes(model.config)


@contextlib.contextmanager
def _trainable(model: SNLIClassifier, frozen: Sequence[str]) -> Iterator[None]:
    """Run the block with the gradients of ``frozen`` parameters off (autograd
    then skips them, e.g. the V x E embedding gradient), restored afterwards."""
    params = _canonical_parameters(model)
    switched = [params[name] for name in frozen if params[name].requires_grad]
    for param in switched:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param in switched:
            param.requires_grad_(True)


@contextlib.contextmanager
def _dropout_randomness(seed: int, step: int, device: torch.device) -> Iterator[None]:
    """Run the block with the generator of ``device`` seeded from (seed,
    step); the caller's random state is restored afterwards."""
    step_seed = int(np.random.SeedSequence([seed, step]).generate_state(1)[0])
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(step_seed)
        yield


def train_step(model: SNLIClassifier, optimizer: torch.optim.Optimizer, batch: PairBatch,
               device: torch.device, *, seed: int = 0, step: int = 0, frozen: Sequence[str] = (),
               transition_weight: float = 0.0) -> float:
    """One optimizer step in training mode (dropout on, if the model has a
    rate); returns the loss computed before the update. The dropout masks are
    a function of (seed, step) only, so a resumed run draws the same ones."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with _dropout_randomness(seed, step, device), _trainable(model, frozen):
        loss = batch_loss(model, batch, device, transition_weight)
        loss.backward()  # the graph of this batch, walked once and freed
    optimizer.step()
    return loss.item()


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def parse(model: SNLIClassifier, batch: PairBatch, device: torch.device, mode: str = "predicted",
          uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[parsing.Parsed, int]:
    """Eval mode, no graph: the batch in ``mode`` -> (shared.parsing.Parsed in
    the model's dtype, the number of device-to-host reads of decisions).

    The inputs are those shared.contract.check_parse accepted: ``uniforms``
    (premise_u, hypothesis_u), each <float>[B, T] as
    shared.parsing.batch_uniforms lays them out, in sampled mode, else None.
    """
    model.eval()
    with torch.inference_mode():
        parses, logits = model.parse(*_model_inputs(batch, device), mode=mode, uniforms=uniforms)
        parsed = parsing.split_pairs(parses, logits, lambda t: t.cpu().numpy() if torch.is_tensor(t) else t)
    return parsed, model.spinn.last_host_syncs
