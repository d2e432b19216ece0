"""The NumPy reference's sentence encoder: one sentence at a time, float64,
with a tape for the hand-written backward pass (docs/spec.md §3, §7).

The package's __init__.py is the oracle the tests use (classifier, losses,
gradients); this file is its encoder. A Python list is the stack, an integer is the
buffer pointer, and every step is written out. The forward pass records
each step on a :class:`Tape` (the tracker and Reduce inputs and gates, and
every decision of the transition head: its logits, the action, whether it
was a choice); :func:`encoder_backward` walks that record back, so every
loss of the package only says how much gradient reaches the root encoding
and the head's logits at each step.

One step loop serves the three transition modes (docs/spec.md §7): in
``gold`` mode a sentence follows its transitions; in ``predicted`` and
``sampled`` mode the head decides each step from the tracker state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..contract import HEAD_KERNEL
from ..params import ModelConfig
from ..parsing import decide
from ..transitions import PAD, REDUCE, SHIFT

Params = Mapping[str, np.ndarray]

HEAD_BIAS = "tracker.transition.bias"


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # exact, and never overflows


def as_f64(params: Params) -> dict[str, np.ndarray]:
    return {name: np.asarray(value, dtype=np.float64) for name, value in params.items()}


# --------------------------------------------------------------------------
# Encoder: forward with a tape
# --------------------------------------------------------------------------


@dataclass
class _TrackerStep:
    inputs: np.ndarray  # [3H]: h of buffer front, stack top, item below
    sources: tuple  # item index (or None) for each of the three
    h_prev: np.ndarray  # [D]
    c_prev: np.ndarray  # [D]
    gates: tuple  # sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    c: np.ndarray  # [D]
    h: np.ndarray  # [D]


@dataclass
class _ReduceStep:
    left: int  # item indices
    right: int
    out: int
    tracker: int | None  # index into tape.tracker of the state used (None: D = 0 or no step yet)
    gates: tuple  # tanh(a), sigmoid(i), sigmoid(f1), sigmoid(f2), sigmoid(o)
    c: np.ndarray  # [H]


@dataclass
class _Decision:
    """The transition head at one non-PAD step (only when the model has a head)."""

    column: int  # the step's index in the sentence's row of transitions
    tracker: int  # index into tape.tracker of the state the head read
    logits: np.ndarray  # [2]: t = (t_S, t_R)
    op: int  # the transition followed: SHIFT or REDUCE
    choice: bool  # both actions were valid and the head chose (predicted, sampled)
    logprob: float  # sampled mode, choice steps: log p(op); else 0
    entropy: float  # sampled mode, choice steps: entropy of the step's Bernoulli; else 0


@dataclass
class Tape:
    """Everything the backward pass needs from one sentence's forward pass."""

    tokens: np.ndarray  # [n] token ids of the leaves
    x: np.ndarray  # [n, E] embeddings
    h: list = field(default_factory=list)  # per item: [H]; leaves first, then reduce outputs
    c: list = field(default_factory=list)
    tracker: list = field(default_factory=list)  # _TrackerStep, in order
    # In order of execution: ("tracker", k) and ("reduce", r) entries.
    order: list = field(default_factory=list)
    reduces: list = field(default_factory=list)
    decisions: list = field(default_factory=list)  # _Decision, in order
    followed: np.ndarray | None = None  # [T] the transitions followed, PAD elsewhere
    root: int = -1

    @property
    def logprob(self) -> float:
        return float(sum(d.logprob for d in self.decisions))

    @property
    def entropy(self) -> float:
        return float(sum(d.entropy for d in self.decisions))


def choose(logits: np.ndarray, can_shift: bool, can_reduce: bool, mode: str, u: float):
    """The decision rule of docs/spec.md §7 for one step: (op, choice, logprob, entropy).

    shared.parsing.decide (the rule in NumPy, float64, with the return
    convention of every framework's) on one step's scalars.
    """
    _, is_reduce, logprob, entropy = decide(logits, u, can_shift, can_reduce, mode)
    choice = can_shift and can_reduce
    if mode == "predicted":
        return (REDUCE if is_reduce else SHIFT), choice, 0.0, 0.0
    return (REDUCE if is_reduce else SHIFT), choice, float(logprob), float(entropy)


