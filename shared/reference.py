"""The NumPy reference SPINN: float64, one example at a time, written to be read.

This is the oracle every framework implementation is tested against (SPEC §3).
It favours plainness over speed: a Python list is the stack, an integer is the
buffer pointer, and every step is written out. Gradients come from a
hand-written backward pass over a record of the forward pass (a "tape"), an
independent route from any framework's autodiff; the tests check it against
central finite differences.

Arrays: ``params`` is the canonical name -> array dict of shared.params;
a batch gives ``tokens <int>[B, N]`` and ``transitions <int>[B, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .params import ModelConfig
from .transitions import PAD, REDUCE, SHIFT

Params = Mapping[str, np.ndarray]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # exact, and never overflows


def _f64(params: Params) -> dict[str, np.ndarray]:
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
class _Tape:
    """Everything the backward pass needs from one sentence's forward pass."""

    tokens: np.ndarray  # [n] token ids of the leaves
    x: np.ndarray  # [n, E] embeddings
    h: list = field(default_factory=list)  # per item: [H]; leaves first, then reduce outputs
    c: list = field(default_factory=list)
    tracker: list = field(default_factory=list)  # _TrackerStep, in order
    # In order of execution: ("tracker", k) and ("reduce", r) entries.
    order: list = field(default_factory=list)
    reduces: list = field(default_factory=list)
    root: int = -1


def encode_sentence(params: Params, config: ModelConfig, tokens: np.ndarray,
                    transitions: np.ndarray) -> tuple[np.ndarray, _Tape]:
    """Encode one sentence. Returns (h of the root item <float64>[H], tape).

    ``tokens`` may carry right padding (0); the buffer holds as many leaves as
    there are SHIFTs.
    """
    p = params
    H, D = config.hidden_dim, config.tracker_dim
    transitions = np.asarray(transitions)
    n = int(np.sum(transitions == SHIFT))
    leaf_ids = np.asarray(tokens)[:n]
    x = p["embed.embedding"][leaf_ids]
    proj = x @ p["projection.kernel"] + p["projection.bias"]
    tape = _Tape(tokens=leaf_ids, x=x, h=list(proj[:, :H]), c=list(proj[:, H:]))

    buffer_pos = 0  # the buffer front is item `buffer_pos` (items 0..n-1 are the leaves)
    stack: list[int] = []  # item indices, top at the end
    h_t = np.zeros(D)
    c_t = np.zeros(D)
    zeros = np.zeros(H)
    for op in transitions:
        op = int(op)
        if op == PAD:
            continue  # PAD changes nothing, the tracker included
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
    """Encode a batch, one sentence at a time: <float64>[B, H]."""
    p = _f64(params)
    return np.stack([encode_sentence(p, config, tok, tr)[0] for tok, tr in zip(tokens, transitions)])


def _encoder_backward(p: Params, config: ModelConfig, tape: _Tape, d_root: np.ndarray,
                      grads: dict[str, np.ndarray]) -> None:
    """Accumulate into ``grads`` the gradient of <d_root, h_root> w.r.t. the weights."""
    H, D = config.hidden_dim, config.tracker_dim
    dh = [np.zeros(H) for _ in tape.h]
    dc = [np.zeros(H) for _ in tape.c]
    dh[tape.root] = dh[tape.root] + d_root
    # Gradients w.r.t. the tracker state after each tracker step.
    dh_t = [np.zeros(D) for _ in tape.tracker]
    dc_t = [np.zeros(D) for _ in tape.tracker]

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


# --------------------------------------------------------------------------
# Classifier
# --------------------------------------------------------------------------


def features(premise: np.ndarray, hypothesis: np.ndarray) -> np.ndarray:
    """[p, q, p - q, p * q]: <float>[B, 4H]."""
    return np.concatenate([premise, hypothesis, premise - hypothesis, premise * hypothesis], axis=-1)


