"""The define-by-run SPINN in TensorFlow eager (docs/spec.md §3, §7).

masked.py builds one static graph: a ``tf.while_loop`` whose body masks every
sentence's SHIFT, REDUCE and PAD. This file runs the other algorithm, the one
impl_pytorch/lists.py runs, in the same framework and with the same cells:
no ``tf.function``, so every TensorFlow op runs as Python reaches it (eager
execution), a sentence's buffer and stack are Python lists of items, the
transition steps are a Python ``for`` loop, and each sentence takes a Python
``if`` on its own SHIFT or REDUCE. The only batching is inside the Tracker and
Reduce calls: at each step the items of the sentences that act are stacked
(``tf.stack``), one matmul serves them all, and each sentence gets its row
back (``tf.unstack``). This is how the TF-Eager SPINN example was written.

So a speed gap between ``tensorflow`` and ``tensorflow-eager`` is the
algorithm's (static graph with masks vs. define-by-run), and one between
``tensorflow-eager`` and ``pytorch`` is the framework's (the same algorithm).

Gradients: ``tf.GradientTape`` records the ops as they run, a tape shaped by
this batch's trees, exactly as PyTorch's autograd does (train.py's
``loss_and_grads`` and ``train_step`` are used unchanged, called eagerly, on
classifier.SNLIClassifier with this SPINN as its encoder).

Parses decided by the model (predicted, sampled): the head's logits are
copied to the host (``.numpy()``) at every step where some sentence has a
choice, and Python picks each sentence's branch: the round trip per step of
define-by-run code, which masked.py avoids by deciding inside the graph.

Shapes: S sentences (2B, premises first), N tokens, T steps, H hidden, D
tracker. An item is ``[h; c]``, <float>[2H], as in masked.py. Transitions are
read on the host (NumPy): they decide what runs, they are never computed on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from shared import parsing
from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import choice_probabilities, choice_scores
from .layers import read_once


@dataclass
class _Lists:
    """One call's state on the host: each sentence's buffer, stack and
    tracker (h_t, c_t) as Python lists, the transitions followed <int32>[S, T]
    (decided ones written step by step), and what parse records."""

    mode: str
    num_steps: list[int]  # steps each sentence runs: T (gold) or 2n - 1 (decided)
    uniforms: list | None  # sampled mode: [S][T] floats
    buffers: list[list]
    stacks: list[list]
    states: list[tuple]
    followed: np.ndarray
    step_logits: list = field(default_factory=list)  # the head's [K, 2] per step
    step_rows: list[int] = field(default_factory=list)  # the sentence of each of their rows
    step_columns: list[int] = field(default_factory=list)  # the step of each row
    choices: list[int] = field(default_factory=list)  # sampled mode: the rows that were choices
    reduced: list[bool] = field(default_factory=list)  # and what each did


class SPINN(tf.Module):
    """The shift-reduce encoder run define-by-run, with masked.py's Tracker
    and Reduce (the same modules, so the same variables and names). Call it
    eagerly: it reads transitions in Python.

    ``last_host_syncs``: the device-to-host reads of decisions made by the
    last call (one per step where some sentence had a choice; gold: none)."""

    last_host_syncs = 0

    def __init__(self, config: ModelConfig, dtype: tf.DType = tf.float32, name: str = "spinn"):
        super().__init__(name=name)
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        with self.name_scope:
            self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head, dtype=dtype)
                            if config.tracker_dim > 0 else None)
            self.reduce = Reduce(config.hidden_dim, config.tracker_dim, dtype=dtype)

    def encode(self, leaves: tf.Tensor, transitions) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token), transitions
        <int32>[S, T] (on the host), followed -> encodings <float>[S, H], the
        h of each root. Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions).encodings

    def parse(self, leaves: tf.Tensor, transitions, mode: str = "predicted", uniforms=None) -> SentenceParses:
        """The encoder with its transition head (docs/spec.md §7): masked.py's
        SPINN.parse (same arguments, same SentenceParses), define-by-run."""
        return self._run(leaves, transitions, mode, uniforms, with_head=True)

    def _run(self, leaves, transitions, mode: str = "gold", uniforms=None, with_head: bool = False) -> SentenceParses:
        """The Python loop behind encode and parse. Without the head only
        ``encodings`` is filled in (the rest is None)."""
        if not tf.executing_eagerly():
            raise RuntimeError("the lists SPINN branches in Python on the transitions; "
                               "call it eagerly, not inside tf.function (that is masked.py's SPINN)")
        lists = self._lists(leaves, np.asarray(transitions), mode, uniforms)  # transitions: the host copy Python reads
        self.last_host_syncs = 0

        # ---- the Python loop over steps: what runs at step t, and so what the
        # tape records, is decided here, by this batch's transitions (gold) or
        # by what the model decided at the steps before. The weights are read
        # once per call, not once per step (layers.read_once, as in masked.py).
        with read_once(*self._weights(with_head)):
            for t in range(max(lists.num_steps, default=0)):
                if mode == "gold":  # PAD changes nothing
                    active = [s for s in range(len(lists.stacks)) if lists.followed[s, t] != PAD]
                else:
                    active = [s for s, n in enumerate(lists.num_steps) if t < n]  # the sentences not finished yet
                if not active:
                    continue
                tracking = self._track(lists, active)  # h_t <float>[K, D], or None
                if with_head:
                    logits = self.tracker.transition_logits(tracking)  # [K, 2] = (t_S, t_R)
                    first_row = len(lists.step_rows)
                    lists.step_logits.append(logits)
                    lists.step_rows.extend(active)
                    lists.step_columns.extend([t] * len(active))
                if mode == "gold":
                    ops = [int(lists.followed[s, t]) for s in active]
                else:
                    ops = self._decide(lists, t, active, logits, first_row)
                self._apply(lists, t, active, ops, tracking)

        for s, stack in enumerate(lists.stacks):
            if len(stack) != 3:
                raise ValueError(f"sentence {s}: transitions leave {len(stack) - 2} items on the stack, expected 1")
        encodings = tf.stack([stack[-1] for stack in lists.stacks])[:, :self.hidden_dim]  # h of the item left: [S, H]
        if not with_head:
            return SentenceParses(encodings, None, None, None, None)
        return _parses(lists, encodings)

    def _weights(self, with_head: bool) -> list[tf.Variable]:
        """The variables a step reads: the tracker's, Reduce's, and the head's where it is used."""
        tracker = [self.tracker.kernel, self.tracker.bias] if self.tracker is not None else []
        head = [self.tracker.transition.kernel, self.tracker.transition.bias] if with_head else []
        return tracker + [self.reduce.kernel, self.reduce.bias] + head

    def _lists(self, leaves, transitions: np.ndarray, mode: str, uniforms) -> _Lists:
        """The batch on the host: a buffer and a stack of items <float>[2H] per sentence."""
        H, D = self.hidden_dim, self.tracker_dim
        dtype = leaves.dtype
        S, N = int(leaves.shape[0]), int(leaves.shape[1])
        T = transitions.shape[1]
        n_leaves = (transitions == SHIFT).sum(axis=1).tolist()  # one SHIFT per word
        num_steps = [T] * S if mode == "gold" else [2 * n - 1 for n in n_leaves]  # decided: 2n - 1 steps (§7)
        if max(num_steps, default=0) > T:
            raise ValueError(f"a sentence of {max(n_leaves)} tokens needs {2 * max(n_leaves) - 1} steps, "
                             f"the batch has T={T}")
        if mode == "sampled":
            uniforms = np.asarray(uniforms, dtype=np.float64).tolist()  # Python reads them one by one

        # The real leaves, one item <float>[2H] per word (padding slots left out):
        # one gather and one unstack, not S * N slices.
        rows = [s * N + j for s, n in enumerate(n_leaves) for j in range(n)]
        words = tf.unstack(tf.gather(tf.reshape(leaves, [S * N, 2 * H]), rows), num=len(rows))
        starts = np.cumsum([0] + n_leaves).tolist()
        # A zero item at the bottom of every buffer (once) and stack (twice),
        # so buf[-1], stack[-1] and stack[-2] always exist and read as zeros
        # where docs/spec.md §3 says an item is absent. A valid sequence never pops one.
        null = tf.zeros([2 * H], dtype)
        zero_state = tf.zeros([D], dtype)
        return _Lists(
            mode=mode, num_steps=num_steps, uniforms=uniforms,
            # reversed: pop() takes the front
            buffers=[[null] + words[starts[s]:starts[s + 1]][::-1] for s in range(S)],
            stacks=[[null, null] for _ in range(S)],
            states=[(zero_state, zero_state)] * S,
            followed=transitions.astype(np.int32) if mode == "gold" else np.full((S, T), PAD, np.int32),
        )

    def _track(self, lists: _Lists, active: list[int]):
        """The tracker on the sentences that act: their new (h_t, c_t) written
        into ``lists.states``; returns their h_t <float>[K, D] (None without a tracker)."""
        if self.tracker is None:
            return None
        H, buffers, stacks, states = self.hidden_dim, lists.buffers, lists.stacks, lists.states
        # The tracker runs only on the sentences that act, batched:
        # stack their items, one matmul, hand each its row back.
        front = tf.stack([buffers[s][-1] for s in active])  # [K, 2H]
        top = tf.stack([stacks[s][-1] for s in active])
        below = tf.stack([stacks[s][-2] for s in active])
        state = (tf.stack([states[s][0] for s in active]), tf.stack([states[s][1] for s in active]))
        tracking = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)  # [K, D] each
        for s, h, c in zip(active, tf.unstack(tracking[0]), tf.unstack(tracking[1])):
            states[s] = (h, c)
        return tracking[0]  # h_t of the K sentences, what Reduce and the head read

    def _decide(self, lists: _Lists, t: int, active: list[int], logits, first_row: int) -> list[int]:
        """The model decides step t (predicted, sampled): the op of each active
        sentence, also written into ``lists.followed``. ``logits`` <float>[K, 2]
        are the rows ``first_row`` .. of ``lists.step_logits``."""
        # ---- What is possible is read off the lists (SHIFT: a word above the
        # buffer's null item; REDUCE: two items above the stack's nulls); where
        # both are, Python needs the head's numbers: the host round trip of define-by-run.
        sampled = lists.mode == "sampled"
        can_shift = [len(lists.buffers[s]) > 1 for s in active]
        can_reduce = [len(lists.stacks[s]) > 3 for s in active]
        if any(a and b for a, b in zip(can_shift, can_reduce)):
            host = logits.numpy()  # waits for the step's work; one copy for the K sentences
            self.last_host_syncs += 1
            if sampled:  # p_R = σ(t_R - t_S), in float64 as the reference computes it
                p_reduce = parsing.reduce_probability(host.astype(np.float64)).tolist()
        ops = []
        for k, s in enumerate(active):
            if can_shift[k] and can_reduce[k]:
                if sampled:
                    take_reduce = lists.uniforms[s][t] < p_reduce[k]
                    lists.choices.append(first_row + k)
                    lists.reduced.append(take_reduce)
                else:
                    t_shift, t_reduce = host[k]
                    take_reduce = bool(t_reduce > t_shift)  # a tie SHIFTs
                ops.append(REDUCE if take_reduce else SHIFT)
            else:
                ops.append(SHIFT if can_shift[k] else REDUCE)  # one possible action: no choice
            lists.followed[s, t] = ops[-1]
        return ops

    def _apply(self, lists: _Lists, t: int, active: list[int], ops: list[int], tracking) -> None:
        """Step t's per-sentence branch: SHIFT moves a list item, REDUCE
        queues the two top items for one batched Reduce call."""
        lefts, rights, reducing, reducing_rows = [], [], [], []
        for k, (s, op) in enumerate(zip(active, ops)):
            stack = lists.stacks[s]
            if op == SHIFT:
                stack.append(lists.buffers[s].pop())
            elif op == REDUCE:
                if len(stack) < 4:
                    raise ValueError(f"sentence {s}, step {t}: REDUCE with fewer than two items on the stack")
                rights.append(stack.pop())
                lefts.append(stack.pop())
                reducing.append(s)
                reducing_rows.append(k)
            else:
                raise ValueError(f"sentence {s}, step {t}: unknown transition code {op}")
        if reducing:
            track = tf.gather(tracking, reducing_rows) if tracking is not None else None  # the h_t just written
            h, c = self.reduce.compose(tf.split(tf.stack(lefts), 2, axis=1), tf.split(tf.stack(rights), 2, axis=1),
                                       track)  # [K', H] each
            for s, item in zip(reducing, tf.unstack(tf.concat([h, c], axis=1))):  # items [2H]
                lists.stacks[s].append(item)


