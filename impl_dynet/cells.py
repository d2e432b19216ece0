"""The cells of SPINN for ONE sentence (docs/spec.md §3): the Tracker's LSTM
step and its transition head, and Reduce's TreeLSTM, on vectors, with no
batch dimension anywhere.

Each call adds a few nodes to DyNet's computation graph and computes
nothing; DyNet's autobatching groups the nodes of different sentences when
the graph is evaluated (docs/autobatching.md), so this code never stacks
rows or pads: compare impl_pytorch/cells.py, which batches by hand.

Both cells use DyNet's fused LSTM nodes (``vanilla_lstm_gates``, ``_c``,
``_h``; convert.py explains the weight layout they need): an autobatching
scheduler pays for each node it groups, whatever its size. The inputs are
concatenated by a node of their own: DyNet 2.1's ``vanilla_lstm_gates_concat``
(a list of inputs) batches only its first two arguments when autobatched, and
so computes wrong gates from three inputs (tests/test_dynet.py keeps the evidence).

An item (of the stack or the buffer) and a tracker state are pairs (h, c)
of vector expressions: [H] for items, [D] for the tracker.
"""

from __future__ import annotations

from .convert import _Weights
from .library import dy

Item = tuple[dy.Expression, dy.Expression]


class Tracker:
    """The tracker's LSTM cell over the parser state, and its transition head
    (docs/spec.md §3, §7), holding the DyNet parameters they use.

    For ONE sentence's expressions: each input is a vector ([H], state [D]),
    not the surface's [K, H] rows, because DyNet batches the K sentences
    itself when it evaluates the graph (docs/autobatching.md)."""

    def __init__(self, weights: _Weights):
        self.Wx, self.Wh, self.b = weights["tracker.Wx"], weights["tracker.Wh"], weights["tracker.b"]
        has_head = "transition.W" in weights  # a model with a head only
        self.head_W = weights["transition.W"] if has_head else None
        self.head_b = weights["transition.b"] if has_head else None

    def step(self, buffer_h: dy.Expression, top_h: dy.Expression, below_h: dy.Expression, state: Item) -> Item:
        """One tracker step (gate order i, f, g, o in the canonical weights): the
        parser's view [b, s1, s2] (each [H]) and the state (h_t, c_t) [D] -> the
        new state. Four nodes."""
        h, c = state
        view = dy.concatenate([buffer_h, top_h, below_h])
        gates = dy.vanilla_lstm_gates(view, h, self.Wx, self.Wh, self.b)
        c = dy.vanilla_lstm_c(c, gates)
        return dy.vanilla_lstm_h(c, gates), c

    def transition_logits(self, h: dy.Expression) -> dy.Expression:
        """The transition head (docs/spec.md §7): h_t [D] -> t = (t_S, t_R) [2]."""
        return dy.affine_transform([self.head_b, self.head_W, h])


class Reduce:
    """The TreeLSTM composition of two items, with the tracker's h as a third
    input (gates a, i, f1, f2, o), holding the DyNet parameters it uses.

    For ONE sentence's expressions: left and right are (h, c) vectors [H],
    not the surface's [K, H] rows, because DyNet batches the K compositions
    itself when it evaluates the graph (docs/autobatching.md)."""

    def __init__(self, weights: _Weights):
        self.Wx, self.Wh, self.b = weights["reduce.Wx"], weights["reduce.Wh"], weights["reduce.b"]
        self.f2_b, self.f2_left, self.f2_right = (weights["reduce.f2.b"], weights["reduce.f2.left"],
                                                  weights["reduce.f2.right"])
        self.f2_track = weights["reduce.f2.track"] if "reduce.f2.track" in weights else None

    def compose(self, left: Item, right: Item, tracking: dy.Expression | None) -> Item:
        """Two items and the tracker's h_t [D] (None without a tracker) -> the composed item.

        The fused node computes i, f1, o and tanh(a), its "hidden" input being
        the right child: act(Wx [left.h; h_t] + Wh right.h + b). The second
        forget gate has no slot there, so it is one affine node and a sigmoid.
        Then c = tanh(a) σ(i) + σ(f1) left.c + σ(f2) right.c and h = σ(o) tanh(c).
        Seven nodes, eight with a tracker.
        """
        (left_h, left_c), (right_h, right_c) = left, right
        inputs = left_h if tracking is None else dy.concatenate([left_h, tracking])
        gates = dy.vanilla_lstm_gates(inputs, right_h, self.Wx, self.Wh, self.b)
        terms = [self.f2_b, self.f2_left, left_h, self.f2_right, right_h]
        if tracking is not None:
            terms += [self.f2_track, tracking]
        f2 = dy.logistic(dy.affine_transform(terms))
        c = dy.vanilla_lstm_c(left_c, gates) + dy.cmult(f2, right_c)
        return dy.vanilla_lstm_h(c, gates), c
