"""SPINN on masked arrays: the whole batch in padded arrays, one fixed-shape loop (docs/spec.md §3, §7).

The masked family (bench/frameworks.py): every sentence's stack and buffer
are rows of fixed-size arrays, moved by integer pointers, and what an
example's transition means is decided by masks. ``SPINN.encode`` follows the
given (gold) transitions; ``SPINN.parse`` also reads the transition head and
may decide the transitions itself. Both run one ``nn.scan`` (``lax.scan``
lifted over Flax variables) of T steps, T the padded length of the batch, in
which nothing depends on a value (docs/static-vs-dynamic.md; the decision,
docs/decided-graphs.md):

    leaves       <float>[S, N, 2H]   [h; c] of every word: the buffer, made by
                                     classifier.py (S sentences: premises and hypotheses, 2B)
    transitions  <int32>[S, T]       PAD / SHIFT / REDUCE
    n_leaves     <int32>[S]          SHIFTs per row: its words
    sp, bp       <int32>[S]          stack pointer (items on the stack), buffer pointer

Two stack layouts (``layout=``): ``"padded"``, ``stack <float>[S, N + 1, 2H]``
written with a scatter; ``"thin"`` (Bowman et al. 2016, the default),
``thin <float>[N + T, S, 2H]`` holding every item ever made (rows 0..N-1 the
leaves, row N + t step t's composition) and the stack proper
``pointers <int32>[S, N + 1]``, row numbers into it. Both give the same
numbers; the thin stack's write is one slab, and its backward pass copies nothing.

In inference each scan iteration is a cond that skips the steps past the
batch's last real one (``SPINN._step_until``); the differentiated programs run
every step (``skip_tail=False``). The parse mode ("gold", "predicted",
"sampled") is a Python argument: each mode is its own traced program.

What the JAX families share (the halves of an item, the leaf count, the
decision of §7) is shift_reduce.py's; the cells are cells.py's.

Linen, not nnx: a linen module holds no state, so the weights are the plain
pytree passed to ``apply`` that ``jax.jit``, ``jax.grad`` and optax work on (train.py).
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
    """The sentence encoder: leaves and transitions -> h of the root, <float>[S, H]."""

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
        """leaves <float>[S, N, 2H], transitions <int32>[S, T] -> encodings <float>[S, H]:
        the root of each sentence, following the given transitions.

        Gold mode only, and the transition head is never evaluated here
        (``parse`` is the path that reads it)."""
        T = transitions.shape[1]
        n_leaves = count_leaves(transitions)
        carry = self._initial_carry(leaves, T)
        if self.is_initializing() and self.config.transition_head:
            # init() creates the weights a call touches; this path never reads
            # the head, so touch it once here, outside the loop.
            self.tracker.transition_logits(jnp.zeros((1, self.config.tracker_dim), leaves.dtype))

        # ---- the loop -------------------------------------------------------
        # lax.scan runs `_step` T times inside ONE compiled loop: the body is
        # traced once, with abstract shapes, so it cannot look at a value to
        # decide what to do. nn.scan is lax.scan lifted over Flax variables:
        # variable_broadcast="params" hands every step the same weights (and
        # makes their gradients sum over steps); xs are the transitions
        # [T, S] (axis 0 is scanned) and the step number t; the leaves and
        # leaf counts are broadcast (the same at every step).
        scan = nn.scan(
            lambda module, carry, xs, leaves, n_leaves, stop: module._step_until(carry, xs, leaves, n_leaves, stop),
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
            length=T,
            unroll=self.unroll,
            # The constancy check traces the body once more; it is only needed
            # when init() creates the weights inside the loop.
            check_constancy_invariants=self.is_initializing(),
        )
        xs = (jnp.swapaxes(transitions, 0, 1), jnp.arange(T, dtype=jnp.int32))
        (stack, pointers, _, _, _), _ = scan(self, carry, xs, leaves, n_leaves, last_step(transitions))
        return self._root(stack, pointers)

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None) -> SentenceParses:
        """Encode with the transitions of ``mode`` (docs/spec.md §7), reading the head at every step.

        leaves <float>[S, N, 2H]; transitions <int32>[S, T]: followed in "gold"
        mode; in "predicted" and "sampled" mode only their count of SHIFTs
        per row (n) is used, and each sentence runs 2n-1 decided steps, then
        PAD. uniforms <float>[S, T]: sampled mode's numbers, step t of a row
        using column t. ``mode`` is a Python string: every mode traces its
        own program. The inputs are those shared.contract checked on the
        host. Returns shared.parsing.SentenceParses:
          encodings <float>[S, H], transitions <int32>[S, T] (followed),
          transition_logits <float>[S, T, 2] (t at non-PAD steps, else 0),
          logprob, entropy <float>[S] (sums over choice steps; sampled mode, else 0).
        """
        S, T = transitions.shape
        n_leaves = count_leaves(transitions)
        carry = self._initial_carry(leaves, T)

        # The same scan as encode, over the same step, which now also
        # returns a per-step output ys: the op it followed, the head's t and
        # (sampled mode) the step's log-probability and entropy. xs are
        # (op, t, u): the data's transitions <int32>[T, S] in gold mode
        # (None otherwise: the op is decided inside the loop), the step
        # number, and the uniform numbers <float>[T, S] in sampled mode.
        scan = nn.scan(
            lambda module, carry, xs, leaves, n_leaves, stop: module._step_until(
                carry, xs, leaves, n_leaves, stop, mode, True),
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
            length=T,
            unroll=self.unroll,
            check_constancy_invariants=self.is_initializing(),
        )
        xs = (jnp.swapaxes(transitions, 0, 1) if mode == "gold" else None, jnp.arange(T, dtype=jnp.int32),
              jnp.swapaxes(uniforms, 0, 1) if mode == "sampled" else None)
        # A decided sentence of n words runs exactly 2n - 1 steps (docs/spec.md §7).
        stop = last_step(transitions) if mode == "gold" else 2 * jnp.max(n_leaves) - 1
        (stack, pointers, _, _, _), ys = scan(self, carry, xs, leaves, n_leaves, stop)
        followed = transitions.astype(jnp.int32) if mode == "gold" else jnp.swapaxes(ys["op"], 0, 1)
        zeros = jnp.zeros((S,), leaves.dtype)
        return SentenceParses(
            encodings=self._root(stack, pointers),
            transitions=followed,
            transition_logits=jnp.swapaxes(ys["logits"], 0, 1),
            logprob=jnp.sum(ys["logprob"], axis=0) if mode == "sampled" else zeros,
            entropy=jnp.sum(ys["entropy"], axis=0) if mode == "sampled" else zeros,
        )

    # ---- the pieces both paths share -----------------------------------------

    def _initial_carry(self, leaves, T: int) -> tuple:
        """The loop state before step 0: an empty stack, the tracker at zeros."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        slots = N + 1  # at most N items, plus one free slot above the top (see _write)
        dtype = leaves.dtype
        zero_index = jnp.zeros((S,), jnp.int32)
        tracker_state = (jnp.zeros((S, D), dtype), jnp.zeros((S, D), dtype)) if D > 0 else ()
        if self.layout == "padded":
            stack = jnp.zeros((S, slots, 2 * H), dtype)
            pointers = ()  # the padded stack holds the vectors themselves
        else:
            # thin stack: the leaves first (rows 0..N-1), then one row per step.
            stack = jnp.concatenate([jnp.swapaxes(leaves, 0, 1), jnp.zeros((T, S, 2 * H), dtype)], axis=0)
            pointers = jnp.zeros((S, slots), jnp.int32)
        carry = (stack, pointers, zero_index, zero_index, tracker_state)
        return carry

    def _root(self, stack, pointers):
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        S = stack.shape[0] if self.layout == "padded" else stack.shape[1]
        rows = jnp.arange(S, dtype=jnp.int32)
        if self.layout == "padded":
            root = stack[:, 0]
        else:
            root = stack[pointers[:, 0], rows]
        return halves(root, self.config.hidden_dim)[0]

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
        """One transition for every sentence of the batch.

        carry: stack (layout's array), pointers (thin: <int32>[S, N + 1]),
               sp, bp <int32>[S], tracker state; xs: op <int32>[S] (None when
               decided), t <int32>[], and in sampled mode u <float>[S].
        ``head``: also read the transition head and return ys (``parse``);
        otherwise ys is None and the step is exactly the gold-mode step.
        """
        stack, pointers, sp, bp, tracker_state = carry
        op, t = xs[0], xs[1]
        N = leaves.shape[1]
        rows = jnp.arange(sp.shape[0], dtype=jnp.int32)

        # ---- masks: the "if op == ..." of the Python version, one bool per sentence.
        # Every sentence computes a tracker step AND a composition; the masks
        # decide which results are kept. PAD keeps nothing: stack, buffer and
        # tracker stay as they were, so padding cannot change a result.
        if mode == "gold":
            is_shift = op == SHIFT
            is_reduce = op == REDUCE
            active = op != PAD

        top, below, front, can_shift = self._read(stack, pointers, sp, bp, leaves, n_leaves, rows)
        if mode != "gold":
            # The op is not known yet (the head decides it after the tracker
            # update), but whether the step does anything is: a sentence is
            # finished, and PADs from then on, when neither action is possible.
            can_reduce = sp >= 2
            active = can_shift | can_reduce

        tracker_state, tracking = self._track(front, top, below, tracker_state, active)

        # ---- the transition head (parse only; a Python `if`, settled while tracing).
        # It reads the state this step's tracker update just wrote; a REDUCE
        # below composes with that same state (docs/spec.md §7).
        ys = None
        if head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            ys = {"logits": jnp.where(active[:, None], logits, 0)}
            if mode != "gold":
                # ---- the decision. Define-by-run code stops here at every
                # step, brings t back to Python and branches on it. Here it
                # never leaves the device: decide (shift_reduce.py) turns t
                # into the masks is_shift / is_reduce, which take the place of
                # the gold op's masks, and the rest of the step is the same in every mode.
                is_shift, is_reduce, choice_ys = decide(logits, xs[2], can_shift, can_reduce, mode)
                ys.update(choice_ys)
                ys["op"] = jnp.where(is_reduce, REDUCE, jnp.where(is_shift, SHIFT, PAD)).astype(jnp.int32)

        # ---- compose the two top items (used only where the step is REDUCE), back into one item [S, 2H]
        H = self.config.hidden_dim
        composed = jnp.concatenate(self.reduce.compose(halves(below, H), halves(top, H), tracking), axis=-1)
        carry = self._write(stack, pointers, sp, bp, t, is_shift, is_reduce, front, composed, rows, N)
        return carry + (tracker_state,), ys

    def _read(self, stack, pointers, sp, bp, leaves, n_leaves, rows):
        """What a step reads, <float>[S, 2H] each: the top two stack items and
        the buffer front, zeros where absent; and can_shift <bool>[S]."""
        # Reads by pointer. sp counts the items on the stack: the top is slot
        # sp-1, the item below it slot sp-2; bp is the buffer front. Indices
        # are clipped into range and absent items masked to zeros.
        N = leaves.shape[1]

        def slot(k):  # the item k places from the top, <float>[S, 2H]
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
        can_shift = bp < n_leaves  # the buffer is not empty
        front = jnp.where(can_shift[:, None], front, 0)
        return top, below, front, can_shift

    def _track(self, front, top, below, tracker_state, active):
        """The tracker step, kept only where the step is not PAD: (tracker
        state, its h_t <float>[S, D] for Reduce), or (), None without a tracker."""
        H = self.config.hidden_dim
        tracking = None
        if self.config.tracker_dim > 0:
            h_t, c_t = self.tracker.step(halves(front, H)[0], halves(top, H)[0], halves(below, H)[0],
                                         tracker_state)
            keep = active[:, None]
            tracker_state = (jnp.where(keep, h_t, tracker_state[0]), jnp.where(keep, c_t, tracker_state[1]))
            tracking = tracker_state[0]
        return tracker_state, tracking

    def _write(self, stack, pointers, sp, bp, t, is_shift, is_reduce, front, composed, rows, N):
        """Keep step t's result and move the pointers: (stack, pointers, sp, bp)."""
        # SHIFT writes at slot sp, REDUCE pops two and writes at slot sp-2;
        # PAD writes (a value nobody reads) at slot sp, the free slot above
        # the top, so no branch is needed.
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
        return stack, pointers, sp, bp

