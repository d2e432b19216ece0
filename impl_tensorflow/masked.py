"""SPINN on masked arrays, in TensorFlow: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``_decide``, docs/decided-graphs.md), and the rest of the step is the one
gold mode runs. The cells are cells.py's: ``SPINN`` holds the submodules of
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
reports flows through the loop as TensorArrays (``_record``), since a
Python list cannot (the body runs once, when traced). Why the graph is
built this way, and what it costs: docs/static-vs-dynamic.md.

``layout=`` picks the container of ``thin``: ``"tensor_array"`` (a
``tf.TensorArray``, for the graph executor on the CPU, which copies a plain
tensor updated inside a while loop at every step) or ``"dense"`` (a plain
tensor, for XLA, which cannot compile the TensorArray scatter, and GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from shared.params import ModelConfig
from shared.parsing import REDUCE_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import choice_probabilities, choice_scores
from .layers import read_once

LAYOUTS = ("tensor_array", "dense")


class SPINN(tf.Module):
    """The shift-reduce encoder as one ``tf.while_loop`` over padded arrays."""

    def __init__(self, config: ModelConfig, dtype: tf.DType = tf.float32, layout: str = "tensor_array",
                 name: str = "spinn"):
        super().__init__(name=name)
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; choose from {LAYOUTS}")
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.layout = layout
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
        loop, (thin, pointers, sp, bp, state) = self._start(leaves, transitions, mode, uniforms, head)
        S, T, dtype = loop.S, loop.T, leaves.dtype
        # The loop stops after the batch's longest sentence, not at T: the
        # steps after it are PAD for every sentence and change nothing, so a
        # batch padded to its length bucket's T costs only its real length.
        # (JAX's scan must have T iterations; its step is a cond instead.)
        if mode == "gold":
            stop = tf.reduce_max(tf.where(tf.not_equal(transitions, PAD), tf.range(1, T + 1)[None, :], 0))
        else:  # a sentence of n words runs exactly 2n - 1 decided steps (docs/spec.md §7)
            stop = tf.reduce_max(2 * loop.n_leaves - 1)

        # ---- the records of parse: what a step reports in `taken`, written
        # into loop variables: TensorArrays of T elements of [S, ...], and the
        # running sums of logprob and entropy. The loop writes elements
        # 0..stop-1 of each TensorArray. Stacking gives the elements never
        # written as zeros (a TensorList's unset elements, with and without
        # XLA), which is what a PAD step records: logits 0, transition PAD (0).
        records = {}
        if head:
            records["logits"] = tf.TensorArray(dtype, size=T, element_shape=[None, 2])
            if mode != "gold":
                records["transitions"] = tf.TensorArray(tf.int32, size=T, element_shape=[None])
            if mode == "sampled":
                records["scores"] = tf.zeros([S, 2], tf.float64)  # per sentence: (logprob, entropy), summed in float64

        # ---- the loop --------------------------------------------------------
        # tf.while_loop puts ONE copy of `body` into the graph and runs it up
        # to T times, T a tensor known only at run time, so the same graph
        # serves every sentence length. The body was traced once with symbolic
        # shapes: it cannot inspect a transition in Python, hence the masks of
        # `_step`. Loop variables (thin, pointers, ...) are what flows from
        # one iteration to the next. For the gradient, TensorFlow builds a
        # second while loop that runs the steps backwards, fed by per-step
        # values the forward loop stacks up (only the small [S, *] tensors a
        # step reads: the thin stack is never saved whole). maximum_iterations
        # bounds those stacks, which XLA needs to know.
        def body(t, thin, pointers, sp, bp, state, records):
            taken = {}  # what the step's head scored and did (with the head), for the records
            t_next, thin, pointers, sp, bp, state = self._step(loop, t, thin, pointers, sp, bp, state, taken)
            return t_next, thin, pointers, sp, bp, state, _record(records, t, taken)

        # The cells' weights are read once, here, before the loop
        # (layers.read_once): a variable read inside the body is a new tensor
        # at every step, and the backward pass keeps one per step (under XLA a
        # copy per step).
        with read_once(*self._weights(head)):
            _, thin, pointers, _, _, _, records = tf.while_loop(
                lambda t, *_: t < stop, body, (tf.constant(0), thin, pointers, sp, bp, state, records),
                maximum_iterations=T)

        encodings = self._root(loop, thin, pointers)  # [S, H]
        if not head:
            return encodings
        followed = tf.transpose(records["transitions"].stack()) if mode != "gold" else transitions  # [S, T]
        if mode == "sampled":
            logprob, entropy = tf.unstack(tf.cast(records["scores"], dtype), axis=1)
        else:
            logprob = entropy = tf.zeros([S], dtype)
        return SentenceParses(encodings, followed, tf.transpose(records["logits"].stack(), [1, 0, 2]), logprob, entropy)

    def _start(self, leaves, transitions, mode: str, uniforms, head: bool):
        """What every step reads (a _Loop), and the loop's state before step 0:
        (thin, pointers, sp, bp, state), an empty stack, the tracker at zeros
        (() without a tracker)."""
        H, D = self.hidden_dim, self.tracker_dim
        # Sizes are tensors: this graph serves every S, N and T.
        S, N = tf.shape(leaves)[0], tf.shape(leaves)[1]
        T = tf.shape(transitions)[1]
        sentences = tf.range(S)  # [S]: sentence s's item in row r is at r * S + s
        # The buffer holds as many leaves as there are SHIFTs (later tokens are padding).
        n_leaves = tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1)  # [S]
        zero_row = N + T  # last: leaf j is row j, step t's composition row N + t
        leaves_by_row = tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * S, 2 * H])  # leaf j of sentence s at j*S + s
        thin = self._new_thin(leaves_by_row, zero_row, S)
        loop = _Loop(
            mode=mode, head=head, dtype=leaves.dtype, S=S, N=N, T=T, sentences=sentences,
            n_leaves=n_leaves, zero_row=zero_row,
            transitions_by_step=tf.transpose(transitions),  # [T, S]: row t is step t of every sentence
            slots=tf.range(N + 1)[None, :],  # [1, N + 1]: stack slot numbers (N items, plus a free slot)
            read_sentences=tf.tile(sentences, [3]),  # [3S], for the three reads of a step
            uniforms_by_step=tf.transpose(uniforms) if mode == "sampled" else None,  # <float64>[T, S]
        )
        zeros = tf.zeros([S], tf.int32)
        state = (tf.zeros([S, D], loop.dtype), tf.zeros([S, D], loop.dtype)) if D > 0 else ()
        return loop, (thin, tf.zeros([S, N + 1], tf.int32), zeros, zeros, state)

    def _weights(self, head: bool) -> list[tf.Variable]:
        """The variables a step reads: the tracker's, Reduce's, and the head's where it is used."""
        tracker = [self.tracker.kernel, self.tracker.bias] if self.tracker is not None else []
        transition = [self.tracker.transition.kernel, self.tracker.transition.bias] if head else []
        return tracker + [self.reduce.kernel, self.reduce.bias] + transition

    def _step(self, loop: _Loop, t, thin, pointers, sp, bp, state, taken: dict):
        """One transition for every sentence, as the loop body runs it.

        t <int32>[]; thin (the layout's container); pointers <int32>[S, N + 1];
        sp, bp <int32>[S]; state (h, c) <float>[S, D], or () without a
        tracker. Returns (t + 1, and the new thin, pointers, sp, bp and
        state); with the head it fills ``taken`` with what the head scored
        and what was done (the records of parse).
        """
        H, mode = self.hidden_dim, loop.mode
        top, below, front, can_shift = self._read(loop, thin, pointers, sp, bp)

        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        # PAD keeps nothing: stack, buffer and tracker stay as they were.
        if mode == "gold":
            op = tf.gather(loop.transitions_by_step, t)  # [S]
            is_shift, is_reduce, active = tf.equal(op, SHIFT), tf.equal(op, REDUCE), tf.not_equal(op, PAD)
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
        if loop.head:
            # h_t, equal to state[0] wherever the step is active, read before
            # the tf.where so that its gradient is a sum of two terms (see cells.Reduce).
            logits = self.tracker.transition_logits(h_t)  # [S, 2] = (t_S, t_R)
            if mode != "gold":
                # ---- the decision, taken on the device: two masks that take
                # the place of the gold op's.
                uniform = tf.gather(loop.uniforms_by_step, t) if mode == "sampled" else None
                is_shift, is_reduce, taken["scores"] = _decide(logits, uniform, can_shift, can_reduce, mode)
                taken["transitions"] = tf.where(is_shift, SHIFT, tf.where(is_reduce, REDUCE, PAD))
            taken["logits"] = tf.where(active[:, None], logits, tf.zeros([], loop.dtype))  # zeros at PAD

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        h, c = self.reduce.compose(tf.split(below, 2, axis=1), tf.split(top, 2, axis=1), tracking)  # [S, H] each
        thin, pointers, sp, bp = self._write(loop, t, thin, pointers, sp, bp, is_shift, is_reduce,
                                             tf.concat([h, c], axis=1))
        return t + 1, thin, pointers, sp, bp, state

    def _read(self, loop: _Loop, thin, pointers, sp, bp):
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front. Indices are clipped
        # into range.
        can_shift = bp < loop.n_leaves  # the buffer is not empty
        top_row = tf.gather(pointers, tf.maximum(sp - 1, 0), batch_dims=1)
        below_row = tf.gather(pointers, tf.maximum(sp - 2, 0), batch_dims=1)
        # Unlike JAX and PyTorch, which mask an absent item after reading it,
        # an absent item reads the zero row (N + T) by address: one gather
        # reads the step's three items, and the gradient of a TensorArray
        # gather overwrites a repeated address instead of adding to it, so a
        # masked read of a real row would erase another read's gradient there.
        rows = tf.concat([tf.where(can_shift, bp, loop.zero_row),
                          tf.where(sp >= 1, top_row, loop.zero_row),
                          tf.where(sp >= 2, below_row, loop.zero_row)], axis=0)  # [3S]
        front, top, below = tf.split(self._gather(thin, rows * loop.S + loop.read_sentences), 3)
        return top, below, front, can_shift

    def _write(self, loop: _Loop, t, thin, pointers, sp, bp, is_shift, is_reduce, composed):
        """Keep step t's result and move the pointers: (thin, pointers, sp, bp)."""
        # Row N + t of the thin stack is this step's composition, for all
        # sentences at once; only a REDUCE ever points at it.
        new_row = loop.N + t
        thin = self._scatter(thin, new_row * loop.S + loop.sentences, composed)
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
        return self._gather(thin, pointers[:, 0] * loop.S + loop.sentences)[:, :self.hidden_dim]

    # ---- the thin stack's container: write rows, read items by address -----
    # A TensorArray element is one item [2H], read and written by address
    # (gather, scatter), so both containers hold the thin stack flattened,
    # <float>[(N + T + 1) * S, 2H]: the item of sentence s in row r at r * S + s.

    def _new_thin(self, leaves_by_row: tf.Tensor, zero_row: tf.Tensor, S: tf.Tensor):
        """A thin stack of ``(zero_row + 1) * S`` items: the leaves in rows 0 .. N - 1,
        zeros in the last row, ``zero_row``; the rows between are the steps'."""
        two_h = 2 * self.hidden_dim
        dtype = leaves_by_row.dtype
        leaf_items = tf.shape(leaves_by_row)[0]  # N * S, from address 0 on
        if self.layout == "tensor_array":
            thin = tf.TensorArray(dtype, size=(zero_row + 1) * S, element_shape=[two_h], clear_after_read=False)
            thin = thin.scatter(tf.range(leaf_items), leaves_by_row)
            return thin.scatter(zero_row * S + tf.range(S), tf.zeros([S, two_h], dtype))  # the zero row
        # Rows N .. N + T - 1 start as zeros and are overwritten step by step; row N + T stays zeros.
        return tf.concat([leaves_by_row, tf.zeros([(zero_row + 1) * S - leaf_items, two_h], dtype)], axis=0)

    def _gather(self, thin, addresses):
        """The items at ``addresses`` <int32>[K] -> <float>[K, 2H]."""
        if self.layout == "tensor_array":
            return thin.gather(addresses)
        return tf.gather(thin, addresses)

    def _scatter(self, thin, addresses, items):
        """``thin`` with ``items`` <float>[K, 2H] written at ``addresses`` <int32>[K]."""
        if self.layout == "tensor_array":
            return thin.scatter(addresses, items)
        return tf.tensor_scatter_nd_update(thin, addresses[:, None], items)


