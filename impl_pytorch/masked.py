"""SPINN on masked arrays, in PyTorch: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``decide``, head.py, docs/decided-graphs.md), and the rest of the step is
the one gold mode runs. The cells are cells.py's: ``SPINN`` holds the submodules of
the other families (``tracker``, ``reduce``), so the parameters, their names
and the canonical conversion (convert.py) are theirs.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item (a stack or buffer entry) is ``[h; c]``, <float>[2H]. The
loop's state is the thin stack (Bowman et al. 2016):

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int64>[S, T]          PAD / SHIFT / REDUCE
    n_leaves     <int64>[S]             SHIFTs per sentence: its words
    thin         <float>[N + T + 1, S, 2H]  every item ever made: rows 0..N-1
                                        the leaves (the buffer lives there), row
                                        N + t what step t composed; plus row
                                        N + T, zeros (see _read)
    pointers     <int64>[S, N + 1]      the stack: row numbers into ``thin``
    sp, bp       <int64>[S]             stack pointer (items on the stack), buffer pointer
    state        <float>[S, D] twice    the tracker's (h, c)

PyTorch runs the algorithm of impl_jax/masked.py eagerly, so that a reader
can tell what a speed gap owes to the framework and what to the algorithm
(lists.py is the same framework with Python lists and a Python ``if`` per
sentence). The loop is a Python ``for`` over all T steps, whatever the
trees, and the transition head's decision is never read back to the host
during it. Each step is one side-effect-free function of fixed shapes
(``SPINN._step``; the loop does the one in-place write), which
``torch.compile`` captures without a graph break and reuses at every step
(runner option ``compile=True``, impl_pytorch/compiled.py, which puts its
compiled version in ``SPINN.step_function``). The transitions come as NumPy
(or a tensor) and are moved to the leaves' device.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import decide


class SPINN(nn.Module):
    """The shift-reduce encoder as one fixed-length loop over padded arrays.

    ``step_function`` is what the loop calls at every step: ``_step``
    itself, or its torch.compile (compiled.py). ``step_begin``, where set,
    is called once as each batch starts: under CUDA graphs it tells Inductor
    that the outputs of the last batch's graphs are no longer read, so their
    memory can be used again (torch.compiler.cudagraph_mark_step_begin).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head)
                        if config.tracker_dim > 0 else None)
        self.reduce = Reduce(config.hidden_dim, config.tracker_dim)
        self.step_function = self._step
        self.step_begin = None
        self.last_host_syncs = 0  # decisions never come back during the loop

    def forward(self, leaves: torch.Tensor, transitions) -> torch.Tensor:
        """nn.Module's entry point: :meth:`encode`."""
        return self.encode(leaves, transitions)

    def encode(self, leaves: torch.Tensor, transitions) -> torch.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T], followed -> encodings <float>[S, H], the h of each root.
        Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions, "gold", None, head=False)

    def parse(self, leaves: torch.Tensor, transitions, mode: str = "predicted",
              uniforms: np.ndarray | None = None) -> SentenceParses:
        """The encoder with its transition head, in ``mode`` (docs/spec.md §7).

        leaves <float>[S, N, 2H]; transitions <int>[S, T]: in gold mode they
        are followed (teacher forcing: the head scores every step), in
        predicted and sampled mode only each row's number of SHIFTs (n) is
        used, and the head decides 2n - 1 steps; uniforms <float>[S, T]
        (sampled mode only): step t of a sentence REDUCEs, where both actions
        are valid, if ``uniforms[:, t]`` < p_R. ``mode`` is a Python string:
        each mode is its own program. Returns shared.parsing.SentenceParses:
        encodings <float>[S, H], transitions <int32>[S, T] (followed),
        transition_logits <float>[S, T, 2] (zeros at PAD), logprob, entropy
        <float>[S] (sampled mode, else zeros).

        The transitions and uniforms may be NumPy or tensors; the followed
        transitions come back as a NumPy array on the host (the given ones,
        or the decisions read back once, after the loop), every tensor
        keeping its graph.
        """
        parses = self._run(leaves, transitions, mode, uniforms, head=True)
        followed = transitions if mode == "gold" else parses.transitions  # gold: the host's own copy
        followed = followed.cpu().numpy() if torch.is_tensor(followed) else np.asarray(followed)
        self.last_host_syncs = 0
        return parses._replace(transitions=followed.astype(np.int32))

    def _run(self, leaves, transitions, mode: str, uniforms, head: bool):
        """The loop behind encode and parse: S sentences through their steps.

        leaves <float>[S, N, 2H]; transitions <int>[S, T]; ``mode`` and
        ``head`` (read the transition head at every step) are Python values:
        each mode is its own program; uniforms <float>[S, T] in sampled mode.
        Returns the encodings <float>[S, H]; with the head, SentenceParses.
        """
        loop, carry, xs = self._start(leaves, transitions, mode, uniforms, head)
        (thin, pointers, _, _, _), ys = self._loop(loop, carry, xs)
        encodings = self._root(loop, thin, pointers)  # [S, H]
        if not head:
            return encodings
        followed = xs[0] if mode == "gold" else ys["transitions"]  # [T, S]
        zeros = leaves.new_zeros(loop.S)
        return SentenceParses(
            encodings=encodings,
            transitions=followed.transpose(0, 1),
            transition_logits=ys["logits"].transpose(0, 1),
            logprob=ys["logprob"].to(leaves.dtype) if mode == "sampled" else zeros,
            entropy=ys["entropy"].to(leaves.dtype) if mode == "sampled" else zeros,
        )

    def _start(self, leaves, transitions, mode: str, uniforms, head: bool) -> tuple:
        """What every step reads, fixed for the run (a _Loop); the loop's state
        before step 0, ``carry`` = (thin, pointers, sp, bp, state): an empty
        stack, the tracker at zeros (() without a tracker); and what each step
        takes of the batch, ``xs`` = (ops <int64>[T, S] in gold mode, the step
        numbers <int64>[T], uniforms <float64>[T, S] in sampled mode), None
        where the mode has none."""
        S, N, _ = leaves.shape
        D, device = self.tracker_dim, leaves.device
        transitions = torch.as_tensor(transitions, dtype=torch.int64, device=device)  # NumPy or a tensor
        T = transitions.shape[1]
        loop = _Loop(mode=mode, head=head, S=S, N=N, T=T, sentences=torch.arange(S, device=device),
                     n_leaves=(transitions == SHIFT).sum(dim=1),  # one SHIFT per word
                     zero_row=N + T)
        thin = self._new_thin(leaves, T)
        pointers = torch.zeros((S, N + 1), dtype=torch.int64, device=device)  # N items + a free slot
        sp = torch.zeros(S, dtype=torch.int64, device=device)
        bp = torch.zeros_like(sp)
        state = (leaves.new_zeros((S, D)), leaves.new_zeros((S, D))) if self.tracker is not None else ()
        xs = (transitions.transpose(0, 1) if mode == "gold" else None,
              torch.arange(T, device=device),  # a tensor, not a Python int: the compiled step serves every t
              torch.as_tensor(uniforms, dtype=torch.float64, device=device).transpose(0, 1)
              if mode == "sampled" else None)
        return loop, (thin, pointers, sp, bp, state), xs

    def _loop(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """The loop: ``_step`` at every one of the T steps, as a scan runs its
        body, whatever the trees. Returns the carry after the last step, and
        ys: the steps' logits <float>[T, S, 2] and (decided modes)
        transitions <int64>[T, S], stacked; (sampled mode) logprob and
        entropy <float64>[S], summed over the steps.

        A Python ``for``, and no Python ``if`` on a tensor's value: the same
        code runs for every batch of this shape, each step the same function
        of the same shapes (torch.compile compiles it once and reuses it at
        every step, like lax.scan's body). That function has no side effects:
        it returns the thin stack's new row in the thin stack's place, and
        the loop writes it, in place (``_scatter``).
        """
        if self.step_begin is not None:
            self.step_begin()
        thin, rest, steps = carry[0], carry[1:], []
        for t in range(loop.T):
            (row, *rest), ys = self.step_function(loop, (thin, *rest), tuple(
                x[t] if x is not None else None for x in xs))
            # Row N + t of thin takes what step t composed, for all sentences
            # (read only where REDUCE pushed a pointer to it). The row was
            # never read before and is never written again, so autograd keeps
            # what earlier steps read.
            thin = self._scatter(loop, thin, loop.N + t, row)
            steps.append(ys)
        ys = {name: torch.stack([y[name] for y in steps]) for name in steps[0]} if steps else {}
        for name in ("logprob", "entropy"):
            if name in ys:
                ys[name] = ys[name].sum(dim=0)
        return (thin, *rest), ys

    def _step(self, loop: _Loop, carry: tuple, xs: tuple) -> tuple:
        """One transition for every sentence, without side effects.

        carry: (thin, pointers, sp, bp, state) (see _start); xs: op <int64>[S]
        (None when decided), t <int64>[] (a tensor), and in sampled mode u
        <float64>[S]. Returns the new carry, with the row the loop writes
        into thin (row N + t, <float>[S, 2H]) in thin's place, and ys: with
        the head, logits <float>[S, 2] (zeros at PAD), in decided modes the
        transitions followed <int64>[S], in sampled mode the step's logprob
        and entropy <float64>[S]; {} without the head.
        """
        thin, pointers, sp, bp, state = carry
        op, t, u = xs
        H = self.hidden_dim
        top, below, front, can_shift = self._read(loop, thin, pointers, sp, bp)

        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        # PAD keeps nothing: stack, buffer and tracker stay as they were.
        if loop.mode == "gold":
            is_shift, is_reduce, active = op == SHIFT, op == REDUCE, op != PAD
        else:
            # The op is decided after the tracker update; whether the step
            # does anything is known now: a finished sentence can neither
            # shift nor reduce, and PADs from then on.
            can_reduce = sp >= 2
            active = can_shift | can_reduce

        # ---- the tracker, kept only where the step is not PAD.
        tracking = None
        if self.tracker is not None:  # a Python `if` on the model's configuration, not on data
            h_t, c_t = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)
            keep = active[:, None]
            state = (torch.where(keep, h_t, state[0]), torch.where(keep, c_t, state[1]))
            tracking = state[0]

        # ---- the transition head reads the state this step's tracker update just wrote (docs/spec.md §7).
        ys = {}
        if loop.head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            if loop.mode != "gold":
                # ---- the decision, taken on the device (head.py): two masks
                # that take the place of the gold op's.
                is_shift, is_reduce, logprob, entropy = decide(logits, u, can_shift, can_reduce, loop.mode)
                ys["transitions"] = torch.where(is_reduce, REDUCE, torch.where(is_shift, SHIFT, PAD))
                if loop.mode == "sampled":
                    ys["logprob"], ys["entropy"] = logprob, entropy
            ys["logits"] = torch.where(active[:, None], logits, 0)  # zeros at PAD

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        h, c = self.reduce.compose((below[:, :H], below[:, H:]), (top[:, :H], top[:, H:]), tracking)  # [S, H] each
        composed = torch.cat([h, c], dim=1)
        pointers, sp, bp = self._write(loop, t, pointers, sp, bp, is_shift, is_reduce)
        return (composed, pointers, sp, bp, state), ys  # the new row in thin's place: the loop writes it

    def _read(self, loop: _Loop, thin, pointers, sp, bp) -> tuple:
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front, a leaf's row (the
        # leaves are rows 0..N-1). Indices are clipped into range.
        can_shift = bp < loop.n_leaves  # the buffer is not empty
        top_row = pointers[loop.sentences, (sp - 1).clamp(min=0)]  # follow the back-pointer
        below_row = pointers[loop.sentences, (sp - 2).clamp(min=0)]
        # An absent item reads the zero row (N + T) by address: one gather
        # reads the step's three items, and nothing is masked after it.
        rows = torch.stack([torch.where(can_shift, bp, loop.zero_row),
                            torch.where(sp >= 1, top_row, loop.zero_row),
                            torch.where(sp >= 2, below_row, loop.zero_row)])  # [3, S]
        front, top, below = self._gather(loop, thin, rows)
        return top, below, front, can_shift

    def _write(self, loop: _Loop, t, pointers, sp, bp, is_shift, is_reduce) -> tuple:
        """Keep step t's result and move the pointers: (pointers, sp, bp).
        (Row N + t of thin, this step's composition, is written by the loop.)"""
        # ---- push a pointer: the leaf's row for SHIFT at slot sp, the new row
        # for REDUCE at slot sp - 2 (where the left child was). PAD writes at
        # slot sp, the free slot above the top, which nobody reads, so no
        # branch is needed. Out of place: the compiled backward may read the
        # pointers this step was given.
        new_row = loop.N + t
        write_slot = sp - 2 * is_reduce.long()
        target = torch.where(is_shift, bp, new_row)
        pointers = pointers.scatter(1, write_slot[:, None], target[:, None])
        sp = sp + is_shift.long() - is_reduce.long()
        bp = bp + is_shift.long()
        return pointers, sp, bp

    def _root(self, loop: _Loop, thin, pointers):
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        return self._gather(loop, thin, pointers[None, :, 0])[0, :, :self.hidden_dim]

    # ---- the thin stack: rows of items, read by address, written a row a step

    def _new_thin(self, leaves, T):
        """The thin stack <float>[N + T + 1, S, 2H]: the leaves in rows 0 .. N - 1,
        a row per step (zeros until it is written), and the zero row, N + T."""
        S, _, two_h = leaves.shape
        return torch.cat([leaves.transpose(0, 1), leaves.new_zeros((T + 1, S, two_h))])

    def _gather(self, loop: _Loop, thin, rows):
        """The items of the S sentences in ``rows`` <int64>[K, S] -> <float>[K, S, 2H]."""
        return thin[rows, loop.sentences]

    def _scatter(self, loop: _Loop, thin, row, items):
        """``thin`` with ``items`` <float>[S, 2H] as its row ``row``: written in place."""
        thin[row] = items
        return thin


class _Loop(NamedTuple):
    """What every step of one run reads, fixed before the loop: the Python
    choices of the program (mode, head), the sizes, and the batch's tensors
    the steps share. Each framework's step takes it as its first argument."""

    mode: str
    head: bool
    S: int
    N: int
    T: int
    sentences: torch.Tensor  # <int64>[S]: 0 .. S - 1
    n_leaves: torch.Tensor  # <int64>[S]: the leaves in each buffer
    zero_row: int  # N + T: the thin stack's last row, zeros
