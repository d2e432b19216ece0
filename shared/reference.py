"""The NumPy reference SPINN: float64, one example at a time, written to be read.

This is the oracle every framework implementation is tested against
(docs/spec.md §3, §7). It favours plainness over speed: a Python list is the
stack, an integer is the buffer pointer, and every step is written out.
Gradients come from a hand-written backward pass over a record of the
forward pass (a "tape"), an independent route from any framework's autodiff;
the tests check it against central finite differences.

One step loop serves the three transition modes (docs/spec.md §7): in
``gold`` mode a sentence follows the batch's transitions; in ``predicted``
and ``sampled`` mode the transition head decides each step from the tracker
state. The tape records every decision (the logits, the action, whether it
was a choice), so each loss only has to say how much gradient reaches the
head's logits at each step: the supervised transition loss, and the
score-function and entropy terms of REINFORCE, share one backward pass.

Arrays: ``params`` is the canonical name -> array dict of shared.params;
a batch gives ``tokens <int>[B, N]`` and ``transitions <int>[B, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .params import ModelConfig
from .parsing import REDUCE_COLUMN, SHIFT_COLUMN, Parsed, check_mode, log_sigmoid
from .parsing import sigmoid as probability
from .transitions import PAD, REDUCE, SHIFT

Params = Mapping[str, np.ndarray]

HEAD_KERNEL = "tracker.transition.kernel"
HEAD_BIAS = "tracker.transition.bias"


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # exact, and never overflows


def _f64(params: Params) -> dict[str, np.ndarray]:
    return {name: np.asarray(value, dtype=np.float64) for name, value in params.items()}


def _require_head(config: ModelConfig, what: str) -> None:
    if not config.transition_head:
        raise ValueError(f"{what} needs the transition head, but the model has no {HEAD_KERNEL!r} "
                         "(its config has transition_head false; docs/spec.md §7)")


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
    decisions: list = field(default_factory=list)  # _Decision, in order
    followed: np.ndarray | None = None  # [T] the transitions followed, PAD elsewhere
    root: int = -1

    @property
    def logprob(self) -> float:
        return float(sum(d.logprob for d in self.decisions))

    @property
    def entropy(self) -> float:
        return float(sum(d.entropy for d in self.decisions))


def _choose(logits: np.ndarray, can_shift: bool, can_reduce: bool, mode: str, u: float):
    """The decision rule of docs/spec.md §7 for one step: (op, choice, logprob, entropy).

    Written out once more, plainly, rather than calling shared.parsing.decide,
    so the tests can hold the vectorised rule against this one.
    """
    if not (can_shift and can_reduce):
        return (SHIFT if can_shift else REDUCE), False, 0.0, 0.0
    t_shift, t_reduce = logits[SHIFT_COLUMN], logits[REDUCE_COLUMN]
    if mode == "predicted":
        return (REDUCE if t_reduce > t_shift else SHIFT), True, 0.0, 0.0
    # p_R = σ(d) with d = t_R - t_S, computed as exp(log σ(d)) so that a tiny
    # p_R stays tiny rather than rounding to 0; log p_R = log σ(d) and
    # log p_S = log σ(-d) are never log 0.
    diff = t_reduce - t_shift
    op = REDUCE if u < probability(diff) else SHIFT
    log_p_reduce, log_p_shift = float(log_sigmoid(diff)), float(log_sigmoid(-diff))
    logprob = log_p_reduce if op == REDUCE else log_p_shift
    entropy = -(probability(diff) * log_p_reduce + probability(-diff) * log_p_shift)
    return op, True, logprob, float(entropy)


def encode_sentence(params: Params, config: ModelConfig, tokens: np.ndarray, transitions: np.ndarray,
                    mode: str = "gold", uniforms: np.ndarray | None = None) -> tuple[np.ndarray, _Tape]:
    """Encode one sentence. Returns (h of the root item <float64>[H], tape).

    ``tokens`` may carry right padding (0); the buffer holds as many leaves as
    ``transitions`` has SHIFTs. In gold mode the sentence follows
    ``transitions``; in predicted and sampled mode only their count of SHIFTs
    (n) is used and the head decides 2n-1 steps, step t of sampled mode using
    ``uniforms[t]``. ``tape.followed`` holds the transitions followed, in a
    row as wide as ``transitions``.
    """
    check_mode(mode)
    if mode != "gold":
        _require_head(config, f"{mode} mode")
    p = params
    H, D = config.hidden_dim, config.tracker_dim
    transitions = np.asarray(transitions)
    n = int(np.sum(transitions == SHIFT))
    num_columns = len(transitions)
    if mode != "gold":
        if n < 1:
            raise ValueError(f"{mode} mode: the row has no SHIFT, so the sentence has no tokens")
        if 2 * n - 1 > num_columns:
            raise ValueError(f"{n} tokens need {2 * n - 1} steps, the row has {num_columns}")
        if mode == "sampled" and (uniforms is None or len(uniforms) < 2 * n - 1):
            raise ValueError(f"sampled mode needs {2 * n - 1} uniform numbers for this sentence, got "
                             + ("none" if uniforms is None else str(len(uniforms))))
    leaf_ids = np.asarray(tokens)[:n]
    x = p["embed.embedding"][leaf_ids]
    proj = x @ p["projection.kernel"] + p["projection.bias"]
    tape = _Tape(tokens=leaf_ids, x=x, h=list(proj[:, :H]), c=list(proj[:, H:]))
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
                op, choice, logprob, entropy = _choose(logits, buffer_pos < n, len(stack) >= 2, mode, u)
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
    p = _f64(params)
    return np.stack([encode_sentence(p, config, tok, tr)[0] for tok, tr in zip(tokens, transitions)])


def _encoder_backward(p: Params, config: ModelConfig, tape: _Tape, d_root: np.ndarray,
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


def cross_entropies(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy of each row's integer label: <float64>[B]."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean cross-entropy of integer labels."""
    return float(cross_entropies(logits, labels).mean())


