"""The cells of SPINN (docs/spec.md §3): the Tracker's LSTM and Reduce's
TreeLSTM, shared by the three families (lists.py, masked.py, levels.py).

``Tracker.step`` and ``Reduce.compose`` hold the arithmetic on rows already
batched: masked.py calls them with every sentence's row at once, levels.py
with the rows of one level. lists.py keeps every sentence's buffer and stack
as Python lists of items and calls the cells as modules: ``forward``
(PyTorch's entry point) stacks the items of the sentences that act into rows
(:func:`_batch`), one matrix multiply serves them all, and :func:`_unbatch`
gives each sentence its row back, the only place where examples meet.

Shapes: K examples acting at this step, H hidden, D tracker.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

# A stack or buffer item, or a tracker state: (h, c), each <float>[H] (or [D]).
Item = tuple[torch.Tensor, torch.Tensor]

# --------------------------------------------------------------------------
# _batch / _unbatch: the only place where examples meet
# --------------------------------------------------------------------------


def _batch(items: Sequence[Item]) -> tuple[torch.Tensor, torch.Tensor]:
    """K items (h, c) -> (h <float>[K, H], c <float>[K, H]), rows in item order."""
    h, c = zip(*items)
    return torch.stack(h), torch.stack(c)


def _unbatch(state: tuple[torch.Tensor, torch.Tensor]) -> list[Item]:
    """(h <float>[K, H], c <float>[K, H]) -> K items (h[k], c[k]); the inverse of _batch."""
    h, c = state
    return list(zip(h.unbind(0), c.unbind(0)))


# --------------------------------------------------------------------------
# Tracker, Reduce
# --------------------------------------------------------------------------


class Tracker(nn.Module):
    """An LSTM cell that reads the parser state: h of the buffer front and of
    the top two stack items (docs/spec.md §3, gate order i, f, g, o).

    Written out rather than ``nn.LSTMCell``, whose two biases (``bias_ih``,
    ``bias_hh``) would both have to be trained against one canonical
    ``tracker.bias``.

    With ``transition_head``, ``transition`` is the head of docs/spec.md §7:
    a linear map from the new state h_t to t = (t_S, t_R), applied by
    :meth:`transition_logits`. The tracker step does not call it; SPINN.parse
    does, after each tracker step.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int, transition_head: bool = False,
                 dtype: torch.dtype | None = None):
        super().__init__()
        # [b, s1, s2] -> gates, with the bias: tracker.kernel_input and tracker.bias (docs/spec.md §4)
        self.kernel_input = nn.Linear(3 * hidden_dim, 4 * tracker_dim, dtype=dtype)
        self.kernel_hidden = nn.Linear(tracker_dim, 4 * tracker_dim, bias=False, dtype=dtype)  # h_t -> gates
        # h_t -> (t_S, t_R): tracker.transition.kernel and .bias
        self.transition = nn.Linear(tracker_dim, 2, dtype=dtype) if transition_head else None

    def forward(self, buffers: Sequence[list[Item]], stacks: Sequence[list[Item]],
                states: Sequence[Item]) -> list[Item]:
        """One step for K examples: their buffers, stacks and tracker states
        (h_t, c_t) -> their K new states. Every buffer and stack has zero
        items at the bottom (see lists.SPINN._start), so [-1] and [-2] always exist."""
        buffer_front = torch.stack([buf[-1][0] for buf in buffers])  # [K, H]
        stack_top = torch.stack([stack[-1][0] for stack in stacks])  # [K, H]
        stack_second = torch.stack([stack[-2][0] for stack in stacks])  # [K, H]
        return _unbatch(self.step(buffer_front, stack_top, stack_second, _batch(states)))

    def step(self, buffer_h: torch.Tensor, top_h: torch.Tensor, below_h: torch.Tensor,
             state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM arithmetic on rows already batched: buffer_h, top_h, below_h
        <float>[K, H], state (h_t, c_t) <float>[K, D] -> the new (h_t, c_t).
        ``forward`` gathers its rows from Python lists; masked.py passes every
        row, levels.py the rows of the sentences that step."""
        h_prev, c_prev = state
        z = self.kernel_input(torch.cat([buffer_h, top_h, below_h], dim=1)) + self.kernel_hidden(h_prev)
        i, f, g, o = z.chunk(4, dim=1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c

    def transition_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The head (docs/spec.md §7): the tracker's h <float>[K, D] -> t = (t_S, t_R) <float>[K, 2]."""
        return self.transition(h)


class Reduce(nn.Module):
    """The TreeLSTM composition of two stack items, with the tracker's h as a
    third input (docs/spec.md §3, gate order a, i, f1, f2, o)."""

    def __init__(self, hidden_dim: int, tracker_dim: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.left = nn.Linear(hidden_dim, 5 * hidden_dim, dtype=dtype)  # carries the bias
        self.right = nn.Linear(hidden_dim, 5 * hidden_dim, bias=False, dtype=dtype)
        self.track = nn.Linear(tracker_dim, 5 * hidden_dim, bias=False, dtype=dtype) if tracker_dim > 0 else None

    def forward(self, lefts: Sequence[Item], rights: Sequence[Item],
                trackings: Sequence[torch.Tensor] | None = None) -> list[Item]:
        """K left and K right items (and K tracker h's) -> K composed items."""
        tracking = torch.stack(list(trackings)) if self.track is not None else None  # [K, D]
        return _unbatch(self.compose(_batch(lefts), _batch(rights), tracking))

    def compose(self, left: tuple[torch.Tensor, torch.Tensor], right: tuple[torch.Tensor, torch.Tensor],
                tracking: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The TreeLSTM arithmetic on rows already batched: left and right
        (h, c) <float>[K, H] each, tracking <float>[K, D] (None without the
        tracker) -> (h, c) <float>[K, H]. ``forward`` gathers its rows from
        Python lists; masked.py passes every row, levels.py a level's."""
        (left_h, left_c), (right_h, right_c) = left, right
        z = self.left(left_h) + self.right(right_h)  # [K, 5H]
        if self.track is not None:
            z = z + self.track(tracking)
        a, i, f1, f2, o = z.chunk(5, dim=1)
        c = torch.tanh(a) * torch.sigmoid(i) + torch.sigmoid(f1) * left_c + torch.sigmoid(f2) * right_c
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c
