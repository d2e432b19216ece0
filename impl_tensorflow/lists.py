"""SPINN on per-example lists, in TensorFlow: the lists family (docs/spec.md §3, §7).

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
head.py's, the one masked.py applies in its while loop; the branches are
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

TensorFlow runs it eagerly, as the TF-Eager SPINN example was written: no
``tf.function``, so every op runs as Python reaches it, and
``tf.GradientTape`` records a tape shaped by this batch's trees, as
PyTorch's autograd does (train.py's ``loss_and_grads`` and ``train_step``
run it unchanged, called eagerly). So a speed gap between ``tensorflow`` and
``tensorflow-eager`` is the algorithm's (masked.py's static graph against
define-by-run), and one between ``tensorflow-eager`` and ``pytorch`` the
framework's. An item is one tensor ``[h; c]``, <float>[2H], as in
masked.py; the cells take stacked rows (``tf.stack``, then ``tf.unstack``),
and their weights are read once per call (layers.read_once).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from shared import parsing
from shared.params import ModelConfig
from shared.parsing import SentenceParses
from shared.transitions import PAD, REDUCE, SHIFT

from .cells import Reduce, Tracker
from .head import decide
from .layers import read_once, step_variables


class SPINN(tf.Module):
    """The shift-reduce encoder run define-by-run: a Python loop over Python
    lists. Call it eagerly: it reads transitions in Python."""

    def __init__(self, config: ModelConfig, dtype: tf.DType = tf.float32, name: str = "spinn"):
        super().__init__(name=name)
        self.hidden_dim = config.hidden_dim
        self.tracker_dim = config.tracker_dim
        with self.name_scope:
            self.tracker = (Tracker(config.hidden_dim, config.tracker_dim, config.transition_head, dtype=dtype)
                            if config.tracker_dim > 0 else None)
            self.reduce = Reduce(config.hidden_dim, config.tracker_dim, dtype=dtype)
        self.last_host_syncs = 0  # device-to-host reads of decisions by the last call

    def encode(self, leaves: tf.Tensor, transitions) -> tf.Tensor:
        """leaves <float>[S, N, 2H] ([h; c] of each token slot), transitions
        <int>[S, T] (NumPy, host), followed -> encodings <float>[S, H], the h
        of each root. Gold mode, and the transition head is never evaluated here."""
        return self._run(leaves, transitions, "gold", None, head=False)

    def parse(self, leaves: tf.Tensor, transitions, mode: str = "predicted", uniforms=None) -> SentenceParses:
        """The encoder with its transition head, in ``mode`` (docs/spec.md §7).

        leaves <float>[S, N, 2H]; transitions <int>[S, T] (NumPy, host): in
        gold mode they are followed (teacher forcing: the head scores every
        step, the data decides), in predicted and sampled mode only each
        row's number of SHIFTs (n) is used, and the head decides 2n - 1
        steps; uniforms <float>[S, T] (sampled mode only): step t of a
        sentence REDUCEs, where both actions are valid, if ``uniforms[:, t]``
        < p_R. The inputs are those shared.contract.check_parse accepted.
        Returns shared.parsing.SentenceParses: encodings <float>[S, H],
        transitions <int32>[S, T] (followed), transition_logits
        <float>[S, T, 2] (zeros at PAD), logprob, entropy <float>[S]
        (sampled mode, else zeros), every tensor on the tape;
        ``last_host_syncs`` counts the device-to-host reads of decisions
        (one per step where some sentence has a choice).
        """
        return self._run(leaves, transitions, mode, uniforms, head=True)

    def _run(self, leaves: tf.Tensor, transitions, mode: str, uniforms, head: bool):
        """The Python loop behind encode and parse. Returns the encodings
        <float>[S, H]; with the head, SentenceParses."""
        if not tf.executing_eagerly():
            raise RuntimeError("the lists SPINN branches in Python on the transitions; "
                               "call it eagerly, not inside tf.function (that is masked.py's SPINN)")
        gold = mode == "gold"
        transitions, buffers, stacks, states, n_leaves = self._start(leaves, transitions)
        S, T = transitions.shape
        # Gold mode: the row says where its PADs are; otherwise n fixes the number of steps (docs/spec.md §7).
        num_steps = [T] * S if gold else [2 * n - 1 for n in n_leaves]
        if max(num_steps, default=0) > T:
            raise ValueError(f"a sentence of {max(n_leaves)} tokens needs {2 * max(n_leaves) - 1} steps, "
                             f"the batch has T={T}")
        uniforms = np.asarray(uniforms, dtype=np.float64) if mode == "sampled" else None
        followed = transitions.astype(np.int32) if gold else np.full((S, T), PAD, dtype=np.int32)
        record = _HeadRecord(mode)

        # ---- the Python loop over steps: what runs at step t, and so what
        # the tape records, is decided here, by this batch's transitions
        # (gold mode) or by what the model decided at the steps before. The
        # weights are read once per call, not once per step (layers.read_once,
        # as in masked.py).
        with read_once(*step_variables(self, head)):
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
                    tracking = self._track(active, buffers, stacks, states)  # h_t <float>[K, D]
                if head:
                    # The head reads the state this step's tracker update just
                    # wrote: one small batched matmul for the K active sentences.
                    logits = self.tracker.transition_logits(tracking)  # [K, 2] = (t_S, t_R)
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
        return SentenceParses(encodings, tf.constant(followed), *record.outputs(encodings, T))

    def _start(self, leaves: tf.Tensor, transitions):
        """The state before step 0: (transitions as a NumPy array, buffers,
        stacks, tracker states, n_leaves). A sentence has as many leaves as
        its row has SHIFTs."""
        H, D = self.hidden_dim, self.tracker_dim
        dtype = leaves.dtype
        S, N = int(leaves.shape[0]), int(leaves.shape[1])
        transitions = np.asarray(transitions)
        n_leaves = (transitions == SHIFT).sum(axis=1).tolist()  # one SHIFT per word
        # The real leaves, one item <float>[2H] per word (padding slots left
        # out): one gather and one unstack, not S * N slices.
        rows = [s * N + j for s, n in enumerate(n_leaves) for j in range(n)]
        words = tf.unstack(tf.gather(tf.reshape(leaves, [S * N, 2 * H]), rows), num=len(rows))
        starts = np.cumsum([0] + n_leaves).tolist()

        # A zero item sits at the bottom of every buffer (once) and stack
        # (twice), so buf[-1], stack[-1] and stack[-2] always exist and read
        # as zeros where docs/spec.md §3 says an item is absent. A valid
        # sequence never pops one.
        null = tf.zeros([2 * H], dtype)
        zero_state = tf.zeros([D], dtype)
        # Buffers are reversed, so buf.pop() takes the first word. A buffer
        # holds one leaf per SHIFT, so a SHIFT always finds one.
        buffers = [[null] + words[starts[s]:starts[s + 1]][::-1] for s in range(S)]
        stacks = [[null, null] for _ in range(S)]
        states = [(zero_state, zero_state)] * S  # (h_t, c_t) per sentence
        return transitions, buffers, stacks, states, n_leaves

    def _track(self, active: list[int], buffers: list, stacks: list, states: list):
        """The tracker on the sentences that act, batched: their new (h_t,
        c_t) written into ``states``, each into its sentence's slot; returns
        their h_t <float>[K, D], what Reduce and the head read."""
        H = self.hidden_dim
        # PAD changes nothing, the tracker included: the tracker runs only on
        # the sentences that act at this step, so a padded one keeps its
        # state exactly. Their rows stacked, one matmul, each its row back.
        front = tf.stack([buffers[s][-1] for s in active])  # [K, 2H]
        top = tf.stack([stacks[s][-1] for s in active])
        below = tf.stack([stacks[s][-2] for s in active])
        state = (tf.stack([states[s][0] for s in active]), tf.stack([states[s][1] for s in active]))
        tracking = self.tracker.step(front[:, :H], top[:, :H], below[:, :H], state)  # [K, D] each
        for s, h, c in zip(active, tf.unstack(tracking[0]), tf.unstack(tracking[1])):
            states[s] = (h, c)
        return tracking[0]

    def _shift_or_reduce(self, t: int, ops: list[int], active: list[int], buffers: list, stacks: list,
                         tracking) -> None:
        """Step t's op ``ops[s]`` for every active sentence s, on its own lists."""
        # The per-sentence branch: SHIFT moves a list item, REDUCE queues the
        # two top items for one batched Reduce call.
        lefts, rights, reducing, reducing_rows = [], [], [], []
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
                reducing_rows.append(k)
            else:
                raise ValueError(f"sentence {s}, step {t}: unknown transition code {ops[s]}")
        if reducing:
            # The cells take stacked rows: the h_t rows of the reducing sentences among the K the tracker returned.
            track = tf.gather(tracking, reducing_rows) if tracking is not None else None  # the h_t just written
            h, c = self.reduce.compose(tf.split(tf.stack(lefts), 2, axis=1), tf.split(tf.stack(rights), 2, axis=1),
                                       track)  # [K', H] each
            for s, item in zip(reducing, tf.unstack(tf.concat([h, c], axis=1))):  # items [2H]
                stacks[s].append(item)


