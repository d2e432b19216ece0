"""SPINN on masked arrays, in TensorFlow: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``decide``, head.py, docs/decided-graphs.md), and the rest of the step is
the one gold mode runs. The cells are cells.py's: ``SPINN`` holds the submodules of
the other families (``tracker``, ``reduce``), so the parameters, their names
and the canonical conversion (convert.py) are theirs.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item (a stack or buffer entry) is ``[h; c]``, <float>[2H]. The
loop's state is the thin stack (Bowman et al. 2016):

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int32>[S, T]          PAD / SHIFT / REDUCE
    n_leaves     <int32>[S]             SHIFTs per sentence: its words
    thin         <float>[(N + T + 1) * S, 2H]  every item ever made: rows 0..N-1 the
                                        leaves (the buffer lives there), row
                                        N + t what step t composed; plus row
                                        N + T, zeros (see _read); flattened,
                                        the item of sentence s in row r at r * S + s
    pointers     <int32>[S, N + 1]      the stack: row numbers into ``thin``
    sp, bp       <int32>[S]             stack pointer (items on the stack), buffer pointer
    state        <float>[S, D] twice    the tracker's (h, c)

TensorFlow builds the loop as one static graph: a ``tf.while_loop``, traced
once with symbolic shapes, whose sizes are tensors, so one trace serves
every batch; the inputs pass shared.contract's checks on the host, since the
graph cannot raise. The loop stops after the batch's last real step; the
weights are read once, before it (layers.read_once); what a step of parse
reports flows through the loop as TensorArrays (``_loop``), since a Python
list cannot (the body runs once, when traced). Why the graph is built this
way, and what it costs: docs/static-vs-dynamic.md.

``container=`` picks the container of ``thin``: ``"tensor_array"`` (a
``tf.TensorArray``, for the graph executor on the CPU, which copies a plain
tensor updated inside a while loop at every step) or ``"dense"`` (a plain
tensor, for XLA, which cannot compile the TensorArray scatter, and GPUs).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import decide
from .layers import CONTAINERS, read_once, step_variables

class SPINN(tf.Module):
    """The shift-reduce encoder as one ``tf.while_loop`` over padded arrays."""

    def __init__(self, config: ModelConfig, dtype: tf.DType = tf.float32, container: str = "tensor_array",
                 name: str = "spinn"):
        super().__init__(name=name)
        if container not in CONTAINERS:
            raise ValueError(f"unknown container {container!r}; choose from {CONTAINERS}")
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.container = container
        with self.name_scope:
            self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head, dtype=dtype)
                            if config.tracker_dim > 0 else None)
            self.reduce = Reduce(config.hidden_dim, config.tracker_dim, dtype=dtype)

    def __call__(self, leaves: tf.Tensor, transitions: tf.Tensor) -> tf.Tensor:
        """tf.Module's entry point: :meth:`encode`."""
        return self.encode(leaves, transitions)

    def encode(self, leaves: tf.Tensor, transitions: tf.Tensor) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions, "gold", None, head=False)

    def parse(self, leaves: tf.Tensor, transitions: tf.Tensor, mode: str = "predicted",
              uniforms: tf.Tensor | None = None) -> SentenceParses:
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

        The transitions are <int32>, the uniforms <float64>; ``mode`` is
        fixed when tracing: it chooses which ops the graph has, never which
        ones run.
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
        zeros = tf.zeros([loop.S], leaves.dtype)
        return SentenceParses(
            encodings=encodings,
            transitions=tf.transpose(followed),
            transition_logits=tf.transpose(ys["logits"], [1, 0, 2]),
            logprob=tf.cast(ys["logprob"], leaves.dtype) if mode == "sampled" else zeros,
            entropy=tf.cast(ys["entropy"], leaves.dtype) if mode == "sampled" else zeros,
        )

    def _start(self, leaves, transitions, mode: str, uniforms, head: bool) -> tuple:
        """What every step reads, fixed for the run (a _Loop); the loop's state
        before step 0, ``carry`` = (thin, pointers, sp, bp, state): an empty
        stack, the tracker at zeros (() without a tracker); and what each step
        takes of the batch, ``xs`` = (ops <int32>[T, S] in gold mode, the step
        numbers <int32>[T], uniforms <float64>[T, S] in sampled mode), None
        where the mode has none."""
        # Sizes are tensors: this graph serves every S, N and T.
        S, N = tf.shape(leaves)[0], tf.shape(leaves)[1]
        D = self.tracker_dim
        T = tf.shape(transitions)[1]
        loop = _Loop(mode=mode, head=head, S=S, N=N, T=T, sentences=tf.range(S),
                     n_leaves=tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1),  # one per word
                     zero_row=N + T,
                     slots=tf.range(N + 1)[None, :])  # [1, N + 1]: stack slot numbers (N items, plus a free slot)
        thin = self._new_thin(leaves, T)
        pointers = tf.zeros([S, N + 1], tf.int32)
        sp = tf.zeros([S], tf.int32)
        bp = tf.zeros_like(sp)
        state = (tf.zeros([S, D], leaves.dtype), tf.zeros([S, D], leaves.dtype)) if D > 0 else ()
        xs = (tf.transpose(transitions) if mode == "gold" else None,
              tf.range(T),
              tf.transpose(uniforms) if mode == "sampled" else None)
        return loop, (thin, pointers, sp, bp, state), xs

    def _loop(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """The loop: ``_step`` at every step up to the batch's last real one,
        as a scan runs its body. Returns the carry after the last step, and
        ys: the steps' logits <float>[T, S, 2] and (decided modes)
        transitions <int32>[T, S], stacked (zeros, i.e. PAD, after the last
        real step); (sampled mode) logprob and entropy <float64>[S], summed
        over the steps.

        tf.while_loop puts ONE copy of its body into the graph and runs it up
        to T times, T a tensor known only at run time, so the same graph
        serves every sentence length. The body was traced once with symbolic
        shapes: it cannot inspect a transition in Python, hence the masks of
        ``_step``. A while loop has no xs: the body takes step t's own from
        the arrays, by t. Loop variables (t, the carry, the records) are what
        flows from one iteration to the next.
        """
        ops, steps, uniforms = xs
        # The loop stops after the batch's longest sentence, not at T: the
        # steps after it are PAD for every sentence and change nothing, so a
        # batch padded to its length bucket's T costs only its real length.
        # (JAX's scan must have T iterations; its step is a cond instead.)
        if loop.mode == "gold":
            stop = tf.reduce_max(tf.where(ops != PAD, steps[:, None] + 1, 0))
        else:  # a sentence of n words runs exactly 2n - 1 decided steps (docs/spec.md §7)
            stop = tf.reduce_max(2 * loop.n_leaves - 1)

        # ---- the records of ys, loop variables: TensorArrays of T elements of
        # [S, ...], and the running sums of logprob and entropy (float64).
        # Stacking gives the elements never written as zeros (a TensorList's
        # unset elements, with and without XLA), which is what a PAD step
        # records: logits 0, transition PAD (0).
        records = {}
        if loop.head:
            if loop.mode != "gold":
                records["transitions"] = tf.TensorArray(tf.int32, size=loop.T, element_shape=[None])
                if loop.mode == "sampled":
                    records["logprob"] = records["entropy"] = tf.zeros([loop.S], tf.float64)
            records["logits"] = tf.TensorArray(carry[0].dtype, size=loop.T, element_shape=[None, 2])

        def body(t, carry, records):
            carry, ys = self._step(loop, carry, (tf.gather(ops, t) if ops is not None else None, t,
                                                 tf.gather(uniforms, t) if uniforms is not None else None))
            return t + 1, carry, {name: record.write(t, ys[name]) if isinstance(record, tf.TensorArray)
                                  else record + ys[name] for name, record in records.items()}

        # The cells' weights are read once, here, before the loop
        # (layers.read_once): a variable read inside the body is a new tensor
        # at every step, and the backward pass keeps one per step (under XLA a
        # copy per step). For the gradient, TensorFlow builds a second while
        # loop that runs the steps backwards, fed by per-step values the
        # forward loop stacks up (only the small [S, *] tensors a step reads:
        # the thin stack is never saved whole). maximum_iterations bounds
        # those stacks, which XLA needs to know.
        with read_once(*step_variables(self, loop.head)):
            _, carry, records = tf.while_loop(lambda t, *_: t < stop, body, (tf.constant(0), carry, records),
                                              maximum_iterations=loop.T)
        return carry, {name: record.stack() if isinstance(record, tf.TensorArray) else record
                       for name, record in records.items()}

    def _step(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """One transition for every sentence, as the loop body runs it.

        carry: (thin, pointers, sp, bp, state) (see _start); xs: op
        <int32>[S] (None when decided), t <int32>[], and in sampled mode u
        <float64>[S]. Returns the new carry, and ys: with the head, logits
        <float>[S, 2] (zeros at PAD), in decided modes the transitions
        followed <int32>[S], in sampled mode the step's logprob and entropy
        <float64>[S]; {} without the head.
        """
        thin, pointers, sp, bp, state = carry
        op, t, u = xs
        H = self.hidden_dim
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
        if self.tracker is not None:  # a Python `if` on the model's configuration, not on data
            h_t, c_t = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)
            keep = active[:, None]
            state = (tf.where(keep, h_t, state[0]), tf.where(keep, c_t, state[1]))
            tracking = state[0]

        # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
        ys = {}
        if loop.head:
            # h_t, equal to state[0] wherever the step is active, read before
            # the tf.where so that its gradient is a sum of two terms (see cells.Reduce).
            logits = self.tracker.transition_logits(h_t)  # [S, 2] = (t_S, t_R)
            if loop.mode != "gold":
                # ---- the decision, taken on the device (head.py): two masks
                # that take the place of the gold op's.
                is_shift, is_reduce, logprob, entropy = decide(logits, u, can_shift, can_reduce, loop.mode)
                ys["transitions"] = tf.where(is_reduce, REDUCE, tf.where(is_shift, SHIFT, PAD))
                if loop.mode == "sampled":
                    ys["logprob"], ys["entropy"] = logprob, entropy
            ys["logits"] = tf.where(active[:, None], logits, tf.zeros([], logits.dtype))  # zeros at PAD

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        h, c = self.reduce.compose(tf.split(below, 2, axis=1), tf.split(top, 2, axis=1), tracking)  # [S, H] each
        composed = tf.concat([h, c], axis=1)
        thin, pointers, sp, bp = self._write(loop, t, thin, pointers, sp, bp, is_shift, is_reduce, composed)
        return (thin, pointers, sp, bp, state), ys

    def _read(self, loop: _Loop, thin, pointers, sp, bp) -> tuple:
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front, a leaf's row (the
        # leaves are rows 0..N-1). Indices are clipped into range.
        can_shift = bp < loop.n_leaves  # the buffer is not empty
        top_row = tf.gather(pointers, tf.maximum(sp - 1, 0), batch_dims=1)  # follow the back-pointer
        below_row = tf.gather(pointers, tf.maximum(sp - 2, 0), batch_dims=1)
        # An absent item reads the zero row (N + T) by address: one gather
        # reads the step's three items, and nothing is masked after it. (A
        # masked read would also be wrong here: the gradient of a TensorArray
        # gather overwrites a repeated address instead of adding to it, so a
        # masked read of a real row would erase another read's gradient there.)
        rows = tf.stack([tf.where(can_shift, bp, loop.zero_row),
                         tf.where(sp >= 1, top_row, loop.zero_row),
                         tf.where(sp >= 2, below_row, loop.zero_row)])  # [3, S]
        front, top, below = tf.unstack(self._gather(loop, thin, rows), num=3)
        return top, below, front, can_shift

    def _write(self, loop: _Loop, t, thin, pointers, sp, bp, is_shift, is_reduce, composed) -> tuple:
        """Keep step t's result and move the pointers: (thin, pointers, sp, bp)."""
        # Row N + t of the thin stack is this step's composition, for all
        # sentences at once; only a REDUCE ever points at it.
        new_row = loop.N + t
        thin = self._scatter(loop, thin, new_row, composed)
        # ---- push a pointer: the leaf's row for SHIFT at slot sp, the new row
        # for REDUCE at slot sp - 2 (where the left child was). PAD writes at
        # slot sp, the free slot above the top, which nobody reads, so no
        # branch is needed.
        write_slot = sp - 2 * tf.cast(is_reduce, tf.int32)
        target = tf.where(is_shift, bp, new_row)
        pointers = tf.where(tf.equal(loop.slots, write_slot[:, None]), target[:, None], pointers)  # [S, N + 1]
        sp = sp + tf.cast(is_shift, tf.int32) - tf.cast(is_reduce, tf.int32)
        bp = bp + tf.cast(is_shift, tf.int32)
        return thin, pointers, sp, bp

    def _root(self, loop: _Loop, thin, pointers):
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        return self._gather(loop, thin, pointers[None, :, 0])[0, :, :self.hidden_dim]

    # ---- the thin stack: rows of items, read by address, written a row a step.
    # A TensorArray element is one item [2H], read and written by address
    # (gather, scatter), so both containers hold the thin stack flattened,
    # <float>[(N + T + 1) * S, 2H]: the item of sentence s in row r at r * S + s.

    def _new_thin(self, leaves, T):
        """The thin stack: the leaves in rows 0 .. N - 1, a row per step (zeros
        until it is written), and the zero row, N + T; flattened, in the
        model's container."""
        S, N = tf.shape(leaves)[0], tf.shape(leaves)[1]
        two_h, dtype = 2 * self.hidden_dim, leaves.dtype
        leaves_by_row = tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * S, two_h])  # leaf j of sentence s at j*S + s
        zero_row = N + T  # last: leaf j is row j, step t's composition row N + t
        if self.container == "tensor_array":
            thin = tf.TensorArray(dtype, size=(zero_row + 1) * S, element_shape=[two_h], clear_after_read=False)
            thin = thin.scatter(tf.range(N * S), leaves_by_row)
            return thin.scatter(zero_row * S + tf.range(S), tf.zeros([S, two_h], dtype))  # the zero row
        # Rows N .. N + T - 1 start as zeros and are overwritten step by step; row N + T stays zeros.
        return tf.concat([leaves_by_row, tf.zeros([(T + 1) * S, two_h], dtype)], axis=0)

    def _gather(self, loop: _Loop, thin, rows):
        """The items of the S sentences in ``rows`` <int32>[K, S] -> <float>[K, S, 2H]."""
        addresses = rows * loop.S + loop.sentences  # [K, S]
        if self.container == "tensor_array":  # a TensorArray gathers a vector of addresses (K is static: 3 or 1)
            return tf.reshape(thin.gather(tf.reshape(addresses, [-1])), [rows.shape[0], -1, 2 * self.hidden_dim])
        return tf.gather(thin, addresses)

    def _scatter(self, loop: _Loop, thin, row, items):
        """``thin`` with ``items`` <float>[S, 2H] as its row ``row``."""
        addresses = row * loop.S + loop.sentences  # [S]
        if self.container == "tensor_array":
            return thin.scatter(addresses, items)
        return tf.tensor_scatter_nd_update(thin, addresses[:, None], items)


class _Loop(NamedTuple):
    """What every step of one run reads, fixed before the loop: the Python
    choices of the program (mode, head), the sizes, and the batch's tensors
    the steps share. Each framework's step takes it as its first argument
    (here the loop body closes over it; the pointers' write also reads the
    slot numbers). The sizes are tensors: one trace serves every shape."""

    mode: str
    head: bool
    S: tf.Tensor
    N: tf.Tensor
    T: tf.Tensor
    sentences: tf.Tensor  # <int32>[S]: 0 .. S - 1
    n_leaves: tf.Tensor  # <int32>[S]: the leaves in each buffer
    zero_row: tf.Tensor  # N + T: the thin stack's last row, zeros
    slots: tf.Tensor  # <int32>[1, N + 1]
