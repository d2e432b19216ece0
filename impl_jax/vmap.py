"""SPINN written for ONE sentence and batched by ``jax.vmap`` (docs/spec.md §3, §7).

masked.py batches by hand: every array carries a leading axis of S
sentences, reads go through ``rows = arange(S)`` index arrays, and every
mask is broadcast with ``[:, None]``. Here the model code has no batch axis at all. One sentence has

    leaves       <float>[N, 2H]      transitions  <int32>[T]
    stack        <float>[N + T, 2H]  its thin stack: rows 0..N-1 the leaves, row N + t step t's composition
    pointers     <int32>[N + 1]      the stack proper: row numbers into ``stack``
    sp, bp       <int32>[]           stack pointer (items on the stack), buffer pointer
    tracker      (h, c) <float>[D] each

and its steps are one ``lax.scan`` over its own T transitions. ``nn.vmap``
(``jax.vmap`` lifted over Flax variables, as ``nn.scan`` lifts ``lax.scan``)
then maps that function over the S sentences of a batch (2B for a pair
batch): JAX adds the sentence axis to every array, turns each scalar branch
(``jnp.where(sp >= k, ...)``) into a per-sentence select, and each ``x[i]``
with a per-sentence i into a gather. The weights are not mapped (``variable_axes={"params": None}``): every
sentence reads the same ones, and their gradients sum over the batch.

The transformation cannot make the scan shorter than its longest sentence,
nor skip a composition: a sentence's ``op`` is data, so under vmap every
sentence computes a tracker step and a composition at every step, exactly as
masked.py's masks do. What vmap saves is writing the batch by hand;
``bench explain --framework jax-vmap`` compares the two programs' sizes.

The cells (Tracker, Reduce, cells.py) and the decision rule of docs/spec.md
§7 (head.decide) are masked.py's, under the same names, so the
weights are the same pytree and the canonical parameter file (convert.py)
is the same; only the loop is rewritten. classifier.py's SNLIClassifier
runs it (``encoder=SPINN``): the leaves are embedded, projected and dropped
out for the whole batch before the map, vmap maps over them, and both
encoders see the same leaves, dropout masks included.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Dtype, Reduce, Tracker
from .head import decide
from .shift_reduce import DEFAULT_LAYOUT, count_leaves, halves


def _vmap(fn):
    """``nn.vmap`` over the sentence axis of every array argument: the
    weights are shared (not mapped). Nothing inside draws random numbers (the
    leaves arrive dropped out), so no rng is split."""
    return nn.vmap(fn, variable_axes={"params": None}, split_rngs={"params": False}, in_axes=0, out_axes=0)


class SPINN(nn.Module):
    """The sentence encoder with masked.py's submodules and weights, its loop
    written for one sentence; ``encode`` and ``parse`` map it over a batch."""

    config: ModelConfig
    # The classifier's encoder fields (classifier.py): the stack is this module's own thin one (the runner
    # refuses another layout), and the loop runs every step, with no tail to skip.
    layout: str = DEFAULT_LAYOUT
    dtype: Dtype = jnp.float32  # the parameters'
    unroll: int = 1  # lax.scan unroll factor (a speed knob; the numbers do not change)
    skip_tail: bool = True

    def setup(self):
        c = self.config
        if c.tracker_dim > 0:
            self.tracker = Tracker(c.hidden_dim, c.tracker_dim, c.transition_head, self.dtype)
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.dtype)

    def encode(self, leaves, transitions):
        """leaves <float>[S, N, 2H], transitions <int32>[S, T] -> encodings <float>[S, H].
        Gold mode, without the head, like masked.py's SPINN.encode."""
        encode = _vmap(lambda module, leaves, transitions: module._run_sentence(leaves, transitions))
        return encode(self, leaves, transitions)["encodings"]

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None) -> SentenceParses:
        """masked.py's SPINN.parse (same arguments, same SentenceParses of [S, ...] arrays), by vmap."""
        # `mode` is a Python value: closed over, so vmap maps only the arrays.
        parse = _vmap(lambda module, leaves, transitions, uniforms: module._run_sentence(
            leaves, transitions, mode, uniforms, head=True))
        return SentenceParses(**parse(self, leaves, transitions, uniforms))  # uniforms None maps to None

    # ---- one sentence ---------------------------------------------------------

    def _run_sentence(self, leaves, transitions, mode: str = "gold", uniforms=None, head: bool = False) -> dict:
        """ONE sentence: leaves <float>[N, 2H], transitions <int32>[T] (followed in
        gold mode; otherwise only their number of SHIFTs, n, is used), uniforms
        <float>[T] in sampled mode. Returns encodings <float>[H], and with
        ``head``: transitions <int32>[T] (followed), transition_logits
        <float>[T, 2], logprob and entropy <float>[] (sampled mode, else 0)."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        N, T = leaves.shape[0], transitions.shape[0]
        n_leaves = count_leaves(transitions)  # <int32>[]: its words
        dtype = leaves.dtype
        tracker_state = (jnp.zeros((D,), dtype), jnp.zeros((D,), dtype)) if D > 0 else ()
        stack = jnp.concatenate([leaves, jnp.zeros((T, 2 * H), dtype)], axis=0)  # [N + T, 2H]
        pointers = jnp.zeros((N + 1,), jnp.int32)  # at most N items, and a free slot above the top
        zero = jnp.zeros((), jnp.int32)
        carry = (stack, pointers, zero, zero, tracker_state)

        # ---- the loop: this sentence's own T steps. nn.scan is lax.scan
        # lifted over Flax variables, as in masked.py; vmap turns the loop of
        # one sentence into one loop over all of them, the carry gaining the
        # batch axis (the step number t, the same for every sentence, stays a scalar).
        scan = nn.scan(
            lambda module, carry, xs, n_leaves: module._sentence_step(carry, xs, n_leaves, N, mode, head),
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=(0, nn.broadcast),
            length=T,
            unroll=self.unroll,
            check_constancy_invariants=self.is_initializing(),
        )
        xs = (transitions if mode == "gold" else None, jnp.arange(T, dtype=jnp.int32),
              uniforms if mode == "sampled" else None)
        (stack, pointers, _, _, _), ys = scan(self, carry, xs, n_leaves)
        out = {"encodings": halves(stack[pointers[0]], H)[0]}  # the one item left, in slot 0
        if head:
            zero_sum = jnp.zeros((), dtype)
            out.update(transitions=transitions.astype(jnp.int32) if mode == "gold" else ys["transitions"],
                       transition_logits=ys["logits"],
                       logprob=jnp.sum(ys["logprob"]) if mode == "sampled" else zero_sum,
                       entropy=jnp.sum(ys["entropy"]) if mode == "sampled" else zero_sum)
        return out

    def _sentence_step(self, carry, xs, n_leaves, N: int, mode: str, head: bool):
        """One transition of one sentence. carry: stack <float>[N + T, 2H],
        pointers <int32>[N + 1], sp, bp <int32>[], tracker (h, c) <float>[D];
        xs: op <int32>[] (None when decided), t <int32>[], u <float>[] (sampled)."""
        H = self.config.hidden_dim
        stack, pointers, sp, bp, tracker_state = carry
        op, t = xs[0], xs[1]

        # ---- what the step does: three booleans. Written for one sentence they
        # read like the `if op == ...` of define-by-run code; under vmap each
        # becomes a mask over the batch, the masks masked.py writes by hand.
        if mode == "gold":
            is_shift, is_reduce, active = op == SHIFT, op == REDUCE, op != PAD

        # ---- reads: no `rows` index array, no [:, None]; an absent item is zeros.
        def item(k):  # the item k places from the top of the stack, <float>[2H]
            return jnp.where(sp >= k, stack[pointers[jnp.maximum(sp - k, 0)]], 0)

        top, below = item(1), item(2)
        can_shift = bp < n_leaves  # the buffer is not empty
        front = jnp.where(can_shift, stack[jnp.minimum(bp, N - 1)], 0)  # the leaves are rows 0..N-1
        if mode != "gold":
            can_reduce = sp >= 2
            active = can_shift | can_reduce  # finished (PAD from now on) when neither is possible

        # ---- tracker: cells.py's Tracker on [H] vectors, kept unless the step is PAD.
        tracking = None
        if self.config.tracker_dim > 0:
            h_t, c_t = self.tracker.step(halves(front, H)[0], halves(top, H)[0], halves(below, H)[0],
                                         tracker_state)
            tracker_state = (jnp.where(active, h_t, tracker_state[0]), jnp.where(active, c_t, tracker_state[1]))
            tracking = tracker_state[0]

        ys = None
        if head:  # the transition head (docs/spec.md §7) reads the state just written
            logits = self.tracker.transition_logits(tracking)  # [2] = (t_S, t_R)
            ys = {"logits": jnp.where(active, logits, 0)}
            if mode != "gold":
                # The decision: masked.py's rule, here on scalars; vmap makes it
                # a mask per sentence, and the step below is the gold step.
                is_shift, is_reduce, logprob, entropy = decide(logits, xs[2], can_shift, can_reduce, mode)
                ys["transitions"] = jnp.where(is_reduce, REDUCE, jnp.where(is_shift, SHIFT, PAD)).astype(jnp.int32)
                if mode == "sampled":
                    ys["logprob"], ys["entropy"] = logprob, entropy

        # ---- compose (kept only if the step REDUCEs: only then does a pointer
        # reach row N + t). Adding into the zero row is writing it, with the
        # cheaper gradient (masked.py).
        new_row = N + t
        composed = jnp.concatenate(self.reduce.compose(halves(below, H), halves(top, H), tracking), axis=-1)
        stack = stack.at[new_row].add(composed)
        # SHIFT pushes the leaf's row at slot sp; REDUCE pops two and pushes
        # the new row at sp - 2; PAD writes the free slot above the top.
        write_slot = sp - 2 * is_reduce.astype(jnp.int32)
        pointers = pointers.at[write_slot].set(jnp.where(is_shift, bp, new_row))
        sp = sp + is_shift.astype(jnp.int32) - is_reduce.astype(jnp.int32)
        bp = bp + is_shift.astype(jnp.int32)
        return (stack, pointers, sp, bp, tracker_state), ys

