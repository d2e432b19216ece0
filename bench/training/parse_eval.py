"""How well a model with a transition head parses (docs/spec.md §7, "Evaluation").

For labelled pairs, in eval mode, against the gold transitions of the data:

* teacher-forced transition accuracy (gold mode: the argmax of t at each gold step), and the mean teacher-forced
  transition loss, the quantity the supervised loss trains;
* the exact-parse rate and the unlabeled bracket F1 of the trees the model predicts (predicted mode);
* class accuracy when the model follows the gold parses and when it follows its own.

The counts come from shared.parsing (ParseCounts); this module only runs the two modes batch by batch and sums them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bench.training.evaluate import labelled_pairs, scored
from shared.batching import DEFAULT_BUCKETS, make_batches
from shared.parse_metrics import ParseCounts, parse_counts
from shared.parsing import REDUCE_COLUMN, SHIFT_COLUMN, log_sigmoid
from shared.snli import Pair
from shared.transitions import PAD, SHIFT
from shared.vocab import Vocabulary


@dataclass
class ParseEvaluation:
    pairs: int  # labelled pairs evaluated (each has two sentences)
    counts: ParseCounts  # summed over both sides of every batch
    transition_loss: float  # mean 2-way cross-entropy of softmax(t) against the gold action, teacher-forced
    accuracy_gold_parse: float  # class accuracy following the gold transitions
    accuracy_predicted_parse: float  # class accuracy following the predicted transitions
    followed: dict = field(default_factory=dict)  # the predicted parses' Evaluation fields (evaluate.scored)

    def to_dict(self) -> dict:
        return {"transition_accuracy": self.counts.transition_accuracy,
                "transition_loss": self.transition_loss,
                "exact_parse_rate": self.counts.exact_parse_rate,
                "bracket_f1": self.counts.bracket_f1,
                "accuracy_gold_parse": self.accuracy_gold_parse,
                "accuracy_predicted_parse": self.accuracy_predicted_parse,
                "sentences": self.counts.sentences, "steps": self.counts.steps, "pairs": self.pairs}


def teacher_forced_loss_sum(transition_logits, gold) -> float:
    """Σ over non-PAD gold steps of -log softmax(t)[gold action] (no validity
    mask, as the supervised loss of docs/spec.md §7)."""
    logits = np.asarray(transition_logits, dtype=np.float64)
    gold = np.asarray(gold)
    diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]
    per_step = -np.where(gold == SHIFT, log_sigmoid(-diff), log_sigmoid(diff))
    return float(per_step[gold != PAD].sum())


def evaluate_parses(runner, pairs: Sequence[Pair], vocab: Vocabulary, *, batch_size: int = 128,
                    buckets: Sequence[int] | None = DEFAULT_BUCKETS) -> ParseEvaluation:
    """The parse metrics of ``runner`` (a model with a transition head) on the labelled ``pairs``."""
    labelled = labelled_pairs(pairs)
    counts = ParseCounts()
    loss_sum = 0.0
    correct, followed = {"gold": 0, "predicted": 0}, []
    for batch in make_batches(labelled, vocab, batch_size, buckets=buckets):
        gold = runner.parse(batch, "gold")
        predicted = runner.parse(batch, "predicted")
        followed.append((predicted.logits, batch.labels))
        counts += parse_counts(gold, predicted, batch.premise_transitions, batch.hypothesis_transitions)
        for side in ("premise", "hypothesis"):
            loss_sum += teacher_forced_loss_sum(getattr(gold, f"{side}_transition_logits"),
                                                getattr(batch, f"{side}_transitions"))
        for mode, parsed in (("gold", gold), ("predicted", predicted)):
            correct[mode] += int(np.sum(np.argmax(parsed.logits, axis=1) == batch.labels))
    return ParseEvaluation(pairs=len(labelled), counts=counts,
                           transition_loss=loss_sum / counts.steps if counts.steps else float("nan"),
                           accuracy_gold_parse=correct["gold"] / len(labelled),
                           accuracy_predicted_parse=correct["predicted"] / len(labelled),
                           followed=scored(pairs, labelled, followed))


def format_parse_evaluation(result: ParseEvaluation) -> str:
    c = result.counts
    return (f"parses ({c.sentences:,} sentences, {c.steps:,} gold steps): teacher-forced transition accuracy "
            f"{c.transition_accuracy:.2%} (loss {result.transition_loss:.4f}), exact parses "
            f"{c.exact_parse_rate:.2%}, bracket F1 {c.bracket_f1:.2%}; class accuracy with gold parses "
            f"{result.accuracy_gold_parse:.2%}, with predicted parses {result.accuracy_predicted_parse:.2%}")
