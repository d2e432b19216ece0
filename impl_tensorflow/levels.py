"""SPINN on a level schedule made on the host, in TensorFlow: the levels family (docs/spec.md §3, §7).

The batch's gold trees are scheduled on the host into levels
(shared/levels.py), as TensorFlow Fold, TorchFold and DGL's Tree-LSTM batch
trees, and each level is one batched Reduce over all the nodes it holds: a
loop over the levels gathers the rows a level reads from a node table, runs
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
                 <float>[S * N + 1 + R, 2H], in the layout's container
    state        <float>[S + 1, D] twice  the tracker's (h, c) (row S: a spare)
    schedule     the ten index arrays of shared.levels.ragged_arrays
                 (RAGGED_ARRAYS' order: BatchArrays.levels)

TensorFlow runs the loop as one ``tf.while_loop`` in a traced graph. A
while loop lets a level's shapes differ from the last one's, so the schedule
is ragged: each level exactly as wide as its nodes (and, with the tracker,
its stepping sentences), the levels' index arrays concatenated with their
offsets. Nothing is padded; a JAX scan needs one shape per run instead
(impl_jax/levels.py). The schedule's arrays are inputs of the traced
functions, every size ``None``: the table's rows follow from them (level l's
block at ``S * N + 1 + offsets[l]``), so one trace serves every batch. So
the programs take one more input than tokens and transitions:
``SPINN.encode`` and ``SPINN.parse`` take the schedule as ``levels=``, and
``LevelClassifier``, classifier.py's SNLIClassifier with this encoder,
passes it on from its ``__call__``, ``encode`` and ``parse`` (the runner's
``algorithm="levels"``, the registry's ``tensorflow-levels``);
:func:`host_schedule` makes it.

The table's container is the model's ``layout`` (as masked.py's, chosen by
the runner): a TensorArray of rows (``"tensor_array"``, the CPU default),
which a level reads with a gather and writes with a scatter of its own rows,
or a dense tensor (``"dense"``, under XLA and on a GPU) written with
``tensor_scatter_nd_update``, which rewrites the whole table each level
unless the executor updates it in place (twice as slow on a CPU).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from shared.batching import sentences_transitions
from shared.levels import RAGGED_ARRAYS, ragged_arrays
from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Reduce, Tracker
from .classifier import SNLIClassifier

LAYOUTS = ("tensor_array", "dense")
LEVELS = tuple([tf.TensorSpec([None], tf.int32)] * len(RAGGED_ARRAYS))  # BatchArrays.levels of a signature


class SPINN(tf.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the schedule made on the host (``levels=``)."""

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

    def encode(self, leaves: tf.Tensor, transitions: tf.Tensor | None, *, levels) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int32>[S, T], followed -> encodings <float>[S, H], the h of each
        root. Gold mode, and the transition head is never evaluated here;
        ``levels`` is the schedule made on the host from the transitions
        (host_schedule: its ten tensors in RAGGED_ARRAYS' order), which holds
        all this reads of them (so they may be None)."""
        return self._run(leaves, levels, head=False)

    def parse(self, leaves: tf.Tensor, transitions: tf.Tensor, mode: str = "predicted", uniforms=None, *,
              levels) -> SentenceParses:
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

    def _run(self, leaves: tf.Tensor, levels, head: bool):
        """The loop over levels behind encode and parse: leaves <float>[S, N, 2H];
        levels: the ten schedule tensors (RAGGED_ARRAYS' order) -> encodings
        <float>[S, H]; with ``head`` also the head's logits <float>[S, L, 2]
        at level (= step) l of the sentences that step, zeros elsewhere."""
        H, D = self.hidden_dim, self.tracker_dim
        left_all, right_all, offsets, active_all, top_all, below_all, front_all, reducing_all, active_offsets, \
            roots = levels
        shape = tf.shape(leaves)
        S, N = shape[0], shape[1]
        dtype = leaves.dtype
        L, R = tf.shape(offsets)[0] - 1, tf.shape(left_all)[0]
        base = S * N + 1
        # The table: the leaves, the zero row, then R rows that the levels write in order.
        leaf_rows = tf.concat([tf.reshape(leaves, [S * N, 2 * H]), tf.zeros([1, 2 * H], dtype)], axis=0)
        dense = self.layout == "dense"
        if dense:
            table = tf.concat([leaf_rows, tf.zeros([R, 2 * H], dtype)], axis=0)
        else:
            table = tf.TensorArray(dtype, size=base + R, element_shape=[2 * H], clear_after_read=False)
            table = table.scatter(tf.range(base), leaf_rows)
        state = (tf.zeros([S + 1, D], dtype), tf.zeros([S + 1, D], dtype)) if D > 0 else ()  # (h_t, c_t)
        logits = tf.TensorArray(dtype, size=L, element_shape=[None, 2], infer_shape=False) if head else ()

        def gather(table, rows):
            """The table's rows <int32>[K] -> <float>[K, 2H]."""
            return tf.gather(table, rows) if dense else table.gather(rows)

        def level(l, table, state, logits):
            """Level l: its slices of the schedule's arrays, the cells on them, its block into the table."""
            lo, hi = offsets[l], offsets[l + 1]
            tracking = None
            if D > 0:
                # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
                alo, ahi = active_offsets[l], active_offsets[l + 1]
                active = active_all[alo:ahi]
                h, c = self.tracker.step(_halves(gather(table, front_all[alo:ahi]), H)[0],
                                         _halves(gather(table, top_all[alo:ahi]), H)[0],
                                         _halves(gather(table, below_all[alo:ahi]), H)[0],
                                         (tf.gather(state[0], active), tf.gather(state[1], active)))
                state = (tf.tensor_scatter_nd_update(state[0], active[:, None], h),
                         tf.tensor_scatter_nd_update(state[1], active[:, None], c))
                tracking = tf.gather(h, reducing_all[lo:hi])  # the h_t just written
                if head:
                    # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                    logits = logits.write(l, self.tracker.transition_logits(h))
            # ---- compose the level's nodes, one batched Reduce.
            composed = tf.concat(self.reduce.compose(_halves(gather(table, left_all[lo:hi]), H),
                                                     _halves(gather(table, right_all[lo:hi]), H), tracking), axis=-1)
            # ---- write the level's block into the table: rows no level read before and none writes again.
            rows = base + tf.range(lo, hi)
            table = tf.tensor_scatter_nd_update(table, rows[:, None], composed) if dense else table.scatter(rows,
                                                                                                          composed)
            return l + 1, table, state, logits

        # ---- the loop over levels: what each runs was decided on the host.
        # A tf.while_loop: one copy of `level` in the graph, its shapes free to change from level to level.
        _, table, _, logits = tf.while_loop(lambda l, *_: l < L, level, (tf.constant(0), table, state, logits))
        encodings = _halves(gather(table, roots), H)[0]  # h of each root, [S, H]
        if not head:
            return encodings
        steps = tf.repeat(tf.range(L), active_offsets[1:] - active_offsets[:-1])
        per_level = tf.scatter_nd(tf.stack([active_all, steps], axis=-1), logits.concat(), [S + 1, L, 2])
        return encodings, per_level[:S]


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


def host_schedule(batch, tracker: bool) -> tuple[tuple[np.ndarray, ...], dict]:
    """A batch's ten schedule arrays (BatchArrays.levels: of its premises and
    hypotheses, ragged: every size ``None`` in the signature, so the loop runs
    the batch's own levels, each its own width), and what they compute: ``levels``,
    ``level_padding_pct`` (0: nothing is padded), ``reduce_rows`` and
    ``tracker_rows`` (the rows each cell computes)."""
    transitions = sentences_transitions(batch)
    levels, sched = ragged_arrays(transitions, np.shape(batch.premise_tokens)[1], tracker)
    return _level_arrays(levels), {"levels": sched.n_levels, "level_padding_pct": 0.0,
                                   "reduce_rows": len(levels["left"]), "tracker_rows": len(levels["active"])}


def _halves(item, H: int):
    """Items <float>[K, 2H] -> their h and c, <float>[K, H] each."""
    return item[:, :H], item[:, H:]


def _level_arrays(arrays: dict) -> tuple[np.ndarray, ...]:
    """shared.levels.ragged_arrays' dict -> its ten arrays in RAGGED_ARRAYS' order."""
    return tuple(np.asarray(arrays[k], np.int32) for k in RAGGED_ARRAYS)
