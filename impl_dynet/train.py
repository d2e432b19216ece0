"""The model, losses, gradients, the optimizers and the parse (DyNet).

:class:`Model` holds what a graph of the classifier is made from: the
parameter collection (weights.py), the canonical float32 weights beside it,
the family's SPINN, autobatching on or off and the dropout rate; and what
the last call read on the host and where its seconds went, for the runner.
Each call builds a fresh graph of it (graph.py): the sentences' nodes in a
Python loop, one evaluation (``dy.forward``; with autobatching DyNet groups
the nodes now), and for a gradient ``backward()`` on the loss node, which
adds into every parameter's gradient. ``loss_and_grads`` returns those
gradients as DyNet holds them, by its parameter names
(convert.grads_to_canonical turns them canonical).

Two optimizers. :class:`Optimizer` (``make_optimizer``; the runner's
``trainer="shared"``, the default: ``bench train``, the checkpoints, the
equivalence tests) is NOT DyNet's trainers: the shared update rules of
shared/optimizers.py, applied in float32 NumPy (rules.py) to the canonical
weights the model keeps, which are then written into DyNet's parameters.
Why, trainer by trainer (DyNet 2.1, dynet/training.cc):

* none of them can be checkpointed from Python: the Python API of
  ``Trainer`` has update, restart, the learning rate, clipping and sparse
  updates, and no way to read or write the moment vectors, so
  ``optimizer_state`` / ``load_optimizer_state`` in the shared layout (a
  checkpoint that resumes in another framework) would be impossible;
* a trainer updates DyNet's copy of the weights, and DyNet's copy of the
  tracker's and Reduce's biases is the canonical bias minus 1 in the forget
  blocks (the fused LSTM nodes add the 1, weights.py): canonical weights read
  back from a trainer's update would be rounded, and a run resumed from saved
  weights would not continue bit for bit;
* and where the rules differ: ``MomentumSGDTrainer`` keeps v = momentum v -
  lr g (the shared buffer times -lr, equal only while lr is constant);
  ``AdamTrainer`` adds epsilon to sqrt(v) before v's bias correction (lr_t =
  lr sqrt(1 - b2^t) / (1 - b1^t)), i.e. the shared rule with epsilon /
  sqrt(1 - b2^t), and takes epsilon only in its constructor, so it cannot be
  fed the per-step correction; DyNet's weight decay is a global decoupled
  rescaling of every weight, not the coupled g + wd p. ``SimpleSGDTrainer``
  (with clipping off) and ``RMSPropTrainer`` (epsilon inside the root) do
  compute the shared rules, but share the first two problems.

So a step with the shared rules reads every gradient out of DyNet, updates
in NumPy and writes every changed weight back. DyNet's Python API has no
buffer access: it copies a tensor element by element through Python floats,
both ways, which at full size costs more than the optimizer's arithmetic and
is kept apart in the runner's ``last_phases`` (``grads``, ``update``). Of the
embedding only the batch's rows are read, only the rows a step moved are
written, and nothing at all while it is frozen (its lookups are then
constants).

The benchmark times DyNet as its users run it instead (``trainer="native"``:
:class:`NativeTrainer`, made with the same arguments as ``make_optimizer``):
``loss.backward()`` and the trainer's ``update()``, both in C++, with no
gradient read and no weight written through Python. The canonical weights
are then read back from DyNet when asked for (``get_params``), and there is
no optimizer state to checkpoint. How far its updates are from the shared
rules is measured, not assumed (tests/test_dynet_native.py;
docs/autobatching.md §6).

Dropout masks come from a NumPy generator seeded with (seed, step)
(dropout.Masks), so a resumed run draws the masks of the uninterrupted one.

Here ``batch`` is a shared.batching.BatchArrays of NumPy arrays: Python
reads the transitions on the host.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from shared import optimizers, parsing
from shared.params import ModelConfig, param_shapes
from shared.transitions import PAD, REDUCE

from . import graph
from .classifier import SNLIClassifier
from .library import dy
from .rules import SharedRules
from .weights import EMBEDDING, Weights


class Model:
    """What a graph of the classifier is made from, and what the last call left
    for the runner.

    ``weights``: the parameter collection (zeros until convert.from_canonical
    writes it); ``params``: the canonical float32 weights beside it, which the
    shared rules update and DyNet's copy is written from; ``encoder``: the
    family's SPINN class (autobatch.SPINN); ``autobatch``: whether DyNet
    batches the graph as it evaluates it; ``dropout``: the rate of a training
    step. ``last_host_syncs``: the graph evaluations the last call made to
    read decisions; ``last_phases``: where its seconds went (phases.Clock)."""

    def __init__(self, config: ModelConfig, *, encoder: type, autobatch: bool = True, dropout: float = 0.0):
        self.config = config
        self.weights = Weights(config)
        self.params: dict[str, np.ndarray] = {}
        self.encoder = encoder
        self.autobatch = bool(autobatch)
        self.dropout = float(dropout)
        self.last_host_syncs = 0
        self.last_phases: dict[str, float] = {}


def transition_loss(parses: parsing.SentenceParses) -> dy.Expression:
    """The mean, over every non-PAD step of every sentence, of the two-way
    cross-entropy of softmax(t) against the action followed (gold mode: the
    gold action; no validity mask, docs/spec.md §7). ``parses``: the graph's
    nodes (autobatch.SPINN.parse), a head's t at each non-PAD step."""
    terms = []
    for row, logits in zip(parses.transitions.tolist(), parses.transition_logits):
        actions = [op for op in row if op != PAD]
        for op, t in zip(actions, logits):
            terms.append(dy.pickneglogsoftmax(t, parsing.REDUCE_COLUMN if op == REDUCE else parsing.SHIFT_COLUMN))
    return dy.esum(terms) * (1.0 / len(terms))


