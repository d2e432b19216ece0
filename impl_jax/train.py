"""Loss, gradients, optax optimizers and the training step, as pure functions of values.

Nothing here runs eagerly and nothing holds state. A Flax linen module holds
no weights, so the model is a value, :class:`Model`: the module (static) and
its parameters (a pytree), which ``jax.jit`` and ``jax.grad`` take whole; the
optimizer is another, :class:`Optimizer`: optax's transformation with the
shared name, hyperparameters and frozen parameters (static), its state and
the learning rate (arrays). ``runner.py`` compiles the functions with
``jax.jit`` (explicitly: ``trace``, ``lower``, ``compile``) once per batch
shape, the training settings bound first (``functools.partial``). The
training step is one function

    train_step(model, optimizer, batch, *, seed, step, transition_weight)
        -> (model, optimizer, loss)

whose compiled program takes the model, the optimizer, the batch and the
step, and gives the new model and optimizer back (the runner donates the old
ones, so XLA updates their buffers in place).

* ``batch`` is a ``shared.batching.BatchArrays`` of device arrays (a
  pytree), its ``levels`` the level schedule's arrays for levels.py's
  classifier, else ``()``; forward.py applies the classifier to it.
* Optimizers are optax's own transformations, composed the way ``optax.sgd``
  and ``optax.adam`` compose them, with the hyperparameters and defaults of
  shared/optimizers.py; the learning rate is applied last, from the
  optimizer's ``lr`` array, an argument of the compiled step
  (``set_learning_rate``), so a new rate never recompiles.
* Frozen parameters: the step splits the tree (params.partition, by the
  optimizer's static ``frozen`` names) and differentiates the trained part
  only, so XLA drops the frozen part's gradient (e.g. the V x E embedding
  gradient) altogether.
* Dropout: on the projected leaves and on the input of every classifier layer
  (``classifier.py``), in training only. Its randomness is
  ``fold_in(key(seed), step)`` (forward.dropout_key): a function of (seed,
  step) only, so a resumed run draws the same masks, and the step, an array
  argument, never recompiles.
* The supervised loss of docs/spec.md §7: with ``transition_weight`` > 0 the
  forward pass is ``SNLIClassifier.parse`` in gold mode, which also returns
  the head's teacher-forced logits, and their two-way cross-entropy against
  the gold actions is added. The weight is a Python number bound before jit
  (a training setting, like the dropout rate): it is a constant of the
  compiled program, and with weight 0 the program is the plain one, without
  the head.
"""

from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct, traverse_util
from flax.core import FrozenDict

from shared import optimizers
from shared.params import param_shapes
from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE

from .convert import name_map
from .forward import forward, forward_parse
from .params import Params, merge, partition


class Model(struct.PyTreeNode):
    """The model as JAX's transformations take it: the Flax module (an SNLIClassifier of a family, static:
    part of what a program is compiled for) and its parameters (the pytree ``apply`` takes under
    "params", JAX arrays). A value: the training step returns a new one."""

    module: nn.Module = struct.field(pytree_node=False)
    params: Params = None


class Optimizer(struct.PyTreeNode):
    """optax with the shared rules' name, hyperparameters and frozen parameters (static: a new optimizer
    is a new program), its state and the learning rate (arrays: arguments of the compiled step). A
    value: the training step and the functions below return a new one."""

    name: str = struct.field(pytree_node=False)  # "sgd", "adam" or "rmsprop"
    hyper: FrozenDict = struct.field(pytree_node=False)  # shared.optimizers.resolve's, hashable
    frozen: tuple[str, ...] = struct.field(pytree_node=False)  # canonical names, not trained
    transformation: optax.GradientTransformation = struct.field(pytree_node=False)  # before the rate
    state: Any = None  # the transformation's state, for the trained parameters
    lr: jax.Array = None  # <float>[], the parameters' dtype


# ---------------------------------------------------------------------------
# Loss and gradients
# ---------------------------------------------------------------------------


