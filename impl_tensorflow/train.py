"""Loss, gradients, optimizers and the training step (TensorFlow).

The functions here build graph pieces; ``runner.py`` wraps them in
``tf.function``s with a fixed input signature, so each is traced once.
``tf.GradientTape`` records the forward pass, the while loop included, and
``tape.gradient`` adds the backward loop to the same graph. The optimizers are
Keras 3's SGD, Adam and RMSprop (the framework's own library) on the raw
``tf.Variable``s, with the shared hyperparameter names, defaults and state
layout of shared/optimizers.py; make_optimizer lists where Keras computes
differently.

Dropout is stateless: the training step takes a seed <int32>[2] made on the
host from (Runner seed, step number), so the traced graph draws fresh masks
at every step without any random state inside it, and a resumed run draws
the masks of an uninterrupted one.

The supervised loss of docs/spec.md §7 (``transition_weight`` > 0) adds the
transition head's cross-entropy against the gold actions, the model
following the gold transitions (teacher forcing): ``SNLIClassifier.parse``
in gold mode gives the head's logits at every step.

The data-parallel step over K replicas is replicas.py's.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from shared import optimizers
from shared.params import param_shapes
from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN
from shared.transitions import PAD, REDUCE

from . import convert
from .classifier import SNLIClassifier

# Keras 3 picks its backend when first imported; the optimizers below must be
# the TensorFlow ones. (Only a default: an explicit choice is respected, and
# checked in make_optimizer.)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402

OPTIMIZERS = optimizers.OPTIMIZERS


# --------------------------------------------------------------------------
# Graph side
# --------------------------------------------------------------------------


def batch_loss(model: SNLIClassifier, inputs, labels, training: bool = False, seed=None,
               transition_weight: float = 0.0) -> tf.Tensor:
    """Mean cross-entropy of the batch (a 0-d tensor); with ``transition_weight``
    > 0 plus that times the transition loss (docs/spec.md §7, supervised)."""
    if not transition_weight:  # a Python value: the graph of a plain model is what it always was
        _, _, logits = model(*inputs, training=training, seed=seed)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    parses, logits = model.parse(*inputs, mode="gold", training=training, seed=seed)
    class_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return class_loss + transition_weight * transition_loss(parses.transition_logits, parses.transitions)


def transition_loss(transition_logits: tf.Tensor, transitions: tf.Tensor) -> tf.Tensor:
    """The mean, over every non-PAD step, of the two-way cross-entropy of
    softmax(t) against the action taken (docs/spec.md §7; no validity mask).

    transition_logits <float>[S, T, 2] = (t_S, t_R); transitions <int32>[S, T].
    """
    total, count = _transition_loss_sum(transition_logits, transitions)
    return total / count


def _transition_loss_sum(transition_logits: tf.Tensor, transitions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(the sum of the two-way cross-entropies over every non-PAD step, the
    number of those steps as a float): transition_loss is their quotient."""
    transitions = tf.reshape(transitions, [-1])  # [S * T]: rank 1, so no shape Assert (which XLA drops)
    real = tf.not_equal(transitions, PAD)
    columns = tf.where(tf.equal(transitions, REDUCE), REDUCE_COLUMN, SHIFT_COLUMN)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=columns,
                                                            logits=tf.reshape(transition_logits, [-1, 2]))
    count = tf.reduce_sum(tf.cast(real, losses.dtype))
    return tf.reduce_sum(tf.where(real, losses, tf.zeros([], losses.dtype))), count


def _dense(grad) -> tf.Tensor:
    # The embedding's gradient arrives as IndexedSlices (rows of the looked-up
    # words); canonical gradients and the optimizers' dense updates want a tensor.
    return tf.convert_to_tensor(grad)


def loss_and_grads(model: SNLIClassifier, inputs, labels,
                   transition_weight: float = 0.0) -> tuple[tf.Tensor, list[tf.Tensor]]:
    """Eval mode: the loss and its gradient for every entry of convert._variables(model), in order.
    (A transition head that the loss does not use gets zeros.)"""
    variables = list(convert._variables(model).values())
    with tf.GradientTape() as tape:
        loss = batch_loss(model, inputs, labels, transition_weight=transition_weight)
    # backwards through the while loop
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return loss, [_dense(g) for g in grads]


