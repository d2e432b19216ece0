"""SPINN for ONE sentence in DyNet (docs/spec.md §3, §7), batched by DyNet's
automatic batching: a Python list is the stack, an index into the leaves is
the buffer, and a Python loop runs the transitions.

This is the shape of shared/reference/encoder.py, the float64 NumPy
reference, written in DyNet expressions: there is no batch dimension, no
padding and no mask anywhere. A batch is a plain loop over its sentences
(classifier.py) that adds every sentence's nodes to ONE computation graph,
which DyNet batches when it evaluates it (docs/autobatching.md).

When the model decides its own parse (predicted and sampled mode), a
decision needs a number the graph has not computed yet: :meth:`SPINN.parse`
therefore advances every sentence of the batch one step at a time and
evaluates the graph once per step with a choice (docs/autobatching.md §3);
``last_host_syncs`` counts those reads.

Shapes: S sentences, T steps, H hidden, D tracker; an item is (h, c) [H].
"""

from __future__ import annotations

import numpy as np

from shared import parsing
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Item, Reduce, Tracker
from .library import dy, pools_checked
from .phases import Clock
from .weights import Weights

# d = t_R - t_S as a dot product with t: -1 at SHIFT's column, +1 at REDUCE's.
_DIFFERENCE = [0.0, 0.0]
_DIFFERENCE[parsing.SHIFT_COLUMN], _DIFFERENCE[parsing.REDUCE_COLUMN] = -1.0, 1.0


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


class SPINN:
    """The loop over transitions inside one computation graph: the cells, and
    the zero vectors a missing item or a fresh tracker reads. Each sentence's
    stack, buffer and tracker state is a :class:`_Sentence` of its own. Build
    one after ``dy.renew_cg`` (its constants belong to that graph; classifier.py
    does), with the clock that times the graph's phases (phases.Clock).

    What the last :meth:`parse` read on the host stays here for the caller:
    ``last_host_syncs``, the graph evaluations that read decisions, and
    ``last_choices``, per sentence the steps where a sampled decision was
    taken (the host sums its log p and entropy from the logits there, graph.py)."""

    def __init__(self, weights: Weights, clock: Clock):
        H, D = weights.config.hidden_dim, weights.config.tracker_dim
        self.clock = clock
        self.tracker = Tracker(weights) if D > 0 else None
        self.reduce = Reduce(weights)
        self.zero_h = dy.zeros(H)
        self.zero_state = (dy.zeros(D), dy.zeros(D)) if D > 0 else None
        self.last_host_syncs = 0
        self.last_choices: list[list[int]] = []

    def encode(self, leaves: list[Item], transitions: np.ndarray) -> dy.Expression:
        """One sentence along its gold transitions <int>[T] -> its root [H].

        One sentence, not the surface's [S, H]: DyNet's model is written per
        sentence, and a batch is a loop of calls into one graph (classifier.py)."""
        return self._follow(leaves, transitions)[0]

    def _follow(self, leaves: list[Item], transitions: np.ndarray, head: bool = False
                ) -> tuple[dy.Expression, list[dy.Expression]]:
        """One sentence along its own transitions (gold mode) -> (its root [H],
        the head's logits [2] at every non-PAD step, teacher-forced, docs/spec.md
        §7, where ``head``, else none)."""
        sentence = _Sentence(self, leaves)
        logits = []
        for step, op in enumerate(np.asarray(transitions, dtype=np.int32).tolist()):
            if op == PAD:
                continue  # PAD changes nothing, the tracker included
            if sentence.state is not None:
                sentence.track()
            if head:
                logits.append(sentence.head())
            sentence.apply(op, step)
        return sentence.root(), logits

    def parse(self, leaves: list[list[Item]], transitions: np.ndarray, mode: str = "predicted",
              uniforms: np.ndarray | None = None) -> SentenceParses:
        """The batch's S sentences in ``mode`` (docs/spec.md §7), the head
        scoring every step: "gold" follows ``transitions`` one sentence after
        the other; "predicted" (REDUCE where t_R > t_S) and "sampled" (REDUCE
        where u < p_R) let the head decide where both actions are possible,
        every sentence a step at a time, so that one evaluation of the graph
        per step serves every sentence that has a choice.

        Unlike :meth:`encode`, this takes every sentence of the batch: a
        decision is read back from the graph, and one read serves them all.

        ``leaves[s]``: sentence s's n items; a decided parse runs 2n-1 steps.
        ``transitions`` <int>[S, T]: followed in gold mode, T (their width)
        alone used otherwise. ``uniforms`` <float64>[S, T] in sampled mode.

        Returns shared.parsing.SentenceParses whose fields are this graph's
        nodes, to be read after one forward pass of the whole graph (graph.py):
        ``encodings`` the S roots [H] (a list), ``transitions`` the followed
        <int32>[S, T] (NumPy), ``transition_logits`` per sentence the head's
        t [2] at each of its non-PAD steps (a list of lists), and ``logprob``
        and ``entropy`` per sentence its sum over sampled choices [1] (lists;
        None for a sentence without a choice and in the other modes).
        """
        S = len(leaves)
        if mode == "gold":
            runs = [self._follow(items, row, head=True) for items, row in zip(leaves, transitions)]
            self.last_host_syncs, self.last_choices = 0, [[] for _ in range(S)]
            return SentenceParses([root for root, _ in runs], np.asarray(transitions, dtype=np.int32),
                                  [logits for _, logits in runs], [None] * S, [None] * S)
        sentences = [_Sentence(self, row) for row in leaves]
        followed = np.full((S, transitions.shape[1]), PAD, np.int32)
        logits: list[list[dy.Expression]] = [[] for _ in range(S)]
        choices: list[list[int]] = [[] for _ in range(S)]
        num_steps = [2 * len(row) - 1 for row in leaves]  # 2n - 1 for n leaves
        host_syncs = 0
        for step in range(max(num_steps, default=0)):
            active = [s for s, steps in enumerate(num_steps) if step < steps]  # the sentences not finished yet
            for s in active:
                sentences[s].track()
                logits[s].append(sentences[s].head())
            can_shift = np.array([sentences[s].can_shift for s in active])
            can_reduce = np.array([sentences[s].can_reduce for s in active])
            choosing = np.flatnonzero(can_shift & can_reduce)
            values = np.zeros((len(active), 2))  # t of the choosing rows; a forced row's is never read
            if len(choosing):
                # The host read: the graph so far is evaluated once (autobatched
                # across sentences), and Python waits for the K x 2 logits.
                with self.clock.section(), pools_checked():
                    read = dy.concatenate_cols([logits[active[k]][-1] for k in choosing]).npvalue()
                values[choosing] = np.asarray(read, np.float64).reshape(2, len(choosing)).T
                host_syncs += 1
            # The rule of docs/spec.md §7 on the host, in float64: shared.parsing's,
            # the reference's (DyNet decides where its values are, in Python).
            u = uniforms[active, step] if uniforms is not None else None
            _, is_reduce, _, _ = parsing.decide(values, u, can_shift, can_reduce, mode)
            for k, s in enumerate(active):
                op = REDUCE if is_reduce[k] else SHIFT  # an active sentence can act: what does not REDUCE SHIFTs
                if mode == "sampled" and can_shift[k] and can_reduce[k]:
                    choices[s].append(step)  # a decided parse's step t is its logits' index t
                followed[s, step] = op
                sentences[s].apply(op, step)
        self.last_host_syncs, self.last_choices = host_syncs, choices
        roots = [sentence.root() for sentence in sentences]
        sums = [_choice_sums(logits[s], choices[s], followed[s]) for s in range(S)]
        return SentenceParses(roots, followed, logits, [pair[0] if pair else None for pair in sums],
                              [pair[1] if pair else None for pair in sums])


