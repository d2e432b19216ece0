"""The decision rule of a decided parse (docs/spec.md §7), written once for
JAX's families: masked.py applies it inside its scan, to every sentence at
once, and vmap.py to one sentence, which ``jax.vmap`` maps over the batch.

Every framework writes this rule once, over its own ops, with one return
convention (impl_pytorch/head.py, impl_tensorflow/head.py;
shared.parsing.decide in NumPy for the reference and DyNet). JAX's alone
computes p_R in the model's dtype: float64 would need ``jax_enable_x64``,
a switch for the whole process (docs/spec.md §7).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN


def decide(logits, uniform, can_shift, can_reduce, mode: str) -> tuple:
    """The decision of docs/spec.md §7, for K rows at once, on the device.

    logits <float>[K, 2] = (t_S, t_R); uniform <float>[K] (sampled mode,
    else None); can_shift (the buffer is not empty), can_reduce (two items
    or more on the stack) <bool>[K]; ``mode`` "predicted" or "sampled".
    Returns (is_shift, is_reduce, logprob, entropy): the masks <bool>[K]
    (both false: the sentence is finished, a PAD step) and, in sampled mode,
    the step's log p(action taken) and entropy <float>[K], zero where the
    step is no choice; None in predicted mode. The K axis may be absent (one
    sentence: vmap.py).
    """
    # Define-by-run code writes this as `if t_R > t_S: reduce() else: shift()`,
    # which needs the value of t in Python. In a traced loop t has no value
    # yet, so the verdict is one more mask per sentence, and the masked step
    # that follows is the one gold mode runs.
    choice = can_shift & can_reduce  # both actions possible: the head decides
    diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]  # t_R - t_S
    logprob = entropy = None
    if mode == "predicted":
        wants_reduce = diff > 0  # t_R > t_S; a tie SHIFTs
    else:
        # In the model's dtype (float64 needs x64, a global switch: docs/spec.md
        # §7); log σ(x) = -softplus(-x) is stable, and p_R = exp(log σ(d))
        # keeps a tiny p_R tiny.
        log_p_reduce, log_p_shift = jax.nn.log_sigmoid(diff), jax.nn.log_sigmoid(-diff)
        p_reduce, p_shift = jnp.exp(log_p_reduce), jnp.exp(log_p_shift)
        wants_reduce = uniform < p_reduce  # REDUCE with probability p_R
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    if mode == "sampled":  # a step with one possible action is no choice and adds nothing
        logprob = jnp.where(choice, jnp.where(is_reduce, log_p_reduce, log_p_shift), 0)
        entropy = jnp.where(choice, -(p_reduce * log_p_reduce + p_shift * log_p_shift), 0)
    return is_shift, is_reduce, logprob, entropy
