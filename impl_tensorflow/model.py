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
item that exists during the run, written once and never moved, R = 1 + T + N
rows of S items each::

    row 0            zeros: what an absent item reads as (empty buffer, short stack)
    row 1 + t        the composition computed at step t (kept only if step t was REDUCE)
    row 1 + T + j    leaf j: the buffer (its front is leaf number ``buffer``)

The item of sentence s in row r sits at address ``r * S + s``. The stack
itself is ``pointers <int32>[S, N + 2]``: row numbers, one stack per
sentence. Slots 0 and 1 hold row 0 for good (two absent items below the
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
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT

MEMORIES = ("tensor_array", "dense")

# Row 0 of the memory holds zeros for every sentence: pointers to it read as
# "absent" (docs/spec.md §3: zeros for an empty buffer or a missing stack item).
ABSENT = 0


# --------------------------------------------------------------------------
# Host-side input checks (a graph cannot raise a readable error mid-loop)
# --------------------------------------------------------------------------


def check_inputs(tokens: np.ndarray, transitions: np.ndarray, vocab_size: int) -> None:
    """Raise ValueError unless every row is a valid sentence (docs/spec.md §1).

    Vectorised over the batch (a Python loop per sentence would cost more
    than some encoder runs). The graph trusts these checks: an invalid
    sequence would silently read the wrong rows.
    """
    tokens, transitions = np.asarray(tokens), np.asarray(transitions)
    if tokens.ndim != 2 or transitions.ndim != 2 or tokens.shape[0] != transitions.shape[0]:
        raise ValueError(f"tokens {tokens.shape} and transitions {transitions.shape} must be [S, N] and [S, T]")
    S, N = tokens.shape

    def fail(mask, message):
        s, t = np.argwhere(mask)[0]
        raise ValueError(f"sentence {s}, position {t}: {message}")

    if S == 0:
        return
    if np.any((tokens < 0) | (tokens >= vocab_size)):
        fail((tokens < 0) | (tokens >= vocab_size), f"token id outside the vocabulary [0, {vocab_size})")
    known = (transitions == PAD) | (transitions == SHIFT) | (transitions == REDUCE)
    if not np.all(known):
        fail(~known, "unknown transition code")
    is_shift, is_reduce = transitions == SHIFT, transitions == REDUCE
    depth = np.cumsum(is_shift.astype(np.int64) - is_reduce, axis=1)  # items after each step
    if np.any(is_reduce & (depth < 1)):
        fail(is_reduce & (depth < 1), "REDUCE with fewer than two items on the stack")
    shifts, reduces = is_shift.sum(axis=1), is_reduce.sum(axis=1)
    for s in range(S):  # per-row totals; cheap (no per-step work)
        if shifts[s] == 0:
            raise ValueError(f"sentence {s}: no SHIFT (an empty sentence)")
        if shifts[s] > N:
            raise ValueError(f"sentence {s}: {shifts[s]} SHIFTs but only N={N} token slots")
        if reduces[s] != shifts[s] - 1:
            raise ValueError(f"sentence {s}: {reduces[s]} REDUCEs for {shifts[s]} SHIFTs (expected {shifts[s] - 1})")


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------


class Embedding(tf.Module):
    """The word vectors, ``embedding <float>[V, E]``."""

    def __init__(self, vocab_size: int, embed_dim: int, dtype: tf.DType, name: str = "embed"):
        super().__init__(name=name)
        # Zeros only give the variable its shape: the values come from the
        # canonical parameters (convert.from_canonical), never from here.
        with self.name_scope:
            self.embedding = tf.Variable(tf.zeros([vocab_size, embed_dim], dtype), name="embedding")

    def __call__(self, tokens: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.embedding, tokens)


class Linear(tf.Module):
    """``x @ kernel + bias`` on the last axis; kernel <float>[in, out] as in the canonical file."""

    def __init__(self, in_dim: int, out_dim: int, dtype: tf.DType, name: str):
        super().__init__(name=name)
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([in_dim, out_dim], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([out_dim], dtype), name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.tensordot(x, self.kernel, axes=1) + self.bias


# --------------------------------------------------------------------------
# Tracker, Reduce, SPINN
# --------------------------------------------------------------------------


class Tracker(tf.Module):
    """An LSTM cell that reads the parser state: h of the buffer front and of
    the top two stack items (docs/spec.md §3, gate order i, f, g, o).

    ``kernel`` is ``[tracker.kernel_input; tracker.kernel_hidden]`` stacked,
    <float>[3H + D, 4D], so a step is one matmul of ``[b, s1, s2, h_t]``.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: tf.DType, name: str = "tracker"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([3 * H + D, 4 * D], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([4 * D], dtype), name="bias")

    def read(self) -> tuple[tf.Tensor, tf.Tensor]:
        """(kernel, bias) as tensors, for SPINN to read once before its loop."""
        return self.kernel.read_value(), self.bias.read_value()

    def __call__(self, front_h, top_h, below_h, state, weights=None):
        """<float>[S, H] each, state (h_t, c_t) <float>[S, D] -> the new (h_t, c_t).
        ``weights``: (kernel, bias) from read(); by default the variables are read here."""
        kernel, bias = weights if weights is not None else (self.kernel, self.bias)
        h, c = state
        z = tf.matmul(tf.concat([front_h, top_h, below_h, h], axis=1), kernel) + bias
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, c


class Reduce(tf.Module):
    """The TreeLSTM composition of two stack items, with the tracker's h as a
    third input (docs/spec.md §3, gate order a, i, f1, f2, o).

    ``kernel`` is ``[reduce.left.kernel; reduce.right.kernel; reduce.track.kernel]``
    stacked, <float>[2H + D, 5H]; ``bias`` is ``reduce.left.bias``.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: tf.DType, name: str = "reduce"):
        super().__init__(name=name)
        H, D = hidden_dim, tracker_dim
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([2 * H + D, 5 * H], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([5 * H], dtype), name="bias")

    def read(self) -> tuple[tf.Tensor, tf.Tensor]:
        """(kernel, bias) as tensors, for SPINN to read once before its loop."""
        return self.kernel.read_value(), self.bias.read_value()

    def __call__(self, left, right, tracking=None, weights=None):
        """Items <float>[S, 2H] each (and the tracker's h <float>[S, D]) -> the composed item [S, 2H].
        ``weights``: (kernel, bias) from read(); by default the variables are read here."""
        kernel, bias = weights if weights is not None else (self.kernel, self.bias)
        left_h, left_c = tf.split(left, 2, axis=1)
        right_h, right_c = tf.split(right, 2, axis=1)
        inputs = [left_h, right_h] if tracking is None else [left_h, right_h, tracking]
        z = tf.matmul(tf.concat(inputs, axis=1), kernel) + bias
        H = left_c.shape[1]
        a, gates, o = tf.split(z, [H, 3 * H, H], axis=1)  # gates: i, f1, f2 (contiguous in the order a, i, f1, f2, o)
        # c = tanh(a)·σ(i) + σ(f1)·left.c + σ(f2)·right.c, as one product and a
        # sum over the three terms. Not as `x + y + z`: Grappler rewrites a
        # chain of adds into one AddN, and TensorFlow's CPU AddN moves whichever
        # input buffer it can reuse to the front, so the rounding of a
        # three-term sum would change from run to run (two terms add the same
        # either way; reduce_sum has a fixed order).
        terms = tf.sigmoid(gates) * tf.concat([tf.tanh(a), left_c, right_c], axis=1)  # [S, 3H]
        c = tf.reduce_sum(tf.reshape(terms, [-1, 3, H]), axis=1)
        h = tf.sigmoid(o) * tf.tanh(c)
        return tf.concat([h, c], axis=1)


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
            self.tracker = Tracker(config.hidden_dim, config.tracker_dim, dtype) if config.tracker_dim > 0 else None
            self.reduce = Reduce(config.hidden_dim, config.tracker_dim, dtype)

    # ---- the memory: write rows, read items by address --------------------

    def _new_memory(self, leaves_by_row: tf.Tensor, num_rows: tf.Tensor, leaf_row: tf.Tensor, S: tf.Tensor):
        """A memory of ``num_rows * S`` items: row 0 zeros, the leaves from ``leaf_row`` on."""
        two_h = 2 * self.hidden_dim
        dtype = leaves_by_row.dtype
        if self.memory == "tensor_array":
            memory = tf.TensorArray(dtype, size=num_rows * S, element_shape=[two_h], clear_after_read=False)
            memory = memory.scatter(tf.range(S), tf.zeros([S, two_h], dtype))  # row 0: absent
            return memory.scatter(leaf_row * S + tf.range(tf.shape(leaves_by_row)[0]), leaves_by_row)
        # Rows 1 .. leaf_row - 1 start as zeros and are overwritten step by step.
        return tf.concat([tf.zeros([leaf_row * S, two_h], dtype), leaves_by_row], axis=0)

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
        <int32>[S, T] -> encodings <float>[S, H]. Inputs must pass check_inputs."""
        H, D = self.hidden_dim, self.tracker_dim
        dtype = leaves.dtype
        # Sizes are tensors: this graph serves every S, N and T.
        S, N = tf.shape(leaves)[0], tf.shape(leaves)[1]
        T = tf.shape(transitions)[1]
        sentences = tf.range(S)  # [S]: sentence s's item in row r is at r * S + s
        # The buffer holds as many leaves as there are SHIFTs (later tokens are padding).
        n_leaves = tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1)  # [S]
        leaf_row = 1 + T
        leaves_by_row = tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * S, 2 * H])  # leaf j of sentence s at j*S + s
        memory = self._new_memory(leaves_by_row, 1 + T + N, leaf_row, S)

        transitions_by_step = tf.transpose(transitions)  # [T, S]: row t is step t of every sentence
        slots = tf.range(N + 2)[None, :]  # [1, N + 2]: stack slot numbers
        read_sentences = tf.tile(sentences, [3])  # [3S], for the three reads of a step
        # The weights are read once, here. A variable read inside the body is a
        # new tensor at every step, and the backward pass keeps one per step
        # (under XLA a copy: +150 MB at B=128, N=16).
        tracker_weights = self.tracker.read() if self.tracker is not None else None
        reduce_weights = self.reduce.read()

        def step(t, memory, pointers, depth, buffer, state):
            """One transition for every sentence. t <int32>[]; pointers <int32>[S, N + 2];
            depth (items on the stack), buffer (leaves shifted so far) <int32>[S];
            state: tracker (h_t, c_t) <float>[S, D], or () without a tracker."""
            op = tf.gather(transitions_by_step, t)  # [S]

            # ---- masks: the `if op == ...` of the Python version, one bool per sentence.
            # They are data, not control flow: every sentence takes the same
            # path through the graph, and tf.where keeps or drops results.
            is_shift = tf.equal(op, SHIFT)
            is_reduce = tf.equal(op, REDUCE)
            active = tf.not_equal(op, PAD)  # PAD changes nothing: stack, buffer, tracker

            # ---- reads by pointer: where the buffer front, the stack top and the
            # item below it live. An absent item points at row 0 (zeros), so
            # no masking is needed on the values.
            front_row = tf.where(buffer < n_leaves, leaf_row + buffer, ABSENT)
            top_row = tf.gather(pointers, depth + 1, batch_dims=1)
            below_row = tf.gather(pointers, depth, batch_dims=1)
            rows = tf.concat([front_row, top_row, below_row], axis=0)  # [3S]
            front, top, below = tf.split(self._read(memory, rows * S + read_sentences), 3)  # [S, 2H] each

            # ---- tracker: its new state is kept only where the step is not PAD.
            tracking = None
            if self.tracker is not None:  # Python `if` on the model's configuration, not on data
                h_t, c_t = self.tracker(front[:, :H], top[:, :H], below[:, :H], state, tracker_weights)
                keep = active[:, None]
                state = (tf.where(keep, h_t, state[0]), tf.where(keep, c_t, state[1]))
                tracking = state[0]

            # ---- compose the two top items for every sentence, and write the
            # result as row 1 + t; only a REDUCE ever points at it.
            new_row = 1 + t
            composed = self.reduce(below, top, tracking, reduce_weights)  # [S, 2H]
            memory = self._write(memory, new_row * S + sentences, composed)

            # ---- move the pointers. SHIFT pushes the front leaf's row into slot
            # depth + 2; REDUCE pops two and pushes the new row into slot depth
            # (where the left child was). PAD writes nothing.
            target_slot = tf.where(is_shift, depth + 2, depth)
            target_row = tf.where(is_shift, front_row, new_row)
            write = tf.logical_and(active[:, None], tf.equal(slots, target_slot[:, None]))  # [S, N + 2]
            pointers = tf.where(write, target_row[:, None], pointers)
            depth = depth + tf.cast(is_shift, tf.int32) - tf.cast(is_reduce, tf.int32)
            buffer = buffer + tf.cast(is_shift, tf.int32)
            return t + 1, memory, pointers, depth, buffer, state

        zeros = tf.zeros([S], tf.int32)
        state = (tf.zeros([S, D], dtype), tf.zeros([S, D], dtype)) if D > 0 else ()
        # ---- the loop --------------------------------------------------------
        # tf.while_loop puts ONE copy of `step` into the graph and runs it T
        # times, T a tensor known only at run time, so the same graph serves
        # every sentence length. The body was traced once with symbolic shapes:
        # it cannot inspect a transition in Python, hence the masks above. Loop
        # variables (memory, pointers, ...) are what flows from one iteration
        # to the next. For the gradient, TensorFlow builds a second while loop
        # that runs the steps backwards, fed by per-step values the forward
        # loop stacks up (only the small [S, *] tensors a step reads: the
        # memory is never saved whole). maximum_iterations bounds those stacks,
        # which XLA needs to know.
        _, memory, pointers, _, _, _ = tf.while_loop(
            lambda t, *_: t < T,
            step,
            (tf.constant(0), memory, tf.zeros([S, N + 2], tf.int32), zeros, zeros, state),
            maximum_iterations=T,
        )
        # After a valid sequence exactly one item is left, in slot 2.
        return self._read(memory, pointers[:, 2] * S + sentences)[:, :H]


# --------------------------------------------------------------------------
# The classifier
# --------------------------------------------------------------------------


class SNLIClassifier(tf.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    Dropout (rate ``dropout``) acts on the projected leaves and on the input
    of every classifier layer (the features and each ReLU output), in
    training only. It is stateless: each call passes a seed <int32>[2], so a
    traced graph draws new masks at every step and a run is repeatable.
    """

    def __init__(self, config: ModelConfig, *, dtype: tf.DType = tf.float32, dropout: float = 0.0,
                 memory: str = "tensor_array", name: str = "snli_classifier"):
        super().__init__(name=name)
        self.config = config
        self.dropout = float(dropout)
        H, M = config.hidden_dim, config.mlp_dim
        with self.name_scope:
            self.embed = Embedding(config.vocab_size, config.embed_dim, dtype)
            self.projection = Linear(config.embed_dim, 2 * H, dtype, name="projection")  # -> [h; c] of each leaf
            self.spinn = SPINN(config, dtype, memory)
            widths = [4 * H] + [M] * config.mlp_layers
            self.mlp = [Linear(a, b, dtype, name=f"mlp_{k}") for k, (a, b) in enumerate(zip(widths[:-1], widths[1:]))]
            self.output = Linear(widths[-1], 3, dtype, name="output")

    def _dropout(self, x: tf.Tensor, training: bool, seed, site: int) -> tf.Tensor:
        if not training or self.dropout == 0.0:
            return x
        if seed is None:
            raise ValueError("training with dropout needs a seed")
        site_seed = tf.random.experimental.stateless_fold_in(seed, site)  # one stream per dropout site
        return tf.nn.experimental.stateless_dropout(x, rate=self.dropout, seed=site_seed)

    def encode(self, tokens: tf.Tensor, transitions: tf.Tensor, training: bool = False, seed=None) -> tf.Tensor:
        """tokens <int32>[S, N], transitions <int32>[S, T] -> encodings <float>[S, H]."""
        leaves = self.projection(self.embed(tokens))  # [S, N, 2H]
        return self.spinn(self._dropout(leaves, training, seed, 0), transitions)

    def classify(self, premise: tf.Tensor, hypothesis: tf.Tensor, training: bool = False, seed=None) -> tf.Tensor:
        """Encodings <float>[B, H] each -> logits <float>[B, 3]."""
        # f = [p, q, p - q, p * q]. Written so that p and q each feed one op
        # (the first concat) whose halves feed the difference and the product:
        # every gradient sum then has two terms, which floating point adds the
        # same in either order. Used three times, p would get a three-term
        # AddN, and TensorFlow's CPU AddN moves whichever input buffer it can
        # reuse to the front: the last bit of the gradients would vary from
        # run to run, and a resumed training run would drift from an
        # uninterrupted one.
        pair = tf.concat([premise, hypothesis], axis=1)  # [B, 2H]
        p, q = tf.split(pair, 2, axis=1)
        f = tf.concat([pair, p - q, p * q], axis=1)  # [B, 4H]
        for k, layer in enumerate(self.mlp):
            f = tf.nn.relu(layer(self._dropout(f, training, seed, 1 + k)))
        return self.output(self._dropout(f, training, seed, 1 + len(self.mlp)))

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
                 training: bool = False, seed=None):
        """<int32>[B, N] tokens and [B, T] transitions of both sides ->
        (premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3])."""
        B = tf.shape(premise_tokens)[0]
        # Premise and hypothesis share N, T and the SPINN weights, so they run
        # as one batch of 2B sentences: one while loop of T steps, not two.
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = tf.concat([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        encodings = self.encode(tokens, transitions, training, seed)  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis, training, seed)
