"""REINFORCE (docs/spec.md §7) in DyNet.

The sampled parse is model.SPINN.parse: at each step where a sentence has
a choice, the graph is evaluated so far and Python compares the head's p_R
with the front end's uniform number, then builds the chosen branch. The
graph that results holds exactly the trees that were followed, so
``backward()`` walks them; the decisions are Python values and carry no
gradient. Gradients reach the head through each sentence's log-probability
and entropy (model._choice_sums), which stay expressions, and the rewards
r_i = -CE_i enter as ``dy.nobackprop`` nodes: constants to the gradient, as
the reference treats them.

    loss = mean_i CE_i - reinforce_weight * mean_i (r_i - b)(logprob_p,i + logprob_h,i)
                       - entropy_weight * mean_i (entropy_p,i + entropy_h,i)
"""

from __future__ import annotations

import numpy as np

from shared import reinforce as shared_reinforce
from shared.batching import PairBatch

from .classifier import SNLIClassifier, _Run
from .convert import _Weights
from .library import dy
from .model import _choice_sums
from .train import (_backward, _class_losses, _Optimizer, _parse_batch, _sentence_parses, _training_classifier,
                    _update)


def reinforce_loss(classifier: SNLIClassifier, batch: PairBatch, uniforms, baseline: float, reinforce_weight: float,
                   entropy_weight: float) -> tuple[dy.Expression, _Run, list[dy.Expression]]:
    """The REINFORCE loss node of the batch sampled with ``uniforms``, the
    run it followed and its per-pair cross-entropies."""
    run = _parse_batch(classifier, batch, "sampled", uniforms)
    ce = _class_losses(run, batch.labels)
    B = len(ce)
    sums = [_choice_sums(sentence) for sentence in run.sentences]
    terms = [dy.esum(ce) * (1.0 / B)]
    for i in range(B):
        mine = [sums[s] for s in (i, B + i) if sums[s] is not None]
        if not mine:
            continue  # no choice step in either sentence: nothing to score
        advantage = -dy.nobackprop(ce[i]) - baseline  # r_i - b, a constant to the gradient
        logprob = dy.esum([logprob for logprob, _ in mine])
        entropy = dy.esum([entropy for _, entropy in mine])
        terms.append(dy.cmult(advantage, logprob) * (-reinforce_weight / B))
        if entropy_weight:
            terms.append(entropy * (-entropy_weight / B))
    return dy.esum(terms), run, ce


def _numbers(classifier: SNLIClassifier, run: _Run, ce: list[dy.Expression], batch: PairBatch) -> dict:
    """The step record's arrays (rewards, per-side logprob, entropy, transitions), read after the forward pass."""
    parses, logits = _sentence_parses(classifier, run, batch.premise_transitions.shape[1])
    (rewards,) = classifier._values(dy.concatenate(ce))
    B = len(ce)
    numbers = {"rewards": -np.asarray(rewards, np.float64).reshape(B)}
    for name in ("logprob", "entropy", "transitions"):
        value = getattr(parses, name)
        numbers[f"premise_{name}"], numbers[f"hypothesis_{name}"] = value[:B], value[B:]
    return numbers


def loss_and_grads(weights: _Weights, batch: PairBatch, uniforms, baseline: float, reinforce_weight: float,
                   entropy_weight: float, *, autobatch: bool
                   ) -> tuple[float, dict[str, np.ndarray], np.ndarray, int, dict]:
    """Eval mode: (loss, canonical gradients, rewards <float64>[B], host reads of decisions, timings)."""
    classifier = SNLIClassifier(weights, autobatch=autobatch)
    loss, run, ce = reinforce_loss(classifier, batch, uniforms, baseline, reinforce_weight, entropy_weight)
    value, grads = _backward(classifier, loss)
    (rewards,) = classifier._values(dy.concatenate(ce))
    return (value, grads, -np.asarray(rewards, np.float64).reshape(len(ce)), run.host_syncs,
            classifier.clock.timings())


def train_step(weights: _Weights, params: dict[str, np.ndarray], optimizer: _Optimizer, batch: PairBatch, uniforms,
               baseline: float, reinforce_weight: float, entropy_weight: float, *, autobatch: bool, dropout: float,
               seed: int, step: int) -> tuple[dict, int, dict]:
    """One update on the REINFORCE loss in training mode (dropout masks from
    (seed, step)); returns shared.reinforce.step_record of the numbers
    computed before the update, the host reads of decisions, and the timings."""
    classifier = _training_classifier(weights, optimizer, batch, autobatch=autobatch, dropout=dropout, seed=seed,
                                      step=step)
    loss, run, ce = reinforce_loss(classifier, batch, uniforms, baseline, reinforce_weight, entropy_weight)
    numbers: dict = {}
    value = _update(classifier, params, optimizer, loss, lambda: numbers.update(_numbers(classifier, run, ce, batch)))
    return shared_reinforce.step_record(value, **numbers), run.host_syncs, classifier.clock.timings()