def parse(model: Model, batch, mode: str = "predicted", uniforms=None) -> tuple[SentenceParses, jax.Array]:
    """A batch parsed in ``mode``, eval mode: ``SNLIClassifier.parse`` with the batch's
    arrays -> (SentenceParses of the 2B sentences, premises first; logits <float>[B, 3]).

    ``mode`` is a Python string (each mode is its own program); ``uniforms``
    is sampled mode's (premise_u, hypothesis_u) <float>[B, T] each, else None.
    """
    return forward_parse(model, batch, mode, uniforms)


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy of integer labels 0..2, in the dtype of the logits."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def transition_loss(parses: SentenceParses) -> jax.Array:
    """The supervised transition term of docs/spec.md §7, before its weight.

    The mean, over every non-PAD step of every premise and hypothesis, of the
    two-way cross-entropy of softmax(t) against the action followed
    (``parses.transitions``, the gold ones in gold mode), t being gold mode's
    teacher-forced logits. No validity mask: the head is trained at every
    step, forced or not.
    """
    followed = parses.transitions  # [2B, T]
    logits = parses.transition_logits  # [2B, T, 2], zeros at PAD
    actions = jnp.where(followed == REDUCE, REDUCE_COLUMN, SHIFT_COLUMN)
    per_step = optax.softmax_cross_entropy_with_integer_labels(logits, actions)  # [2B, T]
    real = followed != PAD
    return jnp.sum(jnp.where(real, per_step, 0)) / jnp.sum(real).astype(per_step.dtype)


def batch_loss(model: Model, batch, *, training: bool = False, seed=0, step=0,
               transition_weight: float = 0.0) -> jax.Array:
    """The mean cross-entropy of the batch <float>[], plus ``transition_weight``
    times ``transition_loss`` when it is > 0. In training, dropout's masks are
    drawn from (seed, step) only."""
    how = dict(training=training, seed=seed, step=step)
    if transition_weight > 0:  # a Python number: this branch is taken while tracing
        parses, logits = forward_parse(model, batch, "gold", **how)
        return _cross_entropy(logits, batch.labels) + transition_weight * transition_loss(parses)
    _, _, logits = forward(model, batch, **how)
    return _cross_entropy(logits, batch.labels)


def loss_and_grads(model: Model, batch, *, transition_weight: float = 0.0) -> tuple[jax.Array, Params]:
    """Eval mode (no dropout): (loss <float>[], grads shaped like ``model.params``).

    ``transition_weight`` > 0 adds the supervised transition term (docs/spec.md §7)."""
    # jax.value_and_grad differentiates with respect to the Model's pytree, its
    # parameters (the module is static); the runner jits this function with the
    # weight bound, so its program is (model, batch) -> ...
    loss, grads = jax.value_and_grad(batch_loss)(model, batch, transition_weight=transition_weight)
    return loss, grads.params


# ---------------------------------------------------------------------------
# Optimizers (optax) and the shared state layout
# ---------------------------------------------------------------------------


def make_optimizer(name: str, model: Model, lr: float, *, frozen=(), **hyper) -> Optimizer:
    """optax's SGD (with momentum), Adam or RMSprop for ``model``'s trained
    parameters (all but the canonical names ``frozen``), at rate ``lr``.

    ``hyper`` takes the shared names (``momentum``, ``beta1``, ``beta2``,
    ``rho``, ``eps``, ``weight_decay``) with the shared defaults. Weight decay
    is the coupled L2 term ``g + wd * p`` (``optax.add_decayed_weights``
    first). optax's RMSprop puts eps inside the square root, as the shared
    definition does; its Adam adds eps to sqrt(v-hat), as the shared one does.

    The hyperparameters are NumPy scalars of the parameters' dtype: a
    Python float would be a weakly typed float64 under x64, and optax's Adam
    bias correction ``1 - b1 ** count`` would then be computed in float64.
    The state and the rate live where the parameters do.
    """
    resolved = optimizers.resolve(name, hyper)
    frozen = optimizers.check_frozen(frozen, name_map(model.module.config))
    h = {key: np.dtype(model.module.dtype).type(value) for key, value in resolved.items()}
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
    transformation = optax.chain(*(parts or [optax.identity()]))  # plain SGD: the gradient itself
    trainable, _ = partition(model.params, _frozen_paths(model, frozen))
    where = _sharding(model)
    return Optimizer(name=name, hyper=FrozenDict(resolved), frozen=frozen, transformation=transformation,
                     state=jax.device_put(transformation.init(trainable), where),
                     lr=jax.device_put(np.asarray(lr, dtype=model.module.dtype), where))


def _sharding(model: Model):
    """Where the parameters live (one device, or replicated on a mesh): where the optimizer's arrays go."""
    return jax.tree.leaves(model.params)[0].sharding


def _frozen_paths(model: Model, frozen) -> list[tuple[str, ...]]:
    paths = name_map(model.module.config)
    return [paths[name] for name in frozen]


def set_learning_rate(optimizer: Optimizer, lr: float) -> Optimizer:
    """The optimizer with the rate of the following steps: ``lr`` as a 0-d array of the old rate's dtype,
    where it was."""
    # The rate is an argument of the compiled step (the optimizer's ``lr``),
    # not a constant of its trace: the step takes this array, and a new rate
    # reuses the executable. (A rate inside the optimizer, as optax.sgd(lr)
    # keeps it, would be a constant of the trace: every new rate a new program.)
    return optimizer.replace(lr=jax.device_put(np.asarray(lr, dtype=optimizer.lr.dtype), optimizer.lr.sharding))