def encode_sentence(params: Params, config: ModelConfig, tokens: np.ndarray, transitions: np.ndarray,
                    mode: str = "gold", uniforms: np.ndarray | None = None) -> tuple[np.ndarray, Tape]:
    """Encode one sentence. Returns (h of the root item <float64>[H], tape).

    ``tokens`` may carry right padding (0); the buffer holds as many leaves as
    ``transitions`` has SHIFTs. In gold mode the sentence follows
    ``transitions``; in predicted and sampled mode only their count of SHIFTs
    (n) is used and the head decides 2n-1 steps, step t of sampled mode using
    ``uniforms[t]``. ``tape.followed`` holds the transitions followed, in a
    row as wide as ``transitions``. The caller has checked its batch
    (shared.contract: the mode, the head, the uniforms, 1 <= n and 2n-1 <= T).
    """
    p = params
    H, D = config.hidden_dim, config.tracker_dim
    transitions = np.asarray(transitions)
    n = int(np.sum(transitions == SHIFT))
    num_columns = len(transitions)
    leaf_ids = np.asarray(tokens)[:n]
    x = p["embed.embedding"][leaf_ids]
    proj = x @ p["projection.kernel"] + p["projection.bias"]
    tape = Tape(tokens=leaf_ids, x=x, h=list(proj[:, :H]), c=list(proj[:, H:]))
    tape.followed = np.full(num_columns, PAD, dtype=np.int32)

    buffer_pos = 0  # the buffer front is item `buffer_pos` (items 0..n-1 are the leaves)
    stack: list[int] = []  # item indices, top at the end
    h_t = np.zeros(D)
    c_t = np.zeros(D)
    zeros = np.zeros(H)
    for column in range(num_columns):
        if mode == "gold":
            op = int(transitions[column])
            if op == PAD:
                continue  # PAD changes nothing, the tracker included
        elif column >= 2 * n - 1:
            break  # the sentence is finished: the rest of the row is PAD
        if D > 0:
            sources = (buffer_pos if buffer_pos < n else None,
                       stack[-1] if len(stack) >= 1 else None,
                       stack[-2] if len(stack) >= 2 else None)
            inputs = np.concatenate([tape.h[s] if s is not None else zeros for s in sources])
            z = inputs @ p["tracker.kernel_input"] + h_t @ p["tracker.kernel_hidden"] + p["tracker.bias"]
            zi, zf, zg, zo = np.split(z, 4)
            gates = (sigmoid(zi), sigmoid(zf), np.tanh(zg), sigmoid(zo))
            i, f, g, o = gates
            c_new = f * c_t + i * g
            h_new = o * np.tanh(c_new)
            tape.tracker.append(_TrackerStep(inputs, sources, h_t, c_t, gates, c_new, h_new))
            tape.order.append(("tracker", len(tape.tracker) - 1))
            h_t, c_t = h_new, c_new
        if config.transition_head:
            # The head reads the state this step's tracker update just wrote.
            logits = h_t @ p[HEAD_KERNEL] + p[HEAD_BIAS]
            choice, logprob, entropy = False, 0.0, 0.0
            if mode != "gold":
                u = float(uniforms[column]) if mode == "sampled" else 0.0
                op, choice, logprob, entropy = choose(logits, buffer_pos < n, len(stack) >= 2, mode, u)
            tape.decisions.append(_Decision(column, len(tape.tracker) - 1, logits, op, choice, logprob, entropy))
        tape.followed[column] = op
        if op == SHIFT:
            if buffer_pos >= n:
                raise ValueError("SHIFT from an empty buffer")
            stack.append(buffer_pos)
            buffer_pos += 1
        elif op == REDUCE:
            if len(stack) < 2:
                raise ValueError("REDUCE with fewer than two items on the stack")
            right = stack.pop()
            left = stack.pop()
            z = (tape.h[left] @ p["reduce.left.kernel"] + p["reduce.left.bias"]
                 + tape.h[right] @ p["reduce.right.kernel"])
            if D > 0:
                z = z + h_t @ p["reduce.track.kernel"]
            za, zi, zf1, zf2, zo = np.split(z, 5)
            gates = (np.tanh(za), sigmoid(zi), sigmoid(zf1), sigmoid(zf2), sigmoid(zo))
            a, i, f1, f2, o = gates
            c = a * i + f1 * tape.c[left] + f2 * tape.c[right]
            h = o * np.tanh(c)
            tape.h.append(h)
            tape.c.append(c)
            out = len(tape.h) - 1
            tracker_index = len(tape.tracker) - 1 if D > 0 else None
            tape.reduces.append(_ReduceStep(left, right, out, tracker_index, gates, c))
            tape.order.append(("reduce", len(tape.reduces) - 1))
            stack.append(out)
        else:
            raise ValueError(f"unknown transition code {op}")
    if len(stack) != 1:
        raise ValueError(f"transitions leave {len(stack)} items on the stack, expected 1")
    tape.root = stack[0]
    return tape.h[tape.root], tape


