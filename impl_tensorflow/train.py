"""Loss, gradients, optimizers and the training step (TensorFlow).

The functions here build graph pieces; ``runner.py`` wraps them in
``tf.function``s with a fixed input signature, so each is traced once. Their
``batch`` is a shared.batching.BatchArrays of tensors (the traced function's
input), whose ``levels`` is the level schedule for levels.py's classifier
and ``()`` otherwise. ``tf.GradientTape`` records the forward pass, the while
loop included, and ``tape.gradient`` adds the backward loop to the same
graph. The optimizers are Keras 3's SGD, Adam and RMSprop (the framework's
own library) on the raw ``tf.Variable``s, held by :class:`Optimizer` with the
shared hyperparameter names, defaults and state layout of
shared/optimizers.py; make_optimizer lists where Keras computes differently,
and updates.py applies the update.

Dropout is stateless: in training (``model.dropout(seed, step)``, classifier.py)
the masks are drawn from the Runner's seed, fixed in the trace, and the step
number, an input of the traced step, so the graph draws fresh masks at every
step without any random state inside it, and a resumed run draws the masks
of an uninterrupted one.

The supervised loss of docs/spec.md §7 (``transition_weight`` > 0) adds the
transition head's cross-entropy against the gold actions, the model
following the gold transitions (teacher forcing): ``SNLIClassifier.parse``
in gold mode gives the head's logits at every step.

The data-parallel step over K replicas is replicas.py's.
"""

from __future__ import annotations

import contextlib
import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from shared import optimizers
from shared.batching import BatchArrays
from shared.params import param_shapes
from shared.parsing import SentenceParses

from . import convert, updates
from .classifier import SNLIClassifier
from .head import transition_loss_sum
from .variables import by_name

# Keras 3 picks its backend when first imported; the optimizers below must be
# the TensorFlow ones. (Only a default: an explicit choice is respected, and
# checked in make_optimizer.)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402

OPTIMIZERS = optimizers.OPTIMIZERS


# --------------------------------------------------------------------------
# Graph side
# --------------------------------------------------------------------------


def _schedule(batch: BatchArrays) -> dict:
    """The model's keyword inputs beyond the four arrays: the level schedule, for levels.py's classifier."""
    return {"levels": batch.levels} if batch.levels else {}


def _training(model: SNLIClassifier, training: bool, seed: int, step):
    """model.dropout(seed, step) in training, else nothing (eval mode: no dropout)."""
    return model.dropout(seed, step) if training else contextlib.nullcontext()


def batch_loss(model: SNLIClassifier, batch: BatchArrays, *, training: bool = False, seed: int = 0, step=0,
               transition_weight: float = 0.0) -> tf.Tensor:
    """Mean cross-entropy of the batch (a 0-d tensor); with ``transition_weight``
    > 0 plus that times the transition loss (docs/spec.md §7, supervised).
    ``training``: dropout on, its masks drawn from (``seed``, ``step``) alone
    (``step`` an int or an int scalar tensor)."""
    with _training(model, training, seed, step):
        if not transition_weight:  # a Python value: the graph of a plain model is what it always was
            _, _, logits = model(*batch[:4], **_schedule(batch))
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch.labels, logits=logits))
        parses, logits = model.parse(*batch[:4], mode="gold", **_schedule(batch))
    class_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch.labels, logits=logits))
    return class_loss + transition_weight * transition_loss(parses)


def transition_loss(parses: SentenceParses) -> tf.Tensor:
    """The mean, over every non-PAD step, of the two-way cross-entropy of
    softmax(t) against the action taken (docs/spec.md §7; no validity mask):
    ``parses.transition_logits`` <float>[S, T, 2] = (t_S, t_R) against
    ``parses.transitions`` <int32>[S, T]."""
    total, count = transition_loss_sum(parses)
    return total / count


def loss_and_grads(model: SNLIClassifier, batch: BatchArrays, *,
                   transition_weight: float = 0.0) -> tuple[tf.Tensor, list[tf.Tensor]]:
    """Eval mode: the loss and its gradient for every entry of
    variables.by_name(model), in order (convert.grads_to_canonical names
    them). A transition head that the loss does not use gets zeros."""
    variables = list(by_name(model).values())
    with tf.GradientTape() as tape:
        loss = batch_loss(model, batch, transition_weight=transition_weight)
    # backwards through the while loop
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    # The embedding's gradient arrives as IndexedSlices (rows of the looked-up
    # words); canonical gradients want a tensor.
    return loss, [tf.convert_to_tensor(g) for g in grads]


