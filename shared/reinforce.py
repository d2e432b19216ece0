"""REINFORCE (docs/spec.md §7), the framework-free parts: NumPy only.

Every implementation computes the loss

    loss = mean_i CE_i - reinforce_weight * mean_i (r_i - b)(logprob_p,i + logprob_h,i)
                       - entropy_weight * mean_i (entropy_p,i + entropy_h,i)

in its own style (impl_*/reinforce.py); what they share is written once here:

* the checks of its inputs (the two weights, the head, the uniforms, the
  baseline) live with the other contract checks in shared/contract.py, which
  the Runner base class calls before every REINFORCE call;
* :func:`step_record`: the dict ``reinforce_step`` returns, from the numbers
  the step computed before its update (rewards, log-probabilities,
  entropies, the transitions followed), so the training log reads the same
  keys whatever the framework;
* :func:`parse_shape_stats`: what the followed trees look like;
* :func:`update_baseline`: the moving average the training loop keeps.
"""

from __future__ import annotations

import numpy as np

from .contract import require_head  # noqa: F401 (the training loop's check, where it asks for REINFORCE)
from .parse_metrics import strip_pad
from .transitions import REDUCE, SHIFT, plain_transitions

BASELINE_DECAY = 0.9  # b <- 0.9 b + 0.1 mean r (docs/spec.md §7)


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

