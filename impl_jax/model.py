"""SPINN as Flax linen modules, run as one fixed-shape loop (docs/spec.md §3).

Why linen (and not nnx): a linen module holds no state. Its weights are a
plain nested dict passed to ``model.apply``, so the canonical ``.npz`` converts
into exactly the pytree that ``jax.jit``, ``jax.grad`` and optax work on, and
the compiled training step is a pure function of (weights, optimizer state,
batch). (nnx keeps weights inside mutable objects and
needs ``nnx.split``/``nnx.merge`` to get that same pytree back.)

The PyTorch implementation walks each tree with a Python list as the stack.
Here nothing may depend on a value at trace time: the batch is a set of
fixed-size arrays, every step does the same work for every sentence, and
what an example's transition *means* is decided by masks and pointers:

    tokens       <int32>[B, N]   (premise and hypothesis arrive as one [2B] batch)
    transitions  <int32>[B, T]   PAD / SHIFT / REDUCE
    leaves       <float>[B, N, 2H]   [h; c] of every word: the buffer
    sp, bp       <int32>[B]      stack pointer (items on the stack), buffer pointer

Two layouts of the stack (``layout=``):

* ``"padded"``: ``stack <float>[B, S, 2H]``, S = N + 1. Item k of sentence b
  sits in ``stack[b, k]``; a step writes one row per sentence with a scatter.
* ``"thin"`` (Bowman et al. 2016): ``thin <float>[N + T, B, 2H]`` holds every
  item ever made: rows 0..N-1 are the leaves (so the buffer lives there too),
  and step t writes its REDUCE result to row N + t, for all sentences at once.
  The stack is ``pointers <int32>[B, S]``: row numbers into ``thin``. SHIFT
  pushes a number, no vector is copied; nothing is ever overwritten.

Both are differentiated by ``jax.grad`` through ``lax.scan`` without saving
the whole stack at every step: the per-step residuals are the few [B, H]
vectors a step reads, plus integer indices (tests/test_jax.py measures it). Both
give the same numbers; on a 2-core CPU at B=128, E=H=300, they encode equally
fast and the thin stack trains ~10-15% faster (its write is one slab, and
its backward pass copies nothing), so it is the default.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT

LAYOUTS = ("thin", "padded")
DEFAULT_LAYOUT = "thin"  # the faster of the two to train (module docstring)

Dtype = Any


def _halves(item: jax.Array, hidden_dim: int) -> tuple[jax.Array, jax.Array]:
    """Split stack items <float>[..., 2H] into h and c, <float>[..., H] each."""
    return item[..., :hidden_dim], item[..., hidden_dim:]


class Tracker(nn.Module):
    """The tracker LSTM: reads the buffer front and the two top stack items.

    Weights keep their canonical names (``tracker.kernel_input`` etc.), so the
    conversion is a rename. Gate order i, f, g, o.
    """

    hidden_dim: int  # H
    tracker_dim: int  # D > 0
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, buffer_h, top_h, below_h, state):
        """buffer_h, top_h, below_h <float>[B, H]; state (h, c) <float>[B, D] -> new (h, c)."""
        H, D = self.hidden_dim, self.tracker_dim
        init = nn.initializers.lecun_normal()  # shapes only: real values come from the canonical dict
        kernel_input = self.param("kernel_input", init, (3 * H, 4 * D), self.param_dtype)
        kernel_hidden = self.param("kernel_hidden", init, (D, 4 * D), self.param_dtype)
        bias = self.param("bias", nn.initializers.zeros, (4 * D,), self.param_dtype)
        h, c = state
        z = jnp.concatenate([buffer_h, top_h, below_h], axis=-1) @ kernel_input + h @ kernel_hidden + bias
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, c


class Reduce(nn.Module):
    """TreeLSTM composition of the two top stack items (gate order a, i, f1, f2, o)."""

    hidden_dim: int  # H
    tracker_dim: int  # D (0: no tracking input)
    param_dtype: Dtype = jnp.float32

    def setup(self):
        H = self.hidden_dim
        self.left = nn.Dense(5 * H, param_dtype=self.param_dtype)
        self.right = nn.Dense(5 * H, use_bias=False, param_dtype=self.param_dtype)
        if self.tracker_dim > 0:
            self.track = nn.Dense(5 * H, use_bias=False, param_dtype=self.param_dtype)

    def __call__(self, left, right, tracking=None):
        """left, right <float>[B, 2H] items; tracking <float>[B, D] or None -> <float>[B, 2H]."""
        left_h, left_c = _halves(left, self.hidden_dim)
        right_h, right_c = _halves(right, self.hidden_dim)
        z = self.left(left_h) + self.right(right_h)
        if tracking is not None:
            z = z + self.track(tracking)
        a, i, f1, f2, o = jnp.split(z, 5, axis=-1)
        c = (jnp.tanh(a) * jax.nn.sigmoid(i) + jax.nn.sigmoid(f1) * left_c
             + jax.nn.sigmoid(f2) * right_c)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return jnp.concatenate([h, c], axis=-1)


class SPINN(nn.Module):
    """The sentence encoder: tokens and transitions -> h of the root, <float>[B, H]."""

    config: ModelConfig
    layout: str = DEFAULT_LAYOUT  # "thin" or "padded"
    dropout_rate: float = 0.0  # on the projected leaves, training only
    param_dtype: Dtype = jnp.float32
    unroll: int = 1  # lax.scan unroll factor (a speed knob; the numbers do not change)

    def setup(self):
        c = self.config
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown stack layout {self.layout!r}; choose from {LAYOUTS}")
        self.embed = nn.Embed(c.vocab_size, c.embed_dim, param_dtype=self.param_dtype)
        self.projection = nn.Dense(2 * c.hidden_dim, param_dtype=self.param_dtype)
        self.leaf_dropout = nn.Dropout(self.dropout_rate)
        if c.tracker_dim > 0:
            self.tracker = Tracker(c.hidden_dim, c.tracker_dim, self.param_dtype)
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.param_dtype)

    def __call__(self, tokens, transitions, train: bool = False):
        """tokens <int32>[B, N], transitions <int32>[B, T] -> encodings <float>[B, H]."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        B, N = tokens.shape
        T = transitions.shape[1]
        S = N + 1  # at most N items, plus one free slot above the top (see _step)

        leaves = self.projection(self.embed(tokens))  # [B, N, 2H]: [h; c] of every word
        leaves = self.leaf_dropout(leaves, deterministic=not train)
        dtype = leaves.dtype
        # The buffer holds as many leaves as there are SHIFTs (tokens past that are padding).
        n_leaves = jnp.sum(transitions == SHIFT, axis=1, dtype=jnp.int32)  # [B]

        zero_index = jnp.zeros((B,), jnp.int32)
        tracker_state = (jnp.zeros((B, D), dtype), jnp.zeros((B, D), dtype)) if D > 0 else ()
        if self.layout == "padded":
            stack = jnp.zeros((B, S, 2 * H), dtype)
            pointers = ()  # the padded stack holds the vectors themselves
        else:
            # thin stack: the leaves first (rows 0..N-1), then one row per step.
            stack = jnp.concatenate([jnp.swapaxes(leaves, 0, 1), jnp.zeros((T, B, 2 * H), dtype)], axis=0)
            pointers = jnp.zeros((B, S), jnp.int32)
        carry = (stack, pointers, zero_index, zero_index, tracker_state)

        # ---- the loop -------------------------------------------------------
        # lax.scan runs `_step` T times inside ONE compiled loop: the body is
        # traced once, with abstract shapes, so it cannot look at a value to
        # decide what to do. nn.scan is lax.scan lifted over Flax variables:
        # variable_broadcast="params" hands every step the same weights (and
        # makes their gradients sum over steps); xs are the transitions
        # [T, B] (axis 0 is scanned) and the step number t; the leaves and
        # leaf counts are broadcast (the same at every step).
        scan = nn.scan(
            lambda module, carry, xs, leaves, n_leaves: module._step(carry, xs, leaves, n_leaves),
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=(0, nn.broadcast, nn.broadcast),
            length=T,
            unroll=self.unroll,
            # The constancy check traces the body once more; it is only needed
            # when init() creates the weights inside the loop.
            check_constancy_invariants=self.is_initializing(),
        )
        xs = (jnp.swapaxes(transitions, 0, 1), jnp.arange(T, dtype=jnp.int32))
        (stack, pointers, _, _, _), _ = scan(self, carry, xs, leaves, n_leaves)

        # After a valid sequence exactly one item is left: stack slot 0.
        rows = jnp.arange(B, dtype=jnp.int32)
        if self.layout == "padded":
            root = stack[:, 0]
        else:
            root = stack[pointers[:, 0], rows]
        return _halves(root, H)[0]

    def _step(self, carry, xs, leaves, n_leaves):
        """One transition for every sentence of the batch.

        carry: stack (layout's array), pointers (thin: <int32>[B, S]),
               sp, bp <int32>[B], tracker state; xs: op <int32>[B], t <int32>[].
        """
        H = self.config.hidden_dim
        stack, pointers, sp, bp, tracker_state = carry
        op, t = xs
        N = leaves.shape[1]
        rows = jnp.arange(op.shape[0], dtype=jnp.int32)

        # ---- masks: the "if op == ..." of the Python version, one bool per sentence.
        # Every sentence computes a tracker step AND a composition; the masks
        # decide which results are kept. PAD keeps nothing: stack, buffer and
        # tracker stay as they were, so padding cannot change a result.
        is_shift = op == SHIFT
        is_reduce = op == REDUCE
        active = op != PAD

        # ---- reads, by pointer. sp counts the items on the stack: the top is
        # slot sp-1, the item below it slot sp-2; bp is the buffer front.
        # Indices are clipped into range and absent items masked to zeros.
        def slot(k):  # the item k places from the top, <float>[B, 2H]
            index = jnp.maximum(sp - k, 0)
            if self.layout == "padded":
                item = stack[rows, index]
            else:  # thin: the stack holds row numbers; follow the back-pointer
                item = stack[pointers[rows, index], rows]
            return jnp.where((sp >= k)[:, None], item, 0)

        top, below = slot(1), slot(2)
        front_index = jnp.minimum(bp, N - 1)
        if self.layout == "padded":
            front = leaves[rows, front_index]
        else:
            front = stack[front_index, rows]  # the leaves are rows 0..N-1 of the thin stack
        front = jnp.where((bp < n_leaves)[:, None], front, 0)

        # ---- tracker (kept only where the step is not PAD)
        tracking = None
        if self.config.tracker_dim > 0:
            h_t, c_t = self.tracker(_halves(front, H)[0], _halves(top, H)[0], _halves(below, H)[0],
                                    tracker_state)
            keep = active[:, None]
            tracker_state = (jnp.where(keep, h_t, tracker_state[0]), jnp.where(keep, c_t, tracker_state[1]))
            tracking = tracker_state[0]

        # ---- compose the two top items (used only where the step is REDUCE)
        composed = self.reduce(below, top, tracking)  # [B, 2H]

        # ---- write, and move the pointers. SHIFT writes at slot sp, REDUCE
        # pops two and writes at slot sp-2; PAD writes (a value nobody reads)
        # at slot sp, the free slot above the top, so no branch is needed.
        write_slot = sp - 2 * is_reduce.astype(jnp.int32)
        if self.layout == "padded":
            item = jnp.where(is_shift[:, None], front, composed)
            # One row per sentence; unique_indices tells JAX that no two
            # updates collide, so the gradient of the scatter needs only the
            # indices (a possibly-colliding scatter saves stack-sized masks).
            stack = stack.at[rows, write_slot].set(item, unique_indices=True)
        else:
            # Row N + t of the thin stack is this step's composition, for all
            # sentences at once (one contiguous slab). The row is still zero,
            # so adding is writing; but the gradient of an add passes the
            # cotangent through, while that of a set must zero the row, and
            # that made XLA copy the whole cotangent stack every step (twice).
            new_row = N + t
            stack = stack.at[new_row].add(composed)
            # Push a back-pointer: the leaf's row for SHIFT, the new row for REDUCE.
            target = jnp.where(is_shift, bp, new_row)
            pointers = pointers.at[rows, write_slot].set(target, unique_indices=True)
        sp = sp + is_shift.astype(jnp.int32) - is_reduce.astype(jnp.int32)
        bp = bp + is_shift.astype(jnp.int32)
        return (stack, pointers, sp, bp, tracker_state), None


