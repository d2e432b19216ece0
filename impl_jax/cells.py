"""The cells of the JAX SPINN (docs/spec.md §3, §7): the Tracker's LSTM and
Reduce's TreeLSTM, as Flax modules whose parameters keep the canonical names
(convert.py's mapping is a rename).

``Tracker.step`` and ``Reduce.compose`` hold the arithmetic on rows already
batched (docs/surface.md). masked.py's scan calls them once per step on every
row of the batch (the masks decide which rows keep the result); vmap.py calls
them on one sentence's rows; levels.py on the rows of one level. On the stacks
an item is one array ``[h; c]``, <float>[2H]; the cells take and return its
halves (h, c) (shift_reduce.halves splits an item).

``dtype`` is the parameters' dtype (Flax's layers inside take it as their
``param_dtype``).

Shapes: K rows (every sentence of the batch, S; no such axis under vmap), H
hidden, D tracker.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Dtype = Any


class Tracker(nn.Module):
    """The tracker LSTM: reads the buffer front and the two top stack items.

    Weights keep their canonical names (``tracker.kernel_input`` etc.), so the
    conversion is a rename. Gate order i, f, g, o. With ``transition_head``
    the tracker also owns the head of docs/spec.md §7, ``tracker.transition``
    (a Dense layer D -> 2: column 0 scores SHIFT, column 1 REDUCE).
    """

    hidden_dim: int  # H
    tracker_dim: int  # D > 0
    transition_head: bool = False
    dtype: Dtype = jnp.float32  # the parameters'

    def setup(self):
        H, D = self.hidden_dim, self.tracker_dim
        init = nn.initializers.lecun_normal()  # shapes only: real values come from the canonical dict
        self.kernel_input = self.param("kernel_input", init, (3 * H, 4 * D), self.dtype)
        self.kernel_hidden = self.param("kernel_hidden", init, (D, 4 * D), self.dtype)
        self.bias = self.param("bias", nn.initializers.zeros, (4 * D,), self.dtype)
        if self.transition_head:
            self.transition = nn.Dense(2, param_dtype=self.dtype)

    def step(self, buffer_h, top_h, below_h, state):
        """One LSTM step on rows already batched: buffer_h, top_h, below_h
        <float>[K, H]; state (h, c) <float>[K, D] -> the new (h, c) <float>[K, D]."""
        h, c = state
        z = (jnp.concatenate([buffer_h, top_h, below_h], axis=-1) @ self.kernel_input + h @ self.kernel_hidden
             + self.bias)
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, c

    def transition_logits(self, h):
        """The head: tracker state h <float>[K, D] -> t = (t_S, t_R) <float>[K, 2]."""
        return self.transition(h)


class Reduce(nn.Module):
    """TreeLSTM composition of two stack items, with the tracker's h as a
    third input (gate order a, i, f1, f2, o)."""

    hidden_dim: int  # H
    tracker_dim: int  # D (0: no tracking input)
    dtype: Dtype = jnp.float32  # the parameters'

    def setup(self):
        H = self.hidden_dim
        self.left = nn.Dense(5 * H, param_dtype=self.dtype)
        self.right = nn.Dense(5 * H, use_bias=False, param_dtype=self.dtype)
        if self.tracker_dim > 0:
            self.track = nn.Dense(5 * H, use_bias=False, param_dtype=self.dtype)

    def compose(self, left, right, tracking=None):
        """The TreeLSTM on rows already batched: left and right (h, c)
        <float>[K, H] each, tracking <float>[K, D] or None -> (h, c) <float>[K, H]."""
        (left_h, left_c), (right_h, right_c) = left, right
        z = self.left(left_h) + self.right(right_h)
        if tracking is not None:
            z = z + self.track(tracking)
        a, i, f1, f2, o = jnp.split(z, 5, axis=-1)
        c = (jnp.tanh(a) * jax.nn.sigmoid(i) + jax.nn.sigmoid(f1) * left_c
             + jax.nn.sigmoid(f2) * right_c)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, c
