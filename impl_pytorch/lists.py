"""SPINN on per-example lists, in PyTorch: the lists family (docs/spec.md §3, §7).

A sentence's buffer and stack are Python lists of items, the transition
steps a Python ``for`` loop, and each sentence takes a Python ``if`` on its
own SHIFT or REDUCE, so what runs, and what the framework records for the
gradient, is a graph shaped by the batch's own trees
(docs/static-vs-dynamic.md). The only batching is inside the cells
(cells.py): at each step the items of the sentences that act are stacked,
one matmul serves them all, and each sentence gets its row back.
``SPINN.encode`` follows the given (gold) transitions; ``SPINN.parse`` also
reads the transition head at every step and, in predicted and sampled mode,
lets it decide: that ``if`` needs the head's verdict in Python, one
device-to-host read per step where some sentence has a choice (the rule is
head.py's, the one masked.py applies in its step; the branches are
shared.parsing.HeadRecord.decide, docs/decided-graphs.md).

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. The state lives on the host, in Python:

    leaves       <float>[S, N, 2H]      [h; c] of every token slot
    transitions  <int>[S, T]            PAD / SHIFT / REDUCE, NumPy: Python reads
                                        them to decide what runs, they never go to the device
    n_leaves     S ints                 SHIFTs per sentence: its words
    buffers      S lists of items       its words, reversed (pop() takes the front)
    stacks       S lists of items       each above two zero items
    states       S pairs (h, c)         the tracker's, <float>[D] each

PyTorch is the framework this algorithm was written for (Bradbury's 2017
SPINN, the baseline every ratio is taken against): autograd records the ops
as they run, a fresh graph every batch. An item is a pair (h, c) of [H]
views, and the cells take Python lists of them (cells.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from shared import parsing
from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import decide


class SPINN(nn.Module):
    """The shift-reduce encoder run define-by-run: a Python loop over Python lists."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head)
                        if config.tracker_dim > 0 else None)
        self.reduce = Reduce(config.hidden_dim, config.tracker_dim)
        self.last_host_syncs = 0  # device-to-host reads of decisions by the last call

    def forward(self, leaves: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """nn.Module's entry point: :meth:`encode`."""
        return self.encode(leaves, transitions)

    def encode(self, leaves: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T] (NumPy, host), followed -> encodings <float>[S, H], the h
        of each root. Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions, "gold", None, head=False)

    def parse(self, leaves: torch.Tensor, transitions: np.ndarray, mode: str = "predicted",
              uniforms: np.ndarray | None = None) -> SentenceParses:
        """The encoder with its transition head, in ``mode`` (docs/spec.md §7).

        leaves <float>[S, N, 2H]; transitions <int>[S, T] (NumPy, host): in
        gold mode they are followed (teacher forcing: the head scores every
        step, the data decides), in predicted and sampled mode only each
        row's number of SHIFTs (n) is used, and the head decides 2n - 1
        steps; uniforms <float>[S, T] (sampled mode only): step t of a
        sentence REDUCEs, where both actions are valid, if ``uniforms[:, t]``
        < p_R. The inputs are those shared.contract.check_parse accepted.
        Returns shared.parsing.SentenceParses: encodings <float>[S, H],
        transitions <int32>[S, T] (followed, a NumPy array on the host),
        transition_logits <float>[S, T, 2] (zeros at PAD), logprob, entropy
        <float>[S] (sampled mode, else zeros), every tensor keeping its
        graph; ``last_host_syncs`` counts the device-to-host reads of
        decisions (one per step where some sentence has a choice).
        """
        return self._run(leaves, transitions, mode, uniforms, head=True)

    def _run(self, leaves: torch.Tensor, transitions: np.ndarray, mode: str, uniforms: np.ndarray | None,
             head: bool):
        """The Python loop behind encode and parse. Returns the encodings
        <float>[S, H]; with the head, SentenceParses."""
        gold = mode == "gold"
        transitions, buffers, stacks, states, n_leaves = self._start(leaves, transitions)
        S, T = transitions.shape
        # Gold mode: the row says where its PADs are; otherwise n fixes the number of steps (docs/spec.md §7).
        num_steps = [T] * S if gold else [2 * n - 1 for n in n_leaves]
        uniforms = np.asarray(uniforms, dtype=np.float64) if mode == "sampled" else None
        followed = transitions.astype(np.int32) if gold else np.full((S, T), PAD, dtype=np.int32)
        record = _HeadRecord(mode)

        # ---- the Python loop over steps: what runs at step t, and so what
        # autograd records, is decided here, by this batch's transitions
        # (gold mode) or by what the model decided at the steps before.
        for t in range(max(num_steps, default=0)):
            if gold:
                ops = transitions[:, t].tolist()
                active = [s for s, op in enumerate(ops) if op != PAD]  # PAD changes nothing
            else:
                active = [s for s in range(S) if t < num_steps[s]]  # the sentences not finished yet
            if not active:
                continue
            tracking = None
            if self.tracker is not None:
                tracking = self._track(active, buffers, stacks, states)  # h_t, K of <float>[D]
            if head:
                # The head reads the state this step's tracker update just
                # wrote: one small batched matmul for the K active sentences.
                # The result stays on the device; nothing waits for it yet.
                logits = self.tracker.transition_logits(torch.stack(tracking))  # [K, 2] = (t_S, t_R)
                record.add(t, active, logits)
                if not gold:
                    ops = record.decide(t, logits, active, buffers, stacks, uniforms)
                    followed[:, t] = ops
            # A REDUCE composes with the h_t the head read.
            self._shift_or_reduce(t, ops, active, buffers, stacks, tracking)

        encodings = _roots(stacks)
        self.last_host_syncs = record.host_syncs
        if not head:
            return encodings
        return SentenceParses(encodings, followed, *record.outputs(encodings, T))

    def _start(self, leaves: torch.Tensor, transitions: np.ndarray):
        """The state before step 0: (transitions as a NumPy array, buffers,
        stacks, tracker states or None, n_leaves). A sentence has as many
        leaves as its row has SHIFTs."""
        S, N, _ = leaves.shape
        H = self.hidden_dim
        transitions = np.asarray(transitions)
        if transitions.ndim != 2 or transitions.shape[0] != S:
            raise ValueError(f"transitions have shape {transitions.shape}, expected ({S}, T)")
        n_leaves = (transitions == SHIFT).sum(axis=1).tolist()  # one SHIFT per word
        for s, n in enumerate(n_leaves):
            if n > N:
                raise ValueError(f"sentence {s}: {n} SHIFTs, but the batch has N={N} token slots")
        # The real leaves, sentence after sentence (padding slots left out),
        # split into one (h, c) pair of [H] views per word.
        rows = np.concatenate([s * N + np.arange(n) for s, n in enumerate(n_leaves)])
        real = leaves.reshape(S * N, 2 * H)[torch.as_tensor(rows, device=leaves.device)]
        words = list(zip(real[:, :H].unbind(0), real[:, H:].unbind(0)))
        starts = np.cumsum([0] + n_leaves).tolist()
        states = None

        # A zero item sits at the bottom of every buffer (once) and stack
        # (twice), so buf[-1], stack[-1] and stack[-2] always exist and read
        # as zeros where docs/spec.md §3 says an item is absent (the 2017
        # code used the projected <pad> embedding there). A valid sequence
        # never pops one.
        zero = leaves.new_zeros(H)
        null = (zero, zero)
        # Buffers are reversed, so buf.pop() takes the first word. A buffer
        # holds one leaf per SHIFT, so a SHIFT always finds one.
        buffers = [[null] + words[starts[s]:starts[s + 1]][::-1] for s in range(S)]
        stacks = [[null, null] for _ in range(S)]
        if self.tracker is not None:
            zero_state = leaves.new_zeros(self.tracker_dim)
            states = [(zero_state, zero_state)] * S  # (h_t, c_t) per example
        return transitions, buffers, stacks, states, n_leaves

    def _track(self, active: list[int], buffers: list, stacks: list, states: list) -> list[torch.Tensor]:
        """The tracker on the sentences that act, batched: their new (h_t,
        c_t) written into ``states``, each into its sentence's slot; returns
        their h_t, K of <float>[D], what Reduce and the head read."""
        # PAD changes nothing, the tracker included: the tracker runs only on
        # the sentences that act at this step, so a padded one keeps its
        # state exactly. The 2017 code ran it on every example; selecting
        # reads plainer than computing all rows and masking the padded ones
        # back, and skips their work. The cells take lists of items and
        # batch them inside (cells.py).
        new_states = self.tracker([buffers[s] for s in active], [stacks[s] for s in active],
                                  [states[s] for s in active])
        for s, state in zip(active, new_states):
            states[s] = state
        return [h for h, _ in new_states]

    def _shift_or_reduce(self, t: int, ops: list[int], active: list[int], buffers: list, stacks: list,
                         tracking: list | None) -> None:
        """Step t's op ``ops[s]`` for every active sentence s, on its own lists."""
        # The per-sentence branch: SHIFT moves a list item, REDUCE queues the
        # two top items for one batched Reduce call.
        lefts, rights, trackings, reducing = [], [], [], []
        for k, s in enumerate(active):
            buffer, stack = buffers[s], stacks[s]
            if ops[s] == SHIFT:
                stack.append(buffer.pop())
            elif ops[s] == REDUCE:
                if len(stack) < 4:
                    raise ValueError(f"sentence {s}, step {t}: REDUCE with fewer than two items on the stack")
                rights.append(stack.pop())
                lefts.append(stack.pop())
                reducing.append(s)
                if tracking is not None:
                    trackings.append(tracking[k])  # the h_t of this step's tracker update
            else:
                raise ValueError(f"sentence {s}, step {t}: unknown transition code {ops[s]}")
        if reducing:
            composed = self.reduce(lefts, rights, trackings if tracking is not None else None)
            for s, item in zip(reducing, composed):
                stacks[s].append(item)


