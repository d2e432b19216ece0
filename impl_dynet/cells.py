"""The cells of SPINN for ONE sentence (docs/spec.md §3): the Tracker's LSTM
step and Reduce's TreeLSTM, on vectors, with no batch dimension anywhere.

Each call adds a few nodes to DyNet's computation graph and computes
nothing. The batch is made later, by DyNet: with autobatching on, the
nodes of every sentence that have the same operation and shapes (say, the
tracker steps of 128 sentences whose inputs are ready) are run as one
matrix operation when the graph is evaluated. So this code never stacks rows
or pads; compare impl_pytorch/cells.py, which batches by hand.

Both cells use DyNet's fused LSTM nodes (convert.py explains the weight
layout they need): ``vanilla_lstm_gates`` computes all gates (two matrix
products and the nonlinearities), ``vanilla_lstm_c`` the new cell,
``vanilla_lstm_h`` the output. Few nodes matter: an autobatching scheduler
pays for each node it groups, whatever its size. The inputs are
concatenated by a node of their own: DyNet 2.1's ``vanilla_lstm_gates_concat``
(a list of inputs) batches only its first two arguments when autobatched, and
so computes wrong gates from three inputs (tests/test_dynet.py keeps the evidence).

An item (of the stack or the buffer) and a tracker state are pairs (h, c)
of vector expressions: [H] for items, [D] for the tracker.
"""

from __future__ import annotations

from .convert import Weights
from .library import dy

Item = tuple[dy.Expression, dy.Expression]


def track(w: Weights, buffer_h: dy.Expression, top_h: dy.Expression, below_h: dy.Expression,
          state: Item) -> Item:
    """One tracker step (gate order i, f, g, o in the canonical weights): the
    parser's view [b, s1, s2] (each [H]) and the state (h_t, c_t) [D] -> the
    new state. Four nodes."""
    h, c = state
    view = dy.concatenate([buffer_h, top_h, below_h])
    gates = dy.vanilla_lstm_gates(view, h, w["tracker.Wx"], w["tracker.Wh"], w["tracker.b"])
    c = dy.vanilla_lstm_c(c, gates)
    return dy.vanilla_lstm_h(c, gates), c


def reduce(w: Weights, left: Item, right: Item, tracking: dy.Expression | None) -> Item:
    """The TreeLSTM composition (gates a, i, f1, f2, o): two items and the
    tracker's h_t [D] (None without a tracker) -> the composed item.

    The fused node computes i, f1, o and tanh(a), its "hidden" input being
    the right child: act(Wx [left.h; h_t] + Wh right.h + b). The second
    forget gate has no slot there, so it is one affine node and a sigmoid.
    Then c = tanh(a) σ(i) + σ(f1) left.c + σ(f2) right.c and h = σ(o) tanh(c).
    Seven nodes, eight with a tracker.
    """
    (left_h, left_c), (right_h, right_c) = left, right
    inputs = left_h if tracking is None else dy.concatenate([left_h, tracking])
    gates = dy.vanilla_lstm_gates(inputs, right_h, w["reduce.Wx"], w["reduce.Wh"], w["reduce.b"])
    terms = [w["reduce.f2.b"], w["reduce.f2.left"], left_h, w["reduce.f2.right"], right_h]
    if tracking is not None:
        terms += [w["reduce.f2.track"], tracking]
    f2 = dy.logistic(dy.affine_transform(terms))
    c = dy.vanilla_lstm_c(left_c, gates) + dy.cmult(f2, right_c)
    return dy.vanilla_lstm_h(c, gates), c


def head(w: Weights, tracker_h: dy.Expression) -> dy.Expression:
    """The transition head (docs/spec.md §7): h_t [D] -> t = (t_S, t_R) [2]."""
    return dy.affine_transform([w["transition.b"], w["transition.W"], tracker_h])
