"""The update a training step applies with a train.Optimizer, in the pieces that
train.py's and reinforce.py's steps (:func:`apply`) and replicas.py's
data-parallel step (its replicas correct their own gradients, Adam's
corrections are set once before them) share.

* :func:`trainable`: which variables an optimizer updates, with a 0/1 row
  mask where a fused variable (convert.py) has some of its canonical blocks
  frozen;
* :func:`corrected`: the gradients as the optimizer takes them: dense, plus
  the shared coupled weight decay ``wd * p``, times the frozen rows' masks;
* :func:`adam_corrections`: Keras' Adam made to compute the shared Adam
  (train.make_optimizer says where Keras differs);
* :func:`apply`: the three, then Keras' ``apply_gradients``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from . import convert
from .variables import by_name


def trainable(model, frozen: Sequence[str]) -> list[tuple[str, tf.Variable, np.ndarray | None]]:
    """The variables an optimizer updates: (TensorFlow name, variable, row mask).

    ``frozen`` holds canonical names. A variable whose every block is frozen
    (e.g. ``embed.embedding``) is left out, so its gradient is never computed.
    A fused variable with some blocks frozen stays in, with a 0/1 mask
    <float>[rows, 1] that zeroes those rows of its gradient (from zero state,
    SGD, Adam and RMSprop then never move them).
    """
    frozen = set(frozen)
    rows: dict[str, list[tuple[int, int, bool]]] = {}
    for name, (tf_name, start, stop) in convert.name_map(model.config).items():
        rows.setdefault(tf_name, []).append((start, stop, name in frozen))
    out = []
    for tf_name, variable in by_name(model).items():
        blocks = rows[tf_name]
        if all(is_frozen for _, _, is_frozen in blocks):
            continue
        mask = None
        if any(is_frozen for _, _, is_frozen in blocks):
            mask = np.ones((variable.shape[0],) + (1,) * (len(variable.shape) - 1), variable.dtype.as_numpy_dtype)
            for start, stop, is_frozen in blocks:
                if is_frozen:
                    mask[start:stop] = 0
        out.append((tf_name, variable, mask))
    return out


def corrected(optimizer, grads, decay=True) -> list[tf.Tensor]:
    """The gradients of ``optimizer.trainable``'s variables, in its order, as
    the optimizer takes them: dense (the embedding's arrives as IndexedSlices,
    the rows of the looked-up words), plus the coupled L2 term
    ``weight_decay * p``, times the frozen rows' masks. ``decay``: whether to
    add the L2 term (a data-parallel replica's boolean tensor: only one
    replica adds it, so the sum over replicas has it once)."""
    weight_decay = optimizer.hyper["weight_decay"]
    out = []
    for (_, variable, mask), grad in zip(optimizer.trainable, grads):
        grad = tf.convert_to_tensor(grad)
        if weight_decay:
            decayed = grad + weight_decay * variable
            grad = decayed if decay is True else tf.where(decay, decayed, grad)
        if mask is not None:
            grad = grad * mask
        out.append(grad)
    return out


def adam_corrections(optimizer) -> None:
    """Set Keras' epsilon and learning rate for the coming step t so that its
    update is the shared lr * m-hat / (sqrt(v-hat) + eps) (see
    train.make_optimizer). Runs in the graph, with t from Keras' iteration
    count; float64 throughout. Nothing for an optimizer other than Adam."""
    if optimizer.name != "adam":
        return
    hyper, keras_optimizer = optimizer.hyper, optimizer.keras
    t = tf.cast(keras_optimizer.iterations + 1, tf.float64)

    def corrections(beta1, beta2):  # Keras' alpha / lr: sqrt(1 - beta2^t) / (1 - beta1^t)
        return tf.sqrt(1.0 - tf.pow(tf.constant(beta2, tf.float64), t)) / (
            1.0 - tf.pow(tf.constant(beta1, tf.float64), t))

    exact = corrections(hyper["beta1"], hyper["beta2"])
    as_keras = corrections(float(np.float32(hyper["beta1"])), float(np.float32(hyper["beta2"])))
    optimizer.rate.assign(tf.cast(optimizer.shared_rate * exact / as_keras, optimizer.rate.dtype))
    epsilon_hat = hyper["eps"] * tf.sqrt(1.0 - tf.pow(tf.constant(hyper["beta2"], tf.float64), t))
    keras_optimizer.epsilon.assign(tf.cast(epsilon_hat, keras_optimizer.epsilon.dtype))


def apply(optimizer, grads) -> None:
    """The update of a training step: ``grads`` of ``optimizer.trainable``'s
    variables, in its order; the coupled L2 term and the frozen rows' masks
    applied first, Adam's corrections set, then Keras' update."""
    updates = [(grad, variable) for grad, (_, variable, _) in zip(corrected(optimizer, grads), optimizer.trainable)]
    adam_corrections(optimizer)
    optimizer.keras.apply_gradients(updates)
