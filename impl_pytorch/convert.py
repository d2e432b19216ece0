"""Canonical parameters (docs/spec.md §4) <-> the PyTorch modules.

The canonical layout stores kernels ``[in, out]`` (``y = x @ kernel``);
``nn.Linear`` stores ``weight`` as ``[out, in]`` (``y = x @ weight.T``), so
every kernel is transposed on the way in and back on the way out. Nothing is
split or fused: each canonical entry is exactly one PyTorch tensor.

    canonical name               PyTorch state_dict name          transposed
    embed.embedding              embed.weight                     no
    projection.kernel / .bias    projection.weight / .bias        yes / no
    tracker.kernel_input         spinn.tracker.kernel_input.weight   yes
    tracker.kernel_hidden        spinn.tracker.kernel_hidden.weight  yes
    tracker.bias                 spinn.tracker.kernel_input.bias     no
    reduce.left.kernel / .bias   spinn.reduce.left.weight / .bias yes / no
    reduce.right.kernel          spinn.reduce.right.weight        yes
    reduce.track.kernel          spinn.reduce.track.weight        yes
    tracker.transition.kernel    spinn.tracker.transition.weight  yes
    tracker.transition.bias      spinn.tracker.transition.bias    no
    mlp.{k}.kernel / .bias       mlp.{k}.weight / .bias           yes / no
    output.kernel / .bias        output.weight / .bias            yes / no

The names are the same whatever the encoder's family (lists.py, masked.py,
levels.py): each holds the same ``tracker`` and ``reduce``. Key counts and
every shape are asserted both ways, so a missing, extra or mis-shaped entry
is an error that names it. The model is built beforehand (the runner builds
it on its device, in its dtype); :func:`from_canonical` copies the values in.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import nn

from shared.params import ModelConfig, ParamError, check_params, param_shapes

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def name_map(config: ModelConfig) -> dict[str, tuple[str, bool]]:
    """canonical name -> (PyTorch state_dict name, transposed?), in canonical order."""
    fixed = {
        "embed.embedding": ("embed.weight", False),
        "projection.kernel": ("projection.weight", True),
        "projection.bias": ("projection.bias", False),
        "tracker.kernel_input": ("spinn.tracker.kernel_input.weight", True),
        "tracker.kernel_hidden": ("spinn.tracker.kernel_hidden.weight", True),
        "tracker.bias": ("spinn.tracker.kernel_input.bias", False),
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


def _check_against_module(model: nn.Module, mapping: dict[str, tuple[str, bool]]) -> None:
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


def from_canonical(params: Mapping[str, np.ndarray], model: nn.Module) -> nn.Module:
    """Copy ``params`` into ``model`` (an SNLIClassifier of any family,
    already on its device in its dtype), kernels transposed into ``[out,
    in]`` weights; returns the model. The values are copied, never shared
    with the caller's arrays, and cast to the model's dtype."""
    check_params(params, model.config)  # ParamError naming any missing, extra or mis-shaped entry
    mapping = name_map(model.config)
    _check_against_module(model, mapping)
    state = {}
    for name, (torch_name, transposed) in mapping.items():
        value = np.asarray(params[name])
        state[torch_name] = torch.tensor(value.T if transposed else value)  # a host copy, any layout
    model.load_state_dict(state, strict=True)  # copy_ into each parameter: its device, its dtype
    return model


def _to_numpy(tensor: torch.Tensor, transposed: bool) -> np.ndarray:
    value = tensor.detach().to("cpu").numpy()  # on the CPU: the tensor's own memory
    # A fresh copy, always: np.ascontiguousarray would hand back the tensor's own
    # memory for an untransposed CPU tensor, and a caller's copy of the weights
    # would then change with the next optimizer step.
    return np.array(value.T if transposed else value, order="C", copy=True)


def to_canonical(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's weights under canonical names, ``[in, out]`` kernels, in the model's dtype."""
    mapping = name_map(model.config)
    _check_against_module(model, mapping)
    state = model.state_dict()
    out = {name: _to_numpy(state[torch_name], transposed) for name, (torch_name, transposed) in mapping.items()}
    check_params(out, model.config)
    return out


def grads_to_canonical(model: nn.Module, grads: Mapping[str, torch.Tensor | None]) -> dict[str, np.ndarray]:
    """Tensors laid out as the parameters, by PyTorch parameter name (the
    ``param.grad`` of each after a backward pass, as train.loss_and_grads
    returns them; or an optimizer's slots) -> canonical names and shapes.
    A parameter missing from ``grads`` or None there (the backward pass did
    not reach it) gets zeros."""
    mapping = name_map(model.config)
    parameters = dict(model.named_parameters())
    out = {}
    for name, (torch_name, transposed) in mapping.items():
        grad = grads.get(torch_name)
        out[name] = _to_numpy(grad if grad is not None else torch.zeros_like(parameters[torch_name]), transposed)
    check_params(out, model.config)
    return out


__all__ = ["DTYPES", "ParamError", "name_map", "resolve_dtype", "from_canonical", "to_canonical",
           "grads_to_canonical"]
