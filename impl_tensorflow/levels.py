"""SPINN on a level schedule made on the host, in TensorFlow: the levels family (docs/spec.md §3, §7).

The batch's gold trees are scheduled on the host into levels
(shared/levels.py), as TensorFlow Fold, TorchFold and DGL's Tree-LSTM batch
trees, and each level is one batched Reduce over all the nodes it holds: a
loop over the levels reads the rows a level needs from a node table, runs
the cells on them and writes the level's block into the table. Without the
tracker a level is a tree height (every node of height h + 1 at level h, so
a batch takes as many levels as its tallest tree); with it a level is a
transition step: the tracker on the sentences that step, Reduce on those
that reduce (shared.levels.schedule_by_step). Gold parses only: a predicted
or sampled parse is decided inside the loop and cannot be scheduled ahead
(the runner refuses them: shared.levels.LEVELS_UNSUPPORTED); ``parse``
returns the gold parse with the head's logits at every step.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker, L levels, R the nodes the levels compute. The state:

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    table        every node: row s * N + i is word i of sentence s (the
                 leaves), row S * N zeros (what an absent stack item or an
                 empty buffer reads), then one block per level, R rows in
                 all, in the order the levels compute them; here
                 <float>[S * N + 1 + R, 2H], in the model's container (SPINN._start)
    state        <float>[S + 1, D] twice  the tracker's (h, c) (row S: padding's)
    schedule     shared.levels.level_arrays' arrays, padded as PADDING says
                 (host_schedule; the ``levels`` of ``encode`` and ``parse``)

The three levels.py run one algorithm in the same steps under the same
names: ``_run`` makes the table and the state and runs ``_loop`` over the
levels, each level a ``_level``: its part of the schedule (``_slices``), one
``_read`` of the rows it reads, the tracker on the sentences that step,
Reduce on its nodes (``_compose``), one ``_write`` of its block. What
TensorFlow forces, or lets it do:

* The loop is one ``tf.while_loop`` in a traced graph, whose body is traced
  once and whose shapes may change from level to level, so nothing is
  padded (PADDING ``"exact"``): each level exactly as wide as its nodes and
  its stepping sentences. The schedule's arrays are inputs of the traced
  functions, every size ``None`` (LEVELS), so one trace serves every batch:
  the programs take one more input than tokens and transitions.
  ``SPINN.encode`` and ``SPINN.parse`` take it as ``levels=``, and
  ``LevelClassifier``, classifier.py's SNLIClassifier with this encoder,
  passes it on from its ``__call__``, ``encode`` and ``parse`` (the runner's
  ``family="levels"``, the registry's ``tensorflow-levels``);
  :func:`host_schedule` makes it.
* The table's container is the model's ``container`` (as masked.py's, chosen by
  the runner): a TensorArray of rows (``"tensor_array"``, the CPU default),
  which a level reads with a gather and writes with a scatter of its own
  rows, its gradient a TensorArray too (one buffer, no table-sized fill per
  read: what impl_pytorch/node_table.py writes for PyTorch), or a
  dense tensor (``"dense"``, under XLA and on a GPU) written with
  ``tensor_scatter_nd_update``, which rewrites the whole table each level
  unless the executor updates it in place (twice as slow on a CPU).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from shared.levels import LEVEL_ARRAYS, batch_schedule
from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Reduce, Tracker
from .classifier import SNLIClassifier
from .layers import CONTAINERS

PADDING = "exact"  # what this framework's loop needs of the schedule (shared.levels.PADDINGS)
# BatchArrays.levels of a signature: every size None, so that one trace serves every batch.
LEVELS = {name: tf.TensorSpec([] if name == "n_levels" else [None], tf.int32) for name in LEVEL_ARRAYS}


class SPINN(tf.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the schedule made on the host (``levels=``)."""

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

    def encode(self, leaves: tf.Tensor, transitions: tf.Tensor | None, *, levels: dict) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int32>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here;
        ``levels`` is the schedule made on the host from the transitions
        (host_schedule: its tensors, LEVELS), which holds all this reads of
        them (so they may be None)."""
        return self._run(leaves, levels, head=False)

    def parse(self, leaves: tf.Tensor, transitions: tf.Tensor, mode: str = "predicted", uniforms=None, *,
              levels: dict) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.py's SPINN.parse returns it
        (logprob and entropy zeros). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        encodings, per_level = self._run(leaves, levels, head=True)
        T, L = tf.shape(transitions)[1], tf.shape(per_level)[1]  # levels are steps; L may differ from T either way
        per_step = tf.pad(per_level, [[0, 0], [0, tf.maximum(T - L, 0)], [0, 0]])[:, :T]
        zeros = tf.zeros([tf.shape(transitions)[0]], encodings.dtype)
        return SentenceParses(encodings=encodings, transitions=transitions, transition_logits=per_step,
                              logprob=zeros, entropy=zeros)

    def _run(self, leaves: tf.Tensor, levels: dict, head: bool):
        """The loop over levels behind encode and parse: leaves <float>[S, N, 2H];
        levels: shared.levels.level_arrays' arrays -> encodings <float>[S, H];
        with ``head`` also the head's logits <float>[S, L, 2] at level (= step)
        l of the sentences that step, zeros elsewhere."""
        shape = tf.shape(leaves)
        S, N = shape[0], shape[1]
        H = self.hidden_dim
        base = S * N + 1  # the table row of the first level's first node
        table, state = self._start(leaves, base + tf.shape(levels["left"])[0])
        table, _, logits = self._loop(table, state, levels, base, head)
        encodings = _read(table, levels["roots"])[:, :H]  # h of each root, [S, H]
        if not head:
            return encodings
        return encodings, _head_logits(logits, levels, S)

    def _start(self, leaves: tf.Tensor, rows):
        """The loop's state at its start: the node table of ``rows`` rows
        <float>[rows, 2H], the leaves <float>[S, N, 2H] in its first S * N and
        zeros after them, in the model's ``container`` (a TensorArray of rows,
        or a dense tensor); the tracker's (h_t, c_t) <float>[S + 1, D] each,
        zeros (row S: padding's)."""
        shape = tf.shape(leaves)
        S, N, width = shape[0], shape[1], leaves.shape[-1]
        leaf_rows = tf.reshape(leaves, [S * N, width])
        if self.container == "dense":
            table = tf.concat([leaf_rows, tf.zeros([rows - S * N, width], leaves.dtype)], axis=0)
        else:  # the leaves and the zero row; every other row is written before a level reads it
            table = tf.TensorArray(leaves.dtype, size=rows, element_shape=[width], clear_after_read=False)
            table = _write(table, 0, tf.concat([leaf_rows, tf.zeros([1, width], leaves.dtype)], axis=0))
        return table, (tf.zeros([S + 1, self.tracker_dim], leaves.dtype),) * 2

    def _loop(self, table, state, levels: dict, base, head: bool):
        """The loop over the levels: (table, state) -> (table, state, the head's
        logits of every tracker row <float>[Q, 2] with ``head``, else None).
        A tf.while_loop: one copy of ``_level`` in the graph, its shapes free to change from level to level."""
        logits = (tf.TensorArray(table.dtype, size=levels["n_levels"], element_shape=[None, 2], infer_shape=False)
                  if head else ())

        def body(l, table, state, logits):  # the while loop's body takes and returns its loop variables
            table, state, level_logits = self._level(table, state, levels, l, base, head)
            return l + 1, table, state, logits.write(l, level_logits) if head else logits

        _, table, state, logits = tf.while_loop(lambda l, *_: l < levels["n_levels"], body,
                                                (tf.constant(0), table, state, logits))
        return table, state, logits.concat() if head else None

    def _level(self, table, state, levels: dict, l, base, head: bool):
        """Level l: read the rows it needs from ``table``, run the cells, write
        its block into ``table`` -> (table, state, the head's logits of its
        tracker rows <float>[A, 2] with ``head``, else None)."""
        H = self.hidden_dim
        offset, width, parser, children, active, reducing = _slices(levels, l)
        tracking = logits = None
        if self.tracker is not None:
            # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
            state, h = self._track(table, state, parser, active)
            tracking = tf.gather(h, reducing)  # the h_t just written
            if head:
                # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                logits = self.tracker.transition_logits(h)
        # ---- read the children of the level's nodes and compose them, one batched Reduce.
        left, right = tf.split(_read(table, children), [width, width])
        composed = self._compose((left[:, :H], left[:, H:]), (right[:, :H], right[:, H:]), tracking)
        # ---- write the level's block into the table: rows no level read before.
        return _write(table, base + offset, composed), state, logits

    def _track(self, table, state, parser: tf.Tensor, active: tf.Tensor):
        """The tracker on the sentences ``active`` <int32>[A] that step, reading
        their buffer front, stack top and the item below it (table rows
        ``parser`` <int32>[3A]) -> (the state with their rows updated, their
        new h_t <float>[A, D])."""
        A = tf.shape(active)[0]
        front, top, below = tf.split(_read(table, parser)[:, :self.hidden_dim], [A, A, A])
        h, c = self.tracker.step(front, top, below, (tf.gather(state[0], active),
                                                     tf.gather(state[1], active)))
        return (tf.tensor_scatter_nd_update(state[0], active[:, None], h),
                tf.tensor_scatter_nd_update(state[1], active[:, None], c)), h

    def _compose(self, left, right, tracking):
        """Reduce on the level's nodes: left and right (h, c) <float>[W, H] each,
        tracking <float>[W, D] or None -> their [h; c] <float>[W, 2H]."""
        return tf.concat(self.reduce.compose(left, right, tracking), axis=-1)


class LevelClassifier(SNLIClassifier):
    """classifier.py's SNLIClassifier (same variables) with this module's
    SPINN: its ``__call__``, ``encode`` and ``parse`` take the schedule's
    arrays (``levels=``: host_schedule of the batch's 2B sentences, premises
    first) besides the batch's arrays."""

    def __init__(self, config: ModelConfig, *, encoder: type = SPINN, **options):
        super().__init__(config, encoder=encoder, **options)  # the only encoder that reads a schedule

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions, *, levels):
        """The batch's arrays and ``levels`` -> (premise, hypothesis, logits), as SNLIClassifier.__call__."""
        B = tf.shape(premise_tokens)[0]
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        encodings = self.encode(tokens, None, levels=levels)  # the schedule holds the transitions
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def encode(self, tokens: tf.Tensor, transitions: tf.Tensor | None, *, levels) -> tf.Tensor:
        """tokens <int32>[S, N], transitions <int32>[S, T] (or None: SPINN.encode
        reads the schedule alone), levels (their schedule) -> encodings <float>[S, H],
        as SNLIClassifier.encode."""
        return self.spinn.encode(self._leaves(tokens), transitions, levels=levels)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, *, levels):
        """Gold mode only (SPINN.parse): SNLIClassifier.parse with the schedule."""
        B = tf.shape(premise_tokens)[0]
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = tf.concat([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        parses = self.spinn.parse(self._leaves(tokens), transitions, mode, uniforms, levels=levels)
        return parses, self.classify(parses.encodings[:B], parses.encodings[B:])


def host_schedule(batch, tracker: bool) -> tuple[dict[str, np.ndarray], dict, dict[str, float]]:
    """A batch's schedule (BatchArrays.levels) as this module's loop takes it, what the loop computes over it and
    the host's seconds making it: shared.levels.batch_schedule, padded as PADDING says."""
    return batch_schedule(batch, tracker, PADDING)


def _slices(levels: dict, l):
    """Level l's part of the schedule: (its first node's offset, its Reduce
    rows W, the table rows of its tracker rows' buffer front, stack top and
    item below <int32>[3A], those of its nodes' left and right children
    <int32>[2W], its tracker rows' sentences <int32>[A], its nodes' tracker
    rows <int32>[W])."""
    offset, width = levels["offsets"][l], levels["widths"][l]
    start, stop = levels["active_offsets"][l], levels["active_offsets"][l + 1]
    parser = levels["parser"][3 * start:3 * stop]
    children = tf.concat([levels[k][offset:offset + width] for k in ("left", "right")], axis=0)
    return offset, width, parser, children, levels["active"][start:stop], levels["reducing"][offset:offset + width]


def _head_logits(logits: tf.Tensor, levels: dict, S) -> tf.Tensor:
    """The head's logits of every tracker row <float>[Q, 2] -> <float>[S, L, 2]:
    at level (= step) l of each sentence that steps, zeros elsewhere."""
    counts = levels["active_offsets"][1:] - levels["active_offsets"][:-1]
    steps = tf.repeat(tf.range(tf.shape(counts)[0]), counts)
    per_level = tf.scatter_nd(tf.stack([levels["active"], steps], axis=-1), logits, [S + 1, tf.shape(counts)[0], 2])
    return per_level[:S]  # row S: padding's


def _read(table, rows: tf.Tensor) -> tf.Tensor:
    """The table's rows <int32>[K] -> <float>[K, 2H]. A TensorArray's gather
    sets, not adds, the gradient of a row it reads twice: a read reads each row once."""
    return table.gather(rows) if isinstance(table, tf.TensorArray) else tf.gather(table, rows)


def _write(table, row, block: tf.Tensor):
    """``block`` <float>[K, 2H] into the table's rows from ``row`` on -> the table."""
    rows = row + tf.range(tf.shape(block)[0])
    if isinstance(table, tf.TensorArray):
        return table.scatter(rows, block)
    return tf.tensor_scatter_nd_update(table, rows[:, None], block)

