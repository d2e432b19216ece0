"""Canonical parameters (docs/spec.md §4) <-> the PyTorch modules.

The canonical layout stores kernels ``[in, out]`` (``y = x @ kernel``);
``nn.Linear`` stores ``weight`` as ``[out, in]`` (``y = x @ weight.T``), so
every kernel is transposed on the way in and back on the way out. Nothing is
split or fused: each canonical entry is exactly one PyTorch tensor.

    canonical name               PyTorch state_dict name          transposed
    embed.embedding              embed.weight                     no
    projection.kernel / .bias    projection.weight / .bias        yes / no
    tracker.kernel_input         spinn.tracker.input.weight       yes
    tracker.kernel_hidden        spinn.tracker.hidden.weight      yes
    tracker.bias                 spinn.tracker.input.bias         no
    reduce.left.kernel / .bias   spinn.reduce.left.weight / .bias yes / no
    reduce.right.kernel          spinn.reduce.right.weight        yes
    reduce.track.kernel          spinn.reduce.track.weight        yes
    tracker.transition.kernel    spinn.tracker.transition.weight  yes
    tracker.transition.bias      spinn.tracker.transition.bias    no
    mlp.{k}.kernel / .bias       mlp.{k}.weight / .bias           yes / no
    output.kernel / .bias        output.weight / .bias            yes / no

Key counts and every shape are asserted both ways, so a missing, extra or
mis-shaped entry is an error that names it.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from shared.params import ModelConfig, ParamError, check_params, param_shapes

from .classifier import SNLIClassifier

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def name_map(config: ModelConfig) -> dict[str, tuple[str, bool]]:
    """canonical name -> (PyTorch state_dict name, transposed?), in canonical order."""
    fixed = {
        "embed.embedding": ("embed.weight", False),
        "projection.kernel": ("projection.weight", True),
        "projection.bias": ("projection.bias", False),
        "tracker.kernel_input": ("spinn.tracker.input.weight", True),
        "tracker.kernel_hidden": ("spinn.tracker.hidden.weight", True),
        "tracker.bias": ("spinn.tracker.input.bias", False),
        "reduce.left.kernel": ("spinn.reduce.left.weight", True),
        "reduce.left.bias": ("spinn.reduce.left.bias", False),
        "reduce.right.kernel": ("spinn.reduce.right.weight", True),
        "reduce.track.kernel": ("spinn.reduce.track.weight", True),
        "tracker.transition.kernel": ("spinn.tracker.transition.weight", True),  # the head, docs/spec.md §7
        "tracker.transition.bias": ("spinn.tracker.transition.bias", False),
        "output.kernel": ("output.weight", True),
        "output.bias": ("output.bias", False),
    }
    mapping = {}
    for name in param_shapes(config):  # this config's names (no tracker entries when D = 0, no head without one)
        if name.startswith("mlp."):
            _, k, kind = name.split(".")
            mapping[name] = (f"mlp.{k}.weight", True) if kind == "kernel" else (f"mlp.{k}.bias", False)
        else:
            mapping[name] = fixed[name]
    return mapping


def resolve_dtype(dtype) -> torch.dtype:
    """"float32" or "float64" (or a torch.dtype) -> the torch.dtype; a ValueError for any other."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[str(dtype)]


def _check_against_module(model: SNLIClassifier, mapping: dict[str, tuple[str, bool]]) -> None:
    """The name map covers the module's tensors one to one, with matching shapes."""
    state = model.state_dict()
    torch_names = [torch_name for torch_name, _ in mapping.values()]
    assert len(torch_names) == len(set(torch_names)), "name map sends two entries to one tensor"
    assert set(torch_names) == set(state), (
        f"name map and module differ: unmapped module tensors {sorted(set(state) - set(torch_names))}, "
        f"mapped names the module lacks {sorted(set(torch_names) - set(state))}")
    assert len(mapping) == len(state)
    shapes = param_shapes(model.config)
    for name, (torch_name, transposed) in mapping.items():
        expected = shapes[name][::-1] if transposed else shapes[name]
        found = tuple(state[torch_name].shape)
        assert found == expected, f"{torch_name} (for {name}) has shape {found}, expected {expected}"


def from_canonical(params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype="float32",
                   device="cpu", dropout: float = 0.0,
                   model_class: type[SNLIClassifier] = SNLIClassifier) -> SNLIClassifier:
    """A new SNLIClassifier holding exactly ``params`` (copied, never shared
    with the caller's arrays), on ``device`` in ``dtype``. ``model_class``: a
    subclass with the same parameters (masked.MaskedClassifier)."""
    check_params(params, config)  # ParamError naming any missing, extra or mis-shaped entry
    dtype = resolve_dtype(dtype)
    mapping = name_map(config)
    # Built on the meta device: PyTorch's own initialisers never run, every
    # value comes from the canonical dict.
    with torch.device("meta"):
        model = model_class(config, dropout=dropout)
    _check_against_module(model, mapping)
    state = {}
    for name, (torch_name, transposed) in mapping.items():
        value = np.asarray(params[name])
        value = np.ascontiguousarray(value.T) if transposed else value
        state[torch_name] = torch.tensor(value, dtype=dtype, device=device)  # a copy
    model.load_state_dict(state, strict=True, assign=True)
    return model


def _to_numpy(tensor: torch.Tensor, transposed: bool) -> np.ndarray:
    value = tensor.detach().to("cpu").numpy()  # on the CPU: the tensor's own memory
    # A fresh copy, always: np.ascontiguousarray would hand back the tensor's own
    # memory for an untransposed CPU tensor, and a caller's copy of the weights
    # would then change with the next optimizer step.
    return np.array(value.T if transposed else value, order="C", copy=True)


def to_canonical(model: SNLIClassifier) -> dict[str, np.ndarray]:
    """The model's weights under canonical names, ``[in, out]`` kernels, in the model's dtype."""
    mapping = name_map(model.config)
    _check_against_module(model, mapping)
    state = model.state_dict()
    out = {name: _to_numpy(state[torch_name], transposed) for name, (torch_name, transposed) in mapping.items()}
    check_params(out, model.config)
    return out


def grads_to_canonical(model: SNLIClassifier) -> dict[str, np.ndarray]:
    """The ``.grad`` of every parameter under canonical names and shapes
    (zeros for a parameter the last backward pass did not reach)."""
    mapping = name_map(model.config)
    parameters = dict(model.named_parameters())
    out = {}
    for name, (torch_name, transposed) in mapping.items():
        param = parameters[torch_name]
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        out[name] = _to_numpy(grad, transposed)
    check_params(out, model.config)
    return out


__all__ = ["DTYPES", "ParamError", "name_map", "resolve_dtype", "from_canonical", "to_canonical",
           "grads_to_canonical"]