def _classifier_backward(p: Params, config: ModelConfig, acts: list, premise: np.ndarray, hypothesis: np.ndarray,
                         d_logits: np.ndarray, grads: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Accumulate the MLP's gradients; return the gradients of the two encodings."""
    grads["output.kernel"] += acts[-1].T @ d_logits
    grads["output.bias"] += d_logits.sum(axis=0)
    d_act = d_logits @ p["output.kernel"].T
    for k in reversed(range(config.mlp_layers)):
        d_pre = d_act * (acts[k + 1] > 0)
        grads[f"mlp.{k}.kernel"] += acts[k].T @ d_pre
        grads[f"mlp.{k}.bias"] += d_pre.sum(axis=0)
        d_act = d_pre @ p[f"mlp.{k}.kernel"].T
    H = config.hidden_dim
    d_f0, d_f1, d_f2, d_f3 = (d_act[:, k * H:(k + 1) * H] for k in range(4))
    return d_f0 + d_f2 + d_f3 * hypothesis, d_f1 - d_f2 + d_f3 * premise


# --------------------------------------------------------------------------
# A pair batch: encodings, logits and tapes
# --------------------------------------------------------------------------

SIDES = ("premise", "hypothesis")


@dataclass
class _BatchRun:
    enc: dict  # side -> <float64>[B, H]
    tapes: dict  # side -> [_Tape] * B
    logits: np.ndarray  # [B, 3]
    acts: list  # MLP activations


def _run_batch(p: Params, config: ModelConfig, batch, mode: str = "gold", uniforms=None) -> _BatchRun:
    """Run every sentence of a pair batch in ``mode`` (``uniforms``: premise_u, hypothesis_u [B, T])."""
    check_mode(mode)
    if mode == "sampled" and uniforms is None:
        raise ValueError("sampled mode needs uniforms (premise_u, hypothesis_u): see shared.parsing.batch_uniforms")
    enc, tapes = {}, {}
    for k, side in enumerate(SIDES):
        tokens = getattr(batch, f"{side}_tokens")
        transitions = getattr(batch, f"{side}_transitions")
        side_u = uniforms[k] if mode == "sampled" else [None] * len(tokens)
        results = [encode_sentence(p, config, tok, tr, mode, u) for tok, tr, u in zip(tokens, transitions, side_u)]
        enc[side] = np.stack([h for h, _ in results])
        tapes[side] = [tape for _, tape in results]
    logits, acts = classify(p, config, enc["premise"], enc["hypothesis"])
    return _BatchRun(enc, tapes, logits, acts)


@dataclass
class Output:
    premise: np.ndarray  # <float64>[B, H]
    hypothesis: np.ndarray  # <float64>[B, H]
    logits: np.ndarray  # <float64>[B, 3]


def forward(params: Params, config: ModelConfig, batch) -> Output:
    """Encodings and logits of a pair batch along its gold transitions
    (anything with the PairBatch arrays)."""
    premise = encode(params, config, batch.premise_tokens, batch.premise_transitions)
    hypothesis = encode(params, config, batch.hypothesis_tokens, batch.hypothesis_transitions)
    logits, _ = classify(params, config, premise, hypothesis)
    return Output(premise, hypothesis, logits)


def parse(params: Params, config: ModelConfig, batch, mode: str = "predicted", uniforms=None) -> Parsed:
    """Encode a pair batch with the transitions of ``mode`` (docs/spec.md §7), eval mode.

    Args:
      params, config: a model with a transition head.
      batch: a PairBatch (or anything with its arrays). In predicted and
        sampled mode only the number of SHIFTs in each row of its
        transitions is used.
      mode: "gold", "predicted" or "sampled".
      uniforms: sampled mode: (premise_u, hypothesis_u), each <float>[B, T]
        as shared.parsing.batch_uniforms lays them out.

    Returns:
      A float64 shared.parsing.Parsed.
    """
    _require_head(config, "parse")
    run = _run_batch(_f64(params), config, batch, mode, uniforms)
    arrays = {"premise": run.enc["premise"], "hypothesis": run.enc["hypothesis"], "logits": run.logits}
    for side in SIDES:
        tapes = run.tapes[side]
        T = np.shape(getattr(batch, f"{side}_transitions"))[1]
        transition_logits = np.zeros((len(tapes), T, 2))
        for row, tape in enumerate(tapes):
            for decision in tape.decisions:
                transition_logits[row, decision.column] = decision.logits
        arrays[f"{side}_transitions"] = np.stack([tape.followed for tape in tapes]).astype(np.int32)
        arrays[f"{side}_transition_logits"] = transition_logits
        arrays[f"{side}_logprob"] = np.array([tape.logprob for tape in tapes])
        arrays[f"{side}_entropy"] = np.array([tape.entropy for tape in tapes])
    return Parsed(**arrays)


# --------------------------------------------------------------------------
# Losses and gradients
# --------------------------------------------------------------------------


def _labels(batch) -> np.ndarray:
    labels = np.asarray(batch.labels)
    if np.any(labels < 0) or np.any(labels > 2):
        raise ValueError("loss needs labels 0..2 on every row (unlabeled rows must be filtered out)")
    return labels


def _class_loss_gradient(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d mean_i CE_i / d logits: (softmax - one-hot) / B."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    d_logits = probs.copy()
    d_logits[np.arange(len(labels)), labels] -= 1.0
    return d_logits / len(labels)


def _transition_loss(tapes: dict) -> tuple[float, int]:
    """Σ over every decision of the 2-way cross-entropy of softmax(t) against
    the action followed (in gold mode, the gold action), and the step count."""
    total, count = 0.0, 0
    for side in SIDES:
        for tape in tapes[side]:
            for d in tape.decisions:
                taken, other = (SHIFT_COLUMN, REDUCE_COLUMN) if d.op == SHIFT else (REDUCE_COLUMN, SHIFT_COLUMN)
                total += float(-log_sigmoid(d.logits[taken] - d.logits[other]))
                count += 1
    return total, count


def _check_transition_weight(config: ModelConfig, transition_weight: float) -> None:
    if transition_weight < 0:
        raise ValueError(f"transition_weight must be >= 0, got {transition_weight}")
    if transition_weight > 0:
        _require_head(config, f"transition_weight {transition_weight}")


def loss(params: Params, config: ModelConfig, batch, transition_weight: float = 0.0) -> float:
    """The supervised loss of :func:`loss_and_grads`, forward only."""
    _check_transition_weight(config, transition_weight)
    run = _run_batch(_f64(params), config, batch)
    value = cross_entropy(run.logits, _labels(batch))
    if transition_weight > 0:
        total, count = _transition_loss(run.tapes)
        value += transition_weight * total / count
    return value


def loss_and_grads(params: Params, config: ModelConfig, batch,
                   transition_weight: float = 0.0) -> tuple[float, dict[str, np.ndarray]]:
    """The supervised (SPINN) loss and its gradient for every canonical parameter (float64).

    loss = mean class cross-entropy + ``transition_weight`` × the mean, over
    every non-PAD gold step of premises and hypotheses, of the 2-way
    cross-entropy of softmax(t) against the gold action. The model follows
    the gold transitions (teacher forcing) and the transition term has no
    validity mask (docs/spec.md §7). A model with a head and weight 0 gets
    zero gradients for the head.
    """
    _check_transition_weight(config, transition_weight)
    p = _f64(params)
    labels = _labels(batch)
    run = _run_batch(p, config, batch)
    value = cross_entropy(run.logits, labels)
    grads = {name: np.zeros_like(value_) for name, value_ in p.items()}

    d_head = {side: [None] * len(run.tapes[side]) for side in SIDES}
    if transition_weight > 0:
        total, count = _transition_loss(run.tapes)
        value += transition_weight * total / count
        for side in SIDES:
            for row, tape in enumerate(run.tapes[side]):
                # d CE / d t = softmax(t) - one-hot(gold), for every step alike.
                d = np.zeros((len(tape.decisions), 2))
                for k, decision in enumerate(tape.decisions):
                    diff = decision.logits[REDUCE_COLUMN] - decision.logits[SHIFT_COLUMN]
                    d[k] = (probability(-diff), probability(diff))  # softmax(t) = (p_S, p_R)
                    d[k, SHIFT_COLUMN if decision.op == SHIFT else REDUCE_COLUMN] -= 1.0
                d_head[side][row] = transition_weight / count * d

    d_logits = _class_loss_gradient(run.logits, labels)
    d_enc = _classifier_backward(p, config, run.acts, run.enc["premise"], run.enc["hypothesis"], d_logits, grads)
    for side, d_side in zip(SIDES, d_enc):
        for tape, d_root, d_t in zip(run.tapes[side], d_side, d_head[side]):
            _encoder_backward(p, config, tape, d_root, grads, d_t)
    return value, grads


def _reinforce_value(run: _BatchRun, labels: np.ndarray, baseline: float, reinforce_weight: float,
                     entropy_weight: float, rewards: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    ce = cross_entropies(run.logits, labels)
    if rewards is None:
        rewards = -ce
    logprob = np.array([a.logprob + b.logprob for a, b in zip(run.tapes["premise"], run.tapes["hypothesis"])])
    entropy = np.array([a.entropy + b.entropy for a, b in zip(run.tapes["premise"], run.tapes["hypothesis"])])
    value = (ce.mean() - reinforce_weight * np.mean((rewards - baseline) * logprob)
             - entropy_weight * entropy.mean())
    return float(value), rewards


def reinforce_loss(params: Params, config: ModelConfig, batch, uniforms, baseline: float,
                   reinforce_weight: float = 1.0, entropy_weight: float = 0.0,
                   rewards: np.ndarray | None = None) -> float:
    """The REINFORCE loss of :func:`reinforce_loss_and_grads`, forward only.

    The gradient treats the rewards as constants, so it is not the derivative
    of this value as the weights move; it is the derivative of the value with
    the rewards held fixed. ``rewards`` <float>[B] holds them fixed (to check
    the gradient by finite differences); None computes r_i = -CE_i.
    """
    _require_head(config, "REINFORCE")
    run = _run_batch(_f64(params), config, batch, "sampled", uniforms)
    return _reinforce_value(run, _labels(batch), baseline, reinforce_weight, entropy_weight, rewards)[0]


def reinforce_loss_and_grads(params: Params, config: ModelConfig, batch, uniforms, baseline: float,
                             reinforce_weight: float = 1.0, entropy_weight: float = 0.0
                             ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """REINFORCE (docs/spec.md §7): the model follows sampled transitions.

    With r_i = -CE_i (pair i's class cross-entropy, a constant for the
    gradient) and the scalar ``baseline`` b:

        loss = mean_i CE_i - reinforce_weight * mean_i (r_i - b)(logprob_p,i + logprob_h,i)
                           - entropy_weight * mean_i (entropy_p,i + entropy_h,i)

    Returns (loss, gradients of every canonical parameter, rewards <float64>[B]);
    the training loop moves its baseline towards the rewards' mean.
    """
    _require_head(config, "REINFORCE")
    p = _f64(params)
    labels = _labels(batch)
    run = _run_batch(p, config, batch, "sampled", uniforms)
    value, rewards = _reinforce_value(run, labels, baseline, reinforce_weight, entropy_weight)
    grads = {name: np.zeros_like(value_) for name, value_ in p.items()}
    B = len(labels)

    d_logits = _class_loss_gradient(run.logits, labels)
    d_enc = _classifier_backward(p, config, run.acts, run.enc["premise"], run.enc["hypothesis"], d_logits, grads)
    for side, d_side in zip(SIDES, d_enc):
        for i, (tape, d_root) in enumerate(zip(run.tapes[side], d_side)):
            # Only choice steps carry logprob and entropy. With d = t_R - t_S and
            # p_R = σ(d): d log p(action) / dd = [action is REDUCE] - p_R and
            # d entropy / dd = -d p_R (1 - p_R); t_R gets +, t_S gets - of it.
            d_head = np.zeros((len(tape.decisions), 2))
            for k, decision in enumerate(tape.decisions):
                if not decision.choice:
                    continue
                diff = decision.logits[REDUCE_COLUMN] - decision.logits[SHIFT_COLUMN]
                d_logprob = (1.0 if decision.op == REDUCE else 0.0) - probability(diff)
                d_entropy = -diff * probability(diff) * probability(-diff)
                d_diff = (-reinforce_weight * (rewards[i] - baseline) * d_logprob
                          - entropy_weight * d_entropy) / B
                d_head[k, REDUCE_COLUMN] = d_diff
                d_head[k, SHIFT_COLUMN] = -d_diff
            _encoder_backward(p, config, tape, d_root, grads, d_head)
    return value, grads, rewards


def sgd_step(params: Params, grads: Mapping[str, np.ndarray], lr: float) -> dict[str, np.ndarray]:
    """Plain SGD: p - lr * grad, for every parameter."""
    return {name: np.asarray(value, dtype=np.float64) - lr * grads[name] for name, value in params.items()}
