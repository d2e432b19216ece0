"""SPINN on a level schedule made on the host, in PyTorch: the levels family (docs/spec.md §3, §7).

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
                 <float>[S * N + 1 + R, 2H], in a NodeTable (SPINN._start)
    state        <float>[S + 1, D] twice  the tracker's (h, c) (row S: padding's)
    schedule     shared.levels.level_arrays' arrays, padded as PADDING says
                 (host_schedule; the ``levels`` of ``encode`` and ``parse``)

The three levels.py run one algorithm in the same steps under the same
names: ``_run`` makes the table and the state and runs ``_loop`` over the
levels, each level a ``_level``: its part of the schedule (``_slices``), one
``_read`` of the rows it reads, the tracker on the sentences that step,
Reduce on its nodes (``_compose``), one ``_write`` of its block. What
PyTorch forces, or lets it do:

* The loop is eager, a Python ``for``: every level takes its exact width, so
  nothing is padded (PADDING ``"exact"``). The index arrays go to the device
  once per batch; a level slices its part with Python ints (the offsets stay
  NumPy), so the loop never waits for the device, and a level where no
  sentence reduces skips Reduce.
* The table's container is a :class:`~impl_pytorch.node_table.NodeTable`
  (node_table.py), which a level reads with a gather and writes a block of
  rows into, its gradient one buffer: the counterpart of TensorFlow's
  TensorArray and JAX's scan carry. PyTorch has no such library type (a
  table autograd tracks costs a table-sized fill per read in the backward
  pass: node_table.py's docstring has the figures), so the suite writes one.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shared.levels import batch_schedule
from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Reduce, Tracker
from .classifier import SNLIClassifier
from .node_table import NodeTable

PADDING = "exact"  # what this framework's loop needs of the schedule (shared.levels.PADDINGS)
_ON_DEVICE = ("left", "right", "reducing", "active", "parser", "roots")  # the rest: Python ints


class SPINN(nn.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the schedule made on the host (``levels=``)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head)
                        if config.tracker_dim > 0 else None)
        self.reduce = Reduce(config.hidden_dim, config.tracker_dim)
        self.last_host_syncs = 0  # gold transitions only: no decision comes back

    def forward(self, leaves: torch.Tensor, transitions, *, levels: dict) -> torch.Tensor:
        """nn.Module's entry point: :meth:`encode`."""
        return self.encode(leaves, transitions, levels=levels)

    def encode(self, leaves: torch.Tensor, transitions, *, levels: dict) -> torch.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here;
        ``levels`` is the schedule made on the host from the transitions
        (host_schedule: NumPy arrays), which holds all this reads of them (so
        they may be None)."""
        return self._run(leaves, levels, head=False)

    def parse(self, leaves: torch.Tensor, transitions: np.ndarray, mode: str = "predicted", uniforms=None, *,
              levels: dict) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.py's SPINN.parse returns it
        (logprob and entropy zeros; the transitions as given, NumPy on the
        host). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        encodings, per_level = self._run(leaves, levels, head=True)
        T, L = transitions.shape[1], per_level.shape[1]  # levels are steps; L may differ from T either way
        per_step = F.pad(per_level, (0, 0, 0, max(T - L, 0)))[:, :T]
        zeros = encodings.new_zeros(transitions.shape[0])
        return SentenceParses(encodings=encodings, transitions=np.asarray(transitions, np.int32),
                              transition_logits=per_step, logprob=zeros, entropy=zeros)

    def _run(self, leaves: torch.Tensor, levels: dict, head: bool):
        """The loop over levels behind encode and parse: leaves <float>[S, N, 2H];
        levels: shared.levels.level_arrays' arrays -> encodings <float>[S, H];
        with ``head`` also the head's logits <float>[S, L, 2] at level (= step)
        l of the sentences that step, zeros elsewhere."""
        S, N, _ = leaves.shape
        H = self.hidden_dim
        # The index arrays on the device, one copy each; the offsets stay on the host.
        levels = {k: torch.as_tensor(v, dtype=torch.int64, device=leaves.device) if k in _ON_DEVICE else v
                  for k, v in levels.items()}
        base = S * N + 1  # the table row of the first level's first node
        table, state = self._start(leaves, base + len(levels["left"]))
        table, _, logits = self._loop(table, state, levels, base, head)
        encodings = _read(table, levels["roots"])[:, :H]  # h of each root, [S, H]
        if not head:
            return encodings
        return encodings, _head_logits(logits, levels, S)

    def _start(self, leaves: torch.Tensor, rows: int):
        """The loop's state at its start: the node table of ``rows`` rows
        <float>[rows, 2H], the leaves <float>[S, N, 2H] in its first S * N and
        zeros after them, in a NodeTable (node_table.py: rows outside
        autograd, their gradient one buffer); the tracker's (h_t, c_t)
        <float>[S + 1, D] each, zeros (row S: padding's)."""
        S, N, width = leaves.shape
        table = NodeTable.zeros(rows, width, dtype=leaves.dtype, device=leaves.device)
        table = _write(table, 0, leaves.reshape(S * N, width))
        return table, (leaves.new_zeros((S + 1, self.tracker_dim)),) * 2

    def _loop(self, table, state, levels: dict, base: int, head: bool):
        """The loop over the levels: (table, state) -> (table, state, the head's
        logits of every tracker row <float>[Q, 2] with ``head``, else None).
        A Python ``for``: each level its own width, the ops recorded as they run."""
        logits = []
        for l in range(int(levels["n_levels"])):
            # A named range for profilers (explain.py counts the ops inside it).
            with torch.profiler.record_function("spinn.level"):
                table, state, level_logits = self._level(table, state, levels, l, base, head)
            logits.append(level_logits)
        return table, state, torch.cat(logits) if head else None

    def _level(self, table, state, levels: dict, l: int, base: int, head: bool):
        """Level l: read the rows it needs from ``table``, run the cells, write
        its block into ``table`` -> (table, state, the head's logits of its
        tracker rows <float>[A, 2] with ``head``, else None)."""
        H = self.hidden_dim
        offset, width, parser, children, active, reducing = _slices(levels, l)
        tracking = logits = None
        if self.tracker is not None:
            # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
            state, h = self._track(table, state, parser, active)
            tracking = h.index_select(0, reducing)  # the h_t just written
            if head:
                # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                logits = self.tracker.transition_logits(h)
        if not width:  # eager: no sentence reduces at this step, so no Reduce
            return table, state, logits
        # ---- read the children of the level's nodes and compose them, one batched Reduce.
        left, right = _read(table, children).split([width, width])
        composed = self._compose((left[:, :H], left[:, H:]), (right[:, :H], right[:, H:]), tracking)
        # ---- write the level's block into the table: rows no level read before.
        return _write(table, base + offset, composed), state, logits

    def _track(self, table, state, parser: torch.Tensor, active: torch.Tensor):
        """The tracker on the sentences ``active`` <int64>[A] that step, reading
        their buffer front, stack top and the item below it (table rows
        ``parser`` <int64>[3A]) -> (the state with their rows updated, their
        new h_t <float>[A, D])."""
        A = len(active)
        front, top, below = _read(table, parser)[:, :self.hidden_dim].split([A, A, A])
        h, c = self.tracker.step(front, top, below, (state[0].index_select(0, active),
                                                     state[1].index_select(0, active)))
        return (state[0].index_copy(0, active, h), state[1].index_copy(0, active, c)), h

    def _compose(self, left, right, tracking):
        """Reduce on the level's nodes: left and right (h, c) <float>[W, H] each,
        tracking <float>[W, D] or None -> their [h; c] <float>[W, 2H]."""
        return torch.cat(self.reduce.compose(left, right, tracking), dim=-1)


class LevelClassifier(SNLIClassifier):
    """classifier.py's SNLIClassifier (same parameters) with this module's
    SPINN: its ``forward``, ``encode`` and ``parse`` take the schedule's
    arrays (``levels=``: host_schedule of the batch's 2B sentences, premises
    first) besides the batch's arrays."""

    def __init__(self, config: ModelConfig, *, encoder: type = SPINN, dropout: float = 0.0):
        super().__init__(config, encoder=encoder, dropout=dropout)  # the only encoder that reads a schedule

    def forward(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions, *, levels):
        """The batch's arrays and ``levels`` -> (premise, hypothesis, logits), as SNLIClassifier.forward."""
        B = len(premise_tokens)
        tokens = torch.cat([self._ids(premise_tokens), self._ids(hypothesis_tokens)])  # [2B, N]
        encodings = self.encode(tokens, None, levels=levels)  # the schedule holds the transitions
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def encode(self, tokens, transitions, *, levels) -> torch.Tensor:
        """tokens <int>[S, N], transitions <int>[S, T] (or None: SPINN.encode
        reads the schedule alone), levels (their schedule) -> encodings <float>[S, H],
        as SNLIClassifier.encode."""
        return self.spinn.encode(self._leaves(tokens), transitions, levels=levels)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, *, levels):
        """Gold mode only (SPINN.parse): SNLIClassifier.parse with the schedule."""
        B = len(premise_tokens)
        tokens = torch.cat([self._ids(premise_tokens), self._ids(hypothesis_tokens)])  # [2B, N]
        transitions = np.concatenate([premise_transitions, hypothesis_transitions])  # [2B, T], on the host
        parses = self.spinn.parse(self._leaves(tokens), transitions, mode, uniforms, levels=levels)
        return parses, self.classify(parses.encodings[:B], parses.encodings[B:])