def _loss(classifier: SNLIClassifier, batch, transition_weight: float) -> dy.Expression:
    """The batch's loss node in ``classifier``'s graph: the mean cross-entropy,
    plus ``transition_weight`` times the supervised transition loss (teacher
    forcing) when it is positive."""
    if transition_weight > 0:
        parses, logits = graph.parse_batch(classifier, batch, "gold")
    else:
        _, logits = graph.encode_batch(classifier, batch)
    loss = dy.esum(graph.class_losses(logits, batch.labels)) * (1.0 / len(batch.labels))
    if transition_weight > 0:
        loss = loss + transition_loss(parses) * transition_weight
    return loss


def batch_loss(model: Model, batch, *, training: bool = False, seed: int = 0, step: int = 0,
               transition_weight: float = 0.0) -> dy.Expression:
    """The batch's loss node in a fresh graph (not evaluated: ``.value()`` runs
    the forward pass): the mean cross-entropy, plus ``transition_weight``
    times the supervised transition loss when it is positive; in training,
    with the dropout masks of (seed, step)."""
    return _loss(graph.new_graph(model, batch, training=training, seed=seed, step=step), batch, transition_weight)


def loss_and_grads(model: Model, batch, *, transition_weight: float = 0.0) -> tuple[float, dict[str, np.ndarray]]:
    """Eval mode: (loss, its gradient by DyNet's parameter names, read out of
    DyNet's accumulators, which are cleared again; graph.gradients)."""
    classifier = graph.new_graph(model, batch)
    value = graph.backward(classifier, _loss(classifier, batch, transition_weight))
    grads = graph.gradients(classifier, model)
    graph.finish(classifier, model)
    return value, grads


# --------------------------------------------------------------------------
# Optimizers (see the module docstring)
# --------------------------------------------------------------------------


class Optimizer(SharedRules):
    """The shared rules of shared/optimizers.py in float32 NumPy (rules.SharedRules),
    under the name of every package's optimizer: ``name``, ``hyper``
    (resolved), ``frozen`` (canonical names), the rate ``lr`` and the state in
    the shared layout. Made by :func:`make_optimizer`; graph.update applies it."""

    def __init__(self, name: str, model: Model, lr: float, *, frozen: Sequence[str] = (), **hyper):
        super().__init__(name, lr, hyper, frozen, param_shapes(model.config))


