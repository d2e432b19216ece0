"""What the JAX families' loops share (docs/spec.md §3): the halves of a stack item, the leaves a
sentence's transitions hold, the batch's last real step, and the stack layouts a runner may ask for (the
decision of a decided parse is head.py's).

masked.py (the batch by hand), vmap.py (one sentence, batched by ``jax.vmap``) and levels.py (a host-made
level schedule) each import what they use from here, and none imports another: a run loads only its own
family. Every function works with or without the sentence axis S (under vmap it is absent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
