"""SPINN on a host-made level schedule (shared/levels.py), one jitted loop.

The schedule turns the batch's trees into index arrays; the program is a
``lax.scan`` over levels that gathers each level's children from the node
table, runs the shared Reduce (and Tracker) cells on the dense block and
writes the results as one contiguous block. Gold parses only: a predicted or
sampled parse is decided inside the loop and cannot be scheduled ahead.

``SPINN`` here has the same submodules and weights as masked.py's; its
``encode`` and ``parse`` take the schedule's arrays (``levels=``) besides the
leaves and transitions. ``LevelClassifier`` is classifier.py's
SNLIClassifier with this encoder, whose ``__call__``, ``encode`` and
``parse`` take the schedule too: the one family whose programs have an
input besides tokens and transitions (the batch's ``levels``, which
train.py passes on), so train.py's loss, gradient and training step run it
unchanged (the runner's ``algorithm="levels"``, the registry's
``jax-levels``).

:func:`host_schedule` makes those arrays for a batch. With the tracker a
level is a step: T levels, the tracker on A rows (2B rounded up: every
sentence steps at step 0), and Reduce on the smallest of a few fixed widths
that holds the step's reducing sentences (shared.levels.class_arrays, a
``nn.switch`` per step: only the chosen width runs), the node arrays padded
to the most a batch can hold, so a program compiles once per (B, N, T, A):
once per bucket. Without it a level is a tree height, and the widest levels
come first: runs of 1, 2, 4, 8, ... levels (shared.levels.doubling_runs),
each of its own width, one scan per run; a program compiles once per
(B, N, T) and tuple of run widths, whose length is log2 of the tallest
tree's height (a few per bucket; one uniform width would pad most rows).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from shared.batching import sentences_transitions
from shared.levels import class_arrays, doubling_runs, program_padding, width_classes
from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Dtype, Reduce, Tracker
from .classifier import SNLIClassifier
from .shift_reduce import DEFAULT_LAYOUT, halves


class SPINN(nn.Module):
    """The encoder on a level schedule, with masked.py's submodules and weights."""

    config: ModelConfig
    # The classifier's encoder fields (classifier.py): the level loop has no stack layout and no tail to skip.
    layout: str = DEFAULT_LAYOUT
    dtype: Dtype = jnp.float32  # the parameters'
    unroll: int = 1
    skip_tail: bool = True

    def setup(self):
        c = self.config
        if c.tracker_dim > 0:
            self.tracker = Tracker(c.hidden_dim, c.tracker_dim, c.transition_head, self.dtype)
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.dtype)

    def encode(self, leaves, transitions, *, levels):
        """leaves <float>[S, N, 2H], transitions <int32>[S, T] (gold; the
        schedule was made from them on the host), levels: the schedule's
        arrays (host_schedule) -> encodings <float>[S, H], the roots' h."""
        return self._encode_program(leaves, levels)

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None, *, levels) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED): the gold parse
        with the head's logits at every step, as masked.py's SPINN.parse returns it (SentenceParses of the
        S sentences; logprob and entropy zeros). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        transitions = transitions.astype(jnp.int32)
        S, T = transitions.shape
        encodings, per_level = self._encode_program(leaves, levels, head=True)
        L = per_level.shape[1]  # levels are steps; rounded up, so L may differ from T either way
        per_step = per_level[:, :T] if L >= T else jnp.pad(per_level, ((0, 0), (0, T - L), (0, 0)))
        zeros = jnp.zeros((S,), encodings.dtype)
        return SentenceParses(encodings=encodings, transitions=transitions, transition_logits=per_step,
                              logprob=zeros, entropy=zeros)

    # ---- the loops over levels --------------------------------------------

    def _encode_scheduled(self, leaves, sched):
        """leaves <float>[S, N, 2H]; sched: shared.levels.uniform's arrays
        (jnp arrays; ``base``/``width``/``n_rows`` Python ints) -> h of the roots <float>[S, H]."""
        return self._encode_segments(leaves, [sched], sched["n_rows"], sched["roots"])

    def _encode_segments(self, leaves, segments, n_rows: int, roots, head: bool = False):
        """leaves <float>[S, N, 2H]; segments: shared.levels.segments' runs
        (or one uniform run), one lax.scan each; n_rows the table's rows;
        roots <int32>[S] -> h of the roots <float>[S, H]; with ``head`` also
        the transition head's logits <float>[S, L, 2] at level (= step) l of
        the sentences that step, zeros elsewhere (one uniform run only)."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        dtype = leaves.dtype
        table = jnp.concatenate([leaves.reshape(S * N, 2 * H), jnp.zeros((n_rows - S * N, 2 * H), dtype)], axis=0)
        state = (jnp.zeros((S + 1, D), dtype), jnp.zeros((S + 1, D), dtype)) if D > 0 else ()  # row S: padding's
        for seg in segments:
            table, state, logits = self._run(table, state, seg, head)
        encodings = halves(table[roots], H)[0]
        if not head:
            return encodings
        active = segments[-1]["active"]  # [L, A]
        L = active.shape[0]
        steps = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32)[:, None], active.shape)
        per_step = jnp.zeros((S + 1, L, 2), dtype).at[active, steps].set(logits)  # row S: padding's
        return encodings, per_step[:S]

    def _encode_program(self, leaves, arrays, head: bool = False):
        """leaves <float>[S, N, 2H]; arrays: shared.levels.program_arrays' dict
        (one uniform run) or shared.levels.doubling_runs' list (runs, then
        the roots), int32 arrays whose shapes give the table's layout ->
        encodings <float>[S, H] (and with ``head``, one uniform run, the
        head's logits <float>[S, L, 2])."""
        if isinstance(arrays, dict) and "cls" in arrays:  # shared.levels.class_arrays
            return self._encode_classes(leaves, arrays, head)
        S, N = leaves.shape[:2]
        runs, roots = ([arrays], arrays["roots"]) if isinstance(arrays, dict) else (arrays[:-1], arrays[-1]["roots"])
        segments, base = [], S * N + 1
        for run in runs:
            L, W = run["left"].shape
            segments.append(dict(run, base=base, width=W))
            base += L * W
        return self._encode_segments(leaves, segments, base, roots, head)

    def _run(self, table, state, seg, head: bool = False):
        H, D = self.config.hidden_dim, self.config.tracker_dim
        base, W = seg["base"], seg["width"]
        names = ("left", "right") + (("active", "top", "below", "front", "reducing") if D > 0 else ())
        xs = tuple(seg[k] for k in names)

        def level(module, carry, x):
            table, state, l = carry
            tracking, logits = None, None
            if D > 0:
                left, right, active, top, below, front, reducing = x
                h0, c0 = state[0][active], state[1][active]
                h, c = module.tracker.step(halves(table[front], H)[0], halves(table[top], H)[0],
                                           halves(table[below], H)[0], (h0, c0))
                # padding rows all write the spare row S; any of them may win, none is read
                state = (state[0].at[active].set(h), state[1].at[active].set(c))
                tracking = jnp.take(h, reducing, axis=0)
                if head:  # the head reads the state this step's tracker update just wrote
                    logits = module.tracker.transition_logits(h)
            else:
                left, right = x
            if W > 0:  # one gather of both children (its transpose: one scatter into the table's cotangent)
                children = jnp.take(table, jnp.concatenate([left, right]), axis=0)
                lh, lc = halves(children[:W], H)
                rh, rc = halves(children[W:], H)
                composed = jnp.concatenate(module.reduce.compose((lh, lc), (rh, rc), tracking), axis=-1)
                table = jax.lax.dynamic_update_slice(table, composed, (base + l * W, jnp.int32(0)))
            return (table, state, l + 1), logits

        scan = nn.scan(level, variable_broadcast="params", split_rngs={"params": False}, length=xs[0].shape[0])
        (table, state, _), logits = scan(self, (table, state, jnp.int32(0)), xs)
        return table, state, logits

    def _encode_classes(self, leaves, arrays, head: bool = False):
        """With the tracker: leaves <float>[S, N, 2H]; arrays:
        shared.levels.class_arrays' -> encodings <float>[S, H] (and with
        ``head`` the head's logits <float>[S, L, 2]). One scan over the steps:
        the tracker on the step's A rows, then Reduce on the step's class
        width (``nn.switch``: only the chosen branch runs), the block read
        and written, the widest class's rows, at its offset; rows past the
        step's own are overwritten by the steps after it before anything
        reads them."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        dtype = leaves.dtype
        base = S * N + 1
        classes = width_classes(S)
        left_all, right_all, reducing_all = arrays["left"], arrays["right"], arrays["reducing"]
        n_rows = base + left_all.shape[0]
        table = jnp.concatenate([leaves.reshape(S * N, 2 * H), jnp.zeros((n_rows - S * N, 2 * H), dtype)], axis=0)
        state = (jnp.zeros((S + 1, D), dtype), jnp.zeros((S + 1, D), dtype))  # row S: padding's

        Wmax = classes[-1]

        def branch(W):  # Reduce on the first W of Wmax gathered rows; the others come back zero
            def run(module, left, right, tracking):
                if W == 0:
                    return jnp.zeros((Wmax, 2 * H), dtype)
                composed = jnp.concatenate(module.reduce.compose(halves(left[:W], H), halves(right[:W], H),
                                                                 tracking[:W]), axis=-1)
                return jnp.concatenate([composed, jnp.zeros((Wmax - W, 2 * H), dtype)], axis=0)
            return run

        def level(module, carry, x):
            table, state = carry
            offset, cls, active, top, below, front = x
            # One gather of every row the step reads (its transpose, in the gradient, is one scatter into
            # the table's cotangent, not five). The gathers and the write stay outside the switch (the table
            # is no operand of it): only the arithmetic's width depends on the class.
            A = active.shape[0]
            rows = jnp.take(table, jnp.concatenate([front, top, below,
                                                    jax.lax.dynamic_slice(left_all, (offset,), (Wmax,)),
                                                    jax.lax.dynamic_slice(right_all, (offset,), (Wmax,))]), axis=0)
            buffer_h, top_h, below_h = (halves(rows[k * A:(k + 1) * A], H)[0] for k in range(3))
            left, right = rows[3 * A:3 * A + Wmax], rows[3 * A + Wmax:]
            h, c = module.tracker.step(buffer_h, top_h, below_h, (state[0][active], state[1][active]))
            state = (state[0].at[active].set(h), state[1].at[active].set(c))
            tracking = jnp.take(h, jax.lax.dynamic_slice(reducing_all, (offset,), (Wmax,)), axis=0)
            composed = nn.switch(cls, [branch(W) for W in classes], module, left, right, tracking)
            table = jax.lax.dynamic_update_slice(table, composed, (base + offset, jnp.int32(0)))
            return (table, state), (module.tracker.transition_logits(h) if head else None)

        names = ("offsets", "cls", "active", "top", "below", "front")
        scan = nn.scan(level, variable_broadcast="params", split_rngs={"params": False},
                       length=arrays["cls"].shape[0])
        (table, _), logits = scan(self, (table, state), tuple(arrays[k] for k in names))
        encodings = halves(table[arrays["roots"]], H)[0]
        if not head:
            return encodings
        active = arrays["active"]
        L = active.shape[0]
        steps = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32)[:, None], active.shape)
        return encodings, jnp.zeros((S + 1, L, 2), dtype).at[active, steps].set(logits)[:S]


class LevelClassifier(SNLIClassifier):
    """classifier.py's SNLIClassifier (same weights) with this module's SPINN
    (``encoder=SPINN``): its ``__call__``, ``encode`` and ``parse`` take the
    schedule's arrays (``levels=``: host_schedule of the batch's 2B
    sentences, premises first) besides the batch's arrays."""

    encoder: type = SPINN  # the only encoder that reads a schedule

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions, *,
                 levels):
        """The batch's arrays and ``levels`` -> (premise, hypothesis, logits), as SNLIClassifier.__call__."""
        B = premise_tokens.shape[0]
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)
        encodings = self.encode(tokens, transitions, levels=levels)
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def encode(self, tokens, transitions, *, levels):
        """tokens <int32>[S, N], transitions <int32>[S, T], levels (their
        schedule) -> encodings <float>[S, H], as SNLIClassifier.encode."""
        return self.spinn.encode(self._leaves(tokens), transitions, levels=levels)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, *, levels) -> tuple[SentenceParses, jnp.ndarray]:
        """Gold mode only (SPINN.parse): SNLIClassifier.parse with the schedule."""
        B = premise_tokens.shape[0]
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)
        parses = self.spinn.parse(self._leaves(tokens), transitions, mode, uniforms, levels=levels)
        return parses, self.classify(parses.encodings[:B], parses.encodings[B:])


