"""SPINN for ONE sentence in DyNet (docs/spec.md §3, §7): a Python list is the
stack, an index into the leaves is the buffer, and a Python loop runs the
transitions.

This is the shape of shared/reference_encoder.py, the float64 NumPy
reference, written in DyNet expressions: there is no batch dimension, no
padding and no mask anywhere. A batch is a plain loop over its sentences
(classifier.py) that adds every sentence's nodes to ONE computation graph;
DyNet evaluates that graph once, and with autobatching on it runs the nodes
of different sentences that share an operation and shapes as one batched
operation. Which nodes those are is DyNet's business, found at run time
from the graph, so the per-sentence code stays as simple as the reference.

When the model decides its own parse (predicted and sampled mode), a
decision needs a number the graph has not computed yet. :func:`parse_decided`
therefore advances every sentence of the batch one step at a time: it adds
step t's tracker and head nodes for all of them, evaluates the graph so far
once (one forward over all the sentences, so autobatching still batches the
step) and reads the head's logits of the sentences that have a choice, then
lets Python take each sentence's branch. ``host_syncs`` counts those reads.

Shapes: S sentences, T steps, H hidden, D tracker; an item is (h, c) [H].
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from shared import parsing
from shared.transitions import PAD, REDUCE, SHIFT

from . import cells
from .cells import Item
from .convert import Weights
from .library import dy, pools_checked

# d = t_R - t_S as a dot product with t: -1 at SHIFT's column, +1 at REDUCE's.
_DIFFERENCE = [0.0, 0.0]
_DIFFERENCE[parsing.SHIFT_COLUMN], _DIFFERENCE[parsing.REDUCE_COLUMN] = -1.0, 1.0


@dataclass
class Followed:
    """What one sentence's run leaves for the outputs and the losses."""

    root: dy.Expression | None = None  # h of the one item left on the stack [H]
    transitions: np.ndarray | None = None  # <int32>[T] the transitions followed, PAD elsewhere
    columns: list[int] = field(default_factory=list)  # the step of each head evaluation
    logits: list[dy.Expression] = field(default_factory=list)  # t = (t_S, t_R) [2] at those steps
    choices: list[int] = field(default_factory=list)  # sampled mode: indices into logits that were choices
    reduced: list[bool] = field(default_factory=list)  # ... and whether each REDUCEd


class Sentence:
    """One sentence's parser state: its leaves (the buffer, front at ``front``),
    its stack (a Python list of items, top last) and its tracker state."""

    def __init__(self, spinn: "SPINN", leaves: list[Item]):
        self.spinn = spinn
        self.leaves = leaves
        self.front = 0  # the buffer holds leaves[front:]
        self.stack: list[Item] = []
        self.state = spinn.zero_state  # (h_t, c_t) [D], or None without a tracker

    @property
    def can_shift(self) -> bool:
        return self.front < len(self.leaves)

    @property
    def can_reduce(self) -> bool:
        return len(self.stack) >= 2

    def track(self) -> None:
        """The tracker step every non-PAD step starts with; a missing item reads zeros."""
        zero = self.spinn.zero_h
        buffer_h = self.leaves[self.front][0] if self.can_shift else zero
        top_h = self.stack[-1][0] if self.stack else zero
        below_h = self.stack[-2][0] if len(self.stack) >= 2 else zero
        self.state = cells.track(self.spinn.weights, buffer_h, top_h, below_h, self.state)

    def head(self) -> dy.Expression:
        """The transition head on the state the last track() wrote."""
        return cells.head(self.spinn.weights, self.state[0])

    def apply(self, op: int, step: int) -> None:
        """SHIFT or REDUCE (step numbers the error of an invalid sequence)."""
        if op == SHIFT:
            if not self.can_shift:
                raise ValueError(f"step {step}: SHIFT from an empty buffer")
            self.stack.append(self.leaves[self.front])
            self.front += 1
        elif op == REDUCE:
            if not self.can_reduce:
                raise ValueError(f"step {step}: REDUCE with fewer than two items on the stack")
            right = self.stack.pop()
            left = self.stack.pop()
            tracking = self.state[0] if self.state is not None else None
            self.stack.append(cells.reduce(self.spinn.weights, left, right, tracking))
        else:
            raise ValueError(f"step {step}: unknown transition code {op}")

    def root(self) -> dy.Expression:
        if len(self.stack) != 1:
            raise ValueError(f"transitions leave {len(self.stack)} items on the stack, expected 1")
        return self.stack[0][0]


class Clock:
    """Where one call's seconds went, by phase, as the runner's ``last_phases``
    (docs/runner-interface.md): ``evaluate`` inside DyNet's forward and
    backward passes (and other named sections), ``build`` the rest, which is
    Python building the graph."""

    def __init__(self):
        self.start = time.perf_counter()
        self.sections: dict[str, float] = {}

    @contextlib.contextmanager
    def section(self, name: str = "evaluate") -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.sections[name] = self.sections.get(name, 0.0) + time.perf_counter() - began

    def timings(self) -> dict[str, float]:
        total = time.perf_counter() - self.start
        return {"build": total - sum(self.sections.values()), "evaluate": 0.0, **self.sections}