def parse(model: SNLIClassifier, inputs, mode: str, uniforms=None):
    """The classifier's parse of a batch in ``mode`` (docs/spec.md §7), eval mode.

    ``inputs``: the four int32 arrays of a PairBatch; ``uniforms``: sampled
    mode's (premise_u, hypothesis_u) <float64>[B, T] each, else None. ``mode``
    is a Python string: runner.py traces one function per mode. Returns
    (SentenceParses of the 2B sentences, premises first; logits <float>[B, 3]).
    """
    return model.parse(*inputs, mode=mode, uniforms=uniforms)


# --------------------------------------------------------------------------
# Optimizers (Keras 3) with the shared names, state layout and frozen entries
# --------------------------------------------------------------------------


def _trainable(model: SNLIClassifier, frozen: Sequence[str]) -> list[tuple[str, tf.Variable, np.ndarray | None]]:
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
    for tf_name, variable in convert._variables(model).items():
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


def make_optimizer(name: str, model: SNLIClassifier, lr: float, *, frozen: Sequence[str] = (),
                   **hyper) -> keras.optimizers.Optimizer:
    """keras.optimizers.SGD, Adam or RMSprop over the trainable variables.

    ``hyper`` takes the shared names of shared/optimizers.py (``momentum``,
    ``beta1``, ``beta2``, ``rho``, ``eps``, ``weight_decay``) with the shared
    defaults, mapped onto Keras' (``beta_1``, ``epsilon``, ...). Built here,
    eagerly: its slot variables must exist before the training step is traced
    (a tf.function may not create variables on every trace).

    Where Keras computes differently from the shared definition:
    ``weight_decay`` is NOT given to Keras (its decay is decoupled, AdamW
    style); train_step adds the shared coupled term ``g + wd * p`` to the
    gradient instead. Keras' Adam adds epsilon to sqrt(v) before the bias
    correction of v (an epsilon acts as ``eps / sqrt(1 - b2^t)`` in the shared
    formula) and computes the bias corrections from float32-rounded betas; the
    training step feeds it an epsilon and a learning rate that turn its
    update into the shared one (_adam_corrections). Keras' SGD momentum keeps
    ``m = momentum * m - lr * g`` and adds it, i.e. ``m = -lr * b`` for the
    shared buffer ``b`` while lr is constant (optimizer_state converts with
    the current lr). RMSprop matches exactly.
    Keras keeps a float learning rate in a float32 variable, which in float64
    would make lr = 0.1 act as 0.10000000149: the rate is instead a variable
    of the model's dtype, handed to Keras as a callable that it reads at
    every step (a traced step reads the variable: no retrace). In float64,
    Keras still makes SGD's momentum and Adam's beta powers from float32
    constants (0.9 acts as 0.89999998), a 1e-8 relative difference; values
    float32 holds exactly (0.5, 0.875, 0.125) avoid it.
    """
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"Keras runs on the {keras.backend.backend()!r} backend; "
                           "set KERAS_BACKEND=tensorflow to train the TensorFlow SPINN")
    hyper = optimizers.resolve(name, hyper)  # ValueError for an unknown name or hyperparameter
    optimizers.check_frozen(frozen, convert.name_map(model.config))
    rate = tf.Variable(lr, dtype=model.embed.embedding.dtype, trainable=False, name="learning_rate")
    if name == "sgd":
        optimizer = keras.optimizers.SGD(learning_rate=lambda: rate, momentum=hyper["momentum"])
    elif name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=lambda: rate, beta_1=hyper["beta1"], beta_2=hyper["beta2"],
                                          epsilon=hyper["eps"])
        # Two places where Keras' Adam computes otherwise than the shared one
        # (PyTorch, optax, the NumPy reference), and what _adam_corrections
        # feeds it before each step so that its own update is the shared one:
        # * it adds epsilon to sqrt(v) before the bias correction of v, where
        #   an epsilon weighs 1/sqrt(1 - beta2^t) times more (30x at step 1):
        #   its epsilon becomes a variable set to eps * sqrt(1 - beta2^t);
        # * it computes the bias corrections from the betas rounded to float32
        #   (0.999 -> 0.99900001), while its moving averages use 1 - beta from
        #   the exact value: v-hat comes out 1.3e-5 too large at every step, and
        #   over 200 steps the loss curve drifts by 1e-2 from the others. Its
        #   learning-rate variable becomes the rate times the ratio of the exact
        #   to the float32 corrections (set_learning_rate sets the rate itself).
        optimizer.epsilon = tf.Variable(hyper["eps"], dtype=model.embed.embedding.dtype, trainable=False,
                                        name="adam_epsilon_hat")
        optimizer.shared = {"eps": hyper["eps"], "beta1": hyper["beta1"], "beta2": hyper["beta2"],
                            "lr": tf.Variable(lr, dtype=tf.float64, trainable=False, name="adam_shared_lr")}
    else:
        optimizer = keras.optimizers.RMSprop(learning_rate=lambda: rate, rho=hyper["rho"], epsilon=hyper["eps"])
    optimizer.build([variable for _, variable, _ in _trainable(model, frozen)])
    return optimizer


