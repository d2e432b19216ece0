"""SPINN on a host-made level schedule (shared/levels.py), one jitted loop.

The schedule turns the batch's trees into index arrays; the program is a
``lax.scan`` over levels that gathers each level's children from the node
table, runs the shared Reduce (and Tracker) cells on the dense block and
writes the results as one contiguous block. Gold parses only: a predicted or
sampled parse is decided inside the loop and cannot be scheduled ahead.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from shared.params import ModelConfig

from .cells import Dtype, Reduce, Tracker, _halves


class LevelSPINN(nn.Module):
    """The encoder with model.SPINN's parameter names (same weights pytree)."""

    config: ModelConfig
    param_dtype: Dtype = jnp.float32

    def setup(self):
        c = self.config
        if c.tracker_dim > 0:
            self.tracker = Tracker(c.hidden_dim, c.tracker_dim, self.param_dtype, c.transition_head)
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.param_dtype)

    def encode_scheduled(self, leaves, sched):
        """leaves <float>[S, N, 2H]; sched: shared.levels.uniform's arrays
        (jnp arrays; ``base``/``width``/``n_rows`` Python ints) -> h of the roots <float>[S, H]."""
        return self.encode_segments(leaves, [sched], sched["n_rows"], sched["roots"])

    def encode_segments(self, leaves, segments, n_rows: int, roots):
        """leaves <float>[S, N, 2H]; segments: shared.levels.segments' runs
        (or one uniform run), one lax.scan each; n_rows the table's rows;
        roots <int32>[S] -> h of the roots <float>[S, H]."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        dtype = leaves.dtype
        table = jnp.concatenate([leaves.reshape(S * N, 2 * H), jnp.zeros((n_rows - S * N, 2 * H), dtype)], axis=0)
        state = (jnp.zeros((S + 1, D), dtype), jnp.zeros((S + 1, D), dtype)) if D > 0 else ()  # row S: padding's
        for seg in segments:
            table, state = self._run(table, state, seg)
        return _halves(table[roots], H)[0]

    def _run(self, table, state, seg):
        H, D = self.config.hidden_dim, self.config.tracker_dim
        base, W = seg["base"], seg["width"]
        names = ("left", "right") + (("active", "top", "below", "front", "reducing") if D > 0 else ())
        xs = tuple(seg[k] for k in names)

        def level(module, carry, x):
            table, state, l = carry
            tracking = None
            if D > 0:
                left, right, active, top, below, front, reducing = x
                h0, c0 = state[0][active], state[1][active]
                h, c = module.tracker.step(_halves(table[front], H)[0], _halves(table[top], H)[0],
                                           _halves(table[below], H)[0], (h0, c0))
                # padding rows all write the spare row S; any of them may win, none is read
                state = (state[0].at[active].set(h), state[1].at[active].set(c))
                tracking = jnp.take(h, reducing, axis=0)
            else:
                left, right = x
            if W > 0:
                lh, lc = _halves(jnp.take(table, left, axis=0), H)
                rh, rc = _halves(jnp.take(table, right, axis=0), H)
                composed = jnp.concatenate(module.reduce.compose((lh, lc), (rh, rc), tracking), axis=-1)
                table = jax.lax.dynamic_update_slice(table, composed, (base + l * W, jnp.int32(0)))
            return (table, state, l + 1), None

        scan = nn.scan(level, variable_broadcast="params", split_rngs={"params": False}, length=xs[0].shape[0])
        (table, state, _), _ = scan(self, (table, state, jnp.int32(0)), xs)
        return table, state
