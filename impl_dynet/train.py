"""Losses, gradients, the optimizers, dropout and the parse (DyNet).

A DyNet call is: start a graph (classifier.SNLIClassifier), add every sentence's
nodes in a Python loop, evaluate once (``dy.forward``; with autobatching
DyNet groups the nodes now), and for a gradient run ``backward()`` on the
loss node, which adds into every parameter's gradient. The gradients are
read under their canonical names (convert.grads_to_canonical) and cleared.

The optimizers are NOT DyNet's trainers. The shared update rules of
shared/optimizers.py are applied here, in float32 NumPy, to the canonical
weights the runner keeps, which are then written into DyNet's parameters.
Why, trainer by trainer (DyNet 2.1, dynet/training.cc):

* none of them can be checkpointed from Python: the Python API of
  ``Trainer`` has update, restart, the learning rate, clipping and sparse
  updates, and no way to read or write the moment vectors, so
  ``optimizer_state`` / ``load_optimizer_state`` in the shared layout (a
  checkpoint that resumes in another framework) would be impossible;
* a trainer updates DyNet's copy of the weights, and DyNet's copy of the
  tracker's and Reduce's biases is the canonical bias minus 1 in the forget
  blocks (the fused LSTM nodes add the 1, convert.py): canonical weights read
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

So, by default (the runner's ``trainer="shared"``: ``bench train``, the
checkpoints, the equivalence tests), a step reads every gradient out of
DyNet, updates in NumPy and writes every changed weight back. DyNet's Python API has no buffer access: it
copies a tensor element by element through Python floats, both ways, which
at full size costs more than the optimizer's arithmetic and is kept apart
in the runner's ``last_phases`` (``grads``, ``update``). Of the embedding only the
batch's rows are read, only the rows a step moved are written, and nothing
at all while it is frozen (its lookups are then constants).

The benchmark times DyNet as its users run it instead (``trainer="native"``,
:class:`_NativeTrainer`): ``loss.backward()`` and the trainer's
``update()``, both in C++, with no gradient read and no weight written
through Python. The canonical weights are then read back from DyNet when
asked for (``get_params``), and there is no optimizer state to checkpoint.
How far its updates are from the shared rules is measured, not assumed
(tests/test_dynet_native.py; docs/autobatching.md §6).

Dropout masks come from a NumPy generator seeded with (seed, step)
(classifier._Masks), so a resumed run draws the masks of the uninterrupted one.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from shared import optimizers, parsing
from shared.batching import PairBatch
from shared.params import param_shapes
from shared.transitions import REDUCE, SHIFT

from . import convert
from .classifier import SNLIClassifier, _Masks, _Run
from .convert import EMBEDDING, _Weights
from .library import dy, pools_checked


def _class_losses(run: _Run, labels: Sequence[int]) -> list[dy.Expression]:
    """Per pair, the cross-entropy of its logits against its label (the Runner checked the labels)."""
    return [dy.pickneglogsoftmax(logits, int(label)) for logits, label in zip(run.logits, labels)]


def transition_loss(run: _Run) -> dy.Expression:
    """The mean, over every head evaluation of every sentence (every non-PAD
    step), of the two-way cross-entropy of softmax(t) against the action
    followed (gold mode: the gold action; no validity mask, docs/spec.md §7)."""
    terms = []
    for sentence in run.sentences:
        for column, logits in zip(sentence.columns, sentence.logits):
            action = parsing.REDUCE_COLUMN if sentence.transitions[column] == REDUCE else parsing.SHIFT_COLUMN
            terms.append(dy.pickneglogsoftmax(logits, action))
    return dy.esum(terms) * (1.0 / len(terms))


def batch_loss(classifier: SNLIClassifier, batch: PairBatch, transition_weight: float = 0.0) -> dy.Expression:
    """Mean cross-entropy of the batch, plus ``transition_weight`` times the
    supervised transition loss (teacher forcing) when it is positive."""
    run = _parse_batch(classifier, batch, "gold") if transition_weight > 0 else classifier._forward(batch)
    loss = dy.esum(_class_losses(run, batch.labels)) * (1.0 / len(batch.labels))
    if transition_weight > 0:
        loss = loss + transition_loss(run) * transition_weight
    return loss


def _backward(classifier: SNLIClassifier, loss: dy.Expression) -> tuple[float, dict[str, np.ndarray]]:
    """Evaluate ``loss`` (one forward), run the backward pass, and return the
    loss and its canonical gradients, the accumulators cleared again."""
    with classifier.clock.section(), pools_checked():
        value = loss.value()
        loss.backward()
    rows = np.array(sorted(classifier.tokens), dtype=np.int64) if classifier.update_embedding else None
    with classifier.clock.section("grads"):  # DyNet's Python API copies a Python float per element
        grads = convert.grads_to_canonical(classifier.weights, embedding_rows=rows)
        convert._zero_grads(classifier.weights, embedding=classifier.update_embedding)
    return float(value), grads


def loss_and_grads(weights: _Weights, batch: PairBatch, *, autobatch: bool, transition_weight: float = 0.0
                   ) -> tuple[float, dict[str, np.ndarray], dict]:
    """Eval mode: (loss, canonical gradients, the call's timings)."""
    classifier = SNLIClassifier(weights, autobatch=autobatch)
    value, grads = _backward(classifier, batch_loss(classifier, batch, transition_weight))
    return value, grads, classifier.clock.timings()


# --------------------------------------------------------------------------
# Optimizers: the shared rules in float32 NumPy (see the module docstring)
# --------------------------------------------------------------------------


class _Optimizer:
    """sgd, adam or rmsprop as shared/optimizers.py defines them (coupled
    weight decay g + wd p, Adam's epsilon after the bias correction of v,
    RMSprop's inside the square root), in float32, with its state held in the
    shared layout itself: ``step`` and ``{slot}/{parameter}`` arrays."""

    def __init__(self, name: str, lr: float, hyper: Mapping[str, float], frozen: Sequence[str],
                 shapes: Mapping[str, tuple]):
        self.name = name
        self.hyper = optimizers.resolve(name, hyper)
        self.frozen = tuple(optimizers.check_frozen(frozen, shapes))
        self.lr = float(lr)
        self.shapes = dict(shapes)
        self.state = optimizers.zero_state(name, self.hyper, shapes, self.frozen, dtype=np.float32)

    @property
    def trainable(self) -> set[str]:
        return set(self.shapes) - set(self.frozen)

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> set[str]:
        """One update of ``params`` (canonical float32 arrays, replaced by new
        ones) from ``grads``; returns the names it changed."""
        t = int(self.state[optimizers.STEP]) + 1
        hyper, lr, state = self.hyper, self.lr, self.state
        for name in self.trainable:
            p, g = params[name], grads[name]
            if hyper["weight_decay"]:
                g = g + hyper["weight_decay"] * p
            if self.name == "sgd":
                if hyper["momentum"] > 0.0:
                    g = state[f"momentum/{name}"] = hyper["momentum"] * state[f"momentum/{name}"] + g
                params[name] = p - lr * g
            elif self.name == "adam":
                b1, b2 = hyper["beta1"], hyper["beta2"]
                m = state[f"m/{name}"] = b1 * state[f"m/{name}"] + (1 - b1) * g
                v = state[f"v/{name}"] = b2 * state[f"v/{name}"] + (1 - b2) * g * g
                params[name] = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + hyper["eps"])
            else:
                v = state[f"v/{name}"] = hyper["rho"] * state[f"v/{name}"] + (1 - hyper["rho"]) * g * g
                params[name] = p - lr * g / np.sqrt(v + hyper["eps"])
        state[optimizers.STEP] = np.array(t, dtype=np.int64)
        return self.trainable


