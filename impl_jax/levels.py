"""SPINN on a level schedule made on the host, in JAX: the levels family (docs/spec.md §3, §7).

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
                 <float>[S * N + 1 + R, 2H], R counting the padding rows (SPINN._start)
    state        <float>[S + 1, D] twice  the tracker's (h, c) (row S: padding's)
    schedule     shared.levels.level_arrays' arrays, padded as PADDING says
                 (host_schedule; the ``levels`` of ``encode`` and ``parse``)

The three levels.py run one algorithm in the same steps under the same
names: ``_run`` makes the table and the state and runs ``_loop`` over the
levels, each level a ``_level``: its part of the schedule (``_slices``), one
``_read`` of the rows it reads, the tracker on the sentences that step,
Reduce on its nodes (``_compose``), one ``_write`` of its block. What JAX
forces:

* The loop is compiled: an ``nn.scan`` (``lax.scan`` lifted over Flax's
  variables) whose every iteration has the same shapes, so the schedule is
  padded (PADDING ``"static"``, shared.levels' docstring): the tracker on S
  rows at every level, a level's Reduce on a window of W rows (S rounded up
  to a class; a wider level without the tracker runs as sub-levels) of
  which it composes the smallest class that holds its nodes (``_compose``:
  an ``nn.switch`` per level over shared.levels.reduce_classes, only the
  chosen width runs; a window of one class needs none), the level count
  rounded up to a class (T at most), the node count padded to the most a
  batch can hold. A conditional skips the levels past the batch's own, in
  inference and in training. So a program compiles once per (B, N, T) and
  level count (shared.levels.static_shape), a few per bucket; the runner's
  ``program_shape`` says which. Under ``jax.grad`` a switch keeps every
  branch's residuals at every level, and each branch is compiled forward and
  backward, so the classes are few (shared.levels.reduce_classes); the
  scan's body runs under ``jax.checkpoint``, every residual saved, so that
  the conds do not make the weights a residual of every level.
* The table is the scan's carry: ``_read`` is a ``take``, ``_write`` a
  ``dynamic_update_slice`` that XLA does in place; the gradient of the
  takes is one buffer, the carry's cotangent (what impl_pytorch/node_table.py
  writes for PyTorch). The reads and the write stay outside
  the switch, so that the table is no operand of it.
* The schedule is an input of the programs, so they take one more input
  than tokens and transitions: ``SPINN.encode`` and ``SPINN.parse`` take it
  as ``levels=``, and ``LevelClassifier``, classifier.py's SNLIClassifier
  with this encoder, passes it on from its ``__call__``, ``encode`` and
  ``parse``, which train.py's loss, gradient and training step run unchanged
  (the runner's ``family="levels"``, the registry's ``jax-levels``);
  :func:`host_schedule` makes it.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from shared.levels import batch_schedule, reduce_classes, static_shape
from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Dtype, Reduce, Tracker
from .classifier import SNLIClassifier
from .shift_reduce import DEFAULT_LAYOUT

PADDING = "static"  # what this framework's loop needs of the schedule (shared.levels.PADDINGS)


class SPINN(nn.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the schedule made on the host (``levels=``)."""

    config: ModelConfig
    # The classifier's encoder fields (classifier.py): the level loop has no stack layout, and skips the levels
    # past the batch's last real one in every program (_loop), so skip_tail is not read.
    layout: str = DEFAULT_LAYOUT
    dtype: Dtype = jnp.float32  # the parameters'
    unroll: int = 1  # the scan's unroll factor (speed only)
    skip_tail: bool = True

    def setup(self):
        c = self.config
        self.hidden_dim, self.tracker_dim = c.hidden_dim, c.tracker_dim
        self.tracker = Tracker(c.hidden_dim, c.tracker_dim, c.transition_head, self.dtype) if c.tracker_dim else None
        self.reduce = Reduce(c.hidden_dim, c.tracker_dim, self.dtype)

    def encode(self, leaves, transitions, *, levels: dict):
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int32>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here;
        ``levels`` is the schedule made on the host from the transitions
        (host_schedule's arrays), which holds all this reads of them (so they
        may be None)."""
        return self._run(leaves, levels, head=False)

    def parse(self, leaves, transitions, mode: str = "predicted", uniforms=None, *, levels: dict) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.py's SPINN.parse returns it
        (logprob and entropy zeros). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        encodings, per_level = self._run(leaves, levels, head=True)
        T, L = transitions.shape[1], per_level.shape[1]  # levels are steps; L may differ from T either way
        per_step = jnp.pad(per_level, ((0, 0), (0, max(T - L, 0)), (0, 0)))[:, :T]
        zeros = jnp.zeros((transitions.shape[0],), encodings.dtype)
        return SentenceParses(encodings=encodings, transitions=transitions.astype(jnp.int32),
                              transition_logits=per_step, logprob=zeros, entropy=zeros)

    def _run(self, leaves, levels: dict, head: bool):
        """The loop over levels behind encode and parse: leaves <float>[S, N, 2H];
        levels: shared.levels.level_arrays' arrays -> encodings <float>[S, H];
        with ``head`` also the head's logits <float>[S, L, 2] at level (= step)
        l of the sentences that step, zeros elsewhere."""
        S, N = leaves.shape[:2]
        H = self.hidden_dim
        levels = jax.tree.map(jnp.asarray, levels)  # (arrays given as NumPy: the loop indexes them with traced ints)
        base = S * N + 1  # the table row of the first level's first node
        table, state = self._start(leaves, base + levels["left"].shape[0])
        table, _, logits = self._loop(table, state, levels, base, head)
        encodings = _read(table, levels["roots"])[:, :H]  # h of each root, [S, H]
        if not head:
            return encodings
        return encodings, _head_logits(logits, levels, S)

    def _start(self, leaves, rows: int):
        """The loop's state at its start: the node table of ``rows`` rows
        <float>[rows, 2H], the leaves <float>[S, N, 2H] in its first S * N and
        zeros after them; the tracker's (h_t, c_t) <float>[S + 1, D] each,
        zeros (row S: padding's)."""
        S, N, width = leaves.shape
        table = jnp.concatenate([leaves.reshape(S * N, width), jnp.zeros((rows - S * N, width), leaves.dtype)])
        return table, (jnp.zeros((S + 1, self.tracker_dim), leaves.dtype),) * 2

    def _loop(self, table, state, levels: dict, base: int, head: bool):
        """The loop over the levels: (table, state) -> (table, state, the head's
        logits of every tracker row <float>[Q, 2] with ``head``, else None).
        An nn.scan: one compiled body, the same shapes at every one of the T
        levels; a conditional skips those past the batch's ``n_levels`` (only
        the branch taken runs, in the forward pass and in its gradient)."""
        A = static_shape(levels)[1]

        def body(module, carry, l):  # the scan's body takes (carry, x): x is the level's number
            def run(module, table, state):
                table, state, logits = module._level(table, state, levels, l, base, head)
                return (table, state), logits

            def idle(module, table, state):  # a level of padding: nothing changes, its logits are padding's
                return (table, state), (jnp.zeros((A, 2), table.dtype) if head else None)

            if module.is_initializing():  # init(): the level itself, in which the weights are made
                return run(module, *carry)
            return nn.cond(l < levels["n_levels"], run, idle, module, *carry)

        # Under jax.grad, partial evaluation of a cond (the one above, the switch in _compose) makes every operand
        # its transposed branches read a residual, the weights included, and the scan stacks residuals per level: a
        # copy of Reduce's (and the tracker's) kernels at every level. Under jax.checkpoint the weights stay
        # operands, read once; the policy saves every other residual, so nothing is computed twice.
        body = nn.remat(body, policy=jax.checkpoint_policies.everything_saveable, prevent_cse=False)
        scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False}, unroll=self.unroll)
        (table, state), logits = scan(self, (table, state), jnp.arange(levels["widths"].shape[0], dtype=jnp.int32))
        return table, state, logits.reshape(-1, 2) if head else None

    def _level(self, table, state, levels: dict, l, base: int, head: bool):
        """Level l: read the rows it needs from ``table``, run the cells, write
        its block into ``table`` -> (table, state, the head's logits of its
        tracker rows <float>[A, 2] with ``head``, else None)."""
        H = self.hidden_dim
        offset, width, parser, children, active, reducing = _slices(levels, l)
        tracking = logits = None
        if self.tracker is not None:
            # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
            state, h = self._track(table, state, parser, active)
            tracking = jnp.take(h, reducing, axis=0)  # the h_t just written
            if head:
                # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                logits = self.tracker.transition_logits(h)
        # ---- read the children of the level's nodes and compose them, one batched Reduce on its class of width.
        left, right = jnp.split(_read(table, children), 2)
        composed = self._compose((left[:, :H], left[:, H:]), (right[:, :H], right[:, H:]), tracking, width)
        # ---- write the level's block into the table: rows no level read before (the window's rows past the
        # level's own are overwritten by the levels after it before anything reads them).
        return _write(table, base + offset, composed), state, logits

    def _track(self, table, state, parser, active):
        """The tracker on the sentences ``active`` <int32>[A] that step, reading
        their buffer front, stack top and the item below it (table rows
        ``parser`` <int32>[3A]) -> (the state with their rows updated, their
        new h_t <float>[A, D]). Padding rows all write the spare row S; any of
        them may win, none is read."""
        front, top, below = jnp.split(_read(table, parser)[:, :self.hidden_dim], 3)
        h, c = self.tracker.step(front, top, below, (state[0][active],
                                                     state[1][active]))
        return (state[0].at[active].set(h), state[1].at[active].set(c)), h

    def _compose(self, left, right, tracking, width):
        """Reduce on the first ``width`` rows of the level's window: left and
        right (h, c) <float>[W, H] each, tracking <float>[W, D] or None -> their
        [h; c] <float>[W, 2H], zeros past ``width``. A compiled shape cannot
        follow the width: one branch per class of shared.levels.reduce_classes,
        of which nn.switch runs the one ``width`` names."""
        W = left[0].shape[0]
        classes = reduce_classes(W, self.tracker is not None)

        def branch(rows: int):  # nn.switch's branches take (module, *operands)
            def compose(module, left, right, tracking):
                first = jax.tree.map(lambda x: x[:rows], (left, right, tracking))
                return jnp.pad(jnp.concatenate(module.reduce.compose(*first), axis=-1), ((0, W - rows), (0, 0)))
            return compose

        if self.is_initializing():  # init(): the widest branch alone, in which the weights are made
            return branch(W)(self, left, right, tracking)
        index = jnp.sum(jnp.asarray(classes, jnp.int32) < width)  # the class's: the classes narrower than it
        return nn.switch(index, [branch(rows) for rows in classes], self, left, right, tracking)


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
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        encodings = self.encode(tokens, None, levels=levels)  # the schedule holds the transitions
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def encode(self, tokens, transitions, *, levels):
        """tokens <int32>[S, N], transitions <int32>[S, T] (or None: SPINN.encode
        reads the schedule alone), levels (their schedule) -> encodings <float>[S, H],
        as SNLIClassifier.encode."""
        return self.spinn.encode(self._leaves(tokens), transitions, levels=levels)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, *, levels) -> tuple[SentenceParses, jnp.ndarray]:
        """Gold mode only (SPINN.parse): SNLIClassifier.parse with the schedule."""
        B = premise_tokens.shape[0]
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        parses = self.spinn.parse(self._leaves(tokens), transitions, mode, uniforms, levels=levels)
        return parses, self.classify(parses.encodings[:B], parses.encodings[B:])


