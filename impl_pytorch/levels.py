"""SPINN on a level schedule made on the host, in PyTorch: the levels family (docs/spec.md §3, §7).

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
                 all, in the order the levels compute them; here h and c
                 apart, <float>[S * N + 1 + R, H] each
    state        <float>[S, D] twice    the tracker's (h, c)
    schedule     the table rows each level reads, the sentences that step
                 and the nodes that reduce, made on the host (_Plan)

PyTorch runs the loop eagerly, a Python ``for`` over the levels. Eager code
has no compiled shapes, so every level takes its exact width: the schedule
pads nothing (``widths=(1,)``). The index arrays are made once per batch on
the host, in NumPy, each copied to the device once (every level's rows in
one array, its sentences in another); a level slices its part with Python
ints, so the loop never waits for the device. A level reads h of every row
it reads and c of the children (one index_select each).

The table lives outside autograd, with a gradient written here: the
gradient of a gather is as large as its source, so a table that autograd
tracks costs a table-sized zero fill and sum per level in the backward pass
(and a table-sized copy per in-place write of a block). Two
``torch.autograd.Function``s read (:class:`_Read`) and write
(:class:`_Write`) it and share one gradient buffer per batch: a read adds
its rows' gradient into the buffer, a write hands its block the buffer's
rows. A token (a 0-d tensor) passed from each write to the next reads and
writes orders the backward pass: a block's gradient is read only after
every level that read the block has added to it. h and c are two tables,
so that no row is sliced in two (a slice's gradient is zero-filled to its
source's size). Measured at B=128 (a batch of make_sentence_batches over
the embedded sample, N=32), H=300, D=64 on a 2-core CPU, the fastest of 9
calls: the gradient took 467 ms with the table an autograd tensor written
in place, 544 ms with the table grown by torch.cat of each block, 317 ms
with these Functions on one [h; c] table and 306 ms on two (D=0: 269, 272,
197, 198 ms); encoding builds no graph and took 103, 140, 107 and 102 ms
(D=0: 70, 93, 71, 70). lists.py took 124 ms and 415 ms on that batch (D=0:
75 and 244); making the schedule on the host is 7 to 9 ms of an encode.

After each call the encoder keeps ``last_graph`` (levels, padding, the rows
each cell computed) and ``last_phases`` (``schedule``: seconds on the host),
which the runner reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from shared.levels import schedule
from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD

from .cells import Reduce, Tracker


class SPINN(nn.Module):
    """The shift-reduce encoder on a level schedule, with masked.py's Tracker
    and Reduce (the same submodules, so the same parameters and names).
    ``encode`` and ``parse`` take the transitions on the host (NumPy) and
    make the schedule inside."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head)
                        if config.tracker_dim > 0 else None)
        self.reduce = Reduce(config.hidden_dim, config.tracker_dim)
        self.last_host_syncs = 0  # gold transitions only: no decision comes back
        self.last_graph: dict[str, float] = {}
        self.last_phases: dict[str, float] = {}

    def forward(self, leaves: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """nn.Module's entry point: :meth:`encode`."""
        return self.encode(leaves, transitions)

    def encode(self, leaves: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T] (NumPy, host), followed -> encodings <float>[S, H], the h
        of each root. Gold mode, and the transition head is never evaluated
        here; the schedule is made here, from the transitions."""
        return self._run(leaves, transitions, head=False)[0]

    def parse(self, leaves: torch.Tensor, transitions: np.ndarray, mode: str = "predicted",
              uniforms: np.ndarray | None = None) -> SentenceParses:
        """Gold mode only (the runner refuses the others, shared.levels.LEVELS_UNSUPPORTED:
        a decided parse cannot be scheduled ahead): the gold parse with the
        head's logits at every step, as masked.py's SPINN.parse returns it
        (logprob and entropy zeros; the transitions as given, NumPy on the
        host). ``uniforms`` is never read."""
        if mode != "gold":
            raise ValueError(f"the level schedule follows gold transitions only, not {mode!r} ones")
        transitions = np.asarray(transitions)
        encodings, logits = self._run(leaves, transitions, head=True)
        zeros = encodings.new_zeros(encodings.shape[0])
        self.last_host_syncs = 0
        return SentenceParses(encodings, transitions.astype(np.int32), logits, zeros, zeros)

    def _run(self, leaves: torch.Tensor, transitions: np.ndarray,
             head: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loop over levels behind encode and parse: (encodings <float>[S, H];
        with ``head`` the head's logits <float>[S, T, 2] at each step a
        sentence runs, zeros elsewhere, else None)."""
        S, N, _ = leaves.shape
        H, D = self.hidden_dim, self.tracker_dim
        start = time.perf_counter()
        plan = _plan(np.asarray(transitions), N, tracker=D > 0)
        self.last_phases = {"schedule": time.perf_counter() - start}
        self.last_graph = {"levels": plan.n_levels, "level_padding_pct": 0.0,
                           "reduce_rows": plan.reduce_rows, "tracker_rows": plan.tracker_rows}
        device = leaves.device
        reads = torch.as_tensor(plan.reads, device=device)  # every level's table rows, one copy to the device
        # The table: the leaves, the zero row, then R rows that the levels write in order.
        table = _NodeTable(S * N + 1 + plan.reduce_rows, leaves)  # row S * N: the zero row
        # The first token takes part in autograd's graph whenever one is recorded, so that the leaves'
        # write is in it, its backward the last of the table's, even where the leaves need no gradient.
        first = leaves.new_zeros((), requires_grad=torch.is_grad_enabled())
        token = _Write.apply(*leaves.reshape(S * N, 2 * H).split(H, dim=1), first, table, 0)
        active_all = reducing_all = state = None
        if D > 0:
            active_all = torch.as_tensor(plan.active, device=device)
            reducing_all = torch.as_tensor(plan.reducing, device=device)
            state = (leaves.new_zeros((S, D)), leaves.new_zeros((S, D)))  # (h_t, c_t) of every sentence
        logits = []

        # ---- the loop over levels: what each runs was decided on the host.
        # A Python `for`: each level its own width, the ops recorded as they run.
        for level in plan.levels:
            # A named range for profilers (explain.py counts the ops inside it).
            with torch.profiler.record_function("spinn.level"):
                token, state = self._level(table, token, reads, level, state, active_all, reducing_all,
                                           logits if head else None)

        roots = torch.as_tensor(plan.roots, device=device)
        encodings = _Read.apply(token, table, roots, roots[:0])[0]  # h of each root, [S, H]
        if not head:
            return encodings, None
        T = transitions.shape[1]
        steps = torch.as_tensor(plan.head_steps, device=device)
        sentences = torch.as_tensor(plan.head_sentences, device=device)
        per_step = leaves.new_zeros((S, T, 2))
        if len(plan.head_steps):
            per_step = per_step.index_put((sentences, steps), torch.cat(logits))
        return encodings, per_step

    def _level(self, table: _NodeTable, token: torch.Tensor, reads: torch.Tensor, level: _Level,
               state: tuple[torch.Tensor, torch.Tensor] | None, active_all: torch.Tensor | None,
               reducing_all: torch.Tensor | None,
               logits: list | None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """One level: gather the rows it reads from ``table``, run the cells,
        write its block into ``table``. Returns the token of that write and
        the new tracker state (h_t, c_t) <float>[S, D] each (None without the
        tracker). With ``logits`` (a list) the head's logits of the level's
        sentences are appended to it."""
        W = level.width
        # One gather of every row the level reads: h of all of them, c of the children (its last 2W rows),
        # which Reduce alone reads.
        rows_h, rows_c = _Read.apply(token, table, reads[level.reads:level.reads_end],
                                     reads[level.reads_end - 2 * W:level.reads_end])
        tracking = None
        if self.tracker is not None:
            A = level.active_end - level.active
            front, top, below, left_h, right_h = rows_h.split([A, A, A, W, W])
            # ---- the tracker on the sentences that step; the others keep their state (PAD changes nothing).
            active = active_all[level.active:level.active_end]
            h, c = self.tracker.step(front, top, below, (state[0].index_select(0, active),
                                                         state[1].index_select(0, active)))
            state = (state[0].index_copy(0, active, h), state[1].index_copy(0, active, c))
            if logits is not None:
                # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
                logits.append(self.tracker.transition_logits(h))
            if W == 0:  # no sentence reduces at this step
                return token, state
            tracking = h.index_select(0, reducing_all[level.reducing:level.reducing + W])  # the h_t just written
        else:
            left_h, right_h = rows_h.chunk(2)
        left_c, right_c = rows_c.chunk(2)
        # ---- compose the level's nodes, one batched Reduce.
        h, c = self.reduce.compose((left_h, left_c), (right_h, right_c), tracking)
        # ---- write the level's block into the table: rows no level read before and none writes again.
        return _Write.apply(h, c, token, table, level.offset), state


class _NodeTable:
    """The node table, h and c <float>[rows, H] each (``h``, ``c``), outside
    autograd, and their gradients (``grad_h``, ``grad_c``), made by the first
    backward that needs them. h and c apart, so that nothing slices a row in
    two: the gradient of a slice is a zero-filled tensor as large as its source."""

    def __init__(self, rows: int, leaves: torch.Tensor):
        S, N, _ = leaves.shape
        H = leaves.shape[-1] // 2
        # Every row is written before it is read (the leaves first, each block by its level), but the
        # zero row, which nobody writes: no need to fill the rest.
        self.h, self.c = leaves.new_empty((rows, H)), leaves.new_empty((rows, H))
        self.h[S * N].zero_()
        self.c[S * N].zero_()
        self.grad_h: torch.Tensor | None = None
        self.grad_c: torch.Tensor | None = None

    def grads(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.grad_h is None:
            self.grad_h, self.grad_c = torch.zeros_like(self.h), torch.zeros_like(self.c)
        return self.grad_h, self.grad_c


class _Write(torch.autograd.Function):
    """A block's h and c <float>[K, H] into the table at ``offset`` (in place,
    outside autograd) -> a new token (0-d) that the next reads and writes take."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, c: torch.Tensor, token: torch.Tensor, table: _NodeTable,
                offset: int) -> torch.Tensor:
        table.h[offset:offset + h.shape[0]] = h
        table.c[offset:offset + c.shape[0]] = c
        ctx.table, ctx.offset, ctx.rows = table, offset, h.shape[0]
        return token.new_zeros(())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_token: torch.Tensor):
        # Every read of these rows came after this write, so its backward has run.
        table, rows = ctx.table, slice(ctx.offset, ctx.offset + ctx.rows)
        grad_h, grad_c = table.grads()
        grad_h = grad_h[rows].clone() if ctx.needs_input_grad[0] else None
        grad_c = grad_c[rows].clone() if ctx.needs_input_grad[1] else None
        if ctx.offset == 0:  # the leaves, written first: the last backward of the table, the buffers are done
            table.grad_h = table.grad_c = None  # (a second backward through a retained graph starts from zeros)
        return grad_h, grad_c, grad_token, None, None


class _Read(torch.autograd.Function):
    """token, table rows <int64>[K] and [K'] -> h of the first <float>[K, H]
    and c of the second <float>[K', H]; the backward adds their gradients
    into the table's buffers."""

    @staticmethod
    def forward(ctx, token: torch.Tensor, table: _NodeTable, rows_h: torch.Tensor,
                rows_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)  # an output nothing read has no gradient to add
        ctx.table = table
        ctx.save_for_backward(rows_h, rows_c)
        return table.h.index_select(0, rows_h), table.c.index_select(0, rows_c)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h: torch.Tensor | None, grad_c: torch.Tensor | None):
        rows_h, rows_c = ctx.saved_tensors
        buffer_h, buffer_c = ctx.table.grads()
        if grad_h is not None:
            buffer_h.index_add_(0, rows_h, grad_h)
        if grad_c is not None:
            buffer_c.index_add_(0, rows_c, grad_c)
        return buffer_h.new_zeros(()), None, None, None


@dataclass(frozen=True)
class _Level:
    """One level's slices of the plan's arrays (Python ints)."""

    offset: int  # the table row of the level's first node
    width: int  # its nodes: Reduce's rows
    reducing: int  # its part of ``reducing``: [reducing, reducing + width)
    reads: int  # its part of ``reads``: [reads, reads_end)
    reads_end: int
    active: int = 0  # with the tracker, its part of ``active``: [active, active_end)
    active_end: int = 0


@dataclass(frozen=True)
class _Plan:
    """What the loop runs, made on the host once per batch.

    reads <int64>[...]: each level's table rows: without the tracker left then
    right ([2W]); with it buffer front, stack top, item below the top (one each
    per sentence that steps, [3A]), then left and right ([2W]). active <int64>[Q]:
    the sentences that step, level after level; reducing <int64>[R]: per node,
    its sentence's position among its level's active ones. roots <int64>[S].
    head_sentences, head_steps <int64>[Q]: where each tracker row's head
    logits go in [S, T, 2].
    """

    levels: tuple[_Level, ...]
    n_levels: int
    reduce_rows: int
    tracker_rows: int
    reads: np.ndarray
    active: np.ndarray
    reducing: np.ndarray
    roots: np.ndarray
    head_sentences: np.ndarray
    head_steps: np.ndarray


def _plan(transitions: np.ndarray, N: int, tracker: bool) -> _Plan:
    """The batch's schedule (shared.levels.schedule, exact widths) as the index
    arrays of :class:`_Plan`, levels that do nothing left out."""
    sched = schedule(transitions, N, tracker, widths=(1,))  # widths (1,): every level exactly as wide as its nodes
    base = sched.n_leaves_rows + 1
    levels, reads, active, reducing = [], [], [], []
    n_reads = n_active = 0
    for lv in sched.levels:
        parts = [lv.left[:lv.used], lv.right[:lv.used]]
        if tracker:
            A = lv.active_used
            if A == 0:  # every sentence PADs at this step
                continue
            parts = [lv.buffer_front[:A], lv.stack_top[:A], lv.stack_below[:A]] + parts
            active.append(lv.active[:A])
            reducing.append(lv.reducing[:lv.used])
        size = sum(len(p) for p in parts)
        # The blocks are packed (exact widths): a level's first node is node number offset - base.
        levels.append(_Level(lv.offset, lv.used, lv.offset - base, n_reads, n_reads + size, n_active,
                             n_active + (lv.active_used if tracker else 0)))
        reads.extend(parts)
        n_reads += size
        n_active += lv.active_used if tracker else 0

    def cat(arrays) -> np.ndarray:
        return np.concatenate([np.asarray(a, np.int64) for a in arrays]) if arrays else np.zeros(0, np.int64)

    steps, sentences = np.nonzero(transitions.T != PAD)  # step-major, as the levels append the head's rows
    return _Plan(tuple(levels), sched.n_levels, sum(lv.used for lv in sched.levels), n_active, cat(reads),
                 cat(active), cat(reducing), np.asarray(sched.roots, np.int64), sentences.astype(np.int64),
                 steps.astype(np.int64))
