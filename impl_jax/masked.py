"""SPINN on masked arrays, in JAX: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``decide``, head.py, docs/decided-graphs.md), and the rest of the step is
the one gold mode runs. The cells are cells.py's: ``SPINN`` holds
the submodules of the other families (``tracker``, ``reduce``), so the
parameters, their names and the canonical conversion (convert.py) are theirs.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item (a stack or buffer entry) is ``[h; c]``, <float>[2H]. The
loop's state is the thin stack (Bowman et al. 2016):

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int32>[S, T]          PAD / SHIFT / REDUCE
    n_leaves     <int32>[S]             SHIFTs per sentence: its words
    thin         <float>[N + T + 1, S, 2H]  every item ever made: rows 0..N-1
                                        the leaves (the buffer lives there), row
                                        N + t what step t composed; plus row
                                        N + T, zeros (see _read)
    pointers     <int32>[S, N + 1]      the stack: row numbers into ``thin``
    sp, bp       <int32>[S]             stack pointer (items on the stack), buffer pointer
    state        <float>[S, D] twice    the tracker's (h, c)

JAX compiles the loop: one ``nn.scan`` (``lax.scan`` lifted over Flax
variables) of T steps, T the padded length of the batch, fixed when the
program is compiled (docs/static-vs-dynamic.md). In inference each scan
iteration is a cond that skips the steps past the batch's last real one
(``SPINN._step_until``); the differentiated programs run every step
(``skip_tail=False``). The parse mode is a Python argument: each mode is
its own traced program. A second stack layout (``layout="padded"``) keeps
the items themselves, ``thin <float>[S, N + 1, 2H]`` written with a
scatter, and no pointers; both give the same numbers, and the thin stack's
write is one slab, whose backward pass copies nothing. What the JAX
families share is shift_reduce.py's (the leaf count, the last step) and
head.py's (the decision). Linen, not nnx: a linen module holds no state, so the
weights are the plain pytree passed to ``apply`` that ``jax.jit``,
``jax.grad`` and optax work on (train.py).
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Dtype, Reduce, Tracker
from .head import decide
from .shift_reduce import DEFAULT_LAYOUT, LAYOUTS, count_leaves, last_step


class SPINN(nn.Module):
    """The shift-reduce encoder as one fixed-length scan over padded arrays."""

    config: ModelConfig
    layout: str = DEFAULT_LAYOUT  # "thin" or "padded"
    dtype: Dtype = jnp.float32  # the parameters'
    unroll: int = 1  # lax.scan unroll factor (a speed knob; the numbers do not change)
    # Skip the steps past the batch's last real one (_step_until). A speed knob: the numbers do not change.
    # Under jax.grad the cond can cost more than the steps it skips (the runner's training programs turn it off).
    skip_tail: bool = True

    def setup(self):
        c = self.config
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown stack layout {self.layout!r}; choose from {LAYOUTS}")
        if c.tracker_dim > 0:
            self.tracker = Tracker(c.hidden_dim, c.tracker_dim, c.transition_head, self.dtype)
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.dtype)

    def encode(self, leaves, transitions):
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions, "gold", None, head=False)

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None) -> SentenceParses:
        """The encoder with its transition head, in ``mode`` (docs/spec.md §7).

        leaves <float>[S, N, 2H]; transitions <int>[S, T]: in gold mode they
        are followed (teacher forcing: the head scores every step), in
        predicted and sampled mode only each row's number of SHIFTs (n) is
        used, and the head decides 2n - 1 steps; uniforms <float>[S, T]
        (sampled mode only): step t of a sentence REDUCEs, where both actions
        are valid, if ``uniforms[:, t]`` < p_R. ``mode`` is a Python string:
        each mode is its own program. Returns shared.parsing.SentenceParses:
        encodings <float>[S, H], transitions <int32>[S, T] (followed),
        transition_logits <float>[S, T, 2] (zeros at PAD), logprob, entropy
        <float>[S] (sampled mode, else zeros).

        The transitions are <int32>; ``mode`` is fixed when tracing.
        """
        return self._run(leaves, transitions, mode, uniforms, head=True)

    def _run(self, leaves, transitions, mode: str, uniforms, head: bool):
        """The loop behind encode and parse: S sentences through their steps.

        leaves <float>[S, N, 2H]; transitions <int>[S, T]; ``mode`` and
        ``head`` (read the transition head at every step) are Python values:
        each mode is its own program; uniforms <float>[S, T] in sampled mode.
        Returns the encodings <float>[S, H]; with the head, SentenceParses.
        """
        loop, carry, xs = self._start(leaves, transitions, mode, uniforms, head)
        (thin, pointers, _, _, _), ys = self._loop(loop, carry, xs)
        encodings = self._root(loop, thin, pointers)  # [S, H]
        if not head:
            return encodings
        followed = xs[0] if mode == "gold" else ys["transitions"]  # [T, S]
        zeros = jnp.zeros((loop.S,), leaves.dtype)
        return SentenceParses(
            encodings=encodings,
            transitions=jnp.swapaxes(followed, 0, 1),
            transition_logits=jnp.swapaxes(ys["logits"], 0, 1),
            logprob=ys["logprob"] if mode == "sampled" else zeros,
            entropy=ys["entropy"] if mode == "sampled" else zeros,
        )

    def _start(self, leaves, transitions, mode: str, uniforms, head: bool) -> tuple:
        """What every step reads, fixed for the run (a _Loop); the loop's state
        before step 0, ``carry`` = (thin, pointers, sp, bp, state): an empty
        stack, the tracker at zeros (() without a tracker); and what each step
        takes of the batch, ``xs`` = (ops <int32>[T, S] in gold mode, the step
        numbers <int32>[T], uniforms <float>[T, S] in sampled mode), None
        where the mode has none."""
        S, N, _ = leaves.shape
        D = self.config.tracker_dim
        transitions = transitions.astype(jnp.int32)
        T = transitions.shape[1]
        loop = _Loop(mode=mode, head=head, S=S, N=N, T=T, sentences=jnp.arange(S, dtype=jnp.int32),
                     n_leaves=count_leaves(transitions),  # one SHIFT per word
                     zero_row=N + T, leaves=leaves)
        thin = self._new_thin(leaves, T)
        # The padded stack holds the items themselves: no pointers.
        pointers = () if self.layout == "padded" else jnp.zeros((S, N + 1), jnp.int32)  # N items + a free slot
        sp = jnp.zeros((S,), jnp.int32)
        bp = jnp.zeros_like(sp)
        state = (jnp.zeros((S, D), leaves.dtype), jnp.zeros((S, D), leaves.dtype)) if D > 0 else ()
        xs = (jnp.swapaxes(transitions, 0, 1) if mode == "gold" else None,
              jnp.arange(T, dtype=jnp.int32),
              jnp.swapaxes(uniforms, 0, 1) if mode == "sampled" else None)
        return loop, (thin, pointers, sp, bp, state), xs

    def _loop(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """The loop: ``_step`` at every one of the T steps, as a scan runs its
        body. Returns the carry after the last step, and ys: the steps'
        logits <float>[T, S, 2] and (decided modes) transitions <int32>[T, S],
        stacked; (sampled mode) logprob and entropy <float>[S], summed over
        the steps.

        lax.scan runs the body T times inside ONE compiled loop: the body is
        traced once, with abstract shapes, so it cannot look at a value to
        decide what to do. nn.scan is lax.scan lifted over Flax variables:
        variable_broadcast="params" hands every step the same weights (and
        makes their gradients sum over steps); xs are scanned along axis 0,
        and the rest the body reads (the _Loop, the stop) it closes over. T is
        the array's length, fixed when the program is compiled: the body is
        ``_step_until``, which skips the steps past the batch's last real one.
        """
        if self.is_initializing() and not loop.head and self.config.transition_head:
            # init() creates the weights a call touches; this path never reads
            # the head, so touch it once here, outside the loop.
            self.tracker.transition_logits(jnp.zeros((1, self.config.tracker_dim), loop.leaves.dtype))
        ops, steps, _ = xs
        # A decided sentence of n words runs exactly 2n - 1 steps (docs/spec.md §7).
        stop = last_step(jnp.swapaxes(ops, 0, 1)) if loop.mode == "gold" else 2 * jnp.max(loop.n_leaves) - 1
        scan = nn.scan(
            lambda module, carry, xs: module._step_until(loop, carry, xs, stop),
            variable_broadcast="params",
            split_rngs={"params": False},
            length=loop.T,
            unroll=self.unroll,
            # The constancy check traces the body once more; it is only needed
            # when init() creates the weights inside the loop.
            check_constancy_invariants=self.is_initializing(),
        )
        carry, ys = scan(self, carry, xs)
        for name in ("logprob", "entropy"):
            if name in ys:
                ys[name] = jnp.sum(ys[name], axis=0)
        return carry, ys

    def _step_until(self, loop: _Loop, carry: tuple, xs: tuple, stop):
        """``_step`` while t < ``stop``, the batch's real length; after it, nothing.

        The scan still has T iterations (T is the array's shape, fixed when
        the program is compiled), but the steps past the batch's last real
        one are PAD for every sentence and would change nothing, so a
        conditional skips their work: the loop costs what the batch's
        longest sentence needs, not what its shape could hold, as
        TensorFlow's while loop does. nn.cond is lax.cond lifted over Flax
        variables; only the branch taken runs, in the forward pass and in its
        gradient.
        """
        if self.is_initializing() or not self.skip_tail:  # init(): the plain step, in which the weights are made
            return self._step(loop, carry, xs)

        def run(module, carry):
            return module._step(loop, carry, xs)

        def idle(module, carry):  # what a step of PAD for every sentence gives out
            dtype, ys = loop.leaves.dtype, {}
            if loop.head:
                if loop.mode != "gold":
                    ys["transitions"] = jnp.full((loop.S,), PAD, jnp.int32)
                    if loop.mode == "sampled":
                        ys["logprob"] = ys["entropy"] = jnp.zeros((loop.S,), dtype)
                ys["logits"] = jnp.zeros((loop.S, 2), dtype)
            return carry, ys

        return nn.cond(xs[1] < stop, run, idle, self, carry)

    def _step(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """One transition for every sentence, as the scan's body runs it.

        carry: (thin, pointers, sp, bp, state) (see _start); xs: op
        <int32>[S] (None when decided), t <int32>[], and in sampled mode u
        <float>[S]. Returns the new carry, and ys: with the head, logits
        <float>[S, 2] (zeros at PAD), in decided modes the transitions
        followed <int32>[S], in sampled mode the step's logprob and entropy
        <float>[S]; {} without the head.
        """
        thin, pointers, sp, bp, state = carry
        op, t, u = xs
        H = self.config.hidden_dim
        top, below, front, can_shift = self._read(loop, thin, pointers, sp, bp)

        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        # PAD keeps nothing: stack, buffer and tracker stay as they were.
        if loop.mode == "gold":
            is_shift, is_reduce, active = op == SHIFT, op == REDUCE, op != PAD
        else:
            # The op is decided after the tracker update; whether the step
            # does anything is known now: a finished sentence can neither
            # shift nor reduce, and PADs from then on.
            can_reduce = sp >= 2
            active = can_shift | can_reduce

        # ---- the tracker, kept only where the step is not PAD.
        tracking = None
        if self.config.tracker_dim > 0:  # a Python `if` on the model's configuration, not on data
            h_t, c_t = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)
            keep = active[:, None]
            state = (jnp.where(keep, h_t, state[0]), jnp.where(keep, c_t, state[1]))
            tracking = state[0]

        # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
        ys = {}
        if loop.head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            if loop.mode != "gold":
                # ---- the decision, taken on the device (head.py): two masks
                # that take the place of the gold op's.
                is_shift, is_reduce, logprob, entropy = decide(logits, u, can_shift, can_reduce, loop.mode)
                ys["transitions"] = jnp.where(is_reduce, REDUCE, jnp.where(is_shift, SHIFT, PAD)).astype(jnp.int32)
                if loop.mode == "sampled":
                    ys["logprob"], ys["entropy"] = logprob, entropy
            ys["logits"] = jnp.where(active[:, None], logits, 0)  # zeros at PAD

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        h, c = self.reduce.compose((below[:, :H], below[:, H:]), (top[:, :H], top[:, H:]), tracking)  # [S, H] each
        composed = jnp.concatenate([h, c], axis=1)
        if self.layout == "padded":  # the padded stack keeps items: a SHIFT pushes the leaf itself
            composed = jnp.where(is_shift[:, None], front, composed)
        thin, pointers, sp, bp = self._write(loop, t, thin, pointers, sp, bp, is_shift, is_reduce, composed)
        return (thin, pointers, sp, bp, state), ys

    def _read(self, loop: _Loop, thin, pointers, sp, bp) -> tuple:
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front, a leaf's row (the
        # leaves are rows 0..N-1). Indices are clipped into range.
        can_shift = bp < loop.n_leaves  # the buffer is not empty
        if self.layout == "padded":  # the items in their slots, masked where absent; the buffer in the leaves
            top, below = (jnp.where((sp >= k)[:, None], thin[loop.sentences, jnp.maximum(sp - k, 0)], 0)
                          for k in (1, 2))
            front = loop.leaves[loop.sentences, jnp.minimum(bp, loop.N - 1)]
            return top, below, jnp.where(can_shift[:, None], front, 0), can_shift
        top_row = pointers[loop.sentences, jnp.maximum(sp - 1, 0)]  # follow the back-pointer
        below_row = pointers[loop.sentences, jnp.maximum(sp - 2, 0)]
        # An absent item reads the zero row (N + T) by address: one gather
        # reads the step's three items, and nothing is masked after it.
        rows = jnp.stack([jnp.where(can_shift, bp, loop.zero_row),
                          jnp.where(sp >= 1, top_row, loop.zero_row),
                          jnp.where(sp >= 2, below_row, loop.zero_row)])  # [3, S]
        front, top, below = self._gather(loop, thin, rows)
        return top, below, front, can_shift

    def _write(self, loop: _Loop, t, thin, pointers, sp, bp, is_shift, is_reduce, composed) -> tuple:
        """Keep step t's result and move the pointers: (thin, pointers, sp, bp)."""
        new_row = loop.N + t
        write_slot = sp - 2 * is_reduce.astype(jnp.int32)
        if self.layout == "padded":
            # SHIFT writes the leaf at slot sp, REDUCE the composition at slot sp - 2.
            # One row per sentence; unique_indices tells JAX that no two
            # updates collide, so the gradient of the scatter needs only the
            # indices (a possibly-colliding scatter saves stack-sized masks).
            thin = thin.at[loop.sentences, write_slot].set(composed, unique_indices=True)
        else:
            # Row N + t of the thin stack is this step's composition, for all
            # sentences at once; only a REDUCE ever points at it.
            thin = self._scatter(loop, thin, new_row, composed)
            # ---- push a pointer: the leaf's row for SHIFT at slot sp, the new row
            # for REDUCE at slot sp - 2 (where the left child was). PAD writes at
            # slot sp, the free slot above the top, which nobody reads, so no
            # branch is needed.
            target = jnp.where(is_shift, bp, new_row)
            pointers = pointers.at[loop.sentences, write_slot].set(target, unique_indices=True)
        sp = sp + is_shift.astype(jnp.int32) - is_reduce.astype(jnp.int32)
        bp = bp + is_shift.astype(jnp.int32)
        return thin, pointers, sp, bp

    def _root(self, loop: _Loop, thin, pointers):
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        if self.layout == "padded":
            return thin[:, 0, :self.config.hidden_dim]
        return self._gather(loop, thin, pointers[None, :, 0])[0, :, :self.config.hidden_dim]

    # ---- the thin stack: rows of items, read by address, written a row a step

    def _new_thin(self, leaves, T):
        """The thin stack <float>[N + T + 1, S, 2H]: the leaves in rows 0 .. N - 1,
        a row per step (zeros until it is written), and the zero row, N + T.
        The padded layout's stack instead: <float>[S, N + 1, 2H], zeros."""
        S, N, two_h = leaves.shape
        if self.layout == "padded":
            return jnp.zeros((S, N + 1, two_h), leaves.dtype)
        return jnp.concatenate([jnp.swapaxes(leaves, 0, 1), jnp.zeros((T + 1, S, two_h), leaves.dtype)], axis=0)

    def _gather(self, loop: _Loop, thin, rows):
        """The items of the S sentences in ``rows`` <int32>[K, S] -> <float>[K, S, 2H]."""
        return thin[rows, loop.sentences]

    def _scatter(self, loop: _Loop, thin, row, items):
        """``thin`` with ``items`` <float>[S, 2H] as its row ``row`` (one contiguous slab)."""
        # The row is still zero, so adding is writing; but the gradient of an
        # add passes the cotangent through, while that of a set must zero the
        # row, and that made XLA copy the whole cotangent stack every step (twice).
        return thin.at[row].add(items)


class _Loop(NamedTuple):
    """What every step of one run reads, fixed before the loop: the Python
    choices of the program (mode, head), the sizes, and the batch's arrays
    the steps share. Each framework's step takes it as its first argument
    (here the scan's body closes over it; the padded layout also reads the
    leaves)."""

    mode: str
    head: bool
    S: int
    N: int
    T: int
    sentences: jax.Array  # <int32>[S]: 0 .. S - 1
    n_leaves: jax.Array  # <int32>[S]: the leaves in each buffer
    zero_row: int  # N + T: the thin stack's last row, zeros
    leaves: jax.Array  # <float>[S, N, 2H]
