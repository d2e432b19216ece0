"""The cells of the static-graph SPINN (docs/spec.md §3, §7): the Tracker's
LSTM and Reduce's TreeLSTM, as ``tf.Module``s whose variables carry the
canonical names' shapes (convert.py maps them).

model.py's while loop calls them once per step on all S rows at once (the
masks decide which rows keep the result); eager.py calls them on the rows of
the sentences that act.

Shapes: K rows (S sentences in model.py), H hidden, D tracker. An item is
(h, c), <float>[K, H] each.
"""

from __future__ import annotations

import tensorflow as tf


class _Linear(tf.Module):
    """``x @ kernel + bias`` on the last axis; kernel <float>[in, out] as in the
    canonical file. (What the other frameworks take from their library.)"""

    def __init__(self, in_dim: int, out_dim: int, dtype: tf.DType, name: str):
        super().__init__(name=name)
        # Zeros only give the variables their shapes: the values come from the
        # canonical parameters (convert.from_canonical), never from here.
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([in_dim, out_dim], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([out_dim], dtype), name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.tensordot(x, self.kernel, axes=1) + self.bias


def _read(*variables: tf.Variable) -> tuple[tf.Tensor, ...]:
    """The variables' values as tensors, for a loop to read once, before it starts."""
    return tuple(v.read_value() for v in variables)


# The weights of step, compose and transition_logits: the cells' variables by
# default, or tensors read once before model.py's tf.while_loop (``weights``,
# from _weights / _head_weights). A variable read inside the loop body is a new
# tensor at every step, and the backward pass keeps one per step (under XLA, a
# copy per step); so the loop passes its weights in as arguments.


class Tracker(tf.Module):
    """An LSTM cell that reads the parser state: h of the buffer front and of
    the top two stack items (docs/spec.md §3, gate order i, f, g, o).

    ``kernel`` is ``[tracker.kernel_input; tracker.kernel_hidden]`` stacked,
    <float>[3H + D, 4D], so a step is one matmul of ``[b, s1, s2, h]``.
    ``transition`` is the transition head (docs/spec.md §7), present when the
    config asks for it: ``t = h @ kernel + bias``, <float>[K, 2] = (t_S, t_R).
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: tf.DType, transition_head: bool = False,
                 name: str = "tracker"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([3 * H + D, 4 * D], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([4 * D], dtype), name="bias")
            # Column 0 scores SHIFT, column 1 REDUCE (shared.parsing.SHIFT_COLUMN, REDUCE_COLUMN).
            self.transition = _Linear(D, 2, dtype, name="transition") if transition_head else None

    def _weights(self) -> tuple[tf.Tensor, tf.Tensor]:
        """step's (kernel, bias) as tensors, read once before a loop."""
        return _read(self.kernel, self.bias)

    def _head_weights(self) -> tuple[tf.Tensor, tf.Tensor]:
        """transition_logits' (kernel, bias) as tensors, read once before a loop."""
        return _read(self.transition.kernel, self.transition.bias)

    def step(self, buffer_h, top_h, below_h, state, weights=None):
        """buffer_h, top_h, below_h <float>[K, H]; state (h, c) <float>[K, D] -> the new (h, c).
        ``weights``: (kernel, bias) from _weights(), else the variables (see above)."""
        kernel, bias = weights if weights is not None else (self.kernel, self.bias)
        h, c = state
        z = tf.matmul(tf.concat([buffer_h, top_h, below_h, h], axis=1), kernel) + bias
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, c

    def transition_logits(self, h, weights=None) -> tf.Tensor:
        """h <float>[K, D] -> t = (t_S, t_R) <float>[K, 2].
        ``weights``: (kernel, bias) from _head_weights(), else the head's variables (see above)."""
        kernel, bias = weights if weights is not None else (self.transition.kernel, self.transition.bias)
        return tf.matmul(h, kernel) + bias


class Reduce(tf.Module):
    """The TreeLSTM composition of two stack items, with the tracker's h as a
    third input (docs/spec.md §3, gate order a, i, f1, f2, o).

    ``kernel`` is ``[reduce.left.kernel; reduce.right.kernel; reduce.track.kernel]``
    stacked, <float>[2H + D, 5H]; ``bias`` is ``reduce.left.bias``.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: tf.DType, name: str = "reduce"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([2 * H + D, 5 * H], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([5 * H], dtype), name="bias")

    def _weights(self) -> tuple[tf.Tensor, tf.Tensor]:
        """compose's (kernel, bias) as tensors, read once before a loop."""
        return _read(self.kernel, self.bias)

    def compose(self, left, right, tracking=None, weights=None):
        """left, right (h, c) <float>[K, H] each; tracking <float>[K, D] or None -> the new (h, c).
        ``weights``: (kernel, bias) from _weights(), else the variables (see above)."""
        kernel, bias = weights if weights is not None else (self.kernel, self.bias)
        (left_h, left_c), (right_h, right_c) = left, right
        inputs = [left_h, right_h] if tracking is None else [left_h, right_h, tracking]
        z = tf.matmul(tf.concat(inputs, axis=1), kernel) + bias
        H = left_c.shape[1]
        a, gates, o = tf.split(z, [H, 3 * H, H], axis=1)  # gates: i, f1, f2 (contiguous in the order a, i, f1, f2, o)
        # c = tanh(a)·σ(i) + σ(f1)·left.c + σ(f2)·right.c, as one product and a
        # sum over the three terms. Not as `x + y + z`: Grappler rewrites a
        # chain of adds into one AddN, and TensorFlow's CPU AddN moves whichever
        # input buffer it can reuse to the front, so the rounding of a
        # three-term sum would change from run to run (two terms add the same
        # either way; reduce_sum has a fixed order).
        terms = tf.sigmoid(gates) * tf.concat([tf.tanh(a), left_c, right_c], axis=1)  # [K, 3H]
        c = tf.reduce_sum(tf.reshape(terms, [-1, 3, H]), axis=1)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, c