def host_schedule(batch, tracker: bool) -> tuple[dict[str, np.ndarray], dict, dict[str, float]]:
    """A batch's schedule (BatchArrays.levels) as this module's loop takes it, what the loop computes over it and
    the host's seconds making it: shared.levels.batch_schedule, padded as PADDING says."""
    return batch_schedule(batch, tracker, PADDING)


def _slices(levels: dict, l):
    """Level l's part of the schedule: (its first node's offset, its Reduce
    rows (a class), the table rows of its tracker rows' buffer front, stack
    top and item below <int32>[3A], those of its window's left and right
    children <int32>[2W], its tracker rows' sentences <int32>[A], its window's
    tracker rows <int32>[W]). A compiled slice has a static size: the windows
    A and W of the padding (shared.levels.static_shape)."""
    _, A, W = static_shape(levels)
    offset, width, start = levels["offsets"][l], levels["widths"][l], levels["active_offsets"][l]
    parser = jax.lax.dynamic_slice_in_dim(levels["parser"], 3 * start, 3 * A)
    children = jnp.concatenate([jax.lax.dynamic_slice_in_dim(levels[k], offset, W) for k in ("left", "right")])
    return (offset, width, parser, children, jax.lax.dynamic_slice_in_dim(levels["active"], start, A),
            jax.lax.dynamic_slice_in_dim(levels["reducing"], offset, W))


def _head_logits(logits, levels: dict, S: int):
    """The head's logits of every tracker row <float>[Q, 2] -> <float>[S, L, 2]:
    at level (= step) l of each sentence that steps, zeros elsewhere."""
    counts = levels["active_offsets"][1:] - levels["active_offsets"][:-1]
    steps = jnp.repeat(jnp.arange(counts.shape[0]), counts, total_repeat_length=levels["active"].shape[0])
    per_level = jnp.zeros((S + 1, counts.shape[0], 2), logits.dtype).at[levels["active"], steps].set(logits)
    return per_level[:S]  # row S: padding's


def _read(table, rows):
    """The table's rows <int32>[K] -> <float>[K, 2H]."""
    return jnp.take(table, rows, axis=0)


def _write(table, row, block):
    """``block`` <float>[K, 2H] into the table's rows from ``row`` on -> the table (in place, under XLA)."""
    return jax.lax.dynamic_update_slice(table, block, (row, jnp.zeros_like(row)))