def _choice_sums(logits: list[dy.Expression], choices: list[int], followed: np.ndarray
                 ) -> tuple[dy.Expression, dy.Expression] | None:
    """Sampled mode: one sentence's logprob and entropy as expressions [1]
    (the REINFORCE loss differentiates them), or None without a choice step.
    ``logits``: the head's t [2] at each step; ``choices``: the steps that
    were choices; ``followed`` <int32>[T]: the transitions taken.

    With d = t_R - t_S per choice step: log p(action) = log σ(±d), the
    entropy -(p log p + (1-p) log(1-p)) with p = exp(log σ(d)), so a
    saturated logit gives 0, never NaN. One vector per sentence, not nodes
    per step: d = [-1, 1] · t for all its choices at once.
    """
    if not choices:
        return None
    chosen = dy.concatenate_cols([logits[k] for k in choices])  # [2, C]
    signs = dy.inputVector([1.0 if followed[k] == REDUCE else -1.0 for k in choices])  # +d where it REDUCEd
    d = dy.transpose(chosen) * dy.inputVector(_DIFFERENCE)  # [C]
    logprob = dy.sum_elems(dy.log_sigmoid(dy.cmult(signs, d)))
    log_reduce, log_shift = dy.log_sigmoid(d), dy.log_sigmoid(-d)
    entropy = -dy.sum_elems(dy.cmult(dy.exp(log_reduce), log_reduce) + dy.cmult(dy.exp(log_shift), log_shift))
    return logprob, entropy