def make_optimizer(name: str, lr: float, config, *, frozen: Sequence[str] = (), **hyper) -> _Optimizer:
    """The shared ``set_optimizer`` arguments -> the shared rules in NumPy (see
    the module docstring; a ValueError names an unknown optimizer)."""
    return _Optimizer(name, lr, hyper, frozen, param_shapes(config))


class _NativeTrainer:
    """DyNet's own trainer for ``name`` (sgd: ``SimpleSGDTrainer``, adam:
    ``AdamTrainer``, rmsprop: ``RMSPropTrainer``), as a DyNet user sets it up,
    with gradient clipping off (DyNet clips at 5 by default; the shared
    rules never clip). Its update runs in C++ on DyNet's copy of the weights.

    What the shared rules have and it cannot take is refused in one line:
    momentum (DyNet's buffer is the shared one times -lr), weight decay
    (DyNet's is a global rescaling, not g + wd p), and freezing anything but
    the embedding (which is then looked up as a constant and gets no
    gradient). DyNet's defaults stand otherwise: Adam puts epsilon before
    the bias correction of v, and the embedding's rows are updated sparsely
    (only the rows of the batch; the shared rules move every row whose Adam
    moments are not zero)."""

    def __init__(self, weights: _Weights, name: str, lr: float, hyper: Mapping[str, float],
                 frozen: Sequence[str], shapes: Mapping[str, tuple]):
        self.name = name
        self.hyper = optimizers.resolve(name, hyper)
        self.frozen = tuple(optimizers.check_frozen(frozen, shapes))
        if set(self.frozen) - {EMBEDDING}:
            raise ValueError(f"DyNet's own trainers freeze only {EMBEDDING} here, not "
                             f"{sorted(set(self.frozen) - {EMBEDDING})}: use trainer='shared'")
        if self.hyper.get("weight_decay") or self.hyper.get("momentum"):
            raise ValueError("DyNet's own trainers differ from the shared rules for momentum and weight decay: "
                             "use trainer='shared'")
        collection = weights.collection
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

    def update(self) -> None:
        """Apply the gradients DyNet accumulated (and clear them)."""
        self.trainer.update()