def _roots(stacks: list) -> torch.Tensor:
    """The encodings <float>[S, H]: h of the one item each valid sequence leaves on its stack."""
    for s, stack in enumerate(stacks):
        if len(stack) != 3:
            raise ValueError(f"sentence {s}: transitions leave {len(stack) - 2} items on the stack, expected 1")
    return torch.stack([stack[-1][0] for stack in stacks])


class _HeadRecord(parsing.HeadRecord):
    """shared.parsing.HeadRecord on PyTorch tensors: the rule of head.py on
    the device, its verdict read back as Python bools, the outputs built
    with their graph."""

    def verdict(self, logits: torch.Tensor, uniform: np.ndarray | None, can_shift: list[bool],
                can_reduce: list[bool]) -> tuple:
        """head.decide on the step's K rows, on the device."""
        if uniform is not None:
            uniform = torch.as_tensor(uniform, device=logits.device)
        can_shift, can_reduce = torch.tensor([can_shift, can_reduce], device=logits.device)  # one copy to the device
        return decide(logits, uniform, can_shift, can_reduce, self.mode)

    def to_host(self, verdict: torch.Tensor) -> list[bool]:
        """The read of the step's verdict <bool>[K]: Python waits for the device here."""
        return verdict.tolist()

    def outputs(self, encodings: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """transition_logits <float>[S, T, 2] (zeros at PAD), logprob and
        entropy <float>[S] (sums over the choices, zeros unless sampled), all
        differentiable."""
        S, device = encodings.shape[0], encodings.device
        all_logits = torch.cat(self.logits) if self.logits else encodings.new_zeros((0, 2))  # [R, 2]
        index = (torch.as_tensor(self.rows, dtype=torch.int64, device=device),
                 torch.as_tensor(self.columns, dtype=torch.int64, device=device))
        transition_logits = encodings.new_zeros((S, T, 2)).index_put(index, all_logits)
        logprob = entropy = encodings.new_zeros(S)
        if self.scored:
            # Summed in float64, as the reference sums them, and cast back to
            # the model's dtype: float32 sums of a long sentence's terms drift.
            sentences = torch.as_tensor(self.scored, dtype=torch.int64, device=device)
            zeros = torch.zeros(S, dtype=torch.float64, device=device)
            logprob = zeros.index_add(0, sentences, torch.cat(self.logprob)).to(encodings.dtype)
            entropy = zeros.index_add(0, sentences, torch.cat(self.entropy)).to(encodings.dtype)
        return transition_logits, logprob, entropy
