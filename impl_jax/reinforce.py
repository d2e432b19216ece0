"""REINFORCE (docs/spec.md §7) as pure functions, compiled by runner.py.

The sampled parse happens inside the ``lax.scan`` (masked.py, vmap.py): at
each step the head's logits, the step's uniform number and the validity
masks decide, on the device, which of the two computed results the carry
keeps. So one compiled program per batch shape serves every sample, and the
samples are an input like the tokens: the uniforms come from the front end
(shared.parsing), which is also why the baseline b is an array argument and
never a constant of the trace: a new b, like a new learning rate, reuses the
executable.

The comparisons that decide are not differentiable, so ``jax.grad`` sees
the followed trees as fixed; gradients reach the head only through the
sampled actions' log-probabilities and the entropies, and the rewards
r_i = -CE_i pass through ``stop_gradient`` (constants of the score term).

As in train.py, every function takes the model (train.Model) and the
optimizer (train.Optimizer) as values, and the runner jits it with the
training settings bound.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from .convert import name_map
from .forward import forward_parse
from .params import Params, merge, partition
from .train import Model, Optimizer


def reinforce_loss(model: Model, batch, uniforms, baseline, *, training: bool = False, seed=0, step=0,
                   reinforce_weight: float = 1.0, entropy_weight: float = 0.0):
    """-> (loss <float>[], numbers: the rewards <float>[B], and per side the
    logprob and entropy <float>[B] and the followed transitions <int32>[B, T]).

    ``uniforms``: (premise_u, hypothesis_u) <float>[B, T]; ``baseline`` <float>[].
    The two weights are Python numbers, constants of the program (training
    settings, like the dropout rate). In training, dropout's masks are drawn
    from (seed, step) only."""
    parses, logits = forward_parse(model, batch, "sampled", uniforms, training=training, seed=seed, step=step)
    labels = batch.labels
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)  # [B]
    rewards = jax.lax.stop_gradient(-ce)
    B = labels.shape[0]
    logprob = parses.logprob[:B] + parses.logprob[B:]  # [B]: premise + hypothesis
    entropy = parses.entropy[:B] + parses.entropy[B:]
    loss = (ce.mean() - reinforce_weight * jnp.mean((rewards - baseline) * logprob)
            - entropy_weight * entropy.mean())
    numbers = {"rewards": rewards}
    for name in ("logprob", "entropy", "transitions"):
        value = jax.lax.stop_gradient(getattr(parses, name))
        numbers[f"premise_{name}"], numbers[f"hypothesis_{name}"] = value[:B], value[B:]
    return loss, numbers


def loss_and_grads(model: Model, batch, uniforms, baseline, *, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0) -> tuple[jax.Array, Params, jax.Array]:
    """Eval mode: (loss <float>[], grads shaped like ``model.params``, rewards <float>[B]).

    Differentiated with respect to the Model's parameters (train.loss_and_grads
    says why); the runner jits this with the weights bound."""
    (loss, numbers), grads = jax.value_and_grad(reinforce_loss, has_aux=True)(
        model, batch, uniforms, baseline, reinforce_weight=reinforce_weight, entropy_weight=entropy_weight)
    return loss, grads.params, numbers["rewards"]


def train_step(model: Model, optimizer: Optimizer, batch, uniforms, baseline, *, seed=0, step=0,
               reinforce_weight: float = 1.0, entropy_weight: float = 0.0):
    """(model, optimizer, batch, uniforms, baseline, step) -> (the new model,
    the new optimizer, loss, numbers): train.train_step with the REINFORCE
    loss, functional and jitted the same way; dropout keys from (seed, step)
    exactly as there. ``numbers`` are reinforce_loss's, what
    shared.reinforce.step_record takes after the loss."""
    paths = name_map(model.module.config)
    trainable, frozen = partition(model.params, [paths[name] for name in optimizer.frozen])

    def loss_of_trainable(trainable):
        return reinforce_loss(model.replace(params=merge(trainable, frozen)), batch, uniforms, baseline,
                              training=True, seed=seed, step=step, reinforce_weight=reinforce_weight,
                              entropy_weight=entropy_weight)

    (loss, numbers), grads = jax.value_and_grad(loss_of_trainable, has_aux=True)(trainable)
    updates, state = optimizer.transformation.update(grads, optimizer.state, trainable)
    updates = jax.tree_util.tree_map(lambda u: -optimizer.lr * u, updates)
    params = merge(optax.apply_updates(trainable, updates), frozen)
    return model.replace(params=params), optimizer.replace(state=state), loss, numbers