def parse(model: SNLIClassifier, batch: BatchArrays, mode: str = "predicted", uniforms=None):
    """The classifier's parse of a batch in ``mode`` (docs/spec.md §7), eval mode.

    ``uniforms``: sampled mode's (premise_u, hypothesis_u) <float64>[B, T]
    each, else None. ``mode`` is a Python string: runner.py traces one
    function per mode. Returns (SentenceParses of the 2B sentences, premises
    first; logits <float>[B, 3]).
    """
    return model.parse(*batch[:4], mode=mode, uniforms=uniforms, **_schedule(batch))


# --------------------------------------------------------------------------
# Optimizers (Keras 3) with the shared names, state layout and frozen entries
# --------------------------------------------------------------------------


class Optimizer:
    """Keras' own SGD, Adam or RMSprop with the shared rules' name, hyperparameters and frozen parameters.

    ``name``, ``hyper`` (shared.optimizers.resolve'd) and ``frozen``
    (canonical names) as the shared rules name them; ``keras``: the Keras
    optimizer, built over ``trainable`` (updates.trainable: the variables it
    updates, with the frozen rows' masks); ``rate``: the learning-rate
    variable Keras reads at every step; ``shared_rate``: Adam's shared rate,
    which updates.adam_corrections turns into Keras' before each step (None
    for the others). train_step takes the coupled weight decay and the
    frozen entries from here.
    """

    def __init__(self, name: str, hyper: dict, frozen: Sequence[str], keras_optimizer: keras.optimizers.Optimizer,
                 rate: tf.Variable, trainable: list, shared_rate: tf.Variable | None = None):
        self.name = name
        self.hyper = hyper
        self.frozen = tuple(frozen)
        self.keras = keras_optimizer
        self.rate = rate
        self.trainable = trainable
        self.shared_rate = shared_rate