def _roots(stacks: list) -> tf.Tensor:
    """The encodings <float>[S, H]: h of the one item each valid sequence leaves on its stack."""
    for s, stack in enumerate(stacks):
        if len(stack) != 3:
            raise ValueError(f"sentence {s}: transitions leave {len(stack) - 2} items on the stack, expected 1")
    return tf.split(tf.stack([stack[-1] for stack in stacks]), 2, axis=1)[0]


class _HeadRecord(parsing.HeadRecord):
    """shared.parsing.HeadRecord on TensorFlow tensors: the rule of head.py on
    the device, its verdict read back as a NumPy array, the outputs built on
    the tape."""

    def verdict(self, logits: tf.Tensor, uniform: np.ndarray | None, can_shift: list[bool],
                can_reduce: list[bool]) -> tuple:
        """head.decide on the step's K rows, on the device."""
        if uniform is not None:
            uniform = tf.constant(uniform)
        return decide(logits, uniform, tf.constant(can_shift), tf.constant(can_reduce), self.mode)

    def to_host(self, verdict: tf.Tensor) -> np.ndarray:
        """The read of the step's verdict <bool>[K]: Python waits for the device here."""
        return verdict.numpy()

    def outputs(self, encodings: tf.Tensor, T: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """transition_logits <float>[S, T, 2] (zeros at PAD), logprob and
        entropy <float>[S] (sums over the choices, zeros unless sampled), all
        differentiable."""
        S, dtype = int(encodings.shape[0]), encodings.dtype
        if self.logits:
            all_logits = tf.concat(self.logits, axis=0)  # [R, 2], in the order the steps ran
            where = np.stack([self.rows, self.columns], axis=1)  # [R, 2]: (sentence, step)
            transition_logits = tf.scatter_nd(where, all_logits, [S, T, 2])  # zeros at PAD, differentiable
        else:
            transition_logits = tf.zeros([S, T, 2], dtype)
        logprob = entropy = tf.zeros([S], dtype)
        if self.scored:
            # Summed in float64, as the reference sums them, and cast back to
            # the model's dtype: float32 sums of a long sentence's terms drift.
            sums = tf.math.unsorted_segment_sum(tf.stack([tf.concat(self.logprob, 0), tf.concat(self.entropy, 0)],
                                                         axis=1), self.scored, S)  # <float64>[S, 2]
            logprob, entropy = tf.unstack(tf.cast(sums, dtype), axis=1)
        return transition_logits, logprob, entropy
