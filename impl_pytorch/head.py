"""The decision rule of a decided parse (docs/spec.md §7), written once for
PyTorch's families: masked.py applies it inside its step, to every sentence
at once, and lists.py to the rows of a step where a sentence has a choice,
reading its verdict back to Python to branch on it.

Every framework writes this rule once, over its own ops, with one return
convention (impl_tensorflow/head.py, impl_jax/head.py; shared.parsing.decide
in NumPy for the reference and DyNet).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN


def decide(logits: torch.Tensor, uniform: torch.Tensor | None, can_shift: torch.Tensor, can_reduce: torch.Tensor,
           mode: str) -> tuple:
    """The decision of docs/spec.md §7, for K rows at once, on the device.

    logits <float>[K, 2] = (t_S, t_R); uniform <float64>[K] (sampled mode,
    else None); can_shift (the buffer is not empty), can_reduce (two items
    or more on the stack) <bool>[K]; ``mode`` "predicted" or "sampled".
    Returns (is_shift, is_reduce, logprob, entropy): the masks <bool>[K]
    (both false: the sentence is finished, a PAD step) and, in sampled mode,
    the step's log p(action taken) and entropy <float64>[K], zero where the
    step is no choice; None in predicted mode.
    """
    # Define-by-run code writes this as `if t_R > t_S: reduce() else: shift()`,
    # which needs the value of t in Python. On the device the verdict is one
    # more mask per sentence, and the masked step that follows is the one gold
    # mode runs (lists.py reads the mask back to take the branch).
    choice = can_shift & can_reduce  # both actions possible: the head decides
    diff = logits[:, REDUCE_COLUMN] - logits[:, SHIFT_COLUMN]  # t_R - t_S
    logprob = entropy = None
    if mode == "predicted":
        wants_reduce = diff > 0  # t_R > t_S; a tie SHIFTs
    else:
        # In float64, as the reference computes p_R, whatever the model's
        # dtype (docs/spec.md §7); log σ(x) = -softplus(-x) is stable, and
        # p_R = exp(log σ(d)) keeps a tiny p_R tiny.
        diff = diff.double()
        log_p_reduce, log_p_shift = F.logsigmoid(diff), F.logsigmoid(-diff)
        p_reduce, p_shift = log_p_reduce.exp(), log_p_shift.exp()
        wants_reduce = uniform < p_reduce  # REDUCE with probability p_R
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    if mode == "sampled":  # a step with one possible action is no choice and adds nothing
        logprob = torch.where(choice, torch.where(is_reduce, log_p_reduce, log_p_shift), 0.0)
        entropy = torch.where(choice, -(p_reduce * log_p_reduce + p_shift * log_p_shift), 0.0)
    return is_shift, is_reduce, logprob, entropy
