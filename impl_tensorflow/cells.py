"""The cells of SPINN (docs/spec.md §3, §7): the Tracker's LSTM and Reduce's
TreeLSTM, as ``tf.Module``s whose variables carry the canonical names' shapes
(convert.py maps them).

masked.py's while loop calls them once per step on all S rows at once (the
masks decide which rows keep the result); lists.py calls them on the rows of
the sentences that act; levels.py on the rows of a level.

The weights are taken through layers.read: a loop built inside
``layers.read_once(...)`` of the cells' variables reads each once, before it
starts (a variable read inside the loop body is a new tensor at every step,
which the backward pass keeps per step); elsewhere they are the variables.

Shapes: K rows (S sentences in masked.py), H hidden, D tracker. An item is
(h, c), <float>[K, H] each.
"""

from __future__ import annotations

import tensorflow as tf

from .layers import Linear, read


class Tracker(tf.Module):
    """An LSTM cell that reads the parser state: h of the buffer front and of
    the top two stack items (docs/spec.md §3, gate order i, f, g, o).

    ``kernel`` is ``[tracker.kernel_input; tracker.kernel_hidden]`` stacked,
    <float>[3H + D, 4D], so a step is one matmul of ``[b, s1, s2, h]``.
    ``transition`` is the transition head (docs/spec.md §7), present when the
    config asks for it: ``t = h @ kernel + bias``, <float>[K, 2] = (t_S, t_R).
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, transition_head: bool = False,
                 dtype: tf.DType = tf.float32, name: str = "tracker"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        # Zeros only give the variables their shapes: the values come from the
        # canonical parameters (convert.from_canonical), never from here.
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([3 * H + D, 4 * D], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([4 * D], dtype), name="bias")
            # Column 0 scores SHIFT, column 1 REDUCE (shared.parsing.SHIFT_COLUMN, REDUCE_COLUMN).
            self.transition = Linear(D, 2, dtype, name="transition") if transition_head else None

    def step(self, buffer_h, top_h, below_h, state):
        """buffer_h, top_h, below_h <float>[K, H]; state (h, c) <float>[K, D] -> the new (h, c)."""
        kernel, bias = read(self.kernel, self.bias)
        h, c = state
        z = tf.matmul(tf.concat([buffer_h, top_h, below_h, h], axis=1), kernel) + bias
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, c

    def transition_logits(self, h) -> tf.Tensor:
        """h <float>[K, D] -> t = (t_S, t_R) <float>[K, 2]."""
        kernel, bias = read(self.transition.kernel, self.transition.bias)
        return tf.matmul(h, kernel) + bias


class Reduce(tf.Module):
    """The TreeLSTM composition of two stack items, with the tracker's h as a
    third input (docs/spec.md §3, gate order a, i, f1, f2, o).

    ``kernel`` is ``[reduce.left.kernel; reduce.right.kernel; reduce.track.kernel]``
    stacked, <float>[2H + D, 5H]; ``bias`` is ``reduce.left.bias``.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: tf.DType = tf.float32, name: str = "reduce"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([2 * H + D, 5 * H], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([5 * H], dtype), name="bias")

    def compose(self, left, right, tracking):
        """left, right (h, c) <float>[K, H] each; tracking <float>[K, D] or None -> the new (h, c)."""
        kernel, bias = read(self.kernel, self.bias)
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