def host_schedule(batch, tracker: bool) -> tuple[dict[str, np.ndarray], dict, dict[str, float]]:
    """A batch's schedule (BatchArrays.levels) as this module's loop takes it, what the loop computes over it and
    the host's seconds making it: shared.levels.batch_schedule, padded as PADDING says."""
    return batch_schedule(batch, tracker, PADDING)


def _slices(levels: dict, l: int):
    """Level l's part of the schedule: (its first node's offset, its Reduce
    rows W, the table rows of its tracker rows' buffer front, stack top and
    item below <int64>[3A], those of its nodes' left and right children
    <int64>[2W], its tracker rows' sentences <int64>[A], its nodes' tracker
    rows <int64>[W]). The offsets are host ints: slices, no device read."""
    offset, width = int(levels["offsets"][l]), int(levels["widths"][l])
    start, stop = int(levels["active_offsets"][l]), int(levels["active_offsets"][l + 1])
    parser = levels["parser"][3 * start:3 * stop]
    children = torch.cat([levels[k][offset:offset + width] for k in ("left", "right")])
    return offset, width, parser, children, levels["active"][start:stop], levels["reducing"][offset:offset + width]


def _head_logits(logits: torch.Tensor, levels: dict, S: int) -> torch.Tensor:
    """The head's logits of every tracker row <float>[Q, 2] -> <float>[S, L, 2]:
    at level (= step) l of each sentence that steps, zeros elsewhere."""
    counts = np.diff(levels["active_offsets"])
    steps = torch.as_tensor(np.repeat(np.arange(len(counts)), counts), device=logits.device)
    per_level = logits.new_zeros((S + 1, len(counts), 2)).index_put((levels["active"], steps), logits)
    return per_level[:S]  # row S: padding's


def _read(table, rows: torch.Tensor) -> torch.Tensor:
    """The table's rows <int64>[K] -> <float>[K, 2H]."""
    return table.gather(rows)


def _write(table, row: int, block: torch.Tensor):
    """``block`` <float>[K, 2H] into the table's rows from ``row`` on (rows not written before) -> the table."""
    return table.write(row, block)
