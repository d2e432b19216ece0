"""One call's computation graph: what train.py, reinforce.py and the runner
share about building one, evaluating it and applying its gradient.

A DyNet call is: start a graph (:func:`new_graph`: a classifier.SNLIClassifier
with the model's autobatching and, in training, dropout masks), add every
sentence's nodes in a Python loop, evaluate once (:func:`values`; with
autobatching DyNet groups the nodes now), and for a gradient run
``backward()`` on the loss node (:func:`backward`), which adds into every
parameter's gradient; :func:`update` then applies it with the step's
optimizer: DyNet's own trainer in C++, or the shared rules, which read the
gradient out (:func:`gradients`), update the canonical weights in NumPy and
write DyNet's copy (train.py says why both exist).

A ``batch`` here is a shared.batching.BatchArrays, or a PairBatch: the five
arrays by name. Every call's seconds are split by phase (phases.Clock), as
the runner's ``last_phases`` reports them (docs/runner-interface.md).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from shared import parsing
from shared.transitions import PAD, REDUCE, SHIFT

from . import convert
from .classifier import SNLIClassifier
from .dropout import Masks
from .library import dy, pools_checked
from .phases import Clock
from .rules import SharedRules
from .weights import EMBEDDING

# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


def new_graph(model, batch, *, training: bool = False, seed: int = 0, step: int = 0,
              update_embedding: bool = True) -> SNLIClassifier:
    """A fresh graph of ``model`` (a train.Model) for ``batch``: in training,
    with dropout masks from (seed, step) if the model's rate is positive;
    ``update_embedding`` False looks the embedding up as a constant (frozen:
    no V x E gradient)."""
    masks = None
    if training and model.dropout > 0.0:
        masks = Masks(model.dropout, seed, step, model.config, 2 * len(batch.labels), batch.premise_tokens.shape[1])
    return SNLIClassifier(model.weights, encoder=model.encoder, autobatch=model.autobatch, clock=Clock(),
                          masks=masks, update_embedding=update_embedding)


def encode_batch(classifier: SNLIClassifier, batch) -> tuple[list[dy.Expression], list[dy.Expression]]:
    """Gold mode without the head: the batch's 2B roots [H] (premises first)
    and B class logits [3], added to the classifier's graph."""
    roots = classifier.encode(np.concatenate([batch.premise_tokens, batch.hypothesis_tokens]),
                              np.concatenate([batch.premise_transitions, batch.hypothesis_transitions]))
    B = len(batch.premise_tokens)
    return roots, classifier.classify(roots[:B], roots[B:])


def parse_batch(classifier: SNLIClassifier, batch, mode: str, uniforms=None
                ) -> tuple[parsing.SentenceParses, list[dy.Expression]]:
    """The classifier's ``parse`` with the batch's arrays: added to its graph, not evaluated."""
    return classifier.parse(batch.premise_tokens, batch.premise_transitions, batch.hypothesis_tokens,
                            batch.hypothesis_transitions, mode, uniforms)


def class_losses(logits: list[dy.Expression], labels) -> list[dy.Expression]:
    """Per pair, the cross-entropy of its logits against its label (the Runner checked the labels)."""
    return [dy.pickneglogsoftmax(pair, int(label)) for pair, label in zip(logits, labels)]


# --------------------------------------------------------------------------
# Evaluating
# --------------------------------------------------------------------------


def values(classifier: SNLIClassifier, *exprs: dy.Expression) -> list[np.ndarray]:
    """One forward pass up to the latest of ``exprs`` (autobatched, when on,
    across everything built since the last one), then their values as
    float32 arrays."""
    with classifier.clock.section(), pools_checked():
        dy.forward(list(exprs))
        return [np.asarray(e.npvalue(), dtype=np.float32) for e in exprs]


