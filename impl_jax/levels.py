"""SPINN on a level schedule made on the host, in JAX: the levels family (docs/spec.md §3, §7).

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
                 <float>[S * N + 1 + R, 2H], R counting the padding rows
    state        <float>[S + 1, D] twice  the tracker's (h, c) (row S: padding's)
    schedule     with the tracker shared.levels.class_arrays' arrays, without
                 it shared.levels.doubling_runs' runs (host_schedule)

JAX compiles the loop: a ``lax.scan`` over levels, whose every iteration
has the same shapes, so the schedule is padded, and its shapes are part of
the compiled program's (schedule_shape). With the tracker a level is a
step: T levels, the tracker on A rows (2B rounded up: every sentence steps
at step 0), and Reduce on the smallest of a few fixed widths that holds the
step's reducing sentences (shared.levels.class_arrays, a ``nn.switch`` per
step: only the chosen width runs), the node arrays padded to the most a
batch can hold, so a program compiles once per (B, N, T, A): once per
bucket; a cond per level skips the levels past the batch's last real one,
in inference and in training (SPINN._encode_classes). Without it the
widest levels come first: runs of 1, 2, 4, 8, ... levels
(shared.levels.doubling_runs), each of its own width, one scan per run; a
program compiles once per (B, N, T) and tuple of run widths, whose
length is log2 of the tallest tree's height (a few per bucket; one uniform
width would pad most rows). The schedule is an input of the program, so
the programs take one more input than tokens and transitions:
``SPINN.encode`` and ``SPINN.parse`` take it as ``levels=``, and
``LevelClassifier``, classifier.py's SNLIClassifier with this encoder,
passes it on from its ``__call__``, ``encode`` and ``parse``, which
train.py's loss, gradient and training step run unchanged (the runner's
``algorithm="levels"``, the registry's ``jax-levels``); :func:`host_schedule`
makes it.
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
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the schedule made on the host (``levels=``)."""

    config: ModelConfig
    # The classifier's encoder fields (classifier.py): the level loop has no stack layout, no unroll factor, and
    # skips the levels past the batch's last real one in every program (_encode_classes), so skip_tail is not read.
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
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int32>[S, T], followed -> encodings <float>[S, H], the h of each
        root. Gold mode, and the transition head is never evaluated here;
        ``levels`` is the schedule made on the host from the transitions
        (host_schedule's arrays), which holds all this reads of them."""
        return self._run(leaves, levels, head=False)

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None, *, levels) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.py's SPINN.parse returns it
        (logprob and entropy zeros). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        transitions = transitions.astype(jnp.int32)
        S, T = transitions.shape
        encodings, per_level = self._run(leaves, levels, head=True)
        L = per_level.shape[1]  # levels are steps; L may differ from T either way
        per_step = per_level[:, :T] if L >= T else jnp.pad(per_level, ((0, 0), (0, T - L), (0, 0)))
        zeros = jnp.zeros((S,), encodings.dtype)
        return SentenceParses(encodings=encodings, transitions=transitions, transition_logits=per_step,
                              logprob=zeros, entropy=zeros)

    def _run(self, leaves, levels, head: bool):
        """The loop over levels behind encode and parse: leaves <float>[S, N, 2H];
        levels: shared.levels.class_arrays' dict (with the tracker: _encode_classes),
        shared.levels.program_arrays' dict (one uniform run) or
        shared.levels.doubling_runs' list (runs, then the roots), int32 arrays
        whose shapes give the table's layout -> encodings <float>[S, H]; with
        ``head`` (with the tracker, or one uniform run) also the head's logits
        <float>[S, L, 2] at level (= step) l of the sentences that step, zeros elsewhere."""
        if isinstance(levels, dict) and "cls" in levels:  # shared.levels.class_arrays
            return self._encode_classes(leaves, levels, head)
        S, N = leaves.shape[:2]
        runs, roots = ([levels], levels["roots"]) if isinstance(levels, dict) else (levels[:-1], levels[-1]["roots"])
        segments, base = [], S * N + 1
        for run in runs:
            L, W = run["left"].shape
            segments.append(dict(run, base=base, width=W))
            base += L * W
        return self._encode_segments(leaves, segments, base, roots, head)

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
            """Level (= step) l: its slices of the schedule's arrays, the cells on them, its block into the table."""
            table, state = carry
            offset, cls, active, top, below, front = x
            # One gather of every row the level reads (its transpose, in the gradient, is one scatter into
            # the table's cotangent, not five). The gathers and the write stay outside the switch (the table
            # is no operand of it): only the arithmetic's width depends on the class.
            A = active.shape[0]
            rows = jnp.take(table, jnp.concatenate([front, top, below,
                                                    jax.lax.dynamic_slice(left_all, (offset,), (Wmax,)),
                                                    jax.lax.dynamic_slice(right_all, (offset,), (Wmax,))]), axis=0)
            buffer_h, top_h, below_h = (halves(rows[k * A:(k + 1) * A], H)[0] for k in range(3))
            left, right = rows[3 * A:3 * A + Wmax], rows[3 * A + Wmax:]
            # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
            # Padding rows all write the spare row S; any of them may win, none is read.
            h, c = module.tracker.step(buffer_h, top_h, below_h, (state[0][active], state[1][active]))
            state = (state[0].at[active].set(h), state[1].at[active].set(c))
            tracking = jnp.take(h, jax.lax.dynamic_slice(reducing_all, (offset,), (Wmax,)), axis=0)  # h_t just written
            # ---- compose the level's nodes, one batched Reduce on the step's class width.
            composed = nn.switch(cls, [branch(W) for W in classes], module, left, right, tracking)
            # ---- write the level's block into the table: rows no level read before (the spill past them is
            # overwritten before anything reads it).
            table = jax.lax.dynamic_update_slice(table, composed, (base + offset, jnp.int32(0)))
            # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
            return (table, state), (module.tracker.transition_logits(h) if head else None)

        L, A = arrays["active"].shape

        def level_until(module, carry, x):
            """``level`` while l < ``stop``; after it, nothing: a conditional skips the padding levels' work, as
            masked.py's _step_until skips the steps past the batch's last real one (only the branch taken runs,
            in the forward pass and in its gradient). The level count is padded to T (class_arrays), so that the
            program's shape depends on the bucket alone; the levels past the batch's last real one would run
            the tracker on padding rows. Every program keeps it: under jax.grad it costs nothing measurable
            (unlike masked.py's), and so the rows host_schedule counts are those every program computes."""

            def run(module, carry):
                return level(module, carry, x[:-1])

            def idle(module, carry):  # what a level of padding returns: it changes no row anything reads
                return carry, (jnp.zeros((A, 2), dtype) if head else None)

            return nn.cond(x[-1] < stop, run, idle, module, carry)

        names = ("offsets", "cls", "active", "top", "below", "front")
        xs = tuple(arrays[k] for k in names)
        skip = not self.is_initializing()  # init(): the plain level, in which the weights are made
        if skip:
            # One past the last level where some sentence steps (a padding row steps the spare row S).
            stop = jnp.max(jnp.where(jnp.any(arrays["active"] < S, axis=1), jnp.arange(1, L + 1, dtype=jnp.int32), 0))
            xs += (jnp.arange(L, dtype=jnp.int32),)  # the level's number, for the cond
        # ---- the loop over levels: what each runs was decided on the host.
        # An nn.scan (lax.scan lifted over Flax variables): one compiled body, the same shapes at every level.
        scan = nn.scan(level_until if skip else level, variable_broadcast="params", split_rngs={"params": False},
                       length=L)
        (table, _), logits = scan(self, (table, state), xs)
        encodings = halves(table[arrays["roots"]], H)[0]  # h of each root, [S, H]
        if not head:
            return encodings
        active = arrays["active"]
        steps = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32)[:, None], active.shape)
        return encodings, jnp.zeros((S + 1, L, 2), dtype).at[active, steps].set(logits)[:S]

    def _encode_segments(self, leaves, segments, n_rows: int, roots, head: bool = False):
        """leaves <float>[S, N, 2H]; segments: shared.levels.segments' runs
        (or one uniform run), one lax.scan each (_segment); n_rows the table's rows;
        roots <int32>[S] -> h of the roots <float>[S, H]; with ``head`` also
        the transition head's logits <float>[S, L, 2] at level (= step) l of
        the sentences that step, zeros elsewhere (one uniform run only)."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        S, N = leaves.shape[:2]
        dtype = leaves.dtype
        table = jnp.concatenate([leaves.reshape(S * N, 2 * H), jnp.zeros((n_rows - S * N, 2 * H), dtype)], axis=0)
        state = (jnp.zeros((S + 1, D), dtype), jnp.zeros((S + 1, D), dtype)) if D > 0 else ()  # row S: padding's
        for seg in segments:
            table, state, logits = self._segment(table, state, seg, head)
        encodings = halves(table[roots], H)[0]
        if not head:
            return encodings
        active = segments[-1]["active"]  # [L, A]
        L = active.shape[0]
        steps = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32)[:, None], active.shape)
        per_step = jnp.zeros((S + 1, L, 2), dtype).at[active, steps].set(logits)  # row S: padding's
        return encodings, per_step[:S]

    def _segment(self, table, state, seg, head: bool = False):
        """One run of levels of one width (a segment), one lax.scan: (table, state) -> (table, state, the
        head's logits <float>[L, A, 2] with ``head``, else None)."""
        H, D = self.config.hidden_dim, self.config.tracker_dim
        base, W = seg["base"], seg["width"]
        names = ("left", "right") + (("active", "top", "below", "front", "reducing") if D > 0 else ())
        xs = tuple(seg[k] for k in names)

        def level(module, carry, x):
            """Level l of the run: its slices of the schedule's arrays, the cells on them, its block into the table."""
            table, state, l = carry
            tracking, logits = None, None
            if D > 0:
                left, right, active, top, below, front, reducing = x
                # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
                # Padding rows all write the spare row S; any of them may win, none is read.
                h0, c0 = state[0][active], state[1][active]
                h, c = module.tracker.step(halves(table[front], H)[0], halves(table[top], H)[0],
                                           halves(table[below], H)[0], (h0, c0))
                state = (state[0].at[active].set(h), state[1].at[active].set(c))
                tracking = jnp.take(h, reducing, axis=0)  # the h_t just written
                if head:
                    # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                    logits = module.tracker.transition_logits(h)
            else:
                left, right = x
            if W > 0:
                # ---- compose the level's nodes, one batched Reduce: one gather of both children (its transpose,
                # in the gradient, is one scatter into the table's cotangent).
                children = jnp.take(table, jnp.concatenate([left, right]), axis=0)
                lh, lc = halves(children[:W], H)
                rh, rc = halves(children[W:], H)
                composed = jnp.concatenate(module.reduce.compose((lh, lc), (rh, rc), tracking), axis=-1)
                # ---- write the level's block into the table: rows no level read before and none writes again.
                table = jax.lax.dynamic_update_slice(table, composed, (base + l * W, jnp.int32(0)))
            return (table, state, l + 1), logits

        # ---- the loop over levels: what each runs was decided on the host.
        # An nn.scan (lax.scan lifted over Flax variables): one compiled body, the same shapes at every level.
        scan = nn.scan(level, variable_broadcast="params", split_rngs={"params": False}, length=xs[0].shape[0])
        (table, state, _), logits = scan(self, (table, state, jnp.int32(0)), xs)
        return table, state, logits

    def _encode_scheduled(self, leaves, sched):
        """leaves <float>[S, N, 2H]; sched: shared.levels.uniform's arrays
        (jnp arrays; ``base``/``width``/``n_rows`` Python ints) -> h of the roots <float>[S, H]."""
        return self._encode_segments(leaves, [sched], sched["n_rows"], sched["roots"])


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
    computes, padding included; not the padding levels the program skips)."""
    transitions = sentences_transitions(batch)
    N = np.shape(batch.premise_tokens)[1]
    if tracker:  # levels are steps: T of them, each Reduce on its width class
        S, T = transitions.shape
        levels, sched = class_arrays(transitions, N, n_levels=T, n_nodes=S * (N - 1))
        classes = width_classes(S)
        computed = sum(classes[k] for k in levels["cls"])
        # The tracker on A rows at each of the batch's own levels: the T - n_levels after them are skipped
        # (SPINN._encode_classes), so they compute nothing.
        tracker_rows = levels["active"].shape[1] * sched.n_levels
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
