"""REINFORCE (docs/spec.md §7), the framework-free parts: NumPy only.

Every implementation computes the loss

    loss = mean_i CE_i - reinforce_weight * mean_i (r_i - b)(logprob_p,i + logprob_h,i)
                       - entropy_weight * mean_i (entropy_p,i + entropy_h,i)

in its own style (impl_*/reinforce.py); what they share is written once here:

* :func:`check_weights`: the two weights, checked the same way by every runner;
* :func:`check_uniforms`: the uniforms of a batch, checked on the host;
* :func:`step_record`: the dict ``reinforce_step`` returns, from the numbers
  the step computed before its update (rewards, log-probabilities,
  entropies, the transitions followed), so the training log reads the same
  keys whatever the framework;
* :func:`parse_shape_stats`: what the followed trees look like;
* :func:`update_baseline`: the moving average the training loop keeps.
"""

from __future__ import annotations

import math

import numpy as np

from .params import ModelConfig
from .parsing import strip_pad
from .transitions import REDUCE, SHIFT, plain_transitions

HEAD_KERNEL = "tracker.transition.kernel"
BASELINE_DECAY = 0.9  # b <- 0.9 b + 0.1 mean r (docs/spec.md §7)
DEFAULT_REINFORCE_WEIGHT = 1.0
DEFAULT_ENTROPY_WEIGHT = 0.0


def require_head(config: ModelConfig, what: str = "REINFORCE") -> None:
    if not config.transition_head:
        raise ValueError(f"{what} needs the transition head, but the model has no {HEAD_KERNEL!r} "
                         "(its config has transition_head false; docs/spec.md §7)")


def check_weights(config: ModelConfig, reinforce_weight: float, entropy_weight: float) -> tuple[float, float]:
    """The constructor options ``reinforce_weight`` and ``entropy_weight`` as floats.

    Both must be finite and >= 0. A weight set to anything but its default
    asks for REINFORCE, which needs the transition head: on a model without
    one that is a ValueError naming the head's kernel.
    """
    weights = {"reinforce_weight": reinforce_weight, "entropy_weight": entropy_weight}
    for name, value in weights.items():
        value = float(value)
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        weights[name] = value
    if (weights["reinforce_weight"] != DEFAULT_REINFORCE_WEIGHT
            or weights["entropy_weight"] != DEFAULT_ENTROPY_WEIGHT):
        require_head(config, f"reinforce_weight {weights['reinforce_weight']}, "
                             f"entropy_weight {weights['entropy_weight']}")
    return weights["reinforce_weight"], weights["entropy_weight"]


def check_uniforms(batch, uniforms) -> tuple[np.ndarray, np.ndarray]:
    """(premise_u, hypothesis_u) as float64 arrays of the batch's [B, T] (docs/spec.md §7)."""
    if uniforms is None:
        raise ValueError("REINFORCE samples its parses: it needs uniforms (premise_u, hypothesis_u), "
                         "see shared.parsing.uniforms_for")
    shape = np.shape(batch.premise_transitions)
    if len(uniforms) != 2 or any(np.shape(u) != shape for u in uniforms):
        raise ValueError(f"uniforms must be two arrays of the transitions' shape {shape}, got "
                         f"{[np.shape(u) for u in uniforms]}")
    return tuple(np.asarray(u, dtype=np.float64) for u in uniforms)


def check_baseline(baseline) -> float:
    baseline = float(baseline)
    if not math.isfinite(baseline):
        raise ValueError(f"the baseline must be a finite number, got {baseline}")
    return baseline


def _choice_reduces(row) -> tuple[int, int]:
    """(choice steps, REDUCEs among them) of one sentence's followed transitions:
    a step is a choice when the buffer is not empty and the stack holds two items."""
    steps = strip_pad(row)
    n = steps.count(SHIFT)
    depth = shifted = choices = reduces = 0
    for op in steps:
        if shifted < n and depth >= 2:
            choices += 1
            reduces += op == REDUCE
        if op == SHIFT:
            depth, shifted = depth + 1, shifted + 1
        else:
            depth -= 1
    return choices, reduces


def parse_shape_stats(transitions) -> dict[str, float]:
    """What the followed trees look like, over the sentences of <int>[S, T]:

    * ``choice_reduce_share``: the share of choice steps that REDUCE (0: the
      model shifts every word first, a right-branching tree; 1: it reduces
      whenever it can, a left-branching tree);
    * ``left_share``, ``right_share``: the share of sentences whose tree is
      exactly left- or right-branching (sentences of one or two words, which
      have a single tree, count for both).
    """
    rows = [strip_pad(row) for row in np.asarray(transitions)]
    choices = reduces = left = right = 0
    for row in rows:
        c, r = _choice_reduces(row)
        choices, reduces = choices + c, reduces + r
        n = row.count(SHIFT)
        left += row == tuple(plain_transitions(n, "left"))
        right += row == tuple(plain_transitions(n, "right"))
    count = max(len(rows), 1)
    return {"choice_reduce_share": reduces / choices if choices else float("nan"),
            "left_share": left / count, "right_share": right / count}


def step_record(loss: float, rewards, premise_logprob, hypothesis_logprob, premise_entropy,
                hypothesis_entropy, premise_transitions, hypothesis_transitions) -> dict:
    """The dict ``reinforce_step`` returns, all computed before the update.

    ``loss`` (the REINFORCE loss), ``reward`` (the mean of r_i = -CE_i, what
    the baseline follows), ``logprob`` and ``entropy`` (means over pairs of
    the premise's plus the hypothesis's sum, the quantities of the loss),
    :func:`parse_shape_stats` of both sides; then the arrays behind them:
    ``rewards``, ``logprobs``, ``entropies`` <float64>[B] (per pair) and the
    followed ``premise_transitions``, ``hypothesis_transitions`` <int32>[B, T].
    Scalars are Python floats; what is an array is a NumPy array.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    logprob = np.asarray(premise_logprob, np.float64) + np.asarray(hypothesis_logprob, np.float64)
    entropy = np.asarray(premise_entropy, np.float64) + np.asarray(hypothesis_entropy, np.float64)
    followed = np.concatenate([np.asarray(premise_transitions), np.asarray(hypothesis_transitions)])
    return {"loss": float(loss), "reward": float(rewards.mean()), "logprob": float(logprob.mean()),
            "entropy": float(entropy.mean()), **parse_shape_stats(followed),
            "rewards": rewards, "logprobs": logprob, "entropies": entropy,
            "premise_transitions": np.asarray(premise_transitions, dtype=np.int32),
            "hypothesis_transitions": np.asarray(hypothesis_transitions, dtype=np.int32)}


def update_baseline(baseline: float | None, mean_reward: float) -> float:
    """b starts as the first batch's mean reward (``baseline`` None), then
    b <- 0.9 b + 0.1 mean r (docs/spec.md §7)."""
    if baseline is None:
        return float(mean_reward)
    return BASELINE_DECAY * float(baseline) + (1.0 - BASELINE_DECAY) * float(mean_reward)