def _decide(logits, uniform, can_shift, can_reduce, mode: str):
    """The decision of docs/spec.md §7, for every sentence at once, on the device.

    logits <float>[S, 2] = (t_S, t_R); uniform <float64>[S] (sampled mode,
    else None); can_shift (the buffer is not empty), can_reduce (two items
    or more on the stack) <bool>[S]. Returns the masks is_shift, is_reduce
    <bool>[S] (both false: the sentence is finished, a PAD step) and, in
    sampled mode, the step's (log p(action taken), entropy) <float64>[S, 2],
    zero unless it was a choice (else None).
    """
    # Define-by-run code must bring the head's verdict back to Python here
    # to pick a branch; on the device it is one more mask per sentence, and
    # the masked step that follows is the one gold mode runs.
    choice = can_shift & can_reduce  # both actions possible: the head decides
    t_shift, t_reduce = tf.unstack(logits, axis=1)  # one op: the gradient of logits stays a two-term sum
    if mode == "predicted":
        wants_reduce = t_reduce > t_shift  # a tie SHIFTs
    else:
        # p_R and the logs in float64, whatever the model's dtype, like
        # the uniforms: a float32 sum of 30 logs of size 1 loses 1e-5.
        diff = tf.cast(t_reduce, tf.float64) - tf.cast(t_shift, tf.float64)  # t_R - t_S
        log_p, p = choice_probabilities(diff)  # <float64>[S, 2] each: (log) (p_S, p_R), stable
        wants_reduce = uniform < p[:, REDUCE_COLUMN]  # u < p_R
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (tf.logical_not(can_shift) | wants_reduce)
    is_shift = can_shift & tf.logical_not(is_reduce)
    if mode != "sampled":
        return is_shift, is_reduce, None
    scores = choice_scores(log_p, p, is_reduce)  # <float64>[S, 2]: (log p(taken), entropy)
    return is_shift, is_reduce, tf.where(choice[:, None], scores, tf.zeros([], tf.float64))  # choices only