def read_parses(classifier: SNLIClassifier, parses: parsing.SentenceParses, logits: list[dy.Expression]
                ) -> tuple[parsing.SentenceParses, np.ndarray]:
    """Evaluate and read everything a parse returns: (SentenceParses of the S
    sentences as NumPy arrays, class logits <float32>[B, 3]).

    The head's logits are read from the graph in float32; each sentence's
    logprob and entropy are summed on the host in float64 from them at the
    steps the SPINN sampled (its ``last_choices``; the shared stable
    formulas), as PyTorch sums its float32 logits in float64.
    """
    H, S, B = classifier.config.hidden_dim, len(parses.encodings), len(logits)
    heads = [t for sentence in parses.transition_logits for t in sentence]
    exprs = [dy.concatenate_cols(parses.encodings), dy.concatenate_cols(logits)]
    exprs += [dy.concatenate_cols(heads)] if heads else []
    read = values(classifier, *exprs)
    encodings, class_logits = read[0].reshape(H, S).T, read[1].reshape(3, B).T
    transition_logits = np.zeros((S,) + parses.transitions.shape[1:] + (2,), np.float32)
    if heads:  # a head at each non-PAD step, sentence after sentence, in step order
        transition_logits[parses.transitions != PAD] = read[2].reshape(2, len(heads)).T
    logprob, entropy = np.zeros(S), np.zeros(S)
    for s, steps in enumerate(classifier.spinn.last_choices):
        if steps:
            chosen = transition_logits[s, steps]
            actions = np.where(parses.transitions[s, steps] == REDUCE, REDUCE, SHIFT)
            logprob[s] = parsing.action_logprob(chosen, actions).sum()
            entropy[s] = parsing.bernoulli_entropy(chosen).sum()
    return (parsing.SentenceParses(encodings, parses.transitions, transition_logits, logprob.astype(np.float32),
                                   entropy.astype(np.float32)), class_logits)


def finish(classifier: SNLIClassifier, model) -> None:
    """Leave on ``model`` what the call on ``classifier``'s graph read on the
    host (the SPINN's host reads of decisions) and where its seconds went."""
    model.last_host_syncs = classifier.spinn.last_host_syncs
    model.last_phases = classifier.clock.timings()


# --------------------------------------------------------------------------
# Gradients and updates
# --------------------------------------------------------------------------


def backward(classifier: SNLIClassifier, loss: dy.Expression) -> float:
    """Evaluate ``loss`` (one forward pass) and run the backward pass, which
    adds into every parameter's gradient; the loss's value."""
    with classifier.clock.section(), pools_checked():
        value = loss.value()
        loss.backward()
    return float(value)


def gradients(classifier: SNLIClassifier, model) -> dict[str, np.ndarray]:
    """The gradient the graph's backward pass accumulated, by DyNet's
    parameter names (weights.Weights.gradients: of the embedding only the
    rows this graph looked up, none when it is frozen), the accumulators
    cleared again. DyNet's Python API copies a Python float per element: the
    ``grads`` phase."""
    rows = np.array(sorted(classifier.tokens), dtype=np.int64) if classifier.update_embedding else None
    with classifier.clock.section("grads"):
        grads = model.weights.gradients(rows)
        model.weights.zero_gradients(embedding=classifier.update_embedding)
    return grads


def update(classifier: SNLIClassifier, model, optimizer, loss: dy.Expression,
           before_update: Callable[[], None] | None = None) -> float:
    """Forward, backward and one update of ``model``; the loss before it.

    DyNet's own trainer (train.NativeTrainer) updates DyNet's copy in C++ and
    leaves the canonical weights as they were (the runner reads them back
    when asked). The shared rules (train.Optimizer) read the gradients out,
    update the canonical weights and write DyNet's copy of what changed (of
    the embedding, the rows the step moved: the batch's words, and those an
    optimizer's state still moves). ``before_update`` reads what else the
    step returns while the weights are those of the pass."""
    value = backward(classifier, loss)
    if not isinstance(optimizer, SharedRules):
        if before_update:
            before_update()
        with classifier.clock.section("update"):
            optimizer.trainer.update()
        return value
    grads = gradients(classifier, model)
    with classifier.clock.section("grads"):
        grads = convert.grads_to_canonical(model, grads)
    if before_update:
        before_update()
    with classifier.clock.section("update"):
        params = model.params
        table = params[EMBEDDING]
        changed = optimizer.step(params, grads)
        rows = np.flatnonzero(np.any(params[EMBEDDING] != table, axis=1)) if EMBEDDING in changed else None
        model.weights.write(params, changed, embedding_rows=rows)
    return value