def set_learning_rate(optimizer: keras.optimizers.Optimizer, lr: float) -> None:
    """Assign the optimizer's learning-rate variable: the traced step reads it, nothing retraces.
    (Adam: the shared rate, which _adam_corrections turns into Keras' before each step.)"""
    if hasattr(optimizer, "shared"):
        optimizer.shared["lr"].assign(lr)
    optimizer.learning_rate.assign(lr)  # the variable behind Keras' callable rate


def _slot_variables(optimizer: keras.optimizers.Optimizer, name: str, slot: str) -> list:
    """Keras' per-variable slot list for a shared slot name, in build order (the _trainable() order)."""
    lists = {("sgd", "momentum"): "momentums", ("adam", "m"): "_momentums", ("adam", "v"): "_velocities",
             ("rmsprop", "v"): "_velocities"}
    return getattr(optimizer, lists[(name, slot)])


def _to_shared(name: str, slot: str, value: np.ndarray, lr: float) -> np.ndarray:
    return -value / lr if (name, slot) == ("sgd", "momentum") else value


def _from_shared(name: str, slot: str, value: np.ndarray, lr: float) -> np.ndarray:
    return -lr * value if (name, slot) == ("sgd", "momentum") else value


def optimizer_state(model: SNLIClassifier, optimizer: keras.optimizers.Optimizer, name: str, hyper: dict,
                    frozen: Sequence[str], step: int) -> dict[str, np.ndarray]:
    """The optimizer's state in the shared layout: ``step`` and ``{slot}/{param}``
    arrays with canonical names and [in, out] kernels (zeros before the first step)."""
    lr = float(optimizer.learning_rate.numpy())
    variables = _trainable(model, frozen)
    mapping = convert.name_map(model.config)
    out: dict[str, np.ndarray] = {optimizers.STEP: np.array(step, dtype=np.int64)}
    for slot in optimizers.slots(name, hyper):
        values = {tf_name: _to_shared(name, slot, np.asarray(keras_variable.numpy()), lr)
                  for (tf_name, _, _), keras_variable in zip(variables, _slot_variables(optimizer, name, slot))}
        for canonical, (tf_name, start, stop) in mapping.items():
            if canonical not in frozen:
                out[f"{slot}/{canonical}"] = np.array(values[tf_name][start:stop], copy=True)
    optimizers.check_state(out, optimizers.state_shapes(name, hyper, param_shapes(model.config), frozen))
    return out


def load_optimizer_state(model: SNLIClassifier, optimizer: keras.optimizers.Optimizer, name: str, hyper: dict,
                         frozen: Sequence[str], state: Mapping[str, np.ndarray]) -> int:
    """Put a shared-layout state into ``optimizer``; returns its step count."""
    optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(model.config), frozen))
    lr = float(optimizer.learning_rate.numpy())
    step = int(state[optimizers.STEP])
    variables = _trainable(model, frozen)
    blocks: dict[str, list[tuple[str, int, int]]] = {}
    for canonical, (tf_name, start, stop) in convert.name_map(model.config).items():
        blocks.setdefault(tf_name, []).append((canonical, start, stop))
    for slot in optimizers.slots(name, hyper):
        for (tf_name, variable, _), keras_variable in zip(variables, _slot_variables(optimizer, name, slot)):
            parts = [np.asarray(state[f"{slot}/{canonical}"]) if canonical not in frozen
                     else np.zeros((stop - start,) + tuple(variable.shape[1:])) for canonical, start, stop in blocks[tf_name]]
            value = _from_shared(name, slot, np.concatenate(parts, axis=0), lr)
            keras_variable.assign(value.astype(variable.dtype.as_numpy_dtype))
    optimizer.iterations.assign(step)  # Adam's bias correction counts from here
    return step