class SPINN:
    """The encoder inside one computation graph: the weights and the zero
    vectors a missing item or a fresh tracker reads. Build one after
    ``dy.renew_cg`` (its constants belong to that graph)."""

    def __init__(self, weights: Weights, clock: Clock | None = None):
        H, D = weights.config.hidden_dim, weights.config.tracker_dim
        self.weights = weights
        self.clock = clock or Clock()
        self.has_head = weights.config.transition_head
        self.zero_h = dy.zeros(H)
        self.zero_state = (dy.zeros(D), dy.zeros(D)) if D > 0 else None

    def start(self, leaves: list[Item]) -> Sentence:
        return Sentence(self, leaves)

    def follow(self, leaves: list[Item], transitions: np.ndarray, head: bool = False) -> Followed:
        """One sentence along its own transitions (gold mode); with ``head`` the
        head scores every non-PAD step (teacher forcing, docs/spec.md §7)."""
        sentence = self.start(leaves)
        out = Followed(transitions=np.asarray(transitions, dtype=np.int32))
        for step, op in enumerate(out.transitions.tolist()):
            if op == PAD:
                continue  # PAD changes nothing, the tracker included
            if sentence.state is not None:
                sentence.track()
            if head:
                out.columns.append(step)
                out.logits.append(sentence.head())
            sentence.apply(op, step)
        out.root = sentence.root()
        return out


def parse_decided(spinn: SPINN, leaves: list[list[Item]], num_steps: int, mode: str,
                  uniforms: np.ndarray | None = None) -> tuple[list[Followed], int]:
    """Every sentence of the batch, the head deciding its transitions
    (predicted or sampled mode, docs/spec.md §7) -> (one Followed per
    sentence, the number of host reads of decisions).

    Sentence s has ``len(leaves[s])`` = n words and runs 2n-1 steps; row T
    of its transitions is ``num_steps`` wide. ``uniforms`` <float64>[S, T] in
    sampled mode. The loop runs step by step over all sentences, so that one
    evaluation per step serves every sentence that has a choice.
    """
    sentences = [spinn.start(row) for row in leaves]
    runs = [Followed(transitions=np.full(num_steps, PAD, np.int32)) for _ in sentences]
    lengths = [2 * len(row) - 1 for row in leaves]
    host_syncs = 0
    for step in range(max(lengths, default=0)):
        active = [s for s, length in enumerate(lengths) if step < length]
        for s in active:
            sentences[s].track()
            runs[s].columns.append(step)
            runs[s].logits.append(sentences[s].head())
        choosing = [s for s in active if sentences[s].can_shift and sentences[s].can_reduce]
        values = {}
        if choosing:
            # The host read: the graph so far is evaluated once (autobatched
            # across sentences), and Python waits for the K x 2 logits.
            with spinn.clock.section(), pools_checked():
                read = dy.concatenate_cols([runs[s].logits[-1] for s in choosing]).npvalue()
            values = dict(zip(choosing, np.asarray(read, np.float64).reshape(2, len(choosing)).T))
            host_syncs += 1
        for s in active:
            op = _decide(sentences[s], values.get(s), mode, uniforms[s, step] if uniforms is not None else 0.0)
            if s in values and mode == "sampled":
                runs[s].choices.append(len(runs[s].logits) - 1)
                runs[s].reduced.append(op == REDUCE)
            runs[s].transitions[step] = op
            sentences[s].apply(op, step)
    for sentence, run in zip(sentences, runs):
        run.root = sentence.root()
    return runs, host_syncs


def _decide(sentence: Sentence, logits: np.ndarray | None, mode: str, uniform: float) -> int:
    """The op of one sentence at one step: the only valid one, or (a choice)
    the head's, read as float64 from the float32 logits (docs/spec.md §7)."""
    if logits is None:  # one valid action: no choice
        return SHIFT if sentence.can_shift else REDUCE
    if mode == "predicted":
        return REDUCE if logits[parsing.REDUCE_COLUMN] > logits[parsing.SHIFT_COLUMN] else SHIFT  # a tie SHIFTs
    return REDUCE if uniform < float(parsing.reduce_probability(logits)) else SHIFT


def choice_sums(run: Followed) -> tuple[dy.Expression, dy.Expression] | None:
    """Sampled mode: one sentence's logprob and entropy as expressions (the
    REINFORCE loss differentiates them), or None without a choice step.

    With d = t_R - t_S per choice step: log p(action) = log σ(±d), the
    entropy -(p log p + (1-p) log(1-p)) with p = exp(log σ(d)), so a
    saturated logit gives 0, never NaN. One vector per sentence, not nodes
    per step: d = [-1, 1] · t for all its choices at once.
    """
    if not run.choices:
        return None
    chosen = dy.concatenate_cols([run.logits[k] for k in run.choices])  # [2, C]
    signs = dy.inputVector([1.0 if r else -1.0 for r in run.reduced])  # +d where it REDUCEd
    d = dy.transpose(chosen) * dy.inputVector(_DIFFERENCE)  # [C]
    logprob = dy.sum_elems(dy.log_sigmoid(dy.cmult(signs, d)))
    log_reduce, log_shift = dy.log_sigmoid(d), dy.log_sigmoid(-d)
    entropy = -dy.sum_elems(dy.cmult(dy.exp(log_reduce), log_reduce) + dy.cmult(dy.exp(log_shift), log_shift))
    return logprob, entropy