@dataclass(frozen=True)
class _Loop:
    """What every step of one run reads, fixed before the loop: the Python
    choices of the trace (mode, head), sizes and the batch's tensors (None
    where the mode has none). One value that the loop body closes over,
    where PyTorch's and JAX's step take them as arguments."""

    mode: str
    head: bool
    dtype: tf.DType
    S: tf.Tensor
    N: tf.Tensor
    T: tf.Tensor
    sentences: tf.Tensor  # <int32>[S]
    n_leaves: tf.Tensor  # <int32>[S]: leaves in each buffer
    zero_row: tf.Tensor  # <int32>[]: N + T, the thin stack's last row, zeros
    transitions_by_step: tf.Tensor  # <int32>[T, S]
    slots: tf.Tensor  # <int32>[1, N + 1]
    read_sentences: tf.Tensor  # <int32>[3S]
    uniforms_by_step: tf.Tensor | None  # <float64>[T, S], sampled mode


def _record(records: dict, t, taken: dict) -> dict:
    """``records`` with step t's ``taken`` added: a TensorArray gets element
    t, a running sum (float64 scores) the step's term. {} stays {}."""
    return {name: record.write(t, taken[name]) if isinstance(record, tf.TensorArray) else record + taken[name]
            for name, record in records.items()}