def make_optimizer(name: str, model: SNLIClassifier, lr: float, *, frozen: Sequence[str] = (),
                   **hyper) -> Optimizer:
    """keras.optimizers.SGD, Adam or RMSprop over the trainable variables, as an :class:`Optimizer`.

    ``hyper`` takes the shared names of shared/optimizers.py (``momentum``,
    ``beta1``, ``beta2``, ``rho``, ``eps``, ``weight_decay``) with the shared
    defaults, mapped onto Keras' (``beta_1``, ``epsilon``, ...). Built here,
    eagerly: its slot variables must exist before the training step is traced
    (a tf.function may not create variables on every trace).

    Where Keras computes differently from the shared definition:
    ``weight_decay`` is NOT given to Keras (its decay is decoupled, AdamW
    style); the training step adds the shared coupled term ``g + wd * p`` to
    the gradient instead (updates.corrected). Keras' Adam adds epsilon to
    sqrt(v) before the bias correction of v (an epsilon acts as
    ``eps / sqrt(1 - b2^t)`` in the shared formula) and computes the bias
    corrections from float32-rounded betas; the training step feeds it an
    epsilon and a learning rate that turn its update into the shared one
    (updates.adam_corrections). Keras' SGD momentum keeps
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
    frozen = optimizers.check_frozen(frozen, convert.name_map(model.config))
    dtype = model.embed.embedding.dtype
    rate = tf.Variable(lr, dtype=dtype, trainable=False, name="learning_rate")
    shared_rate = None
    if name == "sgd":
        keras_optimizer = keras.optimizers.SGD(learning_rate=lambda: rate, momentum=hyper["momentum"])
    elif name == "adam":
        keras_optimizer = keras.optimizers.Adam(learning_rate=lambda: rate, beta_1=hyper["beta1"],
                                                beta_2=hyper["beta2"], epsilon=hyper["eps"])
        # Two places where Keras' Adam computes otherwise than the shared one
        # (PyTorch, optax, the NumPy reference), and what
        # updates.adam_corrections feeds it before each step so that its own
        # update is the shared one:
        # * it adds epsilon to sqrt(v) before the bias correction of v, where
        #   an epsilon weighs 1/sqrt(1 - beta2^t) times more (30x at step 1):
        #   its epsilon becomes a variable set to eps * sqrt(1 - beta2^t);
        # * it computes the bias corrections from the betas rounded to float32
        #   (0.999 -> 0.99900001), while its moving averages use 1 - beta from
        #   the exact value: v-hat comes out 1.3e-5 too large at every step, and
        #   over 200 steps the loss curve drifts by 1e-2 from the others. Its
        #   learning-rate variable becomes the rate times the ratio of the exact
        #   to the float32 corrections (set_learning_rate sets the shared rate).
        keras_optimizer.epsilon = tf.Variable(hyper["eps"], dtype=dtype, trainable=False, name="adam_epsilon_hat")
        shared_rate = tf.Variable(lr, dtype=tf.float64, trainable=False, name="adam_shared_lr")
    else:
        keras_optimizer = keras.optimizers.RMSprop(learning_rate=lambda: rate, rho=hyper["rho"], epsilon=hyper["eps"])
    trainable = updates.trainable(model, frozen)
    keras_optimizer.build([variable for _, variable, _ in trainable])
    return Optimizer(name, hyper, frozen, keras_optimizer, rate, trainable, shared_rate)


def set_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """Assign the optimizer's learning-rate variable: the traced step reads it, nothing retraces.
    (Adam: the shared rate, which updates.adam_corrections turns into Keras' before each step.)"""
    if optimizer.shared_rate is not None:
        optimizer.shared_rate.assign(lr)
    optimizer.rate.assign(lr)  # the variable behind Keras' callable rate


def _slot_variables(optimizer: Optimizer, slot: str) -> list:
    """Keras' per-variable slot list for a shared slot name, in build order (optimizer.trainable's)."""
    lists = {("sgd", "momentum"): "momentums", ("adam", "m"): "_momentums", ("adam", "v"): "_velocities",
             ("rmsprop", "v"): "_velocities"}
    return getattr(optimizer.keras, lists[(optimizer.name, slot)])


def _to_shared(name: str, slot: str, value: np.ndarray, lr: float) -> np.ndarray:
    return -value / lr if (name, slot) == ("sgd", "momentum") else value


def _from_shared(name: str, slot: str, value: np.ndarray, lr: float) -> np.ndarray:
    return -lr * value if (name, slot) == ("sgd", "momentum") else value


def optimizer_state(model: SNLIClassifier, optimizer: Optimizer, step: int) -> dict[str, np.ndarray]:
    """The optimizer's state in the shared layout: ``step`` and ``{slot}/{param}``
    arrays with canonical names and [in, out] kernels (zeros before the first step)."""
    name, hyper, frozen = optimizer.name, optimizer.hyper, optimizer.frozen
    lr = float(optimizer.rate.numpy())
    mapping = convert.name_map(model.config)
    out: dict[str, np.ndarray] = {optimizers.STEP: np.array(step, dtype=np.int64)}
    for slot in optimizers.slots(name, hyper):
        values = {tf_name: _to_shared(name, slot, np.asarray(keras_variable.numpy()), lr)
                  for (tf_name, _, _), keras_variable in zip(optimizer.trainable, _slot_variables(optimizer, slot))}
        for canonical, (tf_name, start, stop) in mapping.items():
            if canonical not in frozen:
                out[f"{slot}/{canonical}"] = np.array(values[tf_name][start:stop], copy=True)
    optimizers.check_state(out, optimizers.state_shapes(name, hyper, param_shapes(model.config), frozen))
    return out


def load_optimizer_state(model: SNLIClassifier, optimizer: Optimizer, state: Mapping[str, np.ndarray]) -> None:
    """Put a shared-layout state into ``optimizer``, in place, its step count
    included (Adam's bias correction counts from it; the runner reads
    ``int(state["step"])`` for its own count)."""
    name, hyper, frozen = optimizer.name, optimizer.hyper, optimizer.frozen
    optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(model.config), frozen))
    lr = float(optimizer.rate.numpy())
    blocks: dict[str, list[tuple[str, int, int]]] = {}
    for canonical, (tf_name, start, stop) in convert.name_map(model.config).items():
        blocks.setdefault(tf_name, []).append((canonical, start, stop))
    for slot in optimizers.slots(name, hyper):
        for (tf_name, variable, _), keras_variable in zip(optimizer.trainable, _slot_variables(optimizer, slot)):
            parts = [np.asarray(state[f"{slot}/{canonical}"]) if canonical not in frozen
                     else np.zeros((stop - start,) + tuple(variable.shape[1:]))
                     for canonical, start, stop in blocks[tf_name]]
            value = _from_shared(name, slot, np.concatenate(parts, axis=0), lr)
            keras_variable.assign(value.astype(variable.dtype.as_numpy_dtype))
    optimizer.keras.iterations.assign(int(state[optimizers.STEP]))  # Adam's bias correction counts from here


def train_step(model: SNLIClassifier, optimizer: Optimizer, batch: BatchArrays, *, seed: int = 0, step=0,
               transition_weight: float = 0.0) -> tf.Tensor:
    """One optimizer step in training mode (dropout on, if the model has a
    rate, its masks from (``seed``, ``step``)); returns the loss computed
    before the update. The optimizer's frozen parameters get no update (their
    gradients are not even computed when a whole variable is frozen), and its
    ``weight_decay`` is the shared coupled L2 term ``g + wd * p``;
    ``transition_weight`` weighs the supervised transition loss."""
    variables = [variable for _, variable, _ in optimizer.trainable]
    with tf.GradientTape() as tape:
        loss = batch_loss(model, batch, training=True, seed=seed, step=step, transition_weight=transition_weight)
    # An unused transition head (weight 0) gets a zero gradient: the optimizer
    # still steps it (weight decay, state), as every framework does.
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    updates.apply(optimizer, grads)
    return loss
