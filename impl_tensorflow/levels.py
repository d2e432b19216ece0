"""SPINN on a host-made level schedule (shared/levels.py), one tf.while_loop.

The schedule turns the batch's trees into index arrays; the loop runs over
levels, gathers each level's children from the node table, runs the shared
Reduce (and Tracker) cells on the dense block and writes the block's rows
at the level's place in the table. Gold parses only: a predicted or sampled
parse is decided inside the loop and cannot be scheduled ahead.

A tf.while_loop lets a level's shapes differ from the last one's, so the
schedule is ragged (shared.levels.ragged_arrays): each level exactly as wide
as its nodes (and, with the tracker, its stepping sentences), the levels'
index arrays concatenated with their offsets. Nothing is padded; a JAX scan
needs one shape per run instead (impl_jax/levels.py).

The table's container is the model's ``layout`` (as masked.py's, chosen by
the runner): a TensorArray of rows (``"tensor_array"``, the CPU default),
which a level reads with a gather and writes with a scatter of its own rows,
or a dense tensor (``"dense"``, under XLA and on a GPU) written with
``tensor_scatter_nd_update``, which rewrites the whole table each level
unless the executor updates it in place (twice as slow on a CPU).

The schedule's ten arrays are inputs of the traced functions, every size
``None`` (``BatchArrays.levels``): the table's rows follow from them (leaves
at rows ``s * N + i``, the zero row ``S * N``, level l's block at
``S * N + 1 + offsets[l]``), so one trace serves every batch. So the
programs take one more input than tokens and transitions: ``SPINN.encode``
and ``SPINN.parse`` take the schedule as ``levels=``, and
``LevelClassifier``, classifier.py's SNLIClassifier with this encoder, passes
it on from its ``__call__``, ``encode`` and ``parse`` (the runner's
``algorithm="levels"``, the registry's ``tensorflow-levels``);
:func:`host_schedule` makes it.
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


def _halves(item, H):
    return item[:, :H], item[:, H:]


def _level_arrays(arrays: dict) -> tuple[np.ndarray, ...]:
    """shared.levels.ragged_arrays' dict -> its ten arrays in RAGGED_ARRAYS' order."""
    return tuple(np.asarray(arrays[k], np.int32) for k in RAGGED_ARRAYS)


class SPINN(tf.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same modules, so the same variables and names)."""

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
        """leaves <float>[S, N, 2H] ([h; c] of each token); transitions
        <int32>[S, T], the gold ones the schedule ``levels`` was made from
        (its ten tensors in RAGGED_ARRAYS' order), which holds all this reads
        of them (so they may be None) -> encodings <float>[S, H]."""
        return self._run(leaves, levels)

    def parse(self, leaves: tf.Tensor, transitions: tf.Tensor, mode: str = "predicted", uniforms=None, *,
              levels) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.SPINN.parse returns it
        (logprob and entropy zeros). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        encodings, per_level = self._run(leaves, levels, head=True)
        # levels are steps, rounded up: cut or pad the level axis to T
        T, L = tf.shape(transitions)[1], tf.shape(per_level)[1]
        per_step = tf.pad(per_level, [[0, 0], [0, tf.maximum(T - L, 0)], [0, 0]])[:, :T]
        zeros = tf.zeros([tf.shape(transitions)[0]], encodings.dtype)
        return SentenceParses(encodings=encodings, transitions=transitions, transition_logits=per_step,
                              logprob=zeros, entropy=zeros)

    def _run(self, leaves: tf.Tensor, levels, head: bool = False):
        """leaves <float>[S, N, 2H]; levels: the ten schedule tensors
        (RAGGED_ARRAYS' order) -> h of the roots <float>[S, H]; with ``head``
        also the head's logits <float>[S, L, 2] at level (= step) l of the
        sentences that step, zeros elsewhere."""
        H, D = self.hidden_dim, self.tracker_dim
        left_all, right_all, offsets, active_all, top_all, below_all, front_all, reducing_all, active_offsets, \
            roots = levels
        shape = tf.shape(leaves)
        S, N = shape[0], shape[1]
        dtype = leaves.dtype
        L, R = tf.shape(offsets)[0] - 1, tf.shape(left_all)[0]
        base = S * N + 1
        leaf_rows = tf.concat([tf.reshape(leaves, [S * N, 2 * H]), tf.zeros([1, 2 * H], dtype)], axis=0)
        dense = self.layout == "dense"
        if dense:
            table = tf.concat([leaf_rows, tf.zeros([R, 2 * H], dtype)], axis=0)
        else:
            table = tf.TensorArray(dtype, size=base + R, element_shape=[2 * H], clear_after_read=False)
            table = table.scatter(tf.range(base), leaf_rows)
        state = (tf.zeros([S + 1, D], dtype), tf.zeros([S + 1, D], dtype)) if D > 0 else ()
        logits = tf.TensorArray(dtype, size=L, element_shape=[None, 2], infer_shape=False) if head else ()

        def read(table, rows):
            return tf.gather(table, rows) if dense else table.gather(rows)

        def body(l, table, state, logits):
            lo, hi = offsets[l], offsets[l + 1]
            tracking = None
            if D > 0:
                alo, ahi = active_offsets[l], active_offsets[l + 1]
                active = active_all[alo:ahi]
                h, c = self.tracker.step(_halves(read(table, front_all[alo:ahi]), H)[0],
                                         _halves(read(table, top_all[alo:ahi]), H)[0],
                                         _halves(read(table, below_all[alo:ahi]), H)[0],
                                         (tf.gather(state[0], active), tf.gather(state[1], active)))
                state = (tf.tensor_scatter_nd_update(state[0], active[:, None], h),
                         tf.tensor_scatter_nd_update(state[1], active[:, None], c))
                tracking = tf.gather(h, reducing_all[lo:hi])
                if head:  # the head reads the state this step's tracker update just wrote
                    logits = logits.write(l, self.tracker.transition_logits(h))
            composed = tf.concat(self.reduce.compose(_halves(read(table, left_all[lo:hi]), H),
                                                     _halves(read(table, right_all[lo:hi]), H), tracking), axis=-1)
            rows = base + tf.range(lo, hi)
            table = tf.tensor_scatter_nd_update(table, rows[:, None], composed) if dense else table.scatter(rows,
                                                                                                          composed)
            return l + 1, table, state, logits

        _, table, _, logits = tf.while_loop(lambda l, *_: l < L, body, (tf.constant(0), table, state, logits))
        encodings = _halves(read(table, roots), H)[0]
        if not head:
            return encodings
        steps = tf.repeat(tf.range(L), active_offsets[1:] - active_offsets[:-1])
        per_level = tf.scatter_nd(tf.stack([active_all, steps], axis=-1), logits.concat(), [S + 1, L, 2])
        return encodings, per_level[:S]


class LevelClassifier(SNLIClassifier):
    """classifier.py's SNLIClassifier (same variables) with this module's
    SPINN, whose programs take one more input: ``__call__``, ``encode`` and
    ``parse`` take the batch's schedule as ``levels=`` (BatchArrays.levels)."""

    def __init__(self, config: ModelConfig, *, encoder: type = SPINN, **options):
        super().__init__(config, encoder=encoder, **options)

    def encode(self, tokens: tf.Tensor, transitions: tf.Tensor | None, *, levels) -> tf.Tensor:
        """tokens <int32>[S, N], transitions <int32>[S, T] (or None: SPINN.encode
        reads the schedule alone), their schedule -> encodings <float>[S, H]."""
        return self.spinn.encode(self._leaves(tokens), transitions, levels=levels)

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions, *, levels):
        """SNLIClassifier.__call__ on the schedule ``levels`` of the 2B sentences."""
        B = tf.shape(premise_tokens)[0]
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        encodings = self.encode(tokens, None, levels=levels)  # the schedule holds the transitions
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, *, levels):
        """Gold mode only (SPINN.parse): SNLIClassifier.parse on the schedule ``levels``."""
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
