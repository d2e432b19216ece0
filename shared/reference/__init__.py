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

The package is the reference whole: the encoder, with its tape and its
backward pass, is encoder.py; this file adds the classifier, a pair batch,
the losses and the gradients; runner.py puts it behind the runner interface
(``--framework reference``).

Arrays: ``params`` is the canonical name -> array dict of shared.params;
a batch gives ``tokens <int>[B, N]`` and ``transitions <int>[B, T]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contract import check_batch, check_labels, check_transition_weight, check_uniforms, require_head
from ..params import ModelConfig
from ..parsing import REDUCE_COLUMN, SHIFT_COLUMN, Parsed, check_mode, log_sigmoid
from ..parsing import sigmoid as probability
from ..transitions import REDUCE, SHIFT
from .encoder import Params, as_f64, encode, encode_sentence, encoder_backward

__all__ = ["Output", "encode", "encode_sentence", "features", "classify",
           "cross_entropies", "cross_entropy", "forward", "parse", "loss", "loss_and_grads", "reinforce_loss",
           "reinforce_loss_and_grads"]


# --------------------------------------------------------------------------
# Classifier
# --------------------------------------------------------------------------


def features(premise: np.ndarray, hypothesis: np.ndarray) -> np.ndarray:
    """[p, q, p - q, p * q]: <float>[B, 4H]."""
    return np.concatenate([premise, hypothesis, premise - hypothesis, premise * hypothesis], axis=-1)


def classify(params: Params, config: ModelConfig, premise: np.ndarray, hypothesis: np.ndarray):
    """Logits <float64>[B, 3] and the MLP activations (for the backward pass)."""
    p = as_f64(params)
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
    tapes: dict  # side -> [Tape] * B
    logits: np.ndarray  # [B, 3]
    acts: list  # MLP activations


def _run_batch(p: Params, config: ModelConfig, batch, mode: str = "gold", uniforms=None) -> _BatchRun:
    """Run every sentence of a pair batch in ``mode`` (``uniforms``: premise_u, hypothesis_u [B, T])."""
    check_mode(mode)
    if mode == "sampled":
        uniforms = check_uniforms(batch, uniforms)
    check_batch(batch, config, mode)
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
    require_head(config, "parse")
    run = _run_batch(as_f64(params), config, batch, mode, uniforms)
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


def loss(params: Params, config: ModelConfig, batch, transition_weight: float = 0.0) -> float:
    """The supervised loss of :func:`loss_and_grads`, forward only."""
    check_transition_weight(config, transition_weight)
    run = _run_batch(as_f64(params), config, batch)
    value = cross_entropy(run.logits, check_labels(batch))
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
    check_transition_weight(config, transition_weight)
    p = as_f64(params)
    labels = check_labels(batch)
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
            encoder_backward(p, config, tape, d_root, grads, d_t)
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
    require_head(config, "REINFORCE")
    run = _run_batch(as_f64(params), config, batch, "sampled", uniforms)
    return _reinforce_value(run, check_labels(batch), baseline, reinforce_weight, entropy_weight, rewards)[0]


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
    require_head(config, "REINFORCE")
    p = as_f64(params)
    labels = check_labels(batch)
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
            encoder_backward(p, config, tape, d_root, grads, d_head)
    return value, grads, rewards