def encode(params: Params, config: ModelConfig, tokens: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    """Encode a batch along its gold transitions, one sentence at a time: <float64>[B, H]."""
    p = as_f64(params)
    return np.stack([encode_sentence(p, config, tok, tr)[0] for tok, tr in zip(tokens, transitions)])


def encoder_backward(p: Params, config: ModelConfig, tape: Tape, d_root: np.ndarray,
                      grads: dict[str, np.ndarray], d_head: np.ndarray | None = None) -> None:
    """Accumulate into ``grads`` the gradient of <d_root, h_root> + Σ_k <d_head[k], t_k>
    w.r.t. the weights, where t_k are the head's logits of ``tape.decisions[k]``.

    The decisions themselves are constants (a discrete choice has no
    gradient); what flows back is the gradient of each step's logits, into
    the head and through the tracker state it read.
    """
    H, D = config.hidden_dim, config.tracker_dim
    dh = [np.zeros(H) for _ in tape.h]
    dc = [np.zeros(H) for _ in tape.c]
    dh[tape.root] = dh[tape.root] + d_root
    # Gradients w.r.t. the tracker state after each tracker step.
    dh_t = [np.zeros(D) for _ in tape.tracker]
    dc_t = [np.zeros(D) for _ in tape.tracker]

    # The head: t = h_t @ kernel + bias at each decision. Its gradient enters
    # the tracker state it read; the walk below carries it further back.
    if d_head is not None:
        for decision, d_t in zip(tape.decisions, d_head):
            h = tape.tracker[decision.tracker].h
            grads[HEAD_KERNEL] += np.outer(h, d_t)
            grads[HEAD_BIAS] += d_t
            dh_t[decision.tracker] += p[HEAD_KERNEL] @ d_t

    # Walk the steps backwards. Within one transition the tracker ran before
    # the reduce, so the reduce's entry comes later in `order` and is undone first.
    for kind, index in reversed(tape.order):
        if kind == "reduce":
            step = tape.reduces[index]
            a, i, f1, f2, o = step.gates
            d_h, d_c = dh[step.out], dc[step.out]
            tanh_c = np.tanh(step.c)
            d_o = d_h * tanh_c * o * (1 - o)
            d_c = d_c + d_h * o * (1 - tanh_c**2)
            d_a = d_c * i * (1 - a**2)
            d_i = d_c * a * i * (1 - i)
            d_f1 = d_c * tape.c[step.left] * f1 * (1 - f1)
            d_f2 = d_c * tape.c[step.right] * f2 * (1 - f2)
            dc[step.left] += d_c * f1
            dc[step.right] += d_c * f2
            dz = np.concatenate([d_a, d_i, d_f1, d_f2, d_o])
            grads["reduce.left.kernel"] += np.outer(tape.h[step.left], dz)
            grads["reduce.left.bias"] += dz
            grads["reduce.right.kernel"] += np.outer(tape.h[step.right], dz)
            dh[step.left] += p["reduce.left.kernel"] @ dz
            dh[step.right] += p["reduce.right.kernel"] @ dz
            if step.tracker is not None:
                grads["reduce.track.kernel"] += np.outer(tape.tracker[step.tracker].h, dz)
                dh_t[step.tracker] += p["reduce.track.kernel"] @ dz
        else:
            step = tape.tracker[index]
            i, f, g, o = step.gates
            d_h, d_c = dh_t[index], dc_t[index]
            tanh_c = np.tanh(step.c)
            d_o = d_h * tanh_c * o * (1 - o)
            d_c = d_c + d_h * o * (1 - tanh_c**2)
            d_i = d_c * g * i * (1 - i)
            d_f = d_c * step.c_prev * f * (1 - f)
            d_g = d_c * i * (1 - g**2)
            dz = np.concatenate([d_i, d_f, d_g, d_o])
            grads["tracker.kernel_input"] += np.outer(step.inputs, dz)
            grads["tracker.kernel_hidden"] += np.outer(step.h_prev, dz)
            grads["tracker.bias"] += dz
            d_inputs = p["tracker.kernel_input"] @ dz
            for slot, source in enumerate(step.sources):
                if source is not None:
                    dh[source] += d_inputs[slot * H:(slot + 1) * H]
            if index > 0:  # the first step's previous state is the constant zero
                dh_t[index - 1] += p["tracker.kernel_hidden"] @ dz
                dc_t[index - 1] += d_c * f

    # Leaves: [h; c] = embed[token] @ projection.kernel + projection.bias
    n = len(tape.tokens)
    d_proj = np.concatenate([np.stack(dh[:n]), np.stack(dc[:n])], axis=1)  # [n, 2H]
    grads["projection.kernel"] += tape.x.T @ d_proj
    grads["projection.bias"] += d_proj.sum(axis=0)
    np.add.at(grads["embed.embedding"], tape.tokens, d_proj @ p["projection.kernel"].T)
