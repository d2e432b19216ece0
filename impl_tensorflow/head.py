"""The transition head's arithmetic that several modules share (docs/spec.md §7):
the decision rule of a decided parse, written once for TensorFlow's families
(masked.py applies it in its while loop, to every sentence at once; lists.py
to the rows of a step where a sentence has a choice, reading its verdict back
to Python to branch on it), and the sum of the supervised transition loss
(train.py's mean; replicas.py's share of it).

Every framework writes the rule once, over its own ops, with one return
convention (impl_pytorch/head.py, impl_jax/head.py; shared.parsing.decide in
NumPy for the reference and DyNet).
"""

from __future__ import annotations

import tensorflow as tf

from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, SentenceParses
from shared.transitions import PAD, REDUCE


def decide(logits: tf.Tensor, uniform: tf.Tensor | None, can_shift: tf.Tensor, can_reduce: tf.Tensor,
           mode: str) -> tuple:
    """The decision of docs/spec.md §7, for K rows at once, on the device.

    logits <float>[K, 2] = (t_S, t_R); uniform <float64>[K] (sampled mode,
    else None); can_shift (the buffer is not empty), can_reduce (two items
    or more on the stack) <bool>[K]; ``mode`` "predicted" or "sampled".
    Returns (is_shift, is_reduce, logprob, entropy): the masks <bool>[K]
    (both false: the sentence is finished, a PAD step) and, in sampled mode,
    the step's log p(action taken) and entropy <float64>[K], zero where the
    step is no choice; None in predicted mode.
    """
    # Define-by-run code writes this as `if t_R > t_S: reduce() else: shift()`,
    # which needs the value of t in Python. On the device the verdict is one
    # more mask per sentence, and the masked step that follows is the one gold
    # mode runs (lists.py reads the mask back to take the branch).
    choice = can_shift & can_reduce  # both actions possible: the head decides
    t_shift, t_reduce = tf.unstack(logits, axis=1)  # one op: the gradient of logits stays a two-term sum
    logprob = entropy = None
    if mode == "predicted":
        wants_reduce = t_reduce > t_shift  # a tie SHIFTs
    else:
        # In float64, as the reference computes p_R, whatever the model's
        # dtype (docs/spec.md §7): a float32 sum of 30 logs of size 1 loses
        # 1e-5. log σ(x) = -softplus(-x) is stable, and p = exp(log σ(·))
        # keeps a tiny p_R tiny.
        diff = tf.cast(t_reduce, tf.float64) - tf.cast(t_shift, tf.float64)  # t_R - t_S
        log_p = tf.math.log_sigmoid(tf.stack([-diff, diff], axis=1))  # <float64>[K, 2]: (log p_S, log p_R)
        p = tf.exp(log_p)
        wants_reduce = uniform < p[:, REDUCE_COLUMN]  # REDUCE with probability p_R
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    if mode == "sampled":  # a step with one possible action is no choice and adds nothing
        # log p(taken) and the entropy -(p_S log p_S + p_R log p_R) out of one
        # product and one sum, so that log_p and p each feed at most two ops
        # and their gradients stay two-term sums (see cells.Reduce); saturated
        # logits give 0, never NaN.
        taken = tf.one_hot(tf.where(is_reduce, REDUCE_COLUMN, SHIFT_COLUMN), 2, dtype=tf.float64)  # [K, 2]
        weights = tf.stack([taken, -p], axis=1)  # [K, 2, 2]: row 0 picks log p(taken), row 1 weighs by -p
        scores = tf.reduce_sum(log_p[:, None, :] * weights, axis=2)  # [K, 2]: (log p(taken), entropy)
        logprob, entropy = tf.unstack(tf.where(choice[:, None], scores, tf.zeros([], tf.float64)), axis=1)
    return is_shift, is_reduce, logprob, entropy


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