class NativeTrainer:
    """DyNet's own trainer for ``name`` (sgd: ``SimpleSGDTrainer``, adam:
    ``AdamTrainer``, rmsprop: ``RMSPropTrainer``) over ``model``'s collection,
    as a DyNet user sets it up, with gradient clipping off (DyNet clips at 5
    by default; the shared rules never clip). Its update runs in C++ on
    DyNet's copy of the weights. Made with make_optimizer's arguments (the
    runner's ``trainer="native"``); ``name``, ``hyper``, ``frozen`` as an
    Optimizer's, ``trainer`` the DyNet trainer.

    What the shared rules have and it cannot take is refused in one line:
    momentum (DyNet's buffer is the shared one times -lr), weight decay
    (DyNet's is a global rescaling, not g + wd p), and freezing anything but
    the embedding (which is then looked up as a constant and gets no
    gradient). DyNet's defaults stand otherwise: Adam puts epsilon before
    the bias correction of v, and the embedding's rows are updated sparsely
    (only the rows of the batch; the shared rules move every row whose Adam
    moments are not zero)."""

    def __init__(self, name: str, model: Model, lr: float, *, frozen: Sequence[str] = (), **hyper):
        shapes = param_shapes(model.config)
        self.name = name
        self.hyper = optimizers.resolve(name, hyper)
        self.frozen = tuple(optimizers.check_frozen(frozen, shapes))
        if set(self.frozen) - {EMBEDDING}:
            raise ValueError(f"DyNet's own trainers freeze only {EMBEDDING} here, not "
                             f"{sorted(set(self.frozen) - {EMBEDDING})}: use trainer='shared'")
        if self.hyper.get("weight_decay") or self.hyper.get("momentum"):
            raise ValueError("DyNet's own trainers differ from the shared rules for momentum and weight decay: "
                             "use trainer='shared'")
        collection = model.weights.collection
        if name == "sgd":
            self.trainer = dy.SimpleSGDTrainer(collection, learning_rate=lr)
        elif name == "adam":
            self.trainer = dy.AdamTrainer(collection, alpha=lr, beta_1=self.hyper["beta1"],
                                          beta_2=self.hyper["beta2"], eps=self.hyper["eps"])
        else:
            self.trainer = dy.RMSPropTrainer(collection, learning_rate=lr, eps=self.hyper["eps"],
                                             rho=self.hyper["rho"])
        self.trainer.set_clip_threshold(0.0)  # <= 0: clipping off
        self.lr = float(lr)


def make_optimizer(name: str, model: Model, lr: float, *, frozen: Sequence[str] = (), **hyper) -> Optimizer:
    """The shared ``set_optimizer`` arguments -> the shared rules in NumPy (an
    :class:`Optimizer`; a ValueError names an unknown optimizer or hyperparameter)."""
    return Optimizer(name, model, lr, frozen=frozen, **hyper)


def set_learning_rate(optimizer: Optimizer | NativeTrainer, lr: float) -> None:
    """The rate of the following steps (nothing is traced, so nothing retraces)."""
    optimizer.lr = float(lr)
    if isinstance(optimizer, NativeTrainer):
        optimizer.trainer.learning_rate = float(lr)


def _shared_rules(optimizer: Optimizer | NativeTrainer) -> Optimizer:
    if isinstance(optimizer, NativeTrainer):
        raise ValueError("DyNet's own trainers keep their state in C++, out of Python's reach: "
                         "an optimizer state (a checkpoint) needs trainer='shared'")
    return optimizer


def optimizer_state(model: Model, optimizer: Optimizer | NativeTrainer, step: int) -> dict[str, np.ndarray]:
    """Copies of the state in the shared layout (float32 slots), with ``step``
    the runner's count of training steps; DyNet's own trainer has none to give
    (a one-line ValueError)."""
    state = {key: np.array(value) for key, value in _shared_rules(optimizer).state.items()}
    state[optimizers.STEP] = np.array(step, dtype=np.int64)
    return state


def load_optimizer_state(model: Model, optimizer: Optimizer | NativeTrainer,
                         state: Mapping[str, np.ndarray]) -> None:
    """Install a state of the shared layout (from any framework), in place; the
    runner reads the step count from ``state["step"]``."""
    optimizer = _shared_rules(optimizer)
    optimizers.check_state(state, optimizers.state_shapes(optimizer.name, optimizer.hyper, optimizer.shapes,
                                                          optimizer.frozen))
    optimizer.state = {key: np.array(value, dtype=np.int64 if key == optimizers.STEP else np.float32)
                       for key, value in state.items()}


def train_step(model: Model, optimizer: Optimizer | NativeTrainer, batch, *, seed: int = 0, step: int = 0,
               transition_weight: float = 0.0) -> float:
    """One update in training mode (dropout masks from (seed, step); a frozen
    embedding looked up as a constant); returns the loss computed before it."""
    classifier = graph.new_graph(model, batch, training=True, seed=seed, step=step,
                                 update_embedding=EMBEDDING not in optimizer.frozen)
    value = graph.update(classifier, model, optimizer, _loss(classifier, batch, transition_weight))
    graph.finish(classifier, model)
    return value


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def parse(model: Model, batch, mode: str = "predicted", uniforms=None
          ) -> tuple[parsing.SentenceParses, np.ndarray]:
    """Eval mode: the batch in ``mode`` -> (SentenceParses of the 2B sentences,
    premises first, as NumPy, float32; class logits <float32>[B, 3]).
    ``uniforms``: sampled mode's (premise_u, hypothesis_u) <float64>[B, T]."""
    classifier = graph.new_graph(model, batch)
    parses, logits = graph.parse_batch(classifier, batch, mode, uniforms)
    out = graph.read_parses(classifier, parses, logits)
    graph.finish(classifier, model)
    return out
