"""Loss, gradients, optax optimizers and the training step, as pure functions.

Nothing here runs eagerly and nothing holds state: a Flax linen model holds no
weights, so every function takes the model and its parameters (a pytree) as
arguments, and ``runner.py`` compiles them with ``jax.jit`` (explicitly:
``lower`` then ``compile``) once per batch shape, the model, the optimizer and
the training settings bound first (``functools.partial``). The training step
is one function

    train_step(model, optimizer, trainable, frozen, opt_state, arrays, labels, step, lr)
        -> (trainable, opt_state, loss)

whose compiled program is a function of the arguments after ``optimizer``.

* Optimizers are optax's own transformations, composed the way ``optax.sgd``
  and ``optax.adam`` compose them, with the hyperparameters and defaults of
  shared/optimizers.py; the learning rate is applied last, as an argument of
  the compiled step (``set_learning_rate``), so a new rate never recompiles.
* Frozen parameters are a separate argument that is not differentiated, so
  XLA drops their gradient (e.g. the V x E embedding gradient) altogether.
* Dropout: on the projected leaves and on the input of every classifier layer
  (``classifier.py``), in training only. Its randomness is
  ``fold_in(key(seed), step)``: a function of (seed, step) only, so a resumed
  run draws the same masks, and the step, an array argument, never recompiles.
* The supervised loss of docs/spec.md §7: with ``transition_weight`` > 0 the
  forward pass is ``SNLIClassifier.parse`` in gold mode, which also returns
  the head's teacher-forced logits, and their two-way cross-entropy against
  the gold actions is added. The weight is a Python number bound before jit
  (a training setting, like the dropout rate): it is a constant of the
  compiled program, and with weight 0 the program is the plain one, without
  the head.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from shared import optimizers
from shared.params import ModelConfig
from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE

from .convert import name_map

Params = Any  # the nested dict under variables["params"]
Arrays = tuple  # (premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions)


# ---------------------------------------------------------------------------
# Loss and gradients
# ---------------------------------------------------------------------------


def _forward(model: nn.Module, params: Params, arrays: Arrays, *, train: bool = False, rng=None):
    """(premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3])."""
    rngs = {"dropout": rng} if train and rng is not None else None
    return model.apply({"params": params}, *arrays, train=train, rngs=rngs)


def parse(model: nn.Module, params: Params, arrays: Arrays, mode: str, uniforms=None, *,
          train: bool = False, rng=None) -> tuple[SentenceParses, jax.Array]:
    """A batch parsed in ``mode``: ``SNLIClassifier.parse`` with the batch's
    arrays -> (SentenceParses of the 2B sentences, logits <float>[B, 3]).

    ``mode`` is a Python string (each mode is its own program); ``uniforms``
    is sampled mode's (premise_u, hypothesis_u) <float>[B, T] each, else None.
    """
    rngs = {"dropout": rng} if train and rng is not None else None
    return model.apply({"params": params}, *arrays, mode, uniforms, train=train, rngs=rngs, method="parse")


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy of integer labels 0..2, in the dtype of the logits."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def transition_loss(parses: SentenceParses, arrays: Arrays) -> jax.Array:
    """The supervised transition term of docs/spec.md §7, before its weight.

    The mean, over every non-PAD gold step of every premise and hypothesis,
    of the two-way cross-entropy of softmax(t) against the gold action, t
    being gold mode's teacher-forced logits. No validity mask: the head is
    trained at every step, forced or not.
    """
    gold = jnp.concatenate([arrays[1], arrays[3]], axis=0)  # [2B, T]
    logits = parses.transition_logits  # [2B, T, 2], zeros at PAD
    actions = jnp.where(gold == REDUCE, REDUCE_COLUMN, SHIFT_COLUMN)
    per_step = optax.softmax_cross_entropy_with_integer_labels(logits, actions)  # [2B, T]
    real = gold != PAD
    return jnp.sum(jnp.where(real, per_step, 0)) / jnp.sum(real).astype(per_step.dtype)


def batch_loss(model: nn.Module, params: Params, arrays: Arrays, labels: jax.Array, *, train: bool = False,
               rng=None, transition_weight: float = 0.0) -> jax.Array:
    """The mean cross-entropy of the batch <float>[], plus ``transition_weight``
    times ``transition_loss`` when it is > 0. ``rng``: the dropout key (train only)."""
    if transition_weight > 0:  # a Python number: this branch is taken while tracing
        parses, logits = parse(model, params, arrays, "gold", train=train, rng=rng)
        return _cross_entropy(logits, labels) + transition_weight * transition_loss(parses, arrays)
    _, _, logits = _forward(model, params, arrays, train=train, rng=rng)
    return _cross_entropy(logits, labels)


def loss_and_grads(model: nn.Module, params: Params, arrays: Arrays, labels: jax.Array,
                   transition_weight: float = 0.0) -> tuple[jax.Array, Params]:
    """Eval mode (no dropout): (loss <float>[], grads shaped like ``params``).

    ``transition_weight`` > 0 adds the supervised transition term (docs/spec.md §7)."""
    # The parameters are an argument, not the model's state: jax.value_and_grad
    # differentiates a function of them, and the runner jits this function with
    # the model and the weight bound, so its program is (params, arrays, labels) -> ...
    return jax.value_and_grad(batch_loss, argnums=1)(model, params, arrays, labels, train=False,
                                                     transition_weight=transition_weight)


# ---------------------------------------------------------------------------
# Optimizers (optax) and the shared state layout
# ---------------------------------------------------------------------------


def make_optimizer(name: str, dtype="float32", **hyper) -> optax.GradientTransformation:
    """optax's SGD (with momentum), Adam or RMSprop, before the learning rate.

    ``hyper`` takes the shared names (``momentum``, ``beta1``, ``beta2``,
    ``rho``, ``eps``, ``weight_decay``) with the shared defaults. Weight decay
    is the coupled L2 term ``g + wd * p`` (``optax.add_decayed_weights``
    first). optax's RMSprop puts eps inside the square root, as the shared
    definition does; its Adam adds eps to sqrt(v-hat), as the shared one does.

    The hyperparameters are NumPy scalars of the parameters' ``dtype``: a
    Python float would be a weakly typed float64 under x64, and optax's Adam
    bias correction ``1 - b1 ** count`` would then be computed in float64.
    """
    h = {key: np.dtype(dtype).type(value) for key, value in optimizers.resolve(name, hyper).items()}
    parts = []
    if h["weight_decay"] > 0.0:
        parts.append(optax.add_decayed_weights(h["weight_decay"]))
    if name == "sgd":
        if h["momentum"] > 0.0:
            parts.append(optax.trace(decay=h["momentum"]))  # b = momentum * b + g
    elif name == "adam":
        parts.append(optax.scale_by_adam(b1=h["beta1"], b2=h["beta2"], eps=h["eps"]))
    else:  # rmsprop
        parts.append(optax.scale_by_rms(decay=h["rho"], eps=h["eps"], initial_scale=0.0))
    return optax.chain(*(parts or [optax.identity()]))  # plain SGD: the gradient itself


def _partition(params: Params, frozen_paths: Iterable[tuple[str, ...]]) -> tuple[Params, Params]:
    """Split a params tree into (trainable, frozen) trees of the same nesting."""
    frozen_paths = set(frozen_paths)
    flat = traverse_util.flatten_dict(params)
    trainable = {k: v for k, v in flat.items() if k not in frozen_paths}
    frozen = {k: v for k, v in flat.items() if k in frozen_paths}
    return traverse_util.unflatten_dict(trainable), traverse_util.unflatten_dict(frozen)


def _merge(a: Params, b: Params) -> Params:
    """The union of two trees with disjoint leaves."""
    return traverse_util.unflatten_dict({**traverse_util.flatten_dict(a), **traverse_util.flatten_dict(b)})


# Shared slot name -> (optax state class, field holding the per-parameter tree).
_OPTAX_SLOTS = {
    "momentum": (optax.TraceState, "trace"),
    "m": (optax.ScaleByAdamState, "mu"),
    "v": ((optax.ScaleByAdamState, optax.ScaleByRmsState), "nu"),
}


def _slot_states(opt_state) -> list:
    """The inner states of an optax chain that hold per-parameter slots."""
    holders = (optax.TraceState, optax.ScaleByAdamState, optax.ScaleByRmsState)
    return [s for s in opt_state if isinstance(s, holders)]


def optimizer_state(opt_state, name: str, hyper: Mapping[str, float], config: ModelConfig, step: int,
                    frozen: Iterable[str]) -> dict[str, np.ndarray]:
    """optax state -> the shared layout (shared/optimizers.py): ``step`` and ``{slot}/{canonical name}``."""
    paths = name_map(config)
    out = {optimizers.STEP: np.array(step, dtype=np.int64)}
    states = _slot_states(opt_state)
    for slot in optimizers.slots(name, hyper):
        kind, field = _OPTAX_SLOTS[slot]
        [holder] = [s for s in states if isinstance(s, kind)]
        flat = traverse_util.flatten_dict(getattr(holder, field))
        for canonical, path in paths.items():
            if canonical not in frozen:
                out[f"{slot}/{canonical}"] = np.asarray(jax.device_get(flat[path]))
    return out


def load_optimizer_state(opt_state, state: Mapping[str, np.ndarray], name: str, hyper: Mapping[str, float],
                         config: ModelConfig, frozen: Iterable[str]):
    """A shared-layout state, from any framework -> an optax state shaped like
    ``opt_state`` (its dtypes and devices). optax states are immutable values:
    the new state is returned, and the caller installs it (the runner's ``opt_state``)."""
    paths = name_map(config)
    step = int(state[optimizers.STEP])
    new = []
    for inner in opt_state:
        if isinstance(inner, (optax.TraceState, optax.ScaleByAdamState, optax.ScaleByRmsState)):
            fields = {}
            for slot in optimizers.slots(name, hyper):
                kind, field = _OPTAX_SLOTS[slot]
                if isinstance(inner, kind):
                    old = traverse_util.flatten_dict(getattr(inner, field))
                    fields[field] = traverse_util.unflatten_dict({
                        path: jax.device_put(np.asarray(state[f"{slot}/{canonical}"], dtype=old[path].dtype),
                                             old[path].sharding)
                        for canonical, path in paths.items() if canonical not in frozen})
            if isinstance(inner, optax.ScaleByAdamState):  # the bias correction counts updates
                fields["count"] = jax.device_put(np.asarray(step, dtype=inner.count.dtype), inner.count.sharding)
            inner = inner._replace(**fields)
        new.append(inner)
    return tuple(new)


# ---------------------------------------------------------------------------
# The training step
# ---------------------------------------------------------------------------


def set_learning_rate(lr: float, dtype, device) -> jax.Array:
    """The rate of the following steps: ``lr`` as a 0-d array of the parameters'
    ``dtype`` on ``device`` (a device or a sharding)."""
    # The rate is an argument of the compiled step (train_step's ``lr``), not a
    # constant of its trace: the step takes this array, and a new rate reuses
    # the executable. (A rate inside the optimizer, as optax.sgd(lr) keeps it,
    # would be a constant of the trace: every new rate a new program.)
    return jax.device_put(np.asarray(lr, dtype=dtype), device)


# ---------------------------------------------------------------------------
# The training step
# ---------------------------------------------------------------------------


def train_step(model: nn.Module, optimizer: optax.GradientTransformation, trainable: Params, frozen: Params,
               opt_state, arrays: Arrays, labels: jax.Array, step: jax.Array, lr: jax.Array, *, seed: int = 0,
               transition_weight: float = 0.0):
    """One optimizer step, dropout on: (trainable, frozen, opt_state, arrays,
    labels, step <int32>[], lr <float>[]) -> (trainable, opt_state, loss).

    The loss is the one computed on the weights before the update (in
    training mode: dropout on when the model has a rate), with the supervised
    transition term when ``transition_weight`` > 0.
    """
    # Functional, not in place: the weights and the optimizer state go in and
    # come out. The runner jits this function with model, optimizer, seed and
    # weight bound, donating ``trainable`` and ``opt_state`` (arguments 0 and 2
    # of what is left), so XLA updates their buffers in place.
    #
    # "rbg" (XLA's RngBitGenerator) rather than the default threefry:
    # threefry's unrolled hash made this step compile twice as slowly on
    # the CPU. Masks are still a function of (seed, step) on a backend.
    rng = jax.random.fold_in(jax.random.key(seed, impl="rbg"), step)

    def loss_of_trainable(trainable):
        return batch_loss(model, _merge(trainable, frozen), arrays, labels, train=True, rng=rng,
                          transition_weight=transition_weight)

    loss, grads = jax.value_and_grad(loss_of_trainable)(trainable)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)  # lr has the params' dtype
    return optax.apply_updates(trainable, updates), opt_state, loss
