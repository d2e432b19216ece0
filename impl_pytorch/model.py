"""The SPINN modules, define-by-run (docs/spec.md §3).

The graph is whatever Python does. A sentence's buffer and stack are Python
lists of ``(h, c)`` items, the transition steps are a Python ``for`` loop, and
every example takes a Python ``if`` on its own SHIFT or REDUCE. Autograd
records the operations as they happen, so each batch gets a graph shaped by
its own trees, built afresh and freed after ``backward()``. The only batching
is inside :class:`Tracker` and :class:`Reduce`: at each step they stack the
rows of the examples that act (:func:`batch`), run one matrix multiply for
all of them, and hand each example its row back (:func:`unbatch`).

Shapes: S sentences (2B when premise and hypothesis run together), N tokens,
T steps, E embedding, H hidden, D tracker. Transitions stay a NumPy array on
the host: Python reads them to decide what to compute, they never go to the
device.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT

# A stack or buffer item, or a tracker state: (h, c), each <float>[H] (or [D]).
Item = tuple[torch.Tensor, torch.Tensor]


# --------------------------------------------------------------------------
# batch / unbatch: the only place where examples meet
# --------------------------------------------------------------------------


def batch(items: Sequence[Item]) -> tuple[torch.Tensor, torch.Tensor]:
    """K items (h, c) -> (h <float>[K, H], c <float>[K, H]), rows in item order."""
    h, c = zip(*items)
    return torch.stack(h), torch.stack(c)


def unbatch(state: tuple[torch.Tensor, torch.Tensor]) -> list[Item]:
    """(h <float>[K, H], c <float>[K, H]) -> K items (h[k], c[k]); the inverse of batch."""
    h, c = state
    return list(zip(h.unbind(0), c.unbind(0)))


# --------------------------------------------------------------------------
# Tracker, Reduce, SPINN
# --------------------------------------------------------------------------


class Tracker(nn.Module):
    """An LSTM cell that reads the parser state: h of the buffer front and of
    the top two stack items (docs/spec.md §3, gate order i, f, g, o).

    Written out rather than ``nn.LSTMCell``, whose two biases (``bias_ih``,
    ``bias_hh``) would both have to be trained against one canonical
    ``tracker.bias``.
    """

    def __init__(self, hidden_dim: int, tracker_dim: int):
        super().__init__()
        self.input = nn.Linear(3 * hidden_dim, 4 * tracker_dim)  # [b, s1, s2] -> gates, with the bias
        self.hidden = nn.Linear(tracker_dim, 4 * tracker_dim, bias=False)  # h_t -> gates

    def forward(self, buffers: Sequence[list[Item]], stacks: Sequence[list[Item]],
                states: Sequence[Item]) -> list[Item]:
        """One step for K examples: their buffers, stacks and tracker states
        (h_t, c_t) -> their K new states. Every buffer and stack has zero
        items at the bottom (see SPINN.forward), so [-1] and [-2] always exist."""
        buffer_front = torch.stack([buf[-1][0] for buf in buffers])  # [K, H]
        stack_top = torch.stack([stack[-1][0] for stack in stacks])  # [K, H]
        stack_second = torch.stack([stack[-2][0] for stack in stacks])  # [K, H]
        h_prev, c_prev = batch(states)  # [K, D] each
        z = self.input(torch.cat([buffer_front, stack_top, stack_second], dim=1)) + self.hidden(h_prev)
        i, f, g, o = z.chunk(4, dim=1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return unbatch((h, c))


class Reduce(nn.Module):
    """The TreeLSTM composition of two stack items, with the tracker's h as a
    third input (docs/spec.md §3, gate order a, i, f1, f2, o)."""

    def __init__(self, hidden_dim: int, tracker_dim: int):
        super().__init__()
        self.left = nn.Linear(hidden_dim, 5 * hidden_dim)  # carries the bias
        self.right = nn.Linear(hidden_dim, 5 * hidden_dim, bias=False)
        self.track = nn.Linear(tracker_dim, 5 * hidden_dim, bias=False) if tracker_dim > 0 else None

    def forward(self, lefts: Sequence[Item], rights: Sequence[Item],
                trackings: Sequence[torch.Tensor] | None = None) -> list[Item]:
        """K left and K right items (and K tracker h's) -> K composed items."""
        left_h, left_c = batch(lefts)  # [K, H] each
        right_h, right_c = batch(rights)
        z = self.left(left_h) + self.right(right_h)  # [K, 5H]
        if self.track is not None:
            z = z + self.track(torch.stack(list(trackings)))
        a, i, f1, f2, o = z.chunk(5, dim=1)
        c = torch.tanh(a) * torch.sigmoid(i) + torch.sigmoid(f1) * left_c + torch.sigmoid(f2) * right_c
        h = torch.sigmoid(o) * torch.tanh(c)
        return unbatch((h, c))


class SPINN(nn.Module):
    """The shift-reduce encoder: projected leaves and transitions -> one
    encoding per sentence."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        self.tracker = Tracker(config.hidden_dim, config.tracker_dim) if config.tracker_dim > 0 else None
        self.reduce = Reduce(config.hidden_dim, config.tracker_dim)

    def forward(self, leaves: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token), transitions
        <int>[S, T] (NumPy, host) -> encodings <float>[S, H]."""
        S, N, _ = leaves.shape
        H = self.hidden_dim
        transitions = np.asarray(transitions)
        if transitions.ndim != 2 or transitions.shape[0] != S:
            raise ValueError(f"transitions have shape {transitions.shape}, expected ({S}, T)")
        num_leaves = (transitions == SHIFT).sum(axis=1).tolist()  # one SHIFT per word
        for s, n in enumerate(num_leaves):
            if n > N:
                raise ValueError(f"sentence {s}: {n} SHIFTs, but the batch has N={N} token slots")
        # The real leaves, sentence after sentence (padding slots left out),
        # split into one (h, c) pair of [H] views per word.
        rows = np.concatenate([s * N + np.arange(n) for s, n in enumerate(num_leaves)])
        real = leaves.reshape(S * N, 2 * H)[torch.as_tensor(rows, device=leaves.device)]
        words = list(zip(real[:, :H].unbind(0), real[:, H:].unbind(0)))
        starts = np.cumsum([0] + num_leaves).tolist()

        # docs/spec.md §3 reads zeros where the buffer is empty or the stack has fewer
        # than two items. As in the 2017 code, a "null" item sits at the
        # bottom of every buffer (once) and stack (twice), so buf[-1],
        # stack[-1] and stack[-2] always exist; the 2017 code used the
        # projected <pad> embedding there, this spec uses zeros. A valid
        # sequence never pops a null item.
        zero = leaves.new_zeros(H)
        null = (zero, zero)
        # Buffers are reversed, so buf.pop() takes the first word. A buffer
        # holds one leaf per SHIFT, so a SHIFT always finds one.
        buffers = [[null] + words[starts[s]:starts[s + 1]][::-1] for s in range(S)]
        stacks = [[null, null] for _ in range(S)]
        if self.tracker is not None:
            zero_state = leaves.new_zeros(self.tracker_dim)
            states = [(zero_state, zero_state)] * S  # (h_t, c_t) per example

        # The Python loop over steps: what runs at step t, and so the graph,
        # is decided here, from this batch's transitions.
        for t, ops in enumerate(transitions.T.tolist()):
            active = [s for s, op in enumerate(ops) if op != PAD]
            if not active:
                continue
            # PAD changes nothing, the tracker included: the tracker runs only
            # on the examples that act at this step (selected, batched inside
            # Tracker, and unbatched back into their own slots), so a padded
            # example keeps its state exactly. The 2017 code ran it on every
            # example; selecting reads plainer than computing all rows and
            # masking the padded ones back, and skips their work.
            if self.tracker is not None:
                new_states = self.tracker([buffers[s] for s in active], [stacks[s] for s in active],
                                          [states[s] for s in active])
                for s, state in zip(active, new_states):
                    states[s] = state
            # The per-example branch: SHIFT moves a list item, REDUCE queues
            # the two top items for one batched Reduce call.
            lefts, rights, trackings, reducing = [], [], [], []
            for s in active:
                buffer, stack = buffers[s], stacks[s]
                if ops[s] == SHIFT:
                    stack.append(buffer.pop())
                elif ops[s] == REDUCE:
                    if len(stack) < 4:
                        raise ValueError(f"sentence {s}, step {t}: REDUCE with fewer than two items on the stack")
                    rights.append(stack.pop())
                    lefts.append(stack.pop())
                    reducing.append(s)
                    if self.tracker is not None:
                        trackings.append(states[s][0])
                else:
                    raise ValueError(f"sentence {s}, step {t}: unknown transition code {ops[s]}")
            if reducing:
                composed = self.reduce(lefts, rights, trackings if self.tracker is not None else None)
                for s, item in zip(reducing, composed):
                    stacks[s].append(item)

        for s, stack in enumerate(stacks):
            if len(stack) != 3:
                raise ValueError(f"sentence {s}: transitions leave {len(stack) - 2} items on the stack, expected 1")
        return torch.stack([stack[-1][0] for stack in stacks])  # h of the one item left: [S, H]


# --------------------------------------------------------------------------
# The classifier
# --------------------------------------------------------------------------


class SNLIClassifier(nn.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    Dropout (rate ``dropout``) acts on the projected leaves and on the input
    of every classifier layer (the features and each ReLU output), as in the
    2017 code; ``model.eval()`` turns it off.
    """

    def __init__(self, config: ModelConfig, dropout: float = 0.0):
        super().__init__()
        self.config = config
        H, M = config.hidden_dim, config.mlp_dim
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.projection = nn.Linear(config.embed_dim, 2 * H)  # -> [h; c] of each leaf
        self.spinn = SPINN(config)
        widths = [4 * H] + [M] * config.mlp_layers
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], 3)
        self.leaf_dropout = nn.Dropout(dropout)
        self.mlp_dropout = nn.Dropout(dropout)

    def encode(self, tokens: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """tokens <int64>[S, N] (on the model's device), transitions <int>[S, T]
        (NumPy) -> encodings <float>[S, H]."""
        leaves = self.leaf_dropout(self.projection(self.embed(tokens)))  # [S, N, 2H]
        return self.spinn(leaves, transitions)

    def classify(self, premise: torch.Tensor, hypothesis: torch.Tensor) -> torch.Tensor:
        """Encodings <float>[B, H] each -> logits <float>[B, 3]."""
        f = torch.cat([premise, hypothesis, premise - hypothesis, premise * hypothesis], dim=1)  # [B, 4H]
        for layer in self.mlp:
            f = torch.relu(layer(self.mlp_dropout(f)))
        return self.output(self.mlp_dropout(f))

    def forward(self, premise_tokens: torch.Tensor, premise_transitions: np.ndarray,
                hypothesis_tokens: torch.Tensor, hypothesis_transitions: np.ndarray):
        """-> premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3]."""
        B = premise_tokens.shape[0]
        # Premise and hypothesis share N and T and the SPINN weights, so they
        # run as one batch of 2B sentences: half the Python loop iterations,
        # and twice the rows in every batched Tracker/Reduce call.
        tokens = torch.cat([premise_tokens, hypothesis_tokens])  # [2B, N]
        transitions = np.concatenate([np.asarray(premise_transitions), np.asarray(hypothesis_transitions)])
        encodings = self.encode(tokens, transitions)  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)
