"""The cells of SPINN for ONE sentence (docs/spec.md §3): the Tracker's LSTM
step and its transition head, and Reduce's TreeLSTM, on vectors, with no
batch dimension anywhere.

Each call adds a few nodes to DyNet's computation graph and computes
nothing; DyNet's autobatching groups the nodes of different sentences when
the graph is evaluated (docs/autobatching.md), so this code never stacks
rows or pads: compare impl_pytorch/cells.py, which batches by hand.

Both cells use DyNet's fused LSTM nodes (``vanilla_lstm_gates``, ``_c``,
``_h``; weights.py explains the weight layout they need): an autobatching
scheduler pays for each node it groups, whatever its size. The inputs are
concatenated by a node of their own: DyNet 2.1's ``vanilla_lstm_gates_concat``
(a list of inputs) batches only its first two arguments when autobatched, and
so computes wrong gates from three inputs (tests/test_dynet.py keeps the evidence).

An item (of the stack or the buffer) and a tracker state are pairs (h, c)
of vector expressions: [H] for items, [D] for the tracker.
"""

from __future__ import annotations

from .library import dy
from .weights import Weights

Item = tuple[dy.Expression, dy.Expression]


class Tracker:
    """The tracker's LSTM cell over the parser state, and its transition head
    (docs/spec.md §3, §7), holding the DyNet parameters they use: built from
    the model's parameter collection (weights.py), not from sizes.

    For ONE sentence's expressions: each input is a vector ([H], state [D]),
    not the surface's [K, H] rows, because DyNet batches the K sentences
    itself when it evaluates the graph (docs/autobatching.md)."""

    def __init__(self, weights: Weights):
        self.kernel_input = weights["tracker.kernel_input"]  # [4D, 3H], gates i, f, o, g (weights.py)
        self.kernel_hidden = weights["tracker.kernel_hidden"]  # [4D, D]
        self.bias = weights["tracker.bias"]  # [4D], the forget block minus 1
        has_head = "tracker.transition.kernel" in weights  # a model with a head only
        self.transition_kernel = weights["tracker.transition.kernel"] if has_head else None  # [2, D]
        self.transition_bias = weights["tracker.transition.bias"] if has_head else None  # [2]

    def step(self, buffer_h: dy.Expression, top_h: dy.Expression, below_h: dy.Expression, state: Item) -> Item:
        """One tracker step (gate order i, f, g, o in the canonical weights): the
        parser's view [b, s1, s2] (each [H]) and the state (h_t, c_t) [D] -> the
        new state. Four nodes."""
        h, c = state
        view = dy.concatenate([buffer_h, top_h, below_h])
        gates = dy.vanilla_lstm_gates(view, h, self.kernel_input, self.kernel_hidden, self.bias)
        c = dy.vanilla_lstm_c(c, gates)
        return dy.vanilla_lstm_h(c, gates), c

    def transition_logits(self, h: dy.Expression) -> dy.Expression:
        """The transition head (docs/spec.md §7): h_t [D] -> t = (t_S, t_R) [2]."""
        return dy.affine_transform([self.transition_bias, self.transition_kernel, h])


class Reduce:
    """The TreeLSTM composition of two items, with the tracker's h as a third
    input (gates a, i, f1, f2, o), holding the DyNet parameters it uses: built
    from the model's parameter collection (weights.py), not from sizes.

    For ONE sentence's expressions: left and right are (h, c) vectors [H],
    not the surface's [K, H] rows, because DyNet batches the K compositions
    itself when it evaluates the graph (docs/autobatching.md)."""

    def __init__(self, weights: Weights):
        # The fused node's gates i, f1, o, a: its input is [left.h; h_t], its "hidden" input the right child.
        self.kernel_input = weights["reduce.kernel_input"]  # [4H, H + D]
        self.kernel_hidden = weights["reduce.kernel_hidden"]  # [4H, H]
        self.bias = weights["reduce.bias"]  # [4H], the f1 block minus 1
        # The second forget gate f2, an affine node of its own.
        self.f2_left_kernel = weights["reduce.f2.left.kernel"]  # [H, H]
        self.f2_right_kernel = weights["reduce.f2.right.kernel"]  # [H, H]
        self.f2_bias = weights["reduce.f2.bias"]  # [H]
        has_tracker = "reduce.f2.track.kernel" in weights
        self.f2_track_kernel = weights["reduce.f2.track.kernel"] if has_tracker else None  # [H, D]

    def compose(self, left: Item, right: Item, tracking: dy.Expression | None) -> Item:
        """Two items and the tracker's h_t [D] (None without a tracker) -> the composed item.

        The fused node computes i, f1, o and tanh(a), its "hidden" input being
        the right child: act(kernel_input [left.h; h_t] + kernel_hidden right.h
        + bias). The second forget gate has no slot there, so it is one affine
        node and a sigmoid.
        Then c = tanh(a) σ(i) + σ(f1) left.c + σ(f2) right.c and h = σ(o) tanh(c).
        Seven nodes, eight with a tracker.
        """
        (left_h, left_c), (right_h, right_c) = left, right
        inputs = left_h if tracking is None else dy.concatenate([left_h, tracking])
        gates = dy.vanilla_lstm_gates(inputs, right_h, self.kernel_input, self.kernel_hidden, self.bias)
        terms = [self.f2_bias, self.f2_left_kernel, left_h, self.f2_right_kernel, right_h]
        if tracking is not None:
            terms += [self.f2_track_kernel, tracking]
        f2 = dy.logistic(dy.affine_transform(terms))
        c = dy.vanilla_lstm_c(left_c, gates) + dy.cmult(f2, right_c)
        return dy.vanilla_lstm_h(c, gates), c
