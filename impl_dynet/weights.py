"""DyNet's copy of one model's weights: a ``dy.ParameterCollection`` laid out
for the fused LSTM nodes, which cells.py and classifier.py read by name and
convert.py fills from the canonical parameters (docs/spec.md §4).

DyNet multiplies column vectors, ``y = W x + b`` with ``W`` stored ``[out, in]``,
so every canonical kernel ``[in, out]`` is kept transposed. The embedding is a
``LookupParameters`` whose rows are the canonical rows, unchanged.

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

Each canonical entry is cut into :class:`Piece` s, each one a block of
output columns placed at some rows (and input columns) of one DyNet
parameter; the pieces cover every canonical entry and every DyNet parameter
exactly once, which :func:`layout` asserts. DyNet's parameters are named as
the canonical ones (a fused parameter after the LSTM kernels it is: its
input's, ``kernel_input``, and its hidden input's, ``kernel_hidden``):

    canonical entry            DyNet parameter(s)
    embed.embedding            embed.embedding (lookup)        rows as they are
    projection.kernel / .bias  projection.kernel / .bias       [2H, E] / [2H]
    tracker.kernel_input       tracker.kernel_input [4D, 3H]   gates reordered i, f, o, g
    tracker.kernel_hidden      tracker.kernel_hidden [4D, D]   ... likewise
    tracker.bias               tracker.bias [4D]               ... and f minus 1
    reduce.left.kernel         reduce.kernel_input[:, :H], reduce.f2.left.kernel   gates i, f1, o, a; then f2
    reduce.track.kernel        reduce.kernel_input[:, H:], reduce.f2.track.kernel
    reduce.right.kernel        reduce.kernel_hidden, reduce.f2.right.kernel
    reduce.left.bias           reduce.bias (f1 minus 1), reduce.f2.bias
    tracker.transition.*       tracker.transition.kernel / .bias   [2, D] / [2]
    mlp.{k}.kernel / .bias     mlp.{k}.kernel / .bias
    output.kernel / .bias      output.kernel / .bias

DyNet keeps float32 only. The canonical values are kept beside it (train.Model),
so :meth:`Weights.write` only ever writes DyNet's copy from them; convert.py
reads it back. DyNet's Python API copies a tensor element by element (a
Python float each way), so what need not be copied is not: the embedding is
written and its gradient read row by row, only the rows asked for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from shared.params import ModelConfig, param_shapes

from .library import dy

EMBEDDING = "embed.embedding"  # the one canonical entry held by a LookupParameters (of the same name here)
TRACKER_GATES = ("i", "f", "g", "o")  # canonical order of the tracker's blocks (docs/spec.md §3)
REDUCE_GATES = ("a", "i", "f1", "f2", "o")  # canonical order of Reduce's blocks
FUSED_GATES = ("i", "f", "o", "g")  # the order of DyNet's fused LSTM gates
FORGET_BIAS = 1.0  # what the fused gates add to the forget gate's pre-activation
# Reduce's gates on the fused node: the fused slot each canonical gate takes (f2 has its own node).
REDUCE_ON_FUSED = {"i": "i", "f1": "f", "o": "o", "a": "g"}


@dataclass(frozen=True)
class Piece:
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
           slots: Mapping[str, str], bias: bool = False) -> list[Piece]:
    """The pieces of one gated entry: canonical gate k (in ``order``) goes to
    the fused slot ``slots[gate]``; gates without a slot are left to the caller."""
    pieces = []
    for k, gate in enumerate(order):
        if gate not in slots:
            continue
        slot = FUSED_GATES.index(slots[gate])
        shift = -FORGET_BIAS if bias and slots[gate] == "f" else 0.0
        pieces.append(Piece(canonical, _span(k * size, size), dynet, _span(slot * size, size),
                            None if bias else cols, shift))
    return pieces


def _tracker(H: int, D: int) -> list[Piece]:
    same = {gate: gate for gate in TRACKER_GATES}
    return (_gates("tracker.kernel_input", TRACKER_GATES, D, "tracker.kernel_input", slice(0, 3 * H), same)
            + _gates("tracker.kernel_hidden", TRACKER_GATES, D, "tracker.kernel_hidden", slice(0, D), same)
            + _gates("tracker.bias", TRACKER_GATES, D, "tracker.bias", None, same, bias=True))


def _reduce(H: int, D: int) -> list[Piece]:
    f2 = _span(3 * H, H)  # f2's block in the canonical order a, i, f1, f2, o
    pieces = (_gates("reduce.left.kernel", REDUCE_GATES, H, "reduce.kernel_input", slice(0, H), REDUCE_ON_FUSED)
              + [Piece("reduce.left.kernel", f2, "reduce.f2.left.kernel", slice(0, H), slice(0, H))]
              + _gates("reduce.right.kernel", REDUCE_GATES, H, "reduce.kernel_hidden", slice(0, H), REDUCE_ON_FUSED)
              + [Piece("reduce.right.kernel", f2, "reduce.f2.right.kernel", slice(0, H), slice(0, H))]
              + _gates("reduce.left.bias", REDUCE_GATES, H, "reduce.bias", None, REDUCE_ON_FUSED, bias=True)
              + [Piece("reduce.left.bias", f2, "reduce.f2.bias", slice(0, H))])
    if D > 0:
        pieces += (_gates("reduce.track.kernel", REDUCE_GATES, H, "reduce.kernel_input", slice(H, H + D),
                          REDUCE_ON_FUSED)
                   + [Piece("reduce.track.kernel", f2, "reduce.f2.track.kernel", slice(0, H), slice(0, D))])
    return pieces


def _whole(name: str, shape: tuple[int, ...]) -> Piece:
    """A canonical entry that is one DyNet parameter of the same name, transposed (kernel) or as it is (bias)."""
    if len(shape) == 2:
        return Piece(name, slice(0, shape[1]), name, slice(0, shape[1]), slice(0, shape[0]))
    return Piece(name, slice(0, shape[0]), name, slice(0, shape[0]))


@functools.lru_cache(maxsize=16)
def layout(config: ModelConfig) -> tuple[tuple[Piece, ...], dict[str, tuple[int, ...]]]:
    """Every :class:`Piece` of ``config``'s canonical entries (the embedding
    aside) and the shape of every DyNet parameter they fill, in the order the
    collection holds them; asserts that both sides are covered exactly once.
    Cached: a training step asks for it."""
    H, D = config.hidden_dim, config.tracker_dim
    shapes = param_shapes(config)
    dynet_shapes: dict[str, tuple] = {"projection.kernel": (2 * H, config.embed_dim), "projection.bias": (2 * H,)}
    pieces = [_whole("projection.kernel", shapes["projection.kernel"]),
              _whole("projection.bias", shapes["projection.bias"])]
    if D > 0:
        dynet_shapes.update({"tracker.kernel_input": (4 * D, 3 * H), "tracker.kernel_hidden": (4 * D, D),
                             "tracker.bias": (4 * D,)})
        pieces += _tracker(H, D)
    dynet_shapes.update({"reduce.kernel_input": (4 * H, H + D), "reduce.kernel_hidden": (4 * H, H),
                         "reduce.bias": (4 * H,), "reduce.f2.left.kernel": (H, H), "reduce.f2.right.kernel": (H, H),
                         "reduce.f2.bias": (H,)})
    if D > 0:
        dynet_shapes["reduce.f2.track.kernel"] = (H, D)
    pieces += _reduce(H, D)
    for name, shape in shapes.items():
        if name.startswith(("mlp.", "output.", "tracker.transition.")):
            dynet_shapes[name] = shape[::-1]
            pieces.append(_whole(name, shape))
    _check_cover(pieces, shapes, dynet_shapes)
    return tuple(pieces), dynet_shapes


def _check_cover(pieces: list[Piece], shapes: Mapping[str, tuple], dynet_shapes: Mapping[str, tuple]) -> None:
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


@functools.lru_cache(maxsize=16)
def _sources(config: ModelConfig) -> dict[str, frozenset[str]]:
    """DyNet parameter name -> the canonical entries its values come from."""
    out: dict[str, set[str]] = {}
    for piece in layout(config)[0]:
        out.setdefault(piece.dynet, set()).add(piece.canonical)
    return {name: frozenset(names) for name, names in out.items()}


def _dynet_arrays(params: Mapping[str, np.ndarray], config: ModelConfig) -> dict[str, np.ndarray]:
    """The float32 value of every DyNet parameter (not the embedding) from canonical ``params``."""
    pieces, dynet_shapes = layout(config)
    out = {name: np.zeros(shape, np.float32) for name, shape in dynet_shapes.items()}
    for piece in pieces:
        value = np.asarray(params[piece.canonical], dtype=np.float32)
        if piece.cols is None:
            out[piece.dynet][piece.rows] = value[piece.block] + np.float32(piece.shift)
        else:
            out[piece.dynet][piece.rows, piece.cols] = value[:, piece.block].T
    return out


class Weights:
    """One model's ParameterCollection: its Parameters by DyNet name
    (``weights["reduce.kernel_input"]``, see the module docstring) and the
    embedding, all zeros until :meth:`write` fills them (convert.from_canonical)."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.collection = dy.ParameterCollection()
        zero = dy.ConstInitializer(0.0)
        self.embedding = self.collection.add_lookup_parameters((config.vocab_size, config.embed_dim), init=zero,
                                                               name="embed")
        self.params: dict[str, dy.Parameters] = {name: self.collection.add_parameters(shape, init=zero)
                                                 for name, shape in layout(config)[1].items()}

    def __getitem__(self, name: str) -> dy.Parameters:
        return self.params[name]

    def __contains__(self, name: str) -> bool:
        return name in self.params

    def write(self, params: Mapping[str, np.ndarray], changed: set[str] | None = None,
              embedding_rows: np.ndarray | None = None) -> None:
        """Write canonical ``params`` into DyNet's copy; ``changed``: only the
        DyNet parameters that depend on these canonical entries (None: all);
        ``embedding_rows``: only these rows of the embedding (None: all)."""
        if changed is None or EMBEDDING in changed:
            table = np.asarray(params[EMBEDDING], dtype=np.float32)
            rows = range(len(table)) if embedding_rows is None else embedding_rows
            for row in rows:
                self.embedding.init_row(int(row), table[row])
        uses = _sources(self.config)
        for name, value in _dynet_arrays(params, self.config).items():
            if changed is None or uses[name] & changed:
                self.params[name].set_value(value)

    def values(self) -> dict[str, np.ndarray]:
        """DyNet's copy of every parameter, float32, by DyNet name (the embedding [V, E] under its own)."""
        values = {EMBEDDING: np.asarray(self.embedding.as_array(), dtype=np.float32)}
        values.update({name: np.asarray(p.as_array(), dtype=np.float32) for name, p in self.params.items()})
        return values

    def gradients(self, embedding_rows: np.ndarray | None) -> dict[str, np.ndarray]:
        """The gradient DyNet accumulated in every parameter, float32, by DyNet
        name. The embedding's is <float32>[V, E] with only ``embedding_rows``
        read (the graph's token ids: every other row's gradient is zero), and
        none when it is None (a frozen embedding, looked up as a constant)."""
        table = np.zeros((self.config.vocab_size, self.config.embed_dim), np.float32)
        if embedding_rows is not None and len(embedding_rows):
            rows = [int(row) for row in embedding_rows]
            table[rows] = np.asarray(self.embedding.rows_grad_as_array(rows), dtype=np.float32)
        grads = {EMBEDDING: table}
        grads.update({name: np.asarray(p.grad_as_array(), dtype=np.float32) for name, p in self.params.items()})
        return grads

    def zero_gradients(self, embedding: bool = True) -> None:
        """Clear every accumulated gradient (DyNet adds each backward pass to
        them until a trainer's update clears them; with the shared rules no
        trainer runs, graph.py)."""
        if embedding:
            self.embedding.scale_gradient(0.0)
        for p in self.params.values():
            p.scale_gradient(0.0)