def _native_trainer(weights: _Weights, name: str, lr: float, config, *, frozen: Sequence[str] = (),
                        **hyper) -> _NativeTrainer:
    """The shared ``set_optimizer`` arguments -> DyNet's own trainer (_NativeTrainer)."""
    return _NativeTrainer(weights, name, lr, hyper, frozen, param_shapes(config))


def set_learning_rate(optimizer: _Optimizer | _NativeTrainer, lr: float) -> None:
    """The rate of the following steps (nothing is traced, so nothing retraces)."""
    optimizer.lr = float(lr)
    if isinstance(optimizer, _NativeTrainer):
        optimizer.trainer.learning_rate = float(lr)


def optimizer_state(optimizer: _Optimizer, step: int) -> dict[str, np.ndarray]:
    """Copies of the state in the shared layout (float32 slots), with ``step``
    the runner's count of training steps."""
    state = {key: np.array(value) for key, value in optimizer.state.items()}
    state[optimizers.STEP] = np.array(step, dtype=np.int64)
    return state


def load_optimizer_state(optimizer: _Optimizer, state: Mapping[str, np.ndarray]) -> int:
    """Install a state of the shared layout (from any framework); returns its step count."""
    optimizers.check_state(state, optimizers.state_shapes(optimizer.name, optimizer.hyper, optimizer.shapes,
                                                          optimizer.frozen))
    optimizer.state = {key: np.array(value, dtype=np.int64 if key == optimizers.STEP else np.float32)
                       for key, value in state.items()}
    return int(optimizer.state[optimizers.STEP])


def train_step(weights: _Weights, params: dict[str, np.ndarray], optimizer: _Optimizer, batch: PairBatch, *,
               autobatch: bool, dropout: float, seed: int, step: int, transition_weight: float = 0.0
               ) -> tuple[float, dict]:
    """One update in training mode (dropout masks from (seed, step)); returns
    the loss computed before it and the call's timings."""
    classifier = _training_classifier(weights, optimizer, batch, autobatch=autobatch, dropout=dropout, seed=seed,
                                      step=step)
    loss = _update(classifier, params, optimizer, batch_loss(classifier, batch, transition_weight))
    return loss, classifier.clock.timings()


def _update(classifier: SNLIClassifier, params: dict[str, np.ndarray], optimizer: _Optimizer | _NativeTrainer,
            loss: dy.Expression, before_update: Callable[[], None] | None = None) -> float:
    """Forward, backward and one update; the loss before it. The shared rule
    reads the gradients out, updates ``params`` and writes DyNet's copy;
    DyNet's own trainer updates DyNet's copy in C++ and leaves ``params`` as
    they were (the runner reads them back when asked). ``before_update``
    reads what else the step returns while the weights are those of the pass."""
    if isinstance(optimizer, _NativeTrainer):
        with classifier.clock.section(), pools_checked():
            value = loss.value()
            loss.backward()
        if before_update:
            before_update()
        with classifier.clock.section("update"):
            optimizer.update()
        return float(value)
    value, grads = _backward(classifier, loss)
    if before_update:
        before_update()
    _apply_update(classifier, params, optimizer, grads)
    return value


