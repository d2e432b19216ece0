"""REINFORCE (docs/spec.md §7) in DyNet.

The sampled parse is autobatch.SPINN.parse: at each step where a sentence
has a choice, the graph is evaluated so far and Python compares the head's
p_R with the front end's uniform number, then builds the chosen branch. The
graph that results holds exactly the trees that were followed, so
``backward()`` walks them; the decisions are Python values and carry no
gradient. Gradients reach the head through each sentence's log-probability
and entropy, which the parse returns as expressions, and the rewards
r_i = -CE_i enter as ``dy.nobackprop`` nodes: constants to the gradient, as
the reference treats them.

    loss = mean_i CE_i - reinforce_weight * mean_i (r_i - b)(logprob_p,i + logprob_h,i)
                       - entropy_weight * mean_i (entropy_p,i + entropy_h,i)

Here ``batch`` is a shared.batching.BatchArrays of NumPy arrays, and
``uniforms`` sampled mode's (premise_u, hypothesis_u) <float64>[B, T].
"""

from __future__ import annotations

import numpy as np

from shared import parsing
from shared import reinforce as shared_reinforce

from . import graph
from .classifier import SNLIClassifier
from .library import dy
from .train import Model, NativeTrainer, Optimizer
from .weights import EMBEDDING


def _loss(classifier: SNLIClassifier, batch, uniforms, baseline: float, reinforce_weight: float,
          entropy_weight: float
          ) -> tuple[dy.Expression, parsing.SentenceParses, list[dy.Expression], list[dy.Expression]]:
    """The REINFORCE loss node of the batch sampled with ``uniforms`` in
    ``classifier``'s graph, the parses it followed, their class logits and the
    per-pair cross-entropies."""
    parses, logits = graph.parse_batch(classifier, batch, "sampled", uniforms)
    ce = graph.class_losses(logits, batch.labels)
    B = len(ce)
    terms = [dy.esum(ce) * (1.0 / B)]
    for i in range(B):
        mine = [s for s in (i, B + i) if parses.logprob[s] is not None]
        if not mine:
            continue  # no choice step in either sentence: nothing to score
        advantage = -dy.nobackprop(ce[i]) - baseline  # r_i - b, a constant to the gradient
        logprob = dy.esum([parses.logprob[s] for s in mine])
        entropy = dy.esum([parses.entropy[s] for s in mine])
        terms.append(dy.cmult(advantage, logprob) * (-reinforce_weight / B))
        if entropy_weight:
            terms.append(entropy * (-entropy_weight / B))
    return dy.esum(terms), parses, logits, ce


def reinforce_loss(model: Model, batch, uniforms, baseline: float, *, training: bool = False, seed: int = 0,
                   step: int = 0, reinforce_weight: float = 1.0, entropy_weight: float = 0.0) -> dy.Expression:
    """The REINFORCE loss node of the batch sampled with ``uniforms``, in a
    fresh graph (not evaluated: ``.value()`` runs the forward pass); in
    training, with the dropout masks of (seed, step)."""
    classifier = graph.new_graph(model, batch, training=training, seed=seed, step=step)
    return _loss(classifier, batch, uniforms, baseline, reinforce_weight, entropy_weight)[0]


def _rewards(classifier: SNLIClassifier, ce: list[dy.Expression]) -> np.ndarray:
    """r_i = -CE_i <float64>[B], read after the forward pass."""
    (values,) = graph.values(classifier, dy.concatenate(ce))
    return -np.asarray(values, np.float64).reshape(len(ce))


def _numbers(classifier: SNLIClassifier, parses: parsing.SentenceParses, logits: list[dy.Expression],
             ce: list[dy.Expression]) -> dict:
    """The step record's arrays (rewards, per-side logprob, entropy, transitions), read after the forward pass."""
    read, _ = graph.read_parses(classifier, parses, logits)
    numbers = {"rewards": _rewards(classifier, ce)}
    B = len(ce)
    for name in ("logprob", "entropy", "transitions"):
        value = getattr(read, name)
        numbers[f"premise_{name}"], numbers[f"hypothesis_{name}"] = value[:B], value[B:]
    return numbers


def loss_and_grads(model: Model, batch, uniforms, baseline: float, *, reinforce_weight: float = 1.0,
                   entropy_weight: float = 0.0) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """Eval mode: (loss, its gradient by DyNet's parameter names, the rewards
    <float64>[B]); the accumulators cleared again."""
    classifier = graph.new_graph(model, batch)
    loss, _, _, ce = _loss(classifier, batch, uniforms, baseline, reinforce_weight, entropy_weight)
    value = graph.backward(classifier, loss)
    grads = graph.gradients(classifier, model)
    rewards = _rewards(classifier, ce)
    graph.finish(classifier, model)
    return value, grads, rewards


def train_step(model: Model, optimizer: Optimizer | NativeTrainer, batch, uniforms, baseline: float, *,
               seed: int = 0, step: int = 0, reinforce_weight: float = 1.0, entropy_weight: float = 0.0) -> dict:
    """One update on the REINFORCE loss in training mode (dropout masks from
    (seed, step)); returns shared.reinforce.step_record of the numbers
    computed before the update."""
    classifier = graph.new_graph(model, batch, training=True, seed=seed, step=step,
                                 update_embedding=EMBEDDING not in optimizer.frozen)
    loss, parses, logits, ce = _loss(classifier, batch, uniforms, baseline, reinforce_weight, entropy_weight)
    numbers: dict = {}
    value = graph.update(classifier, model, optimizer, loss,
                         lambda: numbers.update(_numbers(classifier, parses, logits, ce)))
    record = shared_reinforce.step_record(value, **numbers)
    graph.finish(classifier, model)
    return record