def _parses(lists: _Lists, encodings) -> SentenceParses:
    """The records of parse, laid out as masked.py returns them."""
    S, T = lists.followed.shape
    dtype = encodings.dtype
    if lists.step_logits:
        all_logits = tf.concat(lists.step_logits, axis=0)  # [R, 2], in the order the steps ran
        where = np.stack([lists.step_rows, lists.step_columns], axis=1)  # [R, 2]: (sentence, step)
        transition_logits = tf.scatter_nd(where, all_logits, [S, T, 2])  # zeros at PAD, differentiable
    else:
        transition_logits = tf.zeros([S, T, 2], dtype)
    if lists.choices:
        logprob, entropy = _choice_sums(all_logits, np.asarray(lists.step_rows), lists.choices, lists.reduced, S)
    else:
        logprob = entropy = tf.zeros([S], dtype)
    return SentenceParses(encodings, tf.constant(lists.followed), transition_logits, logprob, entropy)


def _choice_sums(step_logits, step_rows, choices, reduced, num_sentences: int):
    """Sampled mode's per-sentence sums over the choice steps (docs/spec.md §7),
    <float>[S] each: log p(action taken), and the entropy. ``step_logits``
    <float>[R, 2] and ``step_rows`` <int>[R]: the head's rows in the order the
    steps ran, and the sentence of each; ``choices``: the rows that were
    choices, ``reduced``: whether each REDUCEd. Computed in float64 by
    head.py's choice_scores (stable logs, p = exp(log p)), as masked.py's loop
    computes them, then cast back."""
    chosen = tf.cast(tf.gather(step_logits, choices), tf.float64)  # [C, 2]
    diff = chosen[:, parsing.REDUCE_COLUMN] - chosen[:, parsing.SHIFT_COLUMN]  # t_R - t_S
    log_p, p = choice_probabilities(diff)  # (log) (p_S, p_R), as masked.py
    scores = choice_scores(log_p, p, tf.constant(reduced, tf.bool))  # [C, 2]
    sums = tf.math.unsorted_segment_sum(scores, step_rows[choices], num_sentences)  # [S, 2]
    logprob, entropy = tf.unstack(tf.cast(sums, step_logits.dtype), axis=1)
    return logprob, entropy
