"""SPINN on masked arrays, in PyTorch: the masked family (docs/spec.md §3, §7).

Every sentence's stack and buffer are rows of fixed-size arrays, moved by
integer pointers, and what a sentence's transition means is decided by
masks: at every step every sentence runs the tracker and a composition, and
the masks keep the results of the sentences they apply to. Nothing in the
loop branches on a value, so one program serves every tree.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: the decision is two more masks, taken on the device
(``_decide``, docs/decided-graphs.md), and the rest of the step is the one
gold mode runs. The cells are cells.py's: ``SPINN`` holds the submodules of
the other families (``tracker``, ``reduce``), so the parameters, their names
and the canonical conversion (convert.py) are theirs.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item (a stack or buffer entry) is ``[h; c]``, <float>[2H]. The
loop's state is the thin stack (Bowman et al. 2016):

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int64>[S, T]          PAD / SHIFT / REDUCE
    n_leaves     <int64>[S]             SHIFTs per sentence: its words
    thin         <float>[N + T, S, 2H]  every item ever made: rows 0..N-1 the
                                        leaves (the buffer lives there), row
                                        N + t what step t composed
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

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shared import parsing
from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker


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
        return self._run(leaves, _on_device(transitions, leaves.device), "gold", None, head=False)["encodings"]

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

        The transitions may be NumPy or a tensor; the followed ones come back
        as a NumPy array on the host (the given ones, or the decisions read
        back once, after the loop), every tensor keeping its graph.
        """
        device = leaves.device
        if mode == "sampled":
            uniforms = torch.as_tensor(np.asarray(uniforms), dtype=torch.float64, device=device)
        out = self._run(leaves, _on_device(transitions, device), mode, uniforms, head=True)
        if mode == "gold":  # the host's own copy
            followed = transitions.cpu().numpy() if torch.is_tensor(transitions) else np.asarray(transitions)
        else:
            followed = out["transitions"].cpu().numpy()
        self.last_host_syncs = 0
        return SentenceParses(out["encodings"], followed.astype(np.int32), out["transition_logits"], out["logprob"],
                              out["entropy"])

    def _run(self, leaves: torch.Tensor, transitions: torch.Tensor, mode: str, uniforms: torch.Tensor | None,
             head: bool) -> dict[str, torch.Tensor]:
        """The loop behind encode and parse: S sentences through their steps.

        leaves <float>[S, N, 2H]; transitions <int>[S, T]; ``mode`` and
        ``head`` (read the transition head at every step) are Python values:
        each mode is its own program; uniforms <float>[S, T] in sampled mode.
        Returns a dict of tensors: encodings <float>[S, H]; and with the head
        (always on outside gold mode) transitions <int64>[S, T] (followed),
        transition_logits, logprob and entropy, as parse returns them.
        """
        if self.step_begin is not None:
            self.step_begin()
        S, N, _ = leaves.shape
        T = transitions.shape[1]
        head = head or mode != "gold"
        n_leaves = (transitions == SHIFT).sum(dim=1)  # [S]: one SHIFT per word
        thin, pointers, sp, bp, state = self._start(leaves, T)
        new_rows = torch.arange(N, N + T, device=leaves.device)  # row N + t of thin, as a tensor (not a constant)
        followed, step_logits = [], []  # per step: ops <int64>[S], t <float>[S, 2]
        logprob = entropy = leaves.new_zeros(S, dtype=torch.float64)  # summed in float64, as lists.py does

        # ---- the loop --------------------------------------------------------
        # A Python `for` over all T steps for every batch, and no Python `if`
        # on a tensor's value: the same code runs for every batch of this
        # shape, each step the same function of the same shapes (torch.compile
        # compiles it once and reuses it at every step, like lax.scan's body).
        for t in range(T):
            op = transitions[:, t] if mode == "gold" else None
            u = uniforms[:, t] if mode == "sampled" else None
            out = self.step_function(thin, pointers, sp, bp, state, n_leaves, new_rows[t], op, u, mode, head)
            row, pointers, sp, bp, state = out[:5]
            # The step's one write, in place: row N + t of thin takes what it
            # composed, for all sentences (read only where REDUCE pushed a
            # pointer to it). The row was never read before and is never
            # written again, so autograd keeps what earlier steps read.
            thin[N + t] = row
            if head:
                logits, op, step_logprob, step_entropy = out[5:]
                step_logits.append(logits)
                followed.append(op)
                if mode == "sampled":
                    logprob, entropy = logprob + step_logprob, entropy + step_entropy

        out = {"encodings": self._root(thin, pointers)}  # [S, H]
        if head:
            out["transitions"] = torch.stack(followed, dim=1) if T else transitions  # [S, T]
            out["transition_logits"] = (torch.stack(step_logits, dim=1) if T
                                        else leaves.new_zeros((S, 0, 2)))  # [S, T, 2]
            out["logprob"], out["entropy"] = logprob.to(leaves.dtype), entropy.to(leaves.dtype)
        return out

    def _start(self, leaves: torch.Tensor, T: int) -> tuple:
        """The loop's state before step 0: (thin, pointers, sp, bp, state), an
        empty stack, the tracker at zeros (None without a tracker)."""
        S, N, _ = leaves.shape
        H, D = self.hidden_dim, self.tracker_dim
        device = leaves.device
        # The thin stack: the leaves first (rows 0..N-1), then one (still zero) row per step.
        thin = torch.cat([leaves.transpose(0, 1), leaves.new_zeros((T, S, 2 * H))])  # [N + T, S, 2H]
        pointers = torch.zeros((S, N + 1), dtype=torch.int64, device=device)  # N items + a free slot
        sp = torch.zeros(S, dtype=torch.int64, device=device)
        bp = torch.zeros_like(sp)
        state = None
        if self.tracker is not None:
            state = (leaves.new_zeros((S, D)), leaves.new_zeros((S, D)))
        return thin, pointers, sp, bp, state

    def _step(self, thin, pointers, sp, bp, state, n_leaves, new_row, op, u, mode: str, head: bool) -> tuple:
        """One transition for every sentence, without side effects.

        thin <float>[N + T, S, 2H], pointers <int64>[S, N + 1], sp, bp <int64>[S],
        state (h, c) <float>[S, D] or None, n_leaves <int64>[S], new_row
        <int64>[] (N + t), op <int64>[S] (gold mode, else None), u <float64>[S]
        (sampled mode, else None). Returns (row <float>[S, 2H] for thin[N + t],
        the new pointers, sp, bp and state); with ``head`` also (logits <float>[S, 2],
        zeros at PAD; the op followed <int64>[S]; the step's logprob and
        entropy <float64>[S], or None outside sampled mode).
        """
        H = self.hidden_dim
        rows = torch.arange(sp.shape[0], device=sp.device)
        top, below, front, can_shift = self._read(thin, pointers, sp, bp, n_leaves, rows)

        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        # PAD keeps nothing: stack, buffer and tracker stay as they were.
        if mode == "gold":
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
        ys = ()
        if head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            step_logprob = step_entropy = None
            if mode != "gold":
                # ---- the decision, taken on the device: two masks that take
                # the place of the gold op's.
                is_shift, is_reduce, step_logprob, step_entropy = _decide(logits, u, can_shift, can_reduce, mode)
            followed = torch.where(is_reduce, REDUCE, torch.where(is_shift, SHIFT, PAD))
            ys = (torch.where(active[:, None], logits, 0.0), followed, step_logprob, step_entropy)

        # ---- compose the two top items for every sentence (kept only where the step is REDUCE).
        h, c = self.reduce.compose((below[:, :H], below[:, H:]), (top[:, :H], top[:, H:]), tracking)
        pointers, sp, bp = self._write(pointers, sp, bp, is_shift, is_reduce, new_row)
        return (torch.cat([h, c], dim=1), pointers, sp, bp, state) + ys

    def _read(self, thin, pointers, sp, bp, n_leaves, rows) -> tuple:
        """What a step reads: the items at the stack top, below it and the
        buffer front, <float>[S, 2H] each, zeros where absent; and can_shift <bool>[S]."""
        # sp counts the items on the stack: the top is slot sp - 1, the item
        # below it slot sp - 2; bp is the buffer front. Indices are clipped
        # into range and absent items masked to zeros.

        def slot(k: int) -> torch.Tensor:
            """The item k places from the top, <float>[S, 2H]; zeros where there is none."""
            item = thin[pointers[rows, (sp - k).clamp(min=0)], rows]  # follow the back-pointer
            return torch.where((sp >= k)[:, None], item, 0.0)

        top, below = slot(1), slot(2)
        # The leaves are rows 0..N-1 of thin; bp <= n <= N is always a row of it.
        front = thin[bp, rows]
        can_shift = bp < n_leaves  # the buffer is not empty
        front = torch.where(can_shift[:, None], front, 0.0)
        return top, below, front, can_shift

    def _write(self, pointers, sp, bp, is_shift, is_reduce, new_row) -> tuple:
        """Keep step t's result and move the pointers: (pointers, sp, bp)."""
        # ---- push a pointer: the leaf's row for SHIFT at slot sp, the new row
        # for REDUCE at slot sp - 2 (where the left child was). PAD writes at
        # slot sp, the free slot above the top, which nobody reads, so no
        # branch is needed. Out of place: the compiled backward may read the
        # pointers this step was given. (Row N + t itself is written by the
        # loop, the step's one side effect.)
        write_slot = sp - 2 * is_reduce.long()
        target = torch.where(is_shift, bp, new_row)
        pointers = pointers.scatter(1, write_slot[:, None], target[:, None])
        sp = sp + is_shift.long() - is_reduce.long()
        bp = bp + is_shift.long()
        return pointers, sp, bp

    def _root(self, thin, pointers) -> torch.Tensor:
        """After a valid sequence exactly one item is left, in stack slot 0: its h, <float>[S, H]."""
        rows = torch.arange(pointers.shape[0], device=pointers.device)
        return thin[pointers[:, 0], rows][:, :self.hidden_dim]


