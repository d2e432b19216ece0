"""SPINN in PyTorch with the static-graph algorithm: arrays, pointers and masks (docs/spec.md §3, §7).

lists.py walks each tree with Python lists and a Python ``if`` per example.
This file runs the algorithm of impl_jax/masked.py instead, in PyTorch eager,
so that a reader can tell what a speed gap owes to the framework and what to
the algorithm. Every sentence does the same work at every step; what its
transition *means* is decided by masks and pointers:

    leaves       <float>[S, N, 2H]   [h; c] of every token slot
    transitions  <int64>[S, T]       PAD / SHIFT / REDUCE, on the device
    thin         <float>[N + T, S, 2H]  the thin stack (Bowman et al. 2016):
                 rows 0..N-1 are the leaves (the buffer lives there), row
                 N + t is what step t composed, for all sentences at once
    pointers     <int64>[S, N + 1]   the stack: row numbers into ``thin``
    sp, bp       <int64>[S]          stack pointer (items on the stack), buffer pointer

The loop is a Python ``for`` over all T steps, whatever the trees, with no
Python ``if`` on a value: no per-example lists, and the transition head's
decision is a masked select on the device, never read back to the host
during the loop. Each step is one side-effect-free function of fixed
shapes (``SPINN._step``; the loop does the one in-place write), which
``torch.compile`` captures without a graph break and reuses at every step
(runner option ``compile=True``, impl_pytorch/compiled.py, which puts its
compiled version in ``SPINN.step_function``).

The cells are cells.py's: :class:`SPINN` holds the submodules of lists.SPINN
(``tracker``, ``reduce``) and calls ``Tracker.step`` and ``Reduce.compose``
on all S rows, so parameters, their names and the canonical conversion
(convert.py) are the other families'.
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

    ``encode`` follows the given transitions; ``parse`` runs the transition
    head too, and in predicted and sampled mode lets it choose (docs/spec.md
    §7). Both take the transitions as NumPy (or a tensor) and move them to
    the leaves' device. ``step_function`` is what the loop calls at every
    step: ``_step`` itself, or its torch.compile (compiled.py). ``step_begin``,
    where set, is called once as each batch starts: under CUDA graphs it
    tells Inductor that the outputs of the last batch's graphs are no longer
    read, so their memory can be used again
    (torch.compiler.cudagraph_mark_step_begin).
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
        """Gold mode: leaves <float>[S, N, 2H] ([h; c] of each token slot),
        transitions <int>[S, T] (NumPy or a tensor) -> encodings <float>[S, H]."""
        return self._run(leaves, _on_device(transitions, leaves.device), "gold", None, head=False)["encodings"]

    def parse(self, leaves: torch.Tensor, transitions, mode: str = "predicted",
              uniforms: np.ndarray | None = None) -> SentenceParses:
        """Run S sentences with the transition head, in ``mode`` (docs/spec.md §7).

        Args:
          leaves: <float>[S, N, 2H], [h; c] of each token slot.
          transitions: <int>[S, T] (NumPy or a tensor). Gold mode follows
            them (teacher forcing: the head scores every step); predicted and
            sampled mode use only each row's number of SHIFTs, n.
          mode: "gold", "predicted" or "sampled".
          uniforms: sampled mode: <float>[S, T]; step t of sentence s uses
            uniforms[s, t].

        Returns shared.parsing.SentenceParses: the transitions followed as a
        NumPy array on the host (gold mode: the given ones; otherwise the
        decisions, read back once, after the loop), everything else a tensor
        that keeps its graph (logprob and entropy included).
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
        """S sentences through T steps, on the device.

        Args:
          leaves: <float>[S, N, 2H], [h; c] of each token slot.
          transitions: <int64>[S, T]. Gold mode follows them; predicted and
            sampled mode use only each row's number of SHIFTs, n.
          mode: "gold", "predicted" or "sampled" (a Python constant: each
            mode is its own program for torch.compile).
          uniforms: sampled mode, <float64>[S, T].
          head: read the transition head at every step (always, outside gold mode).

        Returns a dict of tensors: encodings <float>[S, H]; and with the head
        transitions <int64>[S, T] (followed; gold mode: the data's),
        transition_logits <float>[S, T, 2] (zeros at PAD), logprob and
        entropy <float>[S] (sampled mode, else zeros).
        """
        if self.step_begin is not None:
            self.step_begin()
        S, N, _ = leaves.shape
        T = transitions.shape[1]
        H = self.hidden_dim
        head = head or mode != "gold"
        device = leaves.device
        rows = torch.arange(S, device=device)
        n_leaves = (transitions == SHIFT).sum(dim=1)  # [S]: one SHIFT per word
        # The thin stack: the leaves, then one (still zero) row per step.
        thin = torch.cat([leaves.transpose(0, 1), leaves.new_zeros((T, S, 2 * H))])  # [N + T, S, 2H]
        pointers = torch.zeros((S, N + 1), dtype=torch.int64, device=device)  # N items + a free slot
        sp = torch.zeros(S, dtype=torch.int64, device=device)
        bp = torch.zeros_like(sp)
        state = None
        if self.tracker is not None:
            state = (leaves.new_zeros((S, self.tracker_dim)), leaves.new_zeros((S, self.tracker_dim)))
        new_rows = torch.arange(N, N + T, device=device)  # row N + t of thin, as a tensor (not a constant)
        followed, step_logits = [], []  # per step: ops <int64>[S], t <float>[S, 2]
        logprob = entropy = leaves.new_zeros(S, dtype=torch.float64)  # summed in float64, as lists.py does

        # ---- the loop -------------------------------------------------------
        # T iterations for every batch, and no Python `if` on a tensor's
        # value: the same code runs for every batch of this shape, each
        # step is the same function of the same shapes (torch.compile
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

        # After a valid sequence one item is left, in slot 0: its h is the encoding.
        out = {"encodings": thin[pointers[:, 0], rows][:, :H]}  # [S, H]
        if head:
            out["transitions"] = torch.stack(followed, dim=1) if T else transitions  # [S, T]
            out["transition_logits"] = (torch.stack(step_logits, dim=1) if T
                                        else leaves.new_zeros((S, 0, 2)))  # [S, T, 2]
            out["logprob"], out["entropy"] = logprob.to(leaves.dtype), entropy.to(leaves.dtype)
        return out

    def _step(self, thin, pointers, sp, bp, state, n_leaves, new_row, op, u, mode: str, head: bool) -> tuple:
        """One transition for every sentence, without side effects.

        thin <float>[N + T, S, 2H], pointers <int64>[S, N + 1], sp, bp <int64>[S],
        state (h_t, c_t) <float>[S, D] or None, n_leaves <int64>[S], new_row
        <int64>[] (N + t), op <int64>[S] (gold mode, else None), u <float64>[S]
        (sampled mode, else None). Returns (row <float>[S, 2H] for thin[N + t],
        the new pointers, sp, bp and state); with ``head`` also (logits <float>[S, 2],
        zeros at PAD; the op followed <int64>[S]; the step's logprob and
        entropy <float64>[S], or None outside sampled mode).
        """
        H = self.hidden_dim
        rows = torch.arange(sp.shape[0], device=sp.device)

        def slot(k: int) -> torch.Tensor:
            """The item k places from the top, <float>[S, 2H]; zeros where there is none."""
            item = thin[pointers[rows, (sp - k).clamp(min=0)], rows]  # follow the back-pointer
            return torch.where((sp >= k)[:, None], item, 0.0)

        top, below = slot(1), slot(2)
        # The leaves are rows 0..N-1 of thin; bp <= n <= N is always a row of it.
        front = thin[bp, rows]
        can_shift = bp < n_leaves  # the buffer is not empty
        front = torch.where(can_shift[:, None], front, 0.0)
        # ---- masks: the "if op == ..." of lists.py, one bool per sentence.
        if mode == "gold":
            is_shift, is_reduce, active = op == SHIFT, op == REDUCE, op != PAD
        else:
            # The op is decided after the tracker update; whether the step
            # does anything is known now: a finished sentence can neither
            # shift nor reduce, and PADs from then on.
            can_reduce = sp >= 2
            active = can_shift | can_reduce

        # ---- tracker, kept only where the step is not PAD: PAD changes nothing.
        tracking = None
        if self.tracker is not None:
            h_t, c_t = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)
            keep = active[:, None]
            state = (torch.where(keep, h_t, state[0]), torch.where(keep, c_t, state[1]))
            tracking = state[0]

        # ---- the transition head reads the state just written (docs/spec.md §7).
        ys = ()
        if head:
            logits = self.tracker.transition_logits(tracking)  # [S, 2] = (t_S, t_R)
            step_logprob = step_entropy = None
            if mode != "gold":
                # ---- the decision. lists.py copies t to Python here and
                # branches; here it stays on the device as two masks that
                # take the place of the gold op's.
                is_shift, is_reduce, step_logprob, step_entropy = _decide(logits, u, can_shift, can_reduce, mode)
            followed = torch.where(is_reduce, REDUCE, torch.where(is_shift, SHIFT, PAD))
            ys = (torch.where(active[:, None], logits, 0.0), followed, step_logprob, step_entropy)

        # ---- compose the two top items for every sentence (kept where REDUCE).
        h, c = self.reduce.compose((below[:, :H], below[:, H:]), (top[:, :H], top[:, H:]), tracking)

        # ---- push a pointer. SHIFT pushes the leaf's row at slot sp, REDUCE
        # pops two and pushes row N + t at slot sp - 2; PAD writes at sp, the
        # free slot above the top, which nobody reads. Out of place: the
        # compiled backward may read the pointers this step was given.
        write_slot = sp - 2 * is_reduce.long()
        target = torch.where(is_shift, bp, new_row)
        pointers = pointers.scatter(1, write_slot[:, None], target[:, None])
        sp = sp + is_shift.long() - is_reduce.long()
        bp = bp + is_shift.long()
        return (torch.cat([h, c], dim=1), pointers, sp, bp, state) + ys


def _decide(logits, uniform, can_shift, can_reduce, mode: str):
    """docs/spec.md §7's rule for every sentence at once, without leaving the device.

    logits <float>[S, 2] = (t_S, t_R); uniform <float64>[S] (sampled mode);
    can_shift, can_reduce <bool>[S]. Returns is_shift, is_reduce <bool>[S]
    (both false: the sentence is finished) and, in sampled mode, the step's
    log p(action taken) and entropy <float64>[S], zero unless it was a choice.
    """
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
