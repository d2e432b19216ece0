"""What the JAX families' loops share (docs/spec.md §3, §7): the halves of a stack item, the leaves a
sentence's transitions hold, the batch's last real step, the decision of a decided parse, and the stack
layouts a runner may ask for.

masked.py (the batch by hand), vmap.py (one sentence, batched by ``jax.vmap``) and levels.py (a host-made
level schedule) each import what they use from here, and none imports another: a run loads only its own
family. Every function works with or without the sentence axis S (under vmap it is absent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN
from shared.transitions import PAD, SHIFT

LAYOUTS = ("thin", "padded")  # masked.py's stack layouts; vmap.py and levels.py keep their own (thin) one
DEFAULT_LAYOUT = "thin"  # Bowman et al.'s layout


def halves(item: jax.Array, hidden_dim: int) -> tuple[jax.Array, jax.Array]:
    """Split stack items <float>[..., 2H] into h and c, <float>[..., H] each."""
    return item[..., :hidden_dim], item[..., hidden_dim:]


def count_leaves(transitions):
    """n_leaves <int32>[S]: the words in each buffer, one per SHIFT. The leaves
    array is padded to N; the transitions say how many of its rows are words.
    (For one sentence, transitions <int32>[T], a scalar: vmap.py.)"""
    return jnp.sum(transitions == SHIFT, axis=-1, dtype=jnp.int32)


def last_step(transitions):
    """<int32>[]: one past the last step that is not PAD in any row of
    transitions <int32>[S, T], the number of steps the batch really needs
    (T, its padded length, or less)."""
    used = jnp.any(transitions != PAD, axis=0)
    return jnp.max(jnp.where(used, jnp.arange(1, transitions.shape[1] + 1, dtype=jnp.int32), 0))


def decide(logits, uniform, can_shift, can_reduce, mode: str):
    """The decision of docs/spec.md §7, for every sentence at once, on the device.

    logits <float>[S, 2] = (t_S, t_R); uniform <float>[S] (sampled mode);
    can_shift (the buffer is not empty), can_reduce (two items or more on the
    stack) <bool>[S]. Returns the masks is_shift, is_reduce <bool>[S] (both
    false: the sentence is finished, a PAD step) and, in sampled mode, the
    step's log-probability and entropy <float>[S], zero unless it was a choice.
    The S axis may be absent (one sentence: vmap.py).
    """
    # Define-by-run code writes this as `if t_R > t_S: reduce() else: shift()`,
    # which needs the value of t in Python at every step. In a traced loop t
    # has no value yet, so the branch becomes a mask: both actions' results
    # are computed anyway (the step always composes AND shifts), and the
    # decision only chooses which one is kept, like the gold op does.
    choice = can_shift & can_reduce  # both actions possible: the head decides
    diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]  # t_R - t_S
    ys = {}
    if mode == "predicted":
        wants_reduce = diff > 0  # t_R > t_S; a tie SHIFTs
    else:
        # Stable logs: log σ(x) = -softplus(-x), never log 0; p_R = exp(log σ(d)).
        log_p_reduce, log_p_shift = jax.nn.log_sigmoid(diff), jax.nn.log_sigmoid(-diff)
        wants_reduce = uniform < jnp.exp(log_p_reduce)  # REDUCE with probability p_R
        taken = jnp.where(wants_reduce, log_p_reduce, log_p_shift)
        entropy = -(jnp.exp(log_p_reduce) * log_p_reduce + jnp.exp(log_p_shift) * log_p_shift)
        # A step with one possible action is no choice and adds nothing.
        ys["logprob"] = jnp.where(choice, taken, 0)
        ys["entropy"] = jnp.where(choice, entropy, 0)
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    return is_shift, is_reduce, ys