def _decide(logits, uniform, can_shift, can_reduce, mode: str):
    """The decision of docs/spec.md §7, for every sentence at once, on the device.

    logits <float>[S, 2] = (t_S, t_R); uniform <float64>[S] (sampled mode,
    else None); can_shift (the buffer is not empty), can_reduce (two items
    or more on the stack) <bool>[S]. Returns the masks is_shift, is_reduce
    <bool>[S] (both false: the sentence is finished, a PAD step) and, in
    sampled mode, the step's log p(action taken) and entropy <float64>[S],
    zero unless it was a choice (else None).
    """
    # Define-by-run code must bring the head's verdict back to Python here
    # to pick a branch; on the device it is one more mask per sentence, and
    # the masked step that follows is the one gold mode runs.
    choice = can_shift & can_reduce  # both actions possible: the head decides
    diff = logits[:, parsing.REDUCE_COLUMN] - logits[:, parsing.SHIFT_COLUMN]  # t_R - t_S
    step_logprob = step_entropy = None
    if mode == "predicted":
        wants_reduce = diff > 0  # a tie SHIFTs
    else:
        # In float64, as lists.py and the reference compare u with p_R;
        # log σ(x) = -softplus(-x) is stable, and p_R = exp(log σ(d)).
        diff = diff.double()
        log_p_reduce, log_p_shift = F.logsigmoid(diff), F.logsigmoid(-diff)
        wants_reduce = uniform < log_p_reduce.exp()
        taken = torch.where(wants_reduce, log_p_reduce, log_p_shift)
        entropy = -(log_p_reduce.exp() * log_p_reduce + log_p_shift.exp() * log_p_shift)
        step_logprob = torch.where(choice, taken, 0.0)  # a forced step adds nothing
        step_entropy = torch.where(choice, entropy, 0.0)
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    return is_shift, is_reduce, step_logprob, step_entropy


def _on_device(transitions, device: torch.device) -> torch.Tensor:
    """Transitions <int>[S, T], NumPy or a tensor -> <int64>[S, T] on ``device``."""
    if torch.is_tensor(transitions):
        return transitions.to(device=device, dtype=torch.int64)
    return torch.as_tensor(np.asarray(transitions, dtype=np.int64), device=device)
