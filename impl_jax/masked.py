"""SPINN on masked arrays, in JAX: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``decide``, shift_reduce.py, docs/decided-graphs.md), and the rest of the
step is the one gold mode runs. The cells are cells.py's: ``SPINN`` holds
the submodules of the other families (``tracker``, ``reduce``), so the
parameters, their names and the canonical conversion (convert.py) are theirs.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item (a stack or buffer entry) is ``[h; c]``, <float>[2H]. The
loop's state is the thin stack (Bowman et al. 2016):

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int32>[S, T]          PAD / SHIFT / REDUCE
    n_leaves     <int32>[S]             SHIFTs per sentence: its words
    thin         <float>[N + T, S, 2H]  every item ever made: rows 0..N-1 the
                                        leaves (the buffer lives there), row
                                        N + t what step t composed (``stack``)
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
the items themselves, ``stack <float>[S, N + 1, 2H]`` written with a
scatter, and no pointers; both give the same numbers, and the thin stack's
write is one slab, whose backward pass copies nothing. What the JAX
families share (the halves of an item, the leaf count, the decision) is
shift_reduce.py's. Linen, not nnx: a linen module holds no state, so the
weights are the plain pytree passed to ``apply`` that ``jax.jit``,
``jax.grad`` and optax work on (train.py).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Dtype, Reduce, Tracker
from .shift_reduce import DEFAULT_LAYOUT, LAYOUTS, count_leaves, decide, halves, last_step


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
        S, T = transitions.shape
        n_leaves = count_leaves(transitions)
        carry = self._start(leaves, T)
        if self.is_initializing() and not head and self.config.transition_head:
            # init() creates the weights a call touches; this path never reads
            # the head, so touch it once here, outside the loop.
            self.tracker.transition_logits(jnp.zeros((1, self.config.tracker_dim), leaves.dtype))

        # ---- the loop --------------------------------------------------------
        # lax.scan runs `_step` T times inside ONE compiled loop: the body is
        # traced once, with abstract shapes, so it cannot look at a value to
        # decide what to do. nn.scan is lax.scan lifted over Flax variables:
        # variable_broadcast="params" hands every step the same weights (and
        # makes their gradients sum over steps); xs are scanned along axis 0:
        # (op, t, u), the transitions <int32>[T, S] in gold mode (None
        # otherwise: the op is decided inside the loop), the step number, and
        # the uniform numbers <float>[T, S] in sampled mode; the leaves, leaf
        # counts and the stop are broadcast (the same at every step). With the
        # head a step also returns ys: the head's t, the op it followed and
        # (sampled mode) the step's log-probability and entropy.
        scan = nn.scan(
            lambda module, carry, xs, leaves, n_leaves, stop: module._step_until(
                carry, xs, leaves, n_leaves, stop, mode, head),
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
            length=T,
            unroll=self.unroll,
            # The constancy check traces the body once more; it is only needed
            # when init() creates the weights inside the loop.
            check_constancy_invariants=self.is_initializing(),
        )
        xs = (jnp.swapaxes(transitions, 0, 1) if mode == "gold" else None, jnp.arange(T, dtype=jnp.int32),
              jnp.swapaxes(uniforms, 0, 1) if mode == "sampled" else None)
        # A decided sentence of n words runs exactly 2n - 1 steps (docs/spec.md §7).
        stop = last_step(transitions) if mode == "gold" else 2 * jnp.max(n_leaves) - 1
        (stack, pointers, _, _, _), ys = scan(self, carry, xs, leaves, n_leaves, stop)

        encodings = self._root(stack, pointers)  # [S, H]
        if not head:
            return encodings
        followed = transitions.astype(jnp.int32) if mode == "gold" else jnp.swapaxes(ys["op"], 0, 1)  # [S, T]
        zeros = jnp.zeros((S,), leaves.dtype)
        return SentenceParses(
            encodings=encodings,
            transitions=followed,
            transition_logits=jnp.swapaxes(ys["logits"], 0, 1),
            logprob=jnp.sum(ys["logprob"], axis=0) if mode == "sampled" else zeros,
            entropy=jnp.sum(ys["entropy"], axis=0) if mode == "sampled" else zeros,
        )

    def _start(self, leaves, T: int) -> tuple:
        """The loop's state before step 0: (stack, pointers, sp, bp, state), an
        empty stack, the tracker at zeros (() without a tracker)."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        slots = N + 1  # at most N items, plus one free slot above the top (see _write)
        dtype = leaves.dtype
        zero_index = jnp.zeros((S,), jnp.int32)
        state = (jnp.zeros((S, D), dtype), jnp.zeros((S, D), dtype)) if D > 0 else ()
        if self.layout == "padded":
            stack = jnp.zeros((S, slots, 2 * H), dtype)
            pointers = ()  # the padded stack holds the vectors themselves
        else:
            # The thin stack: the leaves first (rows 0..N-1), then one (still zero) row per step.
            stack = jnp.concatenate([jnp.swapaxes(leaves, 0, 1), jnp.zeros((T, S, 2 * H), dtype)], axis=0)
            pointers = jnp.zeros((S, slots), jnp.int32)
        return stack, pointers, zero_index, zero_index, state

    def _step_until(self, carry, xs, leaves, n_leaves, stop, mode: str = "gold", head: bool = False):
        """``_step`` while t < ``stop``, the batch's real length; after it, nothing.

        The scan still has T iterations (T is the array's shape, fixed when
        the program is compiled), but the steps past the batch's last real
        one are PAD for every sentence and would change nothing, so a
        conditional skips their work: the loop costs what the batch's
        longest sentence needs, not what its shape could hold, as
        TensorFlow's while loop and PyTorch's Python loop do. nn.cond is
        lax.cond lifted over Flax variables; only the branch taken runs, in
        the forward pass and in its gradient.
        """
        if self.is_initializing() or not self.skip_tail:  # init(): the plain step, in which the weights are made
            return self._step(carry, xs, leaves, n_leaves, mode, head)

        def run(module, carry):
            return module._step(carry, xs, leaves, n_leaves, mode, head)

        def idle(module, carry):  # what a step of PAD for every sentence returns
            sp = carry[2]
            logits = jnp.zeros((sp.shape[0], 2), leaves.dtype)
            ys = None
            if head:
                ys = {"logits": logits}
                if mode != "gold":
                    ys.update(decide(logits, xs[2], jnp.zeros_like(sp, bool), jnp.zeros_like(sp, bool), mode)[2])
                    ys["op"] = jnp.full_like(sp, PAD)
            return carry, ys

        return nn.cond(xs[1] < stop, run, idle, self, carry)

    def _step(self, carry, xs, leaves, n_leaves, mode: str = "gold", head: bool = False):
        """One transition for every sentence, as the scan's body runs it.

        carry: (stack, pointers, sp, bp, state) (see _start); xs: op
        <int32>[S] (None when decided), t <int32>[], and in sampled mode u
        <float>[S]. Returns the new carry and ys: with ``head`` (logits
        <float>[S, 2], zeros at PAD; in decided modes the op followed
        <int32>[S]; in sampled mode the step's logprob and entropy
        <float>[S]), otherwise None, and the step is exactly the gold-mode step.
        """
        stack, pointers, sp, bp, state = carry
        op, t = xs[0], xs[1]
        H, N = self.config.hidden_dim, leaves.shape[1]
        rows = jnp.arange(sp.shape[0], dtype=jnp.int32)
        top, below, front, can_shift = self._read(stack, pointers, sp, bp, leaves, n_leaves, rows)

        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        # PAD keeps nothing: stack, buffer and tracker stay as they were.
        if mode == "gold":
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
            h_t, c_t = self.tracker.step(halves(front, H)[0], halves(top, H)[0], halves(below, H)[0], state)
            keep = active[:, None]
            state = (jnp.where(keep, h_t, state[0]), jnp.where(keep, c_t, state[1]))
            tracking = state[0]

        # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
        ys = None
        if head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            ys = {}
            if mode != "gold":
                # ---- the decision, taken on the device: two masks that take
                # the place of the gold op's.
                is_shift, is_reduce, ys = decide(logits, xs[2], can_shift, can_reduce, mode)
                ys["op"] = jnp.where(is_reduce, REDUCE, jnp.where(is_shift, SHIFT, PAD)).astype(jnp.int32)
            ys["logits"] = jnp.where(active[:, None], logits, 0)  # zeros at PAD

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        composed = jnp.concatenate(self.reduce.compose(halves(below, H), halves(top, H), tracking), axis=-1)
        carry = self._write(stack, pointers, sp, bp, t, is_shift, is_reduce, front, composed, rows, N)
        return carry + (state,), ys

    def _read(self, stack, pointers, sp, bp, leaves, n_leaves, rows):
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front. Indices are clipped
        # into range and absent items masked to zeros.
        N = leaves.shape[1]

        def slot(k):
            """The item k places from the top, <float>[S, 2H]; zeros where there is none."""
            index = jnp.maximum(sp - k, 0)
            if self.layout == "padded":
                item = stack[rows, index]
            else:
                item = stack[pointers[rows, index], rows]  # follow the back-pointer
            return jnp.where((sp >= k)[:, None], item, 0)

        top, below = slot(1), slot(2)
        front_index = jnp.minimum(bp, N - 1)
        if self.layout == "padded":
            front = leaves[rows, front_index]
        else:
            front = stack[front_index, rows]  # the leaves are rows 0..N-1 of the thin stack
        can_shift = bp < n_leaves  # the buffer is not empty
        front = jnp.where(can_shift[:, None], front, 0)
        return top, below, front, can_shift

    def _write(self, stack, pointers, sp, bp, t, is_shift, is_reduce, front, composed, rows, N):
        """Keep step t's result and move the pointers: (stack, pointers, sp, bp)."""
        write_slot = sp - 2 * is_reduce.astype(jnp.int32)
        if self.layout == "padded":
            # SHIFT writes the leaf at slot sp, REDUCE the composition at slot sp - 2.
            item = jnp.where(is_shift[:, None], front, composed)
            # One row per sentence; unique_indices tells JAX that no two
            # updates collide, so the gradient of the scatter needs only the
            # indices (a possibly-colliding scatter saves stack-sized masks).
            stack = stack.at[rows, write_slot].set(item, unique_indices=True)
        else:
            # Row N + t of the thin stack is this step's composition, for all
            # sentences at once (one contiguous slab); only a REDUCE ever
            # points at it. The row is still zero, so adding is writing; but
            # the gradient of an add passes the cotangent through, while that
            # of a set must zero the row, and that made XLA copy the whole
            # cotangent stack every step (twice).
            new_row = N + t
            stack = stack.at[new_row].add(composed)
            # ---- push a pointer: the leaf's row for SHIFT at slot sp, the new row
            # for REDUCE at slot sp - 2 (where the left child was). PAD writes at
            # slot sp, the free slot above the top, which nobody reads, so no
            # branch is needed.
            target = jnp.where(is_shift, bp, new_row)
            pointers = pointers.at[rows, write_slot].set(target, unique_indices=True)
        sp = sp + is_shift.astype(jnp.int32) - is_reduce.astype(jnp.int32)
        bp = bp + is_shift.astype(jnp.int32)
        return stack, pointers, sp, bp

    def _root(self, stack, pointers):
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        S = stack.shape[0] if self.layout == "padded" else stack.shape[1]
        rows = jnp.arange(S, dtype=jnp.int32)
        if self.layout == "padded":
            root = stack[:, 0]
        else:
            root = stack[pointers[:, 0], rows]
        return halves(root, self.config.hidden_dim)[0]