def _training_classifier(weights: _Weights, optimizer: _Optimizer, batch: PairBatch, *, autobatch: bool,
                         dropout: float, seed: int, step: int) -> SNLIClassifier:
    """A fresh graph for a training step: dropout masks if the rate is
    positive, and a frozen embedding read as a constant (no V x E gradient)."""
    masks = None
    if dropout > 0.0:
        masks = _Masks(dropout, seed, step, weights.config, 2 * len(batch.labels), batch.premise_tokens.shape[1])
    return SNLIClassifier(weights, autobatch=autobatch, masks=masks,
                          update_embedding=EMBEDDING not in optimizer.frozen)


def _apply_update(classifier: SNLIClassifier, params: dict[str, np.ndarray], optimizer: _Optimizer,
                  grads: Mapping[str, np.ndarray]) -> None:
    """The optimizer's step on the canonical weights, then DyNet's copy of what
    changed (of the embedding, the rows the step moved: the batch's words,
    and those an optimizer's state still moves)."""
    with classifier.clock.section("update"):
        table = params[EMBEDDING]
        changed = optimizer.step(params, grads)
        rows = np.flatnonzero(np.any(params[EMBEDDING] != table, axis=1)) if EMBEDDING in changed else None
        convert._load(classifier.weights, params, changed, embedding_rows=rows)


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def _sentence_parses(classifier: SNLIClassifier, run: _Run, num_steps: int
                     ) -> tuple[parsing.SentenceParses, np.ndarray]:
    """Evaluate and read everything a parse returns: (SentenceParses of the 2B
    sentences as NumPy arrays, class logits <float32>[B, 3]).

    The head's logits are read from the graph in float32; each sentence's
    logprob and entropy are summed on the host in float64 from them (the
    shared stable formulas), as PyTorch sums its float32 logits in float64.
    """
    H, S, B = classifier.config.hidden_dim, len(run.sentences), len(run.logits)
    heads = [logits for sentence in run.sentences for logits in sentence.logits]
    exprs = [run.encodings(), run.class_logits()] + ([dy.concatenate_cols(heads)] if heads else [])
    values = classifier._values(*exprs)
    encodings, class_logits = values[0].reshape(H, S).T, values[1].reshape(3, B).T
    head_values = values[2].reshape(2, len(heads)).T if heads else np.zeros((0, 2), np.float32)
    transition_logits = np.zeros((S, num_steps, 2), np.float32)
    logprob, entropy = np.zeros(S), np.zeros(S)
    row = 0
    for s, sentence in enumerate(run.sentences):
        mine = head_values[row:row + len(sentence.logits)]
        row += len(sentence.logits)
        transition_logits[s, sentence.columns] = mine
        if sentence.choices:
            chosen = mine[sentence.choices]
            actions = np.where(sentence.reduced, REDUCE, SHIFT)
            logprob[s] = parsing.action_logprob(chosen, actions).sum()
            entropy[s] = parsing.bernoulli_entropy(chosen).sum()
    transitions = np.stack([sentence.transitions for sentence in run.sentences])
    parses = parsing.SentenceParses(encodings, transitions, transition_logits, logprob.astype(np.float32),
                                    entropy.astype(np.float32))
    return parses, class_logits


def _parse_batch(classifier: SNLIClassifier, batch: PairBatch, mode: str, uniforms=None) -> _Run:
    """The classifier's ``parse`` with the batch's arrays: added to its graph, not evaluated."""
    return classifier.parse(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                            batch.hypothesis_transitions, mode, uniforms)


def parse(weights: _Weights, batch: PairBatch, mode: str, uniforms, *, autobatch: bool
          ) -> tuple[parsing.Parsed, int, dict]:
    """Eval mode: the batch in ``mode`` -> (shared.parsing.Parsed in float32,
    host reads of decisions, timings). ``uniforms`` as check_parse returned them."""
    classifier = SNLIClassifier(weights, autobatch=autobatch)
    run = _parse_batch(classifier, batch, mode, uniforms)
    parses, logits = _sentence_parses(classifier, run, batch.premise_transitions.shape[1])
    return parsing.split_pairs(parses, logits), run.host_syncs, classifier.clock.timings()
