"""Canonical parameters (docs/spec.md §4) <-> the TensorFlow modules.

TensorFlow and the canonical file agree on ``[in, out]`` kernels
(``y = x @ kernel``), so nothing is transposed. Two variables are fused so
that a step of the while loop runs one matmul each for the tracker and the
composition; their canonical entries are row blocks of one variable,
stacked on the way in and cut back out on the way out (exact copies, so
load -> save is bit-identical):

    canonical name               TensorFlow variable            rows of it
    embed.embedding              embed.embedding                all
    projection.kernel / .bias    projection.kernel / .bias      all
    tracker.kernel_input         spinn.tracker.kernel           [0, 3H)
    tracker.kernel_hidden        spinn.tracker.kernel           [3H, 3H + D)
    tracker.bias                 spinn.tracker.bias             all
    tracker.transition.kernel    spinn.tracker.transition.kernel  all (only with a transition head)
    tracker.transition.bias      spinn.tracker.transition.bias    all (only with a transition head)
    reduce.left.kernel           spinn.reduce.kernel            [0, H)
    reduce.right.kernel          spinn.reduce.kernel            [H, 2H)
    reduce.track.kernel          spinn.reduce.kernel            [2H, 2H + D)
    reduce.left.bias             spinn.reduce.bias              all
    mlp.{k}.kernel / .bias       mlp.{k}.kernel / .bias         all
    output.kernel / .bias        output.kernel / .bias          all

Key counts and every shape are asserted both ways, so a missing, extra or
mis-shaped entry is an error that names it. The same map turns gradients
(one per variable, in variables.by_name's order) into canonical gradients.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from shared.params import ModelConfig, ParamError, check_params, param_shapes

from .classifier import SNLIClassifier
from .variables import by_name

DTYPES = {"float32": tf.float32, "float64": tf.float64}


def resolve_dtype(dtype) -> tf.DType:
    """"float32" or "float64" (or a tf.DType) -> the TensorFlow dtype; a ValueError otherwise."""
    if isinstance(dtype, tf.DType):
        return dtype
    if str(dtype) not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[str(dtype)]


def name_map(config: ModelConfig) -> dict[str, tuple[str, int, int]]:
    """canonical name -> (TensorFlow variable name, first row, end row), in canonical order."""
    H, D = config.hidden_dim, config.tracker_dim
    shapes = param_shapes(config)
    fused = {
        "tracker.kernel_input": ("spinn.tracker.kernel", 0, 3 * H),
        "tracker.kernel_hidden": ("spinn.tracker.kernel", 3 * H, 3 * H + D),
        "tracker.bias": ("spinn.tracker.bias", 0, 4 * D),
        "reduce.left.kernel": ("spinn.reduce.kernel", 0, H),
        "reduce.right.kernel": ("spinn.reduce.kernel", H, 2 * H),
        "reduce.track.kernel": ("spinn.reduce.kernel", 2 * H, 2 * H + D),
        "reduce.left.bias": ("spinn.reduce.bias", 0, 5 * H),
        # The transition head lives in the tracker module (not fused).
        "tracker.transition.kernel": ("spinn.tracker.transition.kernel", 0, D),
        "tracker.transition.bias": ("spinn.tracker.transition.bias", 0, 2),
    }
    # Every other entry is one whole variable of the same name.
    return {name: fused.get(name, (name, 0, shape[0])) for name, shape in shapes.items()}


def _check_map(config: ModelConfig, tf_shapes: Mapping[str, tuple[int, ...]]) -> None:
    """The map covers every variable exactly, block after block, with matching shapes."""
    mapping = name_map(config)
    shapes = param_shapes(config)
    assert len(mapping) == len(shapes)
    used = {tf_name for tf_name, _, _ in mapping.values()}
    assert used == set(tf_shapes), (
        f"name map and module differ: unmapped variables {sorted(set(tf_shapes) - used)}, "
        f"mapped names the module lacks {sorted(used - set(tf_shapes))}")
    next_row = {tf_name: 0 for tf_name in tf_shapes}
    for name, (tf_name, start, stop) in mapping.items():
        assert start == next_row[tf_name], f"{name}: rows of {tf_name} not contiguous at {start}"
        next_row[tf_name] = stop
        block = (stop - start,) + tuple(tf_shapes[tf_name][1:])
        assert block == shapes[name], f"{tf_name}[{start}:{stop}] (for {name}) has shape {block}, expected {shapes[name]}"
    for tf_name, rows in next_row.items():
        assert rows == tf_shapes[tf_name][0], f"{tf_name}: {rows} of {tf_shapes[tf_name][0]} rows mapped"


def from_canonical(params: Mapping[str, np.ndarray], model: SNLIClassifier) -> SNLIClassifier:
    """Exactly ``params`` (copied) into ``model``'s variables, in their dtype
    (an SNLIClassifier of any family, built beforehand, e.g. by the runner
    under ``tf.device(...)``, which places its variables); returns the model."""
    config = model.config
    check_params(params, config)  # ParamError naming any missing, extra or mis-shaped entry
    variables = by_name(model)
    _check_map(config, {tf_name: tuple(v.shape) for tf_name, v in variables.items()})
    blocks: dict[str, list[np.ndarray]] = {tf_name: [] for tf_name in variables}
    for name, (tf_name, _, _) in name_map(config).items():  # canonical order = row order within a variable
        blocks[tf_name].append(np.asarray(params[name]))
    for tf_name, variable in variables.items():
        value = np.concatenate(blocks[tf_name], axis=0) if len(blocks[tf_name]) > 1 else blocks[tf_name][0]
        variable.assign(value.astype(variable.dtype.as_numpy_dtype, copy=False))
    return model


def _to_canonical_arrays(values: Mapping[str, np.ndarray], config: ModelConfig) -> dict[str, np.ndarray]:
    """Arrays by TensorFlow variable name (weights or their gradients) -> canonical entries (fresh copies)."""
    _check_map(config, {tf_name: tuple(np.shape(v)) for tf_name, v in values.items()})
    out = {name: np.array(values[tf_name][start:stop], copy=True)
           for name, (tf_name, start, stop) in name_map(config).items()}
    check_params(out, config)
    return out


def to_canonical(model: SNLIClassifier) -> dict[str, np.ndarray]:
    """The model's weights under canonical names, ``[in, out]`` kernels, in the model's dtype."""
    return _to_canonical_arrays({tf_name: v.numpy() for tf_name, v in by_name(model).items()}, model.config)


def grads_to_canonical(model: SNLIClassifier, grads: Sequence) -> dict[str, np.ndarray]:
    """Gradients, one per entry of ``variables.by_name(model)`` in that order
    (as train.loss_and_grads returns them; tensors or arrays) -> canonical names and shapes."""
    names = list(by_name(model))
    if len(grads) != len(names):
        raise ValueError(f"{len(grads)} gradients for {len(names)} variables")
    return _to_canonical_arrays({tf_name: np.asarray(g) for tf_name, g in zip(names, grads)}, model.config)


__all__ = ["DTYPES", "ParamError", "resolve_dtype", "name_map", "from_canonical", "to_canonical",
           "grads_to_canonical"]