# Shared slot name -> (optax state class, field holding the per-parameter tree).
_OPTAX_SLOTS = {
    "momentum": (optax.TraceState, "trace"),
    "m": (optax.ScaleByAdamState, "mu"),
    "v": ((optax.ScaleByAdamState, optax.ScaleByRmsState), "nu"),
}
_SLOT_HOLDERS = (optax.TraceState, optax.ScaleByAdamState, optax.ScaleByRmsState)


def optimizer_state(model: Model, optimizer: Optimizer, step: int) -> dict[str, np.ndarray]:
    """The optax state -> the shared layout (shared/optimizers.py): ``step`` and ``{slot}/{canonical name}``."""
    paths = name_map(model.module.config)
    out = {optimizers.STEP: np.array(step, dtype=np.int64)}
    states = [s for s in optimizer.state if isinstance(s, _SLOT_HOLDERS)]
    for slot in optimizers.slots(optimizer.name, optimizer.hyper):
        kind, field = _OPTAX_SLOTS[slot]
        [holder] = [s for s in states if isinstance(s, kind)]
        flat = traverse_util.flatten_dict(getattr(holder, field))
        for canonical, path in paths.items():
            if canonical not in optimizer.frozen:
                out[f"{slot}/{canonical}"] = np.asarray(jax.device_get(flat[path]))
    return out


def load_optimizer_state(model: Model, optimizer: Optimizer, state: Mapping[str, np.ndarray]) -> Optimizer:
    """A shared-layout state, from any framework, checked against the
    optimizer's layout -> the optimizer with that state (its arrays of the
    old ones' dtypes, where they were). optax states are immutable values: the
    new optimizer is returned, and the caller installs it; the step count,
    ``int(state["step"])``, is the caller's to read."""
    config = model.module.config
    optimizers.check_state(state, optimizers.state_shapes(optimizer.name, optimizer.hyper, param_shapes(config),
                                                          optimizer.frozen))
    paths = name_map(config)
    step = int(state[optimizers.STEP])
    new = []
    for inner in optimizer.state:
        if isinstance(inner, _SLOT_HOLDERS):
            fields = {}
            for slot in optimizers.slots(optimizer.name, optimizer.hyper):
                kind, field = _OPTAX_SLOTS[slot]
                if isinstance(inner, kind):
                    old = traverse_util.flatten_dict(getattr(inner, field))
                    fields[field] = traverse_util.unflatten_dict({
                        path: jax.device_put(np.asarray(state[f"{slot}/{canonical}"], dtype=old[path].dtype),
                                             old[path].sharding)
                        for canonical, path in paths.items() if canonical not in optimizer.frozen})
            if isinstance(inner, optax.ScaleByAdamState):  # the bias correction counts updates
                fields["count"] = jax.device_put(np.asarray(step, dtype=inner.count.dtype), inner.count.sharding)
            inner = inner._replace(**fields)
        new.append(inner)
    return optimizer.replace(state=tuple(new))


# ---------------------------------------------------------------------------
# The training step
# ---------------------------------------------------------------------------


def train_step(model: Model, optimizer: Optimizer, batch, *, seed=0, step=0,
               transition_weight: float = 0.0) -> tuple[Model, Optimizer, jax.Array]:
    """One optimizer step, dropout on: (model, optimizer, batch, step <int32>[])
    -> (the new model, the new optimizer, loss).

    The loss is the one computed on the weights before the update (in
    training mode: dropout on when the model has a rate), with the supervised
    transition term when ``transition_weight`` > 0. The frozen parameters
    (``optimizer.frozen``) are not differentiated.
    """
    # Functional, not in place: the weights and the optimizer state go in and
    # come out. The runner jits this function with seed and weight bound,
    # donating the model and the optimizer, so XLA updates their buffers in place.
    trainable, frozen = partition(model.params, _frozen_paths(model, optimizer.frozen))

    def loss_of_trainable(trainable):
        return batch_loss(model.replace(params=merge(trainable, frozen)), batch, training=True, seed=seed,
                          step=step, transition_weight=transition_weight)

    loss, grads = jax.value_and_grad(loss_of_trainable)(trainable)
    updates, state = optimizer.transformation.update(grads, optimizer.state, trainable)
    updates = jax.tree_util.tree_map(lambda u: -optimizer.lr * u, updates)  # lr has the params' dtype
    params = merge(optax.apply_updates(trainable, updates), frozen)
    return model.replace(params=params), optimizer.replace(state=state), loss