def classify(params: Params, config: ModelConfig, premise: np.ndarray, hypothesis: np.ndarray):
    """Logits <float64>[B, 3] and the MLP activations (for the backward pass)."""
    p = _f64(params)
    activations = [features(premise, hypothesis)]
    for k in range(config.mlp_layers):
        activations.append(np.maximum(activations[-1] @ p[f"mlp.{k}.kernel"] + p[f"mlp.{k}.bias"], 0.0))
    logits = activations[-1] @ p["output.kernel"] + p["output.bias"]
    return logits, activations


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean cross-entropy of integer labels."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


@dataclass
class Output:
    premise: np.ndarray  # <float64>[B, H]
    hypothesis: np.ndarray  # <float64>[B, H]
    logits: np.ndarray  # <float64>[B, 3]


def forward(params: Params, config: ModelConfig, batch) -> Output:
    """Encodings and logits of a pair batch (anything with the PairBatch arrays)."""
    premise = encode(params, config, batch.premise_tokens, batch.premise_transitions)
    hypothesis = encode(params, config, batch.hypothesis_tokens, batch.hypothesis_transitions)
    logits, _ = classify(params, config, premise, hypothesis)
    return Output(premise, hypothesis, logits)


def loss(params: Params, config: ModelConfig, batch) -> float:
    return cross_entropy(forward(params, config, batch).logits, np.asarray(batch.labels))


def loss_and_grads(params: Params, config: ModelConfig, batch) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy and its gradient for every canonical parameter (float64)."""
    p = _f64(params)
    labels = np.asarray(batch.labels)
    if np.any(labels < 0) or np.any(labels > 2):
        raise ValueError("loss needs labels 0..2 on every row (unlabeled rows must be filtered out)")
    B = len(labels)
    tapes = {}
    enc = {}
    for side in ("premise", "hypothesis"):
        tokens = getattr(batch, f"{side}_tokens")
        transitions = getattr(batch, f"{side}_transitions")
        results = [encode_sentence(p, config, tok, tr) for tok, tr in zip(tokens, transitions)]
        enc[side] = np.stack([h for h, _ in results])
        tapes[side] = [tape for _, tape in results]
    logits, acts = classify(p, config, enc["premise"], enc["hypothesis"])
    value = cross_entropy(logits, labels)

    grads = {name: np.zeros_like(value_) for name, value_ in p.items()}
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    d_logits = probs.copy()
    d_logits[np.arange(B), labels] -= 1.0
    d_logits /= B
    grads["output.kernel"] += acts[-1].T @ d_logits
    grads["output.bias"] += d_logits.sum(axis=0)
    d_act = d_logits @ p["output.kernel"].T
    for k in reversed(range(config.mlp_layers)):
        d_pre = d_act * (acts[k + 1] > 0)
        grads[f"mlp.{k}.kernel"] += acts[k].T @ d_pre
        grads[f"mlp.{k}.bias"] += d_pre.sum(axis=0)
        d_act = d_pre @ p[f"mlp.{k}.kernel"].T
    H = config.hidden_dim
    prem, hyp = enc["premise"], enc["hypothesis"]
    d_f0, d_f1, d_f2, d_f3 = (d_act[:, k * H:(k + 1) * H] for k in range(4))
    d_prem = d_f0 + d_f2 + d_f3 * hyp
    d_hyp = d_f1 - d_f2 + d_f3 * prem
    for side, d_enc in (("premise", d_prem), ("hypothesis", d_hyp)):
        for tape, d_root in zip(tapes[side], d_enc):
            _encoder_backward(p, config, tape, d_root, grads)
    return value, grads


def sgd_step(params: Params, grads: Mapping[str, np.ndarray], lr: float) -> dict[str, np.ndarray]:
    """Plain SGD: p - lr * grad, for every parameter."""
    return {name: np.asarray(value, dtype=np.float64) - lr * grads[name] for name, value in params.items()}