def train_step(model: SNLIClassifier, optimizer: keras.optimizers.Optimizer, inputs, labels, seed, *,
               frozen: Sequence[str] = (), weight_decay: float = 0.0, transition_weight: float = 0.0) -> tf.Tensor:
    """One optimizer step in training mode (dropout on, if the model has a
    rate); returns the loss computed before the update. Frozen parameters get
    no update (their gradients are not even computed when a whole variable is
    frozen); ``weight_decay`` is the shared coupled L2 term ``g + wd * p``;
    ``transition_weight`` weighs the supervised transition loss."""
    variables = _trainable(model, frozen)
    with tf.GradientTape() as tape:
        loss = batch_loss(model, inputs, labels, training=True, seed=seed, transition_weight=transition_weight)
    # An unused transition head (weight 0) gets a zero gradient: the optimizer
    # still steps it (weight decay, state), as every framework does.
    grads = tape.gradient(loss, [variable for _, variable, _ in variables],
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    _apply_gradients(optimizer, variables, grads, weight_decay)
    return loss


def _apply_gradients(optimizer: keras.optimizers.Optimizer, variables, grads, weight_decay: float = 0.0) -> None:
    """The update of a training step: ``variables`` as ``_trainable`` lists them,
    their gradients in that order; the coupled L2 term and the frozen rows'
    masks applied first."""
    updates = [(grad, variable) for grad, (_, variable, _) in zip(_corrected(variables, grads, weight_decay),
                                                                  variables)]
    if isinstance(optimizer, keras.optimizers.Adam):
        _adam_corrections(optimizer)
    optimizer.apply_gradients(updates)


def _corrected(variables, grads, weight_decay: float = 0.0, decay=True) -> list[tf.Tensor]:
    """The gradients as the optimizer takes them: dense, plus the coupled L2
    term ``weight_decay * p``, times the frozen rows' masks. ``decay``: whether
    to add the L2 term (a data-parallel replica's boolean tensor: only one
    replica adds it, so the sum over replicas has it once)."""
    out = []
    for (_, variable, mask), grad in zip(variables, grads):
        grad = _dense(grad)
        if weight_decay:
            decayed = grad + weight_decay * variable
            grad = decayed if decay is True else tf.where(decay, decayed, grad)
        if mask is not None:
            grad = grad * mask
        out.append(grad)
    return out


def _adam_corrections(optimizer: keras.optimizers.Adam) -> None:
    """Set Keras' epsilon and learning rate for the coming step t so that its
    update is the shared lr * m-hat / (sqrt(v-hat) + eps) (see make_optimizer).
    Runs in the graph, with t from optimizer.iterations; float64 throughout."""
    shared = optimizer.shared
    t = tf.cast(optimizer.iterations + 1, tf.float64)

    def corrections(beta1, beta2):  # Keras' alpha / lr: sqrt(1 - beta2^t) / (1 - beta1^t)
        return tf.sqrt(1.0 - tf.pow(tf.constant(beta2, tf.float64), t)) / (
            1.0 - tf.pow(tf.constant(beta1, tf.float64), t))

    exact = corrections(shared["beta1"], shared["beta2"])
    as_keras = corrections(float(np.float32(shared["beta1"])), float(np.float32(shared["beta2"])))
    optimizer.learning_rate.assign(tf.cast(shared["lr"] * exact / as_keras, optimizer.learning_rate.dtype))
    epsilon_hat = shared["eps"] * tf.sqrt(1.0 - tf.pow(tf.constant(shared["beta2"], tf.float64), t))
    optimizer.epsilon.assign(tf.cast(epsilon_hat, optimizer.epsilon.dtype))
