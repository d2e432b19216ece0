"""SPINN on a host-made level schedule (shared/levels.py), one tf.while_loop.

The schedule turns the batch's trees into index arrays; the loop runs over
levels, gathers each level's children from the node table, runs the shared
Reduce (and Tracker) cells on the dense block and writes the block's rows
back at the level's place in the table. Gold parses only: a predicted or
sampled parse is decided inside the loop and cannot be scheduled ahead.
"""

from __future__ import annotations

import tensorflow as tf

from .model import SPINN


def _halves(item, H):
    return item[:, :H], item[:, H:]


class LevelSPINN(SPINN):
    """model.SPINN's cells and variables, run on a level schedule."""

    def encode_scheduled(self, leaves: tf.Tensor, sched: dict) -> tf.Tensor:
        """leaves <float>[S, N, 2H]; sched: shared.levels.uniform's arrays ->
        h of the roots <float>[S, H]."""
        H, D = self.hidden_dim, self.tracker_dim
        S, N = leaves.shape[0], leaves.shape[1]
        dtype = leaves.dtype
        base, W, n_rows = sched["base"], sched["width"], sched["n_rows"]
        L = int(sched["left"].shape[0])
        table = tf.concat([tf.reshape(leaves, [S * N, 2 * H]), tf.zeros([n_rows - S * N, 2 * H], dtype)], axis=0)
        names = ("left", "right") + (("active", "top", "below", "front", "reducing") if D > 0 else ())
        xs = [tf.convert_to_tensor(sched[k], tf.int32) for k in names]
        state = (tf.zeros([S + 1, D], dtype), tf.zeros([S + 1, D], dtype)) if D > 0 else ()
        block = tf.range(W, dtype=tf.int32)

        def body(l, table, state):
            x = [a[l] for a in xs]
            tracking = None
            if D > 0:
                left, right, active, top, below, front, reducing = x
                h, c = self.tracker.step(_halves(tf.gather(table, front), H)[0], _halves(tf.gather(table, top), H)[0],
                                         _halves(tf.gather(table, below), H)[0],
                                         (tf.gather(state[0], active), tf.gather(state[1], active)))
                # padding rows all write the spare row S; none of them is read
                state = (tf.tensor_scatter_nd_update(state[0], active[:, None], h),
                         tf.tensor_scatter_nd_update(state[1], active[:, None], c))
                tracking = tf.gather(h, reducing)
            else:
                left, right = x
            composed = tf.concat(self.reduce.compose(_halves(tf.gather(table, left), H),
                                                     _halves(tf.gather(table, right), H), tracking), axis=-1)
            rows = base + l * W + block
            table = tf.tensor_scatter_nd_update(table, rows[:, None], composed)
            return l + 1, table, state

        _, table, _ = tf.while_loop(lambda l, *_: l < L, body, (tf.constant(0), table, state))
        return _halves(tf.gather(table, tf.convert_to_tensor(sched["roots"], tf.int32)), H)[0]
