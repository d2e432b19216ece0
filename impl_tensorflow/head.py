"""The transition head's arithmetic that several modules share (docs/spec.md §7):
the probabilities and terms of a sampled choice (masked.py decides in its
while loop, lists.py sums on the host's record of the choices) and the sum of
the supervised transition loss (train.py's mean; replicas.py's share of it).
"""

from __future__ import annotations

import tensorflow as tf

from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE


def choice_probabilities(diff: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """diff = t_R - t_S <float64>[K] -> (log_p, p) <float64>[K, 2], columns (SHIFT, REDUCE).

    log p_S, log p_R = log σ(∓diff), stable (log σ(x) = -softplus(-x)), and
    p = exp(log p), which keeps a tiny p_R tiny."""
    log_p = tf.math.log_sigmoid(tf.stack([-diff, diff], axis=1))
    return log_p, tf.exp(log_p)


def choice_scores(log_p: tf.Tensor, p: tf.Tensor, reduces: tf.Tensor) -> tf.Tensor:
    """One sampled step's (log p(action taken), entropy), <float64>[K, 2].

    ``log_p``, ``p`` from choice_probabilities; ``reduces`` <bool>[K] is the
    action taken. The entropy is -(p_S log p_S + p_R log p_R). Both come out
    of one product and one sum, so that log_p and p each feed at most two ops
    and their gradients stay two-term sums (see cells.Reduce); saturated
    logits give 0, never NaN.
    """
    taken = tf.one_hot(tf.where(reduces, REDUCE_COLUMN, SHIFT_COLUMN), 2, dtype=log_p.dtype)  # [K, 2]
    weights = tf.stack([taken, -p], axis=1)  # [K, 2, 2]: row 0 picks log p(taken), row 1 weighs by -p
    return tf.reduce_sum(log_p[:, None, :] * weights, axis=2)


def transition_loss_sum(parses: SentenceParses) -> tuple[tf.Tensor, tf.Tensor]:
    """(the sum of the two-way cross-entropies of softmax(t) against the
    action taken over every non-PAD step, the number of those steps as a
    float): train.transition_loss is their quotient."""
    transitions = tf.reshape(parses.transitions, [-1])  # [S * T]: rank 1, so no shape Assert (which XLA drops)
    real = tf.not_equal(transitions, PAD)
    columns = tf.where(tf.equal(transitions, REDUCE), REDUCE_COLUMN, SHIFT_COLUMN)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=columns,
                                                            logits=tf.reshape(parses.transition_logits, [-1, 2]))
    count = tf.reduce_sum(tf.cast(real, losses.dtype))
    return tf.reduce_sum(tf.where(real, losses, tf.zeros([], losses.dtype))), count
