"""REINFORCE (docs/spec.md §7) as graph pieces; runner.py traces them once each.

The sampled parse happens inside the ``tf.while_loop`` (model.py): each
step compares the step's uniform number with p_R on the device and keeps
SHIFT's or REDUCE's result with a mask. The uniforms are inputs of the
traced function, drawn by the front end (shared.parsing), and so is the
baseline b: one trace serves every batch shape, every sample and every b.

``tf.GradientTape`` records the loop as it ran with these samples; the
comparisons that decided have no gradient, so the gradient flows along the
followed trees and reaches the head only through the sampled actions'
log-probabilities and the entropies. The rewards r_i = -CE_i pass through
``tf.stop_gradient``: constants of the score term, as in the reference.
"""

from __future__ import annotations

import tensorflow as tf

from . import convert
from .classifier import SNLIClassifier
from .train import _apply_gradients, _dense, _trainable


def reinforce_loss(model: SNLIClassifier, inputs, labels, uniforms, baseline, reinforce_weight: float,
                   entropy_weight: float, training: bool = False, seed=None) -> tuple[tf.Tensor, dict]:
    """-> (loss <float>[], the step's numbers: rewards <float>[B], and per side
    logprob, entropy <float>[B] and the followed transitions <int32>[B, T]).

    ``uniforms``: (premise_u, hypothesis_u) <float64>[B, T]; ``baseline``
    <float64>[]. The weights are Python numbers fixed when tracing."""
    parses, logits = model.parse(*inputs, mode="sampled", uniforms=uniforms, training=training, seed=seed)
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


def loss_and_grads(model: SNLIClassifier, inputs, labels, uniforms, baseline, reinforce_weight: float,
                   entropy_weight: float):
    """Eval mode: (loss, gradients of convert._variables(model) in order, rewards <float>[B])."""
    variables = list(convert._variables(model).values())
    with tf.GradientTape() as tape:
        loss, numbers = reinforce_loss(model, inputs, labels, uniforms, baseline, reinforce_weight, entropy_weight)
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return loss, [_dense(g) for g in grads], numbers["rewards"]


def train_step(model: SNLIClassifier, optimizer, inputs, labels, uniforms, baseline, seed, *, frozen=(),
               weight_decay: float = 0.0, reinforce_weight: float = 1.0, entropy_weight: float = 0.0):
    """One optimizer step on the REINFORCE loss, in training mode (dropout from
    the step's seed, as train.train_step); returns (loss, numbers) computed
    before the update."""
    variables = _trainable(model, frozen)
    with tf.GradientTape() as tape:
        loss, numbers = reinforce_loss(model, inputs, labels, uniforms, baseline, reinforce_weight,
                                       entropy_weight, training=True, seed=seed)
    grads = tape.gradient(loss, [variable for _, variable, _ in variables],
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    _apply_gradients(optimizer, variables, grads, weight_decay)
    return loss, numbers
