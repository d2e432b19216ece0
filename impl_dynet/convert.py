"""Canonical parameters (docs/spec.md §4) <-> a ``dy.ParameterCollection``.

DyNet multiplies column vectors, ``y = W x + b`` with ``W`` stored ``[out, in]``,
so every canonical kernel ``[in, out]`` is transposed on the way in and back
on the way out. The embedding is a ``LookupParameters`` whose rows are the
canonical rows, unchanged.

The two LSTM-like cells run on DyNet's fused LSTM nodes
(``vanilla_lstm_gates``, ``vanilla_lstm_c``, ``vanilla_lstm_h``: three
nodes where the gate-by-gate arithmetic needs a dozen, which matters to an
autobatching scheduler that pays for every node). Those nodes fix three
things the canonical layout does differently, and the layout below undoes
each of them:

* their gate order is i, f, o, g, where the tracker's is i, f, g, o and
  Reduce's is a, i, f1, f2, o: the gate blocks are reordered;
* they add a constant 1 to the forget gate's pre-activation, so the DyNet
  bias of that block holds the canonical bias minus 1 (``shift``);
* they have four gates, Reduce has five: its second forget gate f2 gets a
  plain affine node of its own (``reduce.f2.*``).

Each canonical entry is cut into :class:`_Piece` s, each one a block of
output columns placed at some rows (and input columns) of one DyNet
parameter; the pieces cover every canonical entry and every DyNet parameter
exactly once, which :func:`_layout` asserts. The same pieces map gradients
back (:func:`grads_to_canonical`).

    canonical entry            DyNet parameter(s)
    embed.embedding            embed (lookup)                  rows as they are
    projection.kernel / .bias  projection.W / .b               [2H, E] / [2H]
    tracker.kernel_input       tracker.Wx [4D, 3H]             gates reordered i, f, o, g
    tracker.kernel_hidden      tracker.Wh [4D, D]              ... likewise
    tracker.bias               tracker.b [4D]                  ... and f minus 1
    reduce.left.kernel         reduce.Wx[:, :H], reduce.f2.left     gates i, f1, o, a; then f2
    reduce.track.kernel        reduce.Wx[:, H:], reduce.f2.track
    reduce.right.kernel        reduce.Wh, reduce.f2.right
    reduce.left.bias           reduce.b (f1 minus 1), reduce.f2.b
    tracker.transition.*       transition.W / .b               [2, D] / [2]
    mlp.{k}.kernel / .bias     mlp.{k}.W / .b
    output.kernel / .bias      output.W / .b

DyNet keeps float32 only; the canonical values are kept beside it by the
runner (train.py), so :func:`_load` only ever writes DyNet's copy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from shared.params import ModelConfig, check_params, param_shapes

from .library import dy

EMBEDDING = "embed.embedding"  # the one canonical entry held by a LookupParameters
TRACKER_GATES = ("i", "f", "g", "o")  # canonical order of the tracker's blocks (docs/spec.md §3)
REDUCE_GATES = ("a", "i", "f1", "f2", "o")  # canonical order of Reduce's blocks
FUSED_GATES = ("i", "f", "o", "g")  # the order of DyNet's fused LSTM gates
FORGET_BIAS = 1.0  # what the fused gates add to the forget gate's pre-activation
# Reduce's gates on the fused node: the fused slot each canonical gate takes (f2 has its own node).
REDUCE_ON_FUSED = {"i": "i", "f1": "f", "o": "o", "a": "g"}


@dataclass(frozen=True)
class _Piece:
    """One block of a canonical entry inside one DyNet parameter.

    A kernel's output columns ``block`` go, transposed, to ``rows`` x ``cols``
    of the DyNet matrix; a bias's entries ``block`` go to ``rows`` of the DyNet
    vector (``cols`` None), plus ``shift``.
    """

    canonical: str
    block: slice
    dynet: str
    rows: slice
    cols: slice | None = None
    shift: float = 0.0


def _span(start: int, size: int) -> slice:
    return slice(start, start + size)


def _gates(canonical: str, order: tuple[str, ...], size: int, dynet: str, cols: slice | None,
           slots: Mapping[str, str], bias: bool = False) -> list[_Piece]:
    """The pieces of one gated entry: canonical gate k (in ``order``) goes to
    the fused slot ``slots[gate]``; gates without a slot are left to the caller."""
    pieces = []
    for k, gate in enumerate(order):
        if gate not in slots:
            continue
        slot = FUSED_GATES.index(slots[gate])
        shift = -FORGET_BIAS if bias and slots[gate] == "f" else 0.0
        pieces.append(_Piece(canonical, _span(k * size, size), dynet, _span(slot * size, size),
                            None if bias else cols, shift))
    return pieces


def _tracker(H: int, D: int) -> list[_Piece]:
    same = {gate: gate for gate in TRACKER_GATES}
    return (_gates("tracker.kernel_input", TRACKER_GATES, D, "tracker.Wx", slice(0, 3 * H), same)
            + _gates("tracker.kernel_hidden", TRACKER_GATES, D, "tracker.Wh", slice(0, D), same)
            + _gates("tracker.bias", TRACKER_GATES, D, "tracker.b", None, same, bias=True))


def _reduce(H: int, D: int) -> list[_Piece]:
    f2 = _span(3 * H, H)  # f2's block in the canonical order a, i, f1, f2, o
    pieces = (_gates("reduce.left.kernel", REDUCE_GATES, H, "reduce.Wx", slice(0, H), REDUCE_ON_FUSED)
              + [_Piece("reduce.left.kernel", f2, "reduce.f2.left", slice(0, H), slice(0, H))]
              + _gates("reduce.right.kernel", REDUCE_GATES, H, "reduce.Wh", slice(0, H), REDUCE_ON_FUSED)
              + [_Piece("reduce.right.kernel", f2, "reduce.f2.right", slice(0, H), slice(0, H))]
              + _gates("reduce.left.bias", REDUCE_GATES, H, "reduce.b", None, REDUCE_ON_FUSED, bias=True)
              + [_Piece("reduce.left.bias", f2, "reduce.f2.b", slice(0, H))])
    if D > 0:
        pieces += (_gates("reduce.track.kernel", REDUCE_GATES, H, "reduce.Wx", slice(H, H + D), REDUCE_ON_FUSED)
                   + [_Piece("reduce.track.kernel", f2, "reduce.f2.track", slice(0, H), slice(0, D))])
    return pieces


def _whole(canonical: str, dynet: str, shape: tuple[int, ...]) -> _Piece:
    """A canonical entry that is one DyNet parameter, transposed (kernel) or as it is (bias)."""
    if len(shape) == 2:
        return _Piece(canonical, slice(0, shape[1]), dynet, slice(0, shape[1]), slice(0, shape[0]))
    return _Piece(canonical, slice(0, shape[0]), dynet, slice(0, shape[0]))


@functools.lru_cache(maxsize=16)
def _layout(config: ModelConfig) -> tuple[tuple[_Piece, ...], dict[str, tuple[int, ...]]]:
    """Every :class:`_Piece` of ``config``'s canonical entries (the embedding
    aside) and the shape of every DyNet parameter they fill; asserts that
    both sides are covered exactly once. Cached: the runner asks per step."""
    H, D = config.hidden_dim, config.tracker_dim
    shapes = param_shapes(config)
    dynet_shapes: dict[str, tuple] = {"projection.W": (2 * H, config.embed_dim), "projection.b": (2 * H,)}
    pieces = [_whole("projection.kernel", "projection.W", shapes["projection.kernel"]),
              _whole("projection.bias", "projection.b", shapes["projection.bias"])]
    if D > 0:
        dynet_shapes.update({"tracker.Wx": (4 * D, 3 * H), "tracker.Wh": (4 * D, D), "tracker.b": (4 * D,)})
        pieces += _tracker(H, D)
    dynet_shapes.update({"reduce.Wx": (4 * H, H + D), "reduce.Wh": (4 * H, H), "reduce.b": (4 * H,),
                         "reduce.f2.left": (H, H), "reduce.f2.right": (H, H), "reduce.f2.b": (H,)})
    if D > 0:
        dynet_shapes["reduce.f2.track"] = (H, D)
    pieces += _reduce(H, D)
    for name, shape in shapes.items():
        if name.startswith(("mlp.", "output.", "tracker.transition.")):
            prefix, kind = name.rsplit(".", 1)
            dynet = prefix.replace("tracker.", "") + (".W" if kind == "kernel" else ".b")
            dynet_shapes[dynet] = shape[::-1]
            pieces.append(_whole(name, dynet, shape))
    _check_cover(pieces, shapes, dynet_shapes)
    return tuple(pieces), dynet_shapes


def _check_cover(pieces: list[_Piece], shapes: Mapping[str, tuple], dynet_shapes: Mapping[str, tuple]) -> None:
    """Each canonical output column and each DyNet entry is filled by exactly one piece."""
    canonical = {name: np.zeros(shape[-1], int) for name, shape in shapes.items() if name != EMBEDDING}
    dynet = {name: np.zeros(shape, int) for name, shape in dynet_shapes.items()}
    for piece in pieces:
        canonical[piece.canonical][piece.block] += 1
        target = dynet[piece.dynet]
        if piece.cols is None:
            target[piece.rows] += 1
        else:
            assert shapes[piece.canonical][0] == piece.cols.stop - piece.cols.start, piece
            target[piece.rows, piece.cols] += 1
    for name, count in {**canonical, **dynet}.items():
        assert np.all(count == 1), f"{name}: covered {count.min()}..{count.max()} times"


def name_map(config: ModelConfig) -> dict[str, tuple[_Piece, ...]]:
    """Canonical name -> where DyNet keeps it: its pieces (blocks placed in
    DyNet parameters, see :class:`_Piece`), in canonical order. The embedding
    maps to no piece: it is the LookupParameters ``embed`` itself, rows as they are."""
    pieces, _ = _layout(config)
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


def _dynet_arrays(params: Mapping[str, np.ndarray], config: ModelConfig) -> dict[str, np.ndarray]:
    """The float32 value of every DyNet parameter (not the embedding) from canonical ``params``."""
    pieces, dynet_shapes = _layout(config)
    out = {name: np.zeros(shape, np.float32) for name, shape in dynet_shapes.items()}
    for piece in pieces:
        value = np.asarray(params[piece.canonical], dtype=np.float32)
        if piece.cols is None:
            out[piece.dynet][piece.rows] = value[piece.block] + np.float32(piece.shift)
        else:
            out[piece.dynet][piece.rows, piece.cols] = value[:, piece.block].T
    return out


@dataclass
class _Weights:
    """DyNet's copy of one model's weights: a ParameterCollection, its
    Parameters by DyNet name (``weights["reduce.Wx"]``) and the embedding."""

    config: ModelConfig
    collection: dy.ParameterCollection
    embedding: dy.LookupParameters
    params: dict[str, dy.Parameters] = field(default_factory=dict)

    def __getitem__(self, name: str) -> dy.Parameters:
        return self.params[name]

    def __contains__(self, name: str) -> bool:
        return name in self.params


def from_canonical(params: Mapping[str, np.ndarray], config: ModelConfig) -> _Weights:
    """A new ParameterCollection holding ``params`` (float32 copies; never the caller's arrays)."""
    check_params(params, config)  # ParamError naming any missing, extra or mis-shaped entry
    collection = dy.ParameterCollection()
    embedding = collection.lookup_parameters_from_numpy(np.asarray(params[EMBEDDING], dtype=np.float32),
                                                        name="embed")  # one copy, at construction
    weights = _Weights(config, collection, embedding)
    for name, value in _dynet_arrays(params, config).items():
        weights.params[name] = collection.parameters_from_numpy(value)
    return weights


@functools.lru_cache(maxsize=16)
def _sources(config: ModelConfig) -> dict[str, frozenset[str]]:
    """DyNet parameter name -> the canonical entries its values come from."""
    out: dict[str, set[str]] = {}
    for canonical, pieces in name_map(config).items():
        for piece in pieces:
            out.setdefault(piece.dynet, set()).add(canonical)
    return {name: frozenset(names) for name, names in out.items()}


def _load(weights: _Weights, params: Mapping[str, np.ndarray], changed: set[str] | None = None,
          embedding_rows: np.ndarray | None = None) -> None:
    """Write canonical ``params`` into DyNet's copy; ``changed``: only the
    DyNet parameters that depend on these canonical entries (None: all);
    ``embedding_rows``: only these rows of the embedding (None: all).

    DyNet's Python API copies element by element (a Python float each way),
    so what is not needed is not copied: the embedding row by row, and only
    the rows an update moved.
    """
    if changed is None or EMBEDDING in changed:
        table = np.asarray(params[EMBEDDING], dtype=np.float32)
        rows = range(len(table)) if embedding_rows is None else embedding_rows
        for row in rows:
            weights.embedding.init_row(int(row), table[row])
    uses = _sources(weights.config)
    for name, value in _dynet_arrays(params, weights.config).items():
        if changed is None or uses[name] & changed:
            weights[name].set_value(value)


def to_canonical(weights: _Weights) -> dict[str, np.ndarray]:
    """DyNet's copy of the weights, read back under canonical names and
    shapes (float32). Kernels come back bit for bit; a forget block of a
    bias comes back as (b - 1) + 1 in float32, which may differ from b in the
    last bit: so the runner keeps the canonical arrays themselves and writes
    DyNet's from them, never the other way (this reads for checks)."""
    pieces, _ = _layout(weights.config)
    out = {name: np.zeros(shape, np.float32) for name, shape in param_shapes(weights.config).items()}
    out[EMBEDDING] = np.asarray(weights.embedding.as_array(), dtype=np.float32)
    values = {name: np.asarray(p.as_array(), dtype=np.float32) for name, p in weights.params.items()}
    for piece in pieces:
        source = values[piece.dynet]
        if piece.cols is None:
            out[piece.canonical][piece.block] = source[piece.rows] - np.float32(piece.shift)
        else:
            out[piece.canonical][:, piece.block] = source[piece.rows, piece.cols].T
    return out


def grads_to_canonical(weights: _Weights, embedding_rows: np.ndarray | None) -> dict[str, np.ndarray]:
    """The gradient DyNet accumulated in every parameter, under canonical
    names and shapes, float32 (the shift of a bias does not change its
    gradient). Of the embedding only ``embedding_rows`` are read (the
    batch's token ids: every other row's gradient is zero), and none when
    it is None (a frozen embedding, looked up as a constant)."""
    pieces, _ = _layout(weights.config)
    grads = {name: np.zeros(shape, np.float32) for name, shape in param_shapes(weights.config).items()}
    if embedding_rows is not None and len(embedding_rows):
        rows = [int(row) for row in embedding_rows]
        grads[EMBEDDING][rows] = np.asarray(weights.embedding.rows_grad_as_array(rows), dtype=np.float32)
    dynet_grads = {name: np.asarray(p.grad_as_array(), dtype=np.float32) for name, p in weights.params.items()}
    for piece in pieces:
        source = dynet_grads[piece.dynet]
        if piece.cols is None:
            grads[piece.canonical][piece.block] = source[piece.rows]
        else:
            grads[piece.canonical][:, piece.block] = source[piece.rows, piece.cols].T
    return grads


def _zero_grads(weights: _Weights, embedding: bool = True) -> None:
    """Clear every accumulated gradient (DyNet adds each backward pass to them
    until a trainer's update clears them; no trainer runs here, train.py)."""
    if embedding:
        weights.embedding.scale_gradient(0.0)
    for p in weights.params.values():
        p.scale_gradient(0.0)


__all__ = ["name_map", "resolve_dtype", "from_canonical", "to_canonical", "grads_to_canonical"]