def host_schedule(batch, tracker: bool) -> tuple[dict | list, dict]:
    """The level schedule of a batch's premises and hypotheses, as the
    programs take it (a dict of arrays with the tracker, a list of doubling
    runs and the root rows without), and what it computes: ``levels``,
    ``level_padding_pct`` (the percentage of computed Reduce rows that are
    padding), ``reduce_rows`` and ``tracker_rows`` (the rows each cell
    computes, padding included)."""
    transitions = sentences_transitions(batch)
    N = np.shape(batch.premise_tokens)[1]
    if tracker:  # levels are steps: T of them, each Reduce on its width class
        S, T = transitions.shape
        levels, sched = class_arrays(transitions, N, n_levels=T, n_nodes=S * (N - 1))
        classes = width_classes(S)
        computed = sum(classes[k] for k in levels["cls"])
        tracker_rows = levels["active"].size  # the tracker on A rows at each of the T steps
    else:  # tree heights: runs of 1, 2, 4, ... levels, each its own width
        levels, sched = doubling_runs(transitions, N)
        computed, tracker_rows = sum(run["left"].size for run in levels[:-1]), 0
    return levels, {"levels": sched.n_levels, "level_padding_pct": 100.0 * program_padding(sched, computed),
                    "reduce_rows": computed, "tracker_rows": tracker_rows}


def schedule_shape(levels: dict | list) -> tuple[int, ...]:
    """What a schedule adds to a program's compiled shape: the tracker's A
    (rows per step), or the doubling runs' widths (their lengths are 1, 2, 4, ...)."""
    if isinstance(levels, dict):
        return levels["active"].shape[1:]
    return tuple(run["left"].shape[1] for run in levels[:-1])
