"""The classifier's parameters as a pytree (the nested dict under ``variables["params"]``): the tree a
module makes, without running it, and the split of a tree into trained and frozen parameters.

convert.py fills :func:`abstract`'s tree with the canonical arrays; train.py and reinforce.py split the
tree with :func:`partition` inside their training steps (the frozen part is not differentiated) and join
the halves again with :func:`merge`.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable

import jax
import jax.numpy as jnp
from flax import traverse_util

Params = Any  # the nested dict under variables["params"]


def abstract(module, device=None) -> Params:
    """The tree of parameters ``module`` (an SNLIClassifier of any family) makes, as
    ``jax.ShapeDtypeStruct`` leaves (shape, dtype and, given ``device``, a jax.Device or a sharding,
    where the arrays are to live). Traced, not run."""
    sharding = jax.sharding.SingleDeviceSharding(device) if isinstance(device, jax.Device) else device
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
                        _shapes(module))


@functools.lru_cache(maxsize=None)
def _shapes(module) -> Params:
    key = jax.random.key(0)
    return jax.eval_shape(functools.partial(module.init, method=_every_layer), {"params": key, "dropout": key})[
        "params"]


def _every_layer(classifier) -> None:
    """Each layer of ``classifier`` called once on zeros of its input's shape, which makes its weights in
    ``init``: the embedding and projection, the SPINN's Tracker (and head) and Reduce, which every family
    keeps under the same names, and the MLP. No family's loop runs, so no family's input (such as the
    level schedule) is needed."""
    c = classifier.config
    H, D = c.hidden_dim, c.tracker_dim
    classifier.projection(classifier.embed(jnp.zeros((1, 1), jnp.int32)))
    h = jnp.zeros((1, H), classifier.dtype)
    tracking = None
    if D > 0:
        tracking, _ = classifier.spinn.tracker.step(h, h, h, (jnp.zeros((1, D), classifier.dtype),) * 2)
        if c.transition_head:
            classifier.spinn.tracker.transition_logits(tracking)
    classifier.spinn.reduce.compose((h, h), (h, h), tracking)
    classifier.classify(h, h)


def partition(params: Params, paths: Iterable[tuple[str, ...]]) -> tuple[Params, Params]:
    """Split a params tree into (the rest, the leaves at ``paths``): two trees of the same nesting."""
    paths = set(paths)
    flat = traverse_util.flatten_dict(params)
    rest = {k: v for k, v in flat.items() if k not in paths}
    chosen = {k: v for k, v in flat.items() if k in paths}
    return traverse_util.unflatten_dict(rest), traverse_util.unflatten_dict(chosen)


def merge(a: Params, b: Params) -> Params:
    """The union of two trees with disjoint leaves."""
    return traverse_util.unflatten_dict({**traverse_util.flatten_dict(a), **traverse_util.flatten_dict(b)})
