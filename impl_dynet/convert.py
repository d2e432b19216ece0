"""Canonical parameters (docs/spec.md §4) <-> DyNet's ParameterCollection.

The collection is laid out for DyNet's fused LSTM nodes (weights.py: kernels
transposed to ``[out, in]``, gate blocks reordered, the forget blocks of the
biases minus 1, Reduce's second forget gate in parameters of its own). That
layout is a list of pieces, each a block of a canonical entry placed in one
DyNet parameter (``weights.Piece``); :func:`name_map` lists them by canonical
name. :func:`from_canonical` writes a model's weights through them, and
:func:`to_canonical` and :func:`grads_to_canonical` read values and gradients
back through the same pieces. The embedding is a LookupParameters whose rows
are the canonical rows, unchanged.

DyNet keeps float32 only. The model (train.Model) keeps the canonical float32
arrays beside DyNet's copy and writes DyNet's from them, never the other way.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from shared.params import ModelConfig, check_params, param_shapes

from .weights import EMBEDDING, Piece, layout


def name_map(config: ModelConfig) -> dict[str, tuple[Piece, ...]]:
    """Canonical name -> where DyNet keeps it: its pieces (blocks placed in
    DyNet parameters, see weights.Piece), in canonical order. The embedding
    maps to no piece: it is the LookupParameters itself, rows as they are."""
    pieces, _ = layout(config)
    return {name: tuple(piece for piece in pieces if piece.canonical == name) for name in param_shapes(config)}


def resolve_dtype(dtype) -> np.dtype:
    """'float32' -> float32, DyNet's only precision; 'float64' or any other a
    one-line ValueError (the runner refuses float64 before, as unsupported)."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved == np.float64:
        raise ValueError("DyNet computes in float32 only, not float64")
    if resolved != np.float32:
        raise ValueError(f"dtype must be 'float32' (DyNet has no other), got {dtype!r}")
    return resolved


def from_canonical(params: Mapping[str, np.ndarray], model):
    """The canonical arrays into ``model`` (a train.Model): float32 copies of
    them as its canonical weights (never the caller's arrays), and DyNet's
    copy written from those. Returns the model."""
    check_params(params, model.config)  # as given: an integer or non-finite array is named before any cast
    model.params = {name: np.array(value, dtype=np.float32) for name, value in params.items()}
    model.weights.write(model.params)
    return model


def _canonical(arrays: Mapping[str, np.ndarray], config: ModelConfig, shifted: bool) -> dict[str, np.ndarray]:
    """DyNet-named float32 ``arrays`` (values, or gradients) -> canonical names
    and shapes. ``shifted``: add back the shift of a forget bias (values; a
    constant shift does not change a gradient)."""
    pieces, _ = layout(config)
    out = {name: np.zeros(shape, np.float32) for name, shape in param_shapes(config).items() if name != EMBEDDING}
    out[EMBEDDING] = arrays[EMBEDDING]
    for piece in pieces:
        source = arrays[piece.dynet]
        if piece.cols is None:
            out[piece.canonical][piece.block] = source[piece.rows] - np.float32(piece.shift) if shifted \
                else source[piece.rows]
        else:
            out[piece.canonical][:, piece.block] = source[piece.rows, piece.cols].T
    return out


def to_canonical(model) -> dict[str, np.ndarray]:
    """DyNet's copy of the weights, read back under canonical names and
    shapes (float32). Kernels come back bit for bit; a forget block of a
    bias comes back as (b - 1) + 1 in float32, which may differ from b in the
    last bit: so the model keeps the canonical arrays themselves and writes
    DyNet's from them, never the other way (this reads after DyNet's own
    trainers have moved its copy, and for checks)."""
    return _canonical(model.weights.values(), model.config, shifted=True)


def grads_to_canonical(model, grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The gradients train.py read out of DyNet's accumulators, by DyNet's
    parameter names (weights.Weights.gradients: the embedding's as [V, E], only
    the looked-up rows read), under canonical names and shapes, float32."""
    return _canonical(grads, model.config, shifted=False)


__all__ = ["name_map", "resolve_dtype", "from_canonical", "to_canonical", "grads_to_canonical"]
