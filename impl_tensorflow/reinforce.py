"""REINFORCE (docs/spec.md §7) as graph pieces; runner.py traces them once each.

The sampled parse happens inside the ``tf.while_loop`` (masked.py): each
step compares the step's uniform number with p_R on the device and keeps
SHIFT's or REDUCE's result with a mask. The uniforms are inputs of the
traced function, drawn by the front end (shared.parsing), and so is the
baseline b: one trace serves every batch shape, every sample and every b.
``batch`` is a shared.batching.BatchArrays of tensors, as in train.py.

``tf.GradientTape`` records the loop as it ran with these samples; the
comparisons that decided have no gradient, so the gradient flows along the
followed trees and reaches the head only through the sampled actions'
log-probabilities and the entropies. The rewards r_i = -CE_i pass through
``tf.stop_gradient``: constants of the score term, as in the reference.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from shared.batching import BatchArrays

from . import updates
from .classifier import SNLIClassifier
from .train import Optimizer
from .variables import by_name


def reinforce_loss(model: SNLIClassifier, batch: BatchArrays, uniforms, baseline, *, training: bool = False,
                   seed: int = 0, step=0, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0) -> tuple[tf.Tensor, dict]:
    """-> (loss <float>[], the step's numbers: rewards <float>[B], and per side
    logprob, entropy <float>[B] and the followed transitions <int32>[B, T]).

    ``uniforms``: (premise_u, hypothesis_u) <float64>[B, T]; ``baseline``
    <float64>[]. ``training``: dropout on, its masks from (``seed``, ``step``)
    alone (as train.batch_loss). The weights are Python numbers fixed when tracing."""
    with model.dropout(seed, step) if training else contextlib.nullcontext():
        parses, logits = model.parse(*batch[:4], mode="sampled", uniforms=uniforms)
    labels = batch.labels
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)  # [B]
    rewards = tf.stop_gradient(-ce)
    B = tf.shape(labels)[0]
    logprob = parses.logprob[:B] + parses.logprob[B:]  # [B]: premise + hypothesis
    entropy = parses.entropy[:B] + parses.entropy[B:]
    baseline = tf.cast(baseline, ce.dtype)
    loss = (tf.reduce_mean(ce) - reinforce_weight * tf.reduce_mean((rewards - baseline) * logprob)
            - entropy_weight * tf.reduce_mean(entropy))
    numbers = {"rewards": rewards}
    for side, rows in (("premise", slice(None, B)), ("hypothesis", slice(B, None))):
        numbers[f"{side}_logprob"] = tf.stop_gradient(parses.logprob[rows])
        numbers[f"{side}_entropy"] = tf.stop_gradient(parses.entropy[rows])
        numbers[f"{side}_transitions"] = parses.transitions[rows]
    return loss, numbers


def loss_and_grads(model: SNLIClassifier, batch: BatchArrays, uniforms, baseline, *, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0):
    """Eval mode: (loss, gradients of variables.by_name(model) in order, as
    train.loss_and_grads; rewards <float>[B])."""
    variables = list(by_name(model).values())
    with tf.GradientTape() as tape:
        loss, numbers = reinforce_loss(model, batch, uniforms, baseline, reinforce_weight=reinforce_weight,
                                       entropy_weight=entropy_weight)
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return loss, [tf.convert_to_tensor(g) for g in grads], numbers["rewards"]


def train_step(model: SNLIClassifier, optimizer: Optimizer, batch: BatchArrays, uniforms, baseline, *, seed: int = 0,
               step=0, reinforce_weight: float = 1.0, entropy_weight: float = 0.0):
    """One optimizer step on the REINFORCE loss, in training mode (dropout from
    (``seed``, ``step``), frozen entries and weight decay from the optimizer,
    as train.train_step); returns (loss, numbers) computed before the update:
    the arguments of shared.reinforce.step_record, as tensors."""
    variables = [variable for _, variable, _ in optimizer.trainable]
    with tf.GradientTape() as tape:
        loss, numbers = reinforce_loss(model, batch, uniforms, baseline, training=True, seed=seed, step=step,
                                       reinforce_weight=reinforce_weight, entropy_weight=entropy_weight)
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    updates.apply(optimizer, grads)
    return loss, numbers
