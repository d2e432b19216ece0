"""SPINN for ONE sentence in DyNet (docs/spec.md §3, §7): a Python list is the
stack, an index into the leaves is the buffer, and a Python loop runs the
transitions.

This is the shape of shared/reference_encoder.py, the float64 NumPy
reference, written in DyNet expressions: there is no batch dimension, no
padding and no mask anywhere. A batch is a plain loop over its sentences
(classifier.py) that adds every sentence's nodes to ONE computation graph,
which DyNet batches when it evaluates it (docs/autobatching.md).

When the model decides its own parse (predicted and sampled mode), a
decision needs a number the graph has not computed yet: :meth:`SPINN.parse`
therefore advances every sentence of the batch one step at a time and
evaluates the graph once per step with a choice (docs/autobatching.md §3);
``host_syncs`` counts those reads.

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

from .cells import Item, Reduce, Tracker
from .convert import _Weights
from .library import dy, pools_checked

# d = t_R - t_S as a dot product with t: -1 at SHIFT's column, +1 at REDUCE's.
_DIFFERENCE = [0.0, 0.0]
_DIFFERENCE[parsing.SHIFT_COLUMN], _DIFFERENCE[parsing.REDUCE_COLUMN] = -1.0, 1.0


@dataclass
class _Followed:
    """What one sentence's run leaves for the outputs and the losses."""

    root: dy.Expression | None = None  # h of the one item left on the stack [H]
    transitions: np.ndarray | None = None  # <int32>[T] the transitions followed, PAD elsewhere
    columns: list[int] = field(default_factory=list)  # the step of each head evaluation
    logits: list[dy.Expression] = field(default_factory=list)  # t = (t_S, t_R) [2] at those steps
    choices: list[int] = field(default_factory=list)  # sampled mode: indices into logits that were choices
    reduced: list[bool] = field(default_factory=list)  # ... and whether each REDUCEd


class _Sentence:
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
        self.state = self.spinn.tracker.step(buffer_h, top_h, below_h, self.state)

    def head(self) -> dy.Expression:
        """The transition head on the state the last track() wrote."""
        return self.spinn.tracker.transition_logits(self.state[0])

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
            self.stack.append(self.spinn.reduce.compose(left, right, tracking))
        else:
            raise ValueError(f"step {step}: unknown transition code {op}")

    def root(self) -> dy.Expression:
        if len(self.stack) != 1:
            raise ValueError(f"transitions leave {len(self.stack)} items on the stack, expected 1")
        return self.stack[0][0]


class _Clock:
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
    """The loop over transitions inside one computation graph: the cells, and
    the zero vectors a missing item or a fresh tracker reads. Each sentence's
    stack, buffer and tracker state is a :class:`_Sentence` of its own. Build
    one after ``dy.renew_cg`` (its constants belong to that graph)."""

    def __init__(self, weights: _Weights, clock: _Clock | None = None):
        H, D = weights.config.hidden_dim, weights.config.tracker_dim
        self.clock = clock or _Clock()
        self.tracker = Tracker(weights) if D > 0 else None
        self.reduce = Reduce(weights)
        self.zero_h = dy.zeros(H)
        self.zero_state = (dy.zeros(D), dy.zeros(D)) if D > 0 else None

    def encode(self, leaves: list[Item], transitions: np.ndarray) -> dy.Expression:
        """One sentence along its gold transitions <int>[T] -> its root [H]
        (one sentence, not the surface's [S, H]: a batch is a loop of calls
        into one graph, classifier.py)."""
        return self._follow(leaves, transitions).root

    def _follow(self, leaves: list[Item], transitions: np.ndarray, head: bool = False) -> _Followed:
        """One sentence along its own transitions (gold mode); with ``head`` the
        head scores every non-PAD step (teacher forcing, docs/spec.md §7)."""
        sentence = _Sentence(self, leaves)
        out = _Followed(transitions=np.asarray(transitions, dtype=np.int32))
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

    def parse(self, leaves: list[list[Item]], transitions: np.ndarray, mode: str,
              uniforms: np.ndarray | None = None) -> tuple[list[_Followed], int]:
        """The batch's S sentences in ``mode`` (docs/spec.md §7), the head
        scoring every step -> (one _Followed per sentence, the number of host
        reads of decisions). The parses stay expressions: the caller reads
        them after one forward pass of the whole graph (train.py).

        Unlike :meth:`encode`, this takes every sentence of the batch: in
        predicted and sampled mode a decision is read back from the graph,
        and the loop runs step by step over all sentences so that one
        evaluation per step serves every sentence that has a choice.

        ``leaves[s]``: sentence s's n items; it runs 2n-1 steps. ``transitions``
        <int>[S, T]: followed in gold mode, T (their width) alone used
        otherwise. ``uniforms`` <float64>[S, T] in sampled mode.
        """
        if mode == "gold":
            return [self._follow(items, row, head=True) for items, row in zip(leaves, transitions)], 0
        num_steps = transitions.shape[1]
        sentences = [_Sentence(self, row) for row in leaves]
        runs = [_Followed(transitions=np.full(num_steps, PAD, np.int32)) for _ in sentences]
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
                with self.clock.section(), pools_checked():
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


def _decide(sentence: _Sentence, logits: np.ndarray | None, mode: str, uniform: float) -> int:
    """The op of one sentence at one step: the only valid one, or (a choice)
    the head's, read as float64 from the float32 logits (docs/spec.md §7)."""
    if logits is None:  # one valid action: no choice
        return SHIFT if sentence.can_shift else REDUCE
    if mode == "predicted":
        return REDUCE if logits[parsing.REDUCE_COLUMN] > logits[parsing.SHIFT_COLUMN] else SHIFT  # a tie SHIFTs
    return REDUCE if uniform < float(parsing.reduce_probability(logits)) else SHIFT


def _choice_sums(run: _Followed) -> tuple[dy.Expression, dy.Expression] | None:
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
