"""The SPINN modules as one static graph (docs/spec.md §3).

Nothing here looks at a value in Python. The batch is a set of tensors whose
sizes are only known when the graph runs, the transition steps are one
``tf.while_loop``, and what an example's transition *means* is decided inside
the graph by masks (``tf.where``) and integer pointers. Every sentence
computes a tracker step and a composition at every step; the masks decide
which results are kept.

Shapes: S sentences (2B when premise and hypothesis run together), N tokens,
T steps, E embedding, H hidden, D tracker. An item (stack entry, buffer
entry) is ``[h; c]``, <float>[2H].

The stack is the thin stack of Bowman et al. (2016). One *memory* holds every
item that exists during the run, written once and never moved, R = N + T + 1
rows of S items each, in the row order of JAX's thin stack and PyTorch's
masked one (leaves, then compositions) plus one row of zeros, last::

    row j            leaf j: the buffer (its front is leaf number ``buffer``)
    row N + t        the composition computed at step t (kept only if step t was REDUCE)
    row N + T        zeros: what an absent item reads as (empty buffer, short stack)

The other two mask what they read instead; here a pointer to the zero row
makes an absent item read as zeros with no mask. The item of sentence s in
row r sits at address ``r * S + s``. The stack itself is
``pointers <int32>[S, N + 2]``: row numbers, one stack per sentence. Slots 0
and 1 hold the zero row, N + T, for good (two absent items below the
bottom), the items sit in slots 2 .. depth + 1, the top at ``depth + 1`` and
the item below it at ``depth``. SHIFT pushes the front leaf's row number;
REDUCE overwrites the left child's slot with the new row. No vector is ever
copied onto a stack, and a step writes exactly one new row.

The memory container (``memory=``):

* ``"tensor_array"`` (graph executor on the CPU): a ``tf.TensorArray`` with
  one element per address, written with ``scatter`` and read with ``gather``.
  Elements are separate buffers, so a step's write costs O(S * H), and the
  backward pass keeps only the few [S, *] tensors a step reads. A plain tensor
  updated with ``tf.tensor_scatter_nd_update`` inside a while loop is copied
  whole at every step by TensorFlow's executor (in a prototype at S=256, N=32:
  a 13x slower forward pass).
* ``"dense"`` (XLA, GPU): a plain ``<float>[R * S, 2H]`` tensor, written with
  ``tf.tensor_scatter_nd_update`` and read with ``tf.gather``. XLA updates it
  in place, but cannot compile the TensorArray scatter; on a GPU the copy is
  cheap and the TensorArray's per-element copies are not.

The backward pass never saves the memory per step: the gradient of a read
needs only the addresses and the memory's shape (tests/test_tensorflow.py
checks the traced graph). Under XLA, TensorFlow does stack the dense memory
per step, for its shape alone, and XLA, where every shape is static, drops
that stack: peak memory measured at T = 31, 79, 127 grows linearly with T.

Parses decided by the model (docs/spec.md §7). With a transition head the
tracker state scores SHIFT and REDUCE at every step. ``SPINN.parse`` runs the
same loop and the same masked step; only where ``op`` comes from differs. In
gold mode it is read from the batch, as in ``__call__``; in predicted and
sampled mode it is a tensor op on the head's logits and the pointers
(validity), taken inside the graph, so the decision never leaves the device
and one trace serves every batch. What each step decided is written into
loop variables (TensorArrays of T elements) and returned with the encodings.
The gold path of ``__call__`` builds exactly the graph it built before the
head existed: the head's pieces are added by Python ``if``s on the mode,
decided when tracing.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from shared.params import ModelConfig
from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker

MEMORIES = ("tensor_array", "dense")


def choice_scores(log_p: tf.Tensor, p: tf.Tensor, reduces: tf.Tensor) -> tf.Tensor:
    """One sampled step's (log p(action taken), entropy), <float64>[S, 2] (docs/spec.md §7).

    ``log_p`` = (log p_S, log p_R) = log σ(∓(t_R - t_S)) and ``p`` = exp(log_p),
    <float64>[S, 2]; ``reduces`` <bool>[S] is the action taken. The entropy is
    -(p_S log p_S + p_R log p_R). Both come out of one product and one sum,
    so that log_p and p each feed at most two ops and their gradients stay
    two-term sums (see Reduce); saturated logits give 0, never NaN.
    """
    taken = tf.one_hot(tf.where(reduces, REDUCE_COLUMN, SHIFT_COLUMN), 2, dtype=log_p.dtype)  # [S, 2]
    weights = tf.stack([taken, -p], axis=1)  # [S, 2, 2]: row 0 picks log p(taken), row 1 weighs by -p
    return tf.reduce_sum(log_p[:, None, :] * weights, axis=2)


def _decide(logits, active, can_shift, can_reduce, mode: str, uniform=None):
    """The decision of docs/spec.md §7 for every sentence at once, inside the graph.

    logits <float>[S, 2] = (t_S, t_R); active (the sentence is not finished),
    can_shift (the buffer has leaves), can_reduce (two items or more on the
    stack) <bool>[S]; uniform <float64>[S] (sampled mode). Returns the masks
    is_shift, is_reduce <bool>[S] (both false: a PAD step), the op taken
    <int32>[S], and in sampled mode the step's (log p(taken), entropy)
    <float64>[S, 2], zero unless it was a choice (else None).
    """
    # Define-by-run code must bring the head's verdict back to Python here
    # to pick a branch; in the graph it is one more mask per sentence, and
    # the masked step that follows is the one gold mode runs.
    choice = active & can_shift & can_reduce  # both valid: the head chooses
    t_shift, t_reduce = tf.unstack(logits, axis=1)  # one op: the gradient of logits stays a two-term sum
    if mode == "predicted":
        wants_reduce = t_reduce > t_shift  # a tie SHIFTs
    else:
        # p_R and the logs in float64, whatever the model's dtype, like
        # the uniforms: a float32 sum of 30 logs of size 1 loses 1e-5.
        diff = tf.cast(t_reduce, tf.float64) - tf.cast(t_shift, tf.float64)  # t_R - t_S
        log_p = tf.math.log_sigmoid(tf.stack([-diff, diff], axis=1))  # stable: log σ(x) = -softplus(-x)
        p = tf.exp(log_p)  # <float64>[S, 2] = (p_S, p_R); exp(log σ) keeps a tiny p_R tiny
        wants_reduce = uniform < p[:, REDUCE_COLUMN]  # u < p_R
    # Where only one action is valid it is taken, whatever t says.
    reduces = tf.where(choice, wants_reduce, tf.logical_not(can_shift))
    is_shift = active & tf.logical_not(reduces)
    is_reduce = active & reduces
    op = tf.where(is_shift, SHIFT, tf.where(is_reduce, REDUCE, PAD))
    if mode != "sampled":
        return is_shift, is_reduce, op, None
    scores = choice_scores(log_p, p, reduces)  # <float64>[S, 2]: (log p(taken), entropy)
    return is_shift, is_reduce, op, tf.where(choice[:, None], scores, tf.zeros([], tf.float64))  # choices only


@dataclass(frozen=True)
class _Loop:
    """What every step of one run reads, fixed before the loop: the Python
    choices of the trace (mode, with_head), sizes, the batch's tensors and
    the weights (None where the mode or the model has none)."""

    mode: str
    with_head: bool
    dtype: tf.DType
    S: tf.Tensor
    N: tf.Tensor
    T: tf.Tensor
    sentences: tf.Tensor  # <int32>[S]
    n_leaves: tf.Tensor  # <int32>[S]: leaves in each buffer
    absent_row: tf.Tensor  # <int32>[]: N + T, the memory's last row, zeros
    transitions_by_step: tf.Tensor  # <int32>[T, S]
    slots: tf.Tensor  # <int32>[1, N + 2]
    read_sentences: tf.Tensor  # <int32>[3S]
    tracker_weights: tuple | None
    reduce_weights: tuple
    head_weights: tuple | None
    num_steps: tf.Tensor | None  # <int32>[S], decided modes: 2n - 1
    uniforms_by_step: tf.Tensor | None  # <float64>[T, S], sampled mode

    @property
    def deciding(self) -> bool:
        """The head, not the batch, says what each step does."""
        return self.mode != "gold"


class SPINN(tf.Module):
    """The shift-reduce encoder: projected leaves and transitions -> one
    encoding per sentence, as one ``tf.while_loop``."""

    def __init__(self, config: ModelConfig, dtype: tf.DType, memory: str = "tensor_array", name: str = "spinn"):
        super().__init__(name=name)
        if memory not in MEMORIES:
            raise ValueError(f"unknown memory {memory!r}; choose from {MEMORIES}")
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.memory = memory
        with self.name_scope:
            self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, dtype, config.transition_head)
                            if config.tracker_dim > 0 else None)
            self.reduce = Reduce(config.hidden_dim, config.tracker_dim, dtype)

    # ---- the memory: write rows, read items by address --------------------

    def _new_memory(self, leaves_by_row: tf.Tensor, absent_row: tf.Tensor, S: tf.Tensor):
        """A memory of ``(absent_row + 1) * S`` items: the leaves in rows 0 .. N - 1,
        zeros in the last row, ``absent_row``; the rows between are the steps'."""
        two_h = 2 * self.hidden_dim
        dtype = leaves_by_row.dtype
        leaf_items = tf.shape(leaves_by_row)[0]  # N * S, from address 0 on
        if self.memory == "tensor_array":
            memory = tf.TensorArray(dtype, size=(absent_row + 1) * S, element_shape=[two_h], clear_after_read=False)
            memory = memory.scatter(tf.range(leaf_items), leaves_by_row)
            return memory.scatter(absent_row * S + tf.range(S), tf.zeros([S, two_h], dtype))  # the zero row
        # Rows N .. N + T - 1 start as zeros and are overwritten step by step; row N + T stays zeros.
        return tf.concat([leaves_by_row, tf.zeros([(absent_row + 1) * S - leaf_items, two_h], dtype)], axis=0)

    def _write(self, memory, addresses, items):
        if self.memory == "tensor_array":
            return memory.scatter(addresses, items)
        return tf.tensor_scatter_nd_update(memory, addresses[:, None], items)

    def _read(self, memory, addresses):
        if self.memory == "tensor_array":
            return memory.gather(addresses)
        return tf.gather(memory, addresses)

    # ---- the encoder --------------------------------------------------------

    def __call__(self, leaves: tf.Tensor, transitions: tf.Tensor) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token), transitions
        <int32>[S, T] -> encodings <float>[S, H]. Inputs must pass shared.contract.check_batch."""
        return self._run(leaves, transitions)

    def parse(self, leaves: tf.Tensor, transitions: tf.Tensor, mode: str = "predicted",
              uniforms: tf.Tensor | None = None) -> SentenceParses:
        """The encoder with its transition head (docs/spec.md §7).

        leaves <float>[S, N, 2H]; transitions <int32>[S, T], passing
        shared.contract's checks on the host: in gold mode they are followed,
        in predicted and sampled mode only each row's number of SHIFTs (n) is
        used, and the head decides 2n - 1 steps; uniforms <float64>[S, T]
        (sampled mode only): step t of a sentence REDUCEs, where both actions
        are valid, if ``uniforms[:, t]`` < p_R. Returns
        shared.parsing.SentenceParses: the encodings and what was followed and scored.
        """
        return self._run(leaves, transitions, mode, uniforms, with_head=True)

    def _run(self, leaves, transitions, mode: str = "gold", uniforms=None, with_head: bool = False):
        """The loop behind __call__ (gold mode, no head: returns the encodings
        <float>[S, H]) and parse (with the head: returns SentenceParses).
        ``mode`` and ``with_head`` are Python values, fixed when tracing: they
        choose which ops the graph has, never which ones run."""
        loop, memory = self._prepare(leaves, transitions, mode, uniforms, with_head)
        # The loop stops after the batch's longest sentence, not at T: the
        # steps after it are PAD for every sentence and change nothing, so a
        # batch padded to its length bucket's T costs only its real length.
        # (JAX's scan must have T iterations; its step is a cond instead.)
        T = loop.T
        if loop.deciding:  # a sentence of n words runs exactly 2n - 1 decided steps (docs/spec.md §7)
            last = tf.reduce_max(loop.num_steps)
        else:
            last = tf.reduce_max(tf.where(tf.not_equal(transitions, PAD), tf.range(1, T + 1)[None, :], 0))
        if not with_head:
            encodings, _ = self._loop(loop, memory, last, {})
            return encodings

        # ---- the records of parse: what a step reports in `taken`, written
        # into loop variables: TensorArrays of T elements of [S, ...]
        # (per-step outputs, like the memory, must flow through the loop; a
        # Python list cannot, the body runs only once, when traced), and the
        # running sums of logprob and entropy.
        S, T, dtype = loop.S, loop.T, leaves.dtype
        records = {"logits": tf.TensorArray(dtype, size=T, element_shape=[None, 2])}
        if loop.deciding:
            records["transitions"] = tf.TensorArray(tf.int32, size=T, element_shape=[None])
        if mode == "sampled":
            records["scores"] = tf.zeros([S, 2], tf.float64)  # per sentence: (logprob, entropy), summed in float64
        # The loop writes elements 0..last-1 of each TensorArray. Stacking
        # gives the elements never written as zeros (a TensorList's unset
        # elements, with and without XLA), which is what a PAD step records:
        # logits 0, transition PAD (0).
        encodings, records = self._loop(loop, memory, last, records)
        followed = tf.transpose(records["transitions"].stack()) if loop.deciding else transitions  # [S, T]
        if mode == "sampled":
            logprob, entropy = tf.unstack(tf.cast(records["scores"], dtype), axis=1)
        else:
            logprob = entropy = tf.zeros([S], dtype)
        return SentenceParses(encodings, followed, tf.transpose(records["logits"].stack(), [1, 0, 2]), logprob, entropy)

    def _prepare(self, leaves, transitions, mode: str, uniforms, with_head: bool):
        """What every step reads (a _Loop) and the memory the loop starts from."""
        H = self.hidden_dim
        # Sizes are tensors: this graph serves every S, N and T.
        S, N = tf.shape(leaves)[0], tf.shape(leaves)[1]
        T = tf.shape(transitions)[1]
        sentences = tf.range(S)  # [S]: sentence s's item in row r is at r * S + s
        # The buffer holds as many leaves as there are SHIFTs (later tokens are padding).
        n_leaves = tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1)  # [S]
        absent_row = N + T  # the zero row, last: leaf j is row j, step t's composition row N + t
        leaves_by_row = tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * S, 2 * H])  # leaf j of sentence s at j*S + s
        memory = self._new_memory(leaves_by_row, absent_row, S)
        loop = _Loop(
            mode=mode, with_head=with_head, dtype=leaves.dtype, S=S, N=N, T=T, sentences=sentences,
            n_leaves=n_leaves, absent_row=absent_row,
            transitions_by_step=tf.transpose(transitions),  # [T, S]: row t is step t of every sentence
            slots=tf.range(N + 2)[None, :],  # [1, N + 2]: stack slot numbers
            read_sentences=tf.tile(sentences, [3]),  # [3S], for the three reads of a step
            # The weights are read once, here. A variable read inside the body is a
            # new tensor at every step, and the backward pass keeps one per step
            # (under XLA a copy: +150 MB at B=128, N=16).
            tracker_weights=self.tracker.read() if self.tracker is not None else None,
            reduce_weights=self.reduce.read(),
            head_weights=self.tracker.read_head() if with_head else None,
            # A sentence of n words is finished after exactly 2n - 1 steps
            # (docs/spec.md §7): n comes from the batch, the parse does not.
            num_steps=2 * n_leaves - 1 if mode != "gold" else None,  # [S]
            uniforms_by_step=tf.transpose(uniforms) if mode == "sampled" else None,  # <float64>[T, S]
        )
        return loop, memory

    def _loop(self, loop: _Loop, memory, stop, records: dict):
        """The steps t = 0, 1, ... while t < ``stop`` (a tensor): returns the
        encodings <float>[S, H] and ``records`` (the loop variables of parse,
        {} without the head) with every step's record written into them."""
        # ---- the loop --------------------------------------------------------
        # tf.while_loop puts ONE copy of `body` into the graph and runs it up
        # to T times, T a tensor known only at run time, so the same graph
        # serves every sentence length. The body was traced once with symbolic
        # shapes: it cannot inspect a transition in Python, hence the masks of
        # `_step`. Loop variables (memory, pointers, ...) are what flows from
        # one iteration to the next. For the gradient, TensorFlow builds a
        # second while loop that runs the steps backwards, fed by per-step
        # values the forward loop stacks up (only the small [S, *] tensors a
        # step reads: the memory is never saved whole). maximum_iterations
        # bounds those stacks, which XLA needs to know.
        S, D = loop.S, self.tracker_dim
        zeros = tf.zeros([S], tf.int32)
        state = (tf.zeros([S, D], loop.dtype), tf.zeros([S, D], loop.dtype)) if D > 0 else ()

        def body(t, memory, pointers, depth, buffer, state, records):
            taken = {}  # what the step's head scored and did (with the head), for the records
            t_next, memory, pointers, depth, buffer, state = self._step(
                loop, t, memory, pointers, depth, buffer, state, taken)
            return t_next, memory, pointers, depth, buffer, state, _record(records, t, taken)

        _, memory, pointers, _, _, _, records = tf.while_loop(
            lambda t, *_: t < stop,
            body,
            (tf.constant(0), memory, tf.fill([S, loop.N + 2], loop.absent_row), zeros, zeros, state, records),
            maximum_iterations=loop.T,
        )
        # After a valid sequence exactly one item is left, in slot 2.
        return self._read(memory, pointers[:, 2] * S + loop.sentences)[:, :self.hidden_dim], records

    def _read_step_items(self, loop: _Loop, memory, pointers, depth, buffer):
        """What a step reads: the buffer front's row <int32>[S], and the
        items at the buffer front, the stack top and below it, <float>[S, 2H] each."""
        # ---- reads by pointer: where the buffer front, the stack top and the
        # item below it live. Leaf j is row j; an absent item points at the
        # zero row (N + T), so no masking is needed on the values.
        front_row = tf.where(buffer < loop.n_leaves, buffer, loop.absent_row)
        top_row = tf.gather(pointers, depth + 1, batch_dims=1)
        below_row = tf.gather(pointers, depth, batch_dims=1)
        rows = tf.concat([front_row, top_row, below_row], axis=0)  # [3S]
        front, top, below = tf.split(self._read(memory, rows * loop.S + loop.read_sentences), 3)
        return front_row, front, top, below

    def _step(self, loop: _Loop, t, memory, pointers, depth, buffer, state, taken: dict):
        """One transition for every sentence. t <int32>[]; pointers <int32>[S, N + 2];
        depth (items on the stack), buffer (leaves shifted so far) <int32>[S];
        state: tracker (h_t, c_t) <float>[S, D], or () without a tracker.
        taken: with the head, a dict this step fills with what the head
        scored and what was done (the records of parse)."""
        H, S = self.hidden_dim, loop.S
        if loop.deciding:
            # The op is not known yet: the head decides it after the
            # tracker has run. Until then only "is the sentence still
            # going" matters: PAD changes nothing, as in gold mode.
            active = t < loop.num_steps
        else:
            op = tf.gather(loop.transitions_by_step, t)  # [S]
            # ---- masks: the `if op == ...` of the Python version, one bool per sentence.
            # They are data, not control flow: every sentence takes the same
            # path through the graph, and tf.where keeps or drops results.
            is_shift = tf.equal(op, SHIFT)
            is_reduce = tf.equal(op, REDUCE)
            active = tf.not_equal(op, PAD)  # PAD changes nothing: stack, buffer, tracker

        front_row, front, top, below = self._read_step_items(loop, memory, pointers, depth, buffer)

        # ---- tracker: its new state is kept only where the step is not PAD.
        tracking = None
        if self.tracker is not None:  # Python `if` on the model's configuration, not on data
            h_t, c_t = self.tracker(front[:, :H], top[:, :H], below[:, :H], state, loop.tracker_weights)
            keep = active[:, None]
            state = (tf.where(keep, h_t, state[0]), tf.where(keep, c_t, state[1]))
            tracking = state[0]

        if loop.with_head:
            # ---- the head reads the state this step's tracker update just
            # wrote (h_t, equal to state[0] wherever the step is active; read
            # before the tf.where so its gradient is a sum of two terms, see
            # Reduce), and scores the two actions.
            logits = Tracker.transition_logits(h_t, loop.head_weights)  # [S, 2] = (t_S, t_R)
            taken["logits"] = tf.where(active[:, None], logits, tf.zeros([], loop.dtype))  # zeros at PAD
        if loop.deciding:
            # ---- the decision, taken inside the graph. Validity comes from the pointers:
            # SHIFT while the buffer has leaves, REDUCE while the stack holds two items.
            uniform = tf.gather(loop.uniforms_by_step, t) if loop.mode == "sampled" else None
            is_shift, is_reduce, taken["transitions"], taken["scores"] = _decide(
                logits, active, buffer < loop.n_leaves, depth >= 2, loop.mode, uniform)

        # ---- compose the two top items for every sentence, and write the
        # result as row N + t; only a REDUCE ever points at it.
        new_row = loop.N + t
        composed = self.reduce(below, top, tracking, loop.reduce_weights)  # [S, 2H]
        memory = self._write(memory, new_row * S + loop.sentences, composed)

        # ---- move the pointers. SHIFT pushes the front leaf's row into slot
        # depth + 2; REDUCE pops two and pushes the new row into slot depth
        # (where the left child was). PAD writes nothing.
        target_slot = tf.where(is_shift, depth + 2, depth)
        target_row = tf.where(is_shift, front_row, new_row)
        write = tf.logical_and(active[:, None], tf.equal(loop.slots, target_slot[:, None]))  # [S, N + 2]
        pointers = tf.where(write, target_row[:, None], pointers)
        depth = depth + tf.cast(is_shift, tf.int32) - tf.cast(is_reduce, tf.int32)
        buffer = buffer + tf.cast(is_shift, tf.int32)
        return t + 1, memory, pointers, depth, buffer, state


def _record(records: dict, t, taken: dict) -> dict:
    """``records`` with step t's ``taken`` added: a TensorArray gets element
    t, a running sum (float64 scores) the step's term. {} stays {}."""
    return {name: record.write(t, taken[name]) if isinstance(record, tf.TensorArray) else record + taken[name]
            for name, record in records.items()}
