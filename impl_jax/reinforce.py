"""REINFORCE (docs/spec.md §7) as pure functions, compiled by runner.py.

The sampled parse happens inside the ``lax.scan`` (model.py): at each step
the head's logits, the step's uniform number and the validity masks decide,
on the device, which of the two computed results the carry keeps. So one
compiled program per batch shape serves every sample, and the samples are
an input like the tokens: the uniforms come from the front end
(shared.parsing), which is also why the baseline b is an array argument and
never a constant of the trace: a new b, like a new learning rate, reuses the
executable.

The comparisons that decide are not differentiable, so ``jax.grad`` sees
the followed trees as fixed; gradients reach the head only through the
sampled actions' log-probabilities and the entropies, and the rewards
r_i = -CE_i pass through ``stop_gradient`` (constants of the score term).

As in train.py, every function takes the model and its parameters as
arguments, and the runner jits it with the model, the optimizer and the
training settings bound.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from .train import Arrays, Params, _merge, parse


def reinforce_loss(model: nn.Module, params: Params, arrays: Arrays, labels, uniforms, baseline,
                   reinforce_weight: float, entropy_weight: float, *, train: bool = False, rng=None):
    """-> (loss <float>[], numbers: the rewards <float>[B], and per side the
    logprob and entropy <float>[B] and the followed transitions <int32>[B, T]).

    ``uniforms``: (premise_u, hypothesis_u) <float>[B, T]; ``baseline`` <float>[].
    The two weights are Python numbers, constants of the program (training
    settings, like the dropout rate)."""
    parses, logits = parse(model, params, arrays, "sampled", uniforms, train=train, rng=rng)
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


def loss_and_grads(model: nn.Module, params: Params, arrays: Arrays, labels, uniforms, baseline, *,
                   reinforce_weight: float, entropy_weight: float):
    """Eval mode: ((loss, numbers), grads shaped like ``params``).

    The parameters are an argument (train.loss_and_grads says why); the runner
    jits this with the model and the weights bound."""
    return jax.value_and_grad(reinforce_loss, argnums=1, has_aux=True)(
        model, params, arrays, labels, uniforms, baseline, reinforce_weight, entropy_weight)


def train_step(model: nn.Module, optimizer: optax.GradientTransformation, trainable: Params, frozen: Params,
               opt_state, arrays: Arrays, labels, uniforms, baseline, step, lr, *, seed: int,
               reinforce_weight: float, entropy_weight: float):
    """(trainable, frozen, opt_state, arrays, labels, uniforms, baseline, step, lr)
    -> (trainable, opt_state, loss, numbers): train.train_step with the
    REINFORCE loss, functional and jitted the same way; dropout keys from
    (seed, step) exactly as there."""
    rng = jax.random.fold_in(jax.random.key(seed, impl="rbg"), step)

    def loss_of_trainable(trainable):
        return reinforce_loss(model, _merge(trainable, frozen), arrays, labels, uniforms, baseline,
                              reinforce_weight, entropy_weight, train=True, rng=rng)

    (loss, numbers), grads = jax.value_and_grad(loss_of_trainable, has_aux=True)(trainable)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
    return optax.apply_updates(trainable, updates), opt_state, loss, numbers