class SNLIClassifier(nn.Module):
    """Premise and hypothesis through one SPINN, then an MLP over [p, q, p-q, p*q]."""

    config: ModelConfig
    layout: str = DEFAULT_LAYOUT
    dropout_rate: float = 0.0  # leaves and MLP inputs, training only
    param_dtype: Dtype = jnp.float32
    unroll: int = 1

    def setup(self):
        c = self.config
        self.spinn = SPINN(c, self.layout, self.dropout_rate, self.param_dtype, self.unroll)
        self.mlp = [nn.Dense(c.mlp_dim, param_dtype=self.param_dtype) for _ in range(c.mlp_layers)]
        self.output = nn.Dense(3, param_dtype=self.param_dtype)
        self.mlp_dropout = nn.Dropout(self.dropout_rate)

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
                 train: bool = False):
        """<int32>[B, N] tokens and [B, T] transitions of both sides ->
        (premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3])."""
        B = premise_tokens.shape[0]
        # One encoder pass over 2B sentences: the scan runs T steps once, not twice.
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)
        encodings = self.spinn(tokens, transitions, train)
        premise, hypothesis = encodings[:B], encodings[B:]
        x = jnp.concatenate([premise, hypothesis, premise - hypothesis, premise * hypothesis], axis=-1)
        # Dropout on the input of every classifier layer, as in the 2017 code.
        for layer in self.mlp:
            x = nn.relu(layer(self.mlp_dropout(x, deterministic=not train)))
        logits = self.output(self.mlp_dropout(x, deterministic=not train))
        return premise, hypothesis, logits
