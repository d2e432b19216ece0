"""Accuracy, loss and confusion of a Runner on labelled pairs, and parse metrics (docs/spec.md §7, "Evaluation")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from shared import snli
from shared.batching import DEFAULT_BUCKETS, make_batches
from shared.parse_metrics import ParseCounts, parse_counts
from shared.parsing import action_logprob
from shared.reference import cross_entropies
from shared.snli import LABELS, Pair
from shared.transitions import PAD
from shared.vocab import Vocabulary


def confusion_matrix(gold: np.ndarray, predicted: np.ndarray, num_classes: int = 3) -> np.ndarray:
    """<int64>[C, C]: entry [g, p] counts pairs of gold label g predicted as p."""
    gold, predicted = (np.asarray(labels, dtype=np.int64).reshape(-1) for labels in (gold, predicted))
    if gold.shape != predicted.shape:
        raise ValueError(f"{gold.size} gold labels but {predicted.size} predictions")
    for name, values in (("gold", gold), ("predicted", predicted)):
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise ValueError(f"{name} labels must be in 0..{num_classes - 1}, got {values.min()}..{values.max()}")
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (gold, predicted), 1)
    return matrix


@dataclass
class Evaluation:
    pairs: int  # labelled pairs evaluated
    accuracy: float
    loss: float  # mean cross-entropy (eval mode)
    confusion: np.ndarray  # <int64>[3, 3], rows gold, columns predicted
    skipped_unlabeled: int = 0  # rows without a gold label, left out

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "accuracy": self.accuracy, "loss": self.loss,
                "confusion": self.confusion.tolist(), "skipped_unlabeled": self.skipped_unlabeled}


def labelled_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs with a gold label; a ValueError if none has one (shared.snli.labelled_pairs's words)."""
    return snli.labelled_pairs(pairs, "nothing to evaluate", empty="nothing to evaluate: no pairs")


def scored(pairs: Sequence[Pair], labelled: Sequence[Pair], results: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Accuracy, mean cross-entropy and confusion of (logits, labels) per batch, as Evaluation's fields."""
    gold, predicted, losses = [], [], []
    for logits, labels in results:
        logits = np.asarray(logits, dtype=np.float64)
        losses.append(cross_entropies(logits, labels))
        gold.append(labels)
        predicted.append(logits.argmax(axis=1))
    gold, predicted = np.concatenate(gold), np.concatenate(predicted)
    return dict(pairs=len(labelled), accuracy=float(np.mean(gold == predicted)),
                loss=float(np.concatenate(losses).mean()), confusion=confusion_matrix(gold, predicted),
                skipped_unlabeled=len(pairs) - len(labelled))


def evaluate_pairs(runner, pairs: Sequence[Pair], vocab: Vocabulary, *, batch_size: int = 128,
                   buckets: Sequence[int] | None = DEFAULT_BUCKETS) -> Evaluation:
    """Accuracy, loss and confusion matrix of ``runner`` (eval mode) on the labelled ``pairs``."""
    labelled = labelled_pairs(pairs)
    batches = make_batches(labelled, vocab, batch_size, buckets=buckets)
    return Evaluation(**scored(pairs, labelled, ((runner.encode(b)[2], b.labels) for b in batches)))


def format_confusion(matrix: np.ndarray) -> str:
    """A Markdown table: rows gold, columns predicted, with per-class recall and precision."""
    matrix = np.asarray(matrix)
    lines = ["| gold \\ predicted | " + " | ".join(LABELS) + " | recall |", "|---|" + "---:|" * (len(LABELS) + 1)]
    for g, label in enumerate(LABELS):
        total = matrix[g].sum()
        recall = f"{matrix[g, g] / total:.1%}" if total else "-"
        lines.append(f"| {label} | " + " | ".join(f"{n:,}" for n in matrix[g]) + f" | {recall} |")
    precision = [f"{matrix[p, p] / matrix[:, p].sum():.1%}" if matrix[:, p].sum() else "-" for p in range(len(LABELS))]
    lines.append("| precision | " + " | ".join(precision) + " | |")
    return "\n".join(lines)


@dataclass
class ParseEvaluation:
    pairs: int  # labelled pairs evaluated (each has two sentences)
    counts: ParseCounts  # summed over both sides of every batch
    transition_loss: float  # mean 2-way cross-entropy of softmax(t) against the gold action, teacher-forced
    accuracy_gold_parse: float  # class accuracy following the gold transitions
    accuracy_predicted_parse: float  # class accuracy following the predicted transitions
    followed: dict = field(default_factory=dict)  # the predicted parses' Evaluation fields (evaluate.scored)

    def to_dict(self) -> dict:
        return {"transition_accuracy": self.counts.transition_accuracy, "transition_loss": self.transition_loss,
                "exact_parse_rate": self.counts.exact_parse_rate, "bracket_f1": self.counts.bracket_f1,
                "accuracy_gold_parse": self.accuracy_gold_parse,
                "accuracy_predicted_parse": self.accuracy_predicted_parse, "sentences": self.counts.sentences,
                "steps": self.counts.steps, "pairs": self.pairs}


def evaluate_parses(runner, pairs: Sequence[Pair], vocab: Vocabulary, *, batch_size: int = 128,
                    buckets: Sequence[int] | None = DEFAULT_BUCKETS) -> ParseEvaluation:
    """The parse metrics of ``runner`` (a model with a transition head) on the labelled ``pairs``."""
    labelled = labelled_pairs(pairs)
    counts, loss_sum, correct_gold, followed = ParseCounts(), 0.0, 0, []
    for batch in make_batches(labelled, vocab, batch_size, buckets=buckets):
        gold = runner.parse(batch, "gold")
        predicted = runner.parse(batch, "predicted")
        followed.append((predicted.logits, batch.labels))
        counts += parse_counts(gold, predicted, batch.premise_transitions, batch.hypothesis_transitions)
        for side in ("premise", "hypothesis"):  # -log softmax(t)[gold action] at the gold steps, no validity mask
            steps = getattr(batch, f"{side}_transitions")
            loss_sum -= float(action_logprob(getattr(gold, f"{side}_transition_logits"), steps)[steps != PAD].sum())
        correct_gold += int(np.sum(np.argmax(gold.logits, axis=1) == batch.labels))
    followed = scored(pairs, labelled, followed)  # the predicted parses' accuracy is theirs
    return ParseEvaluation(pairs=len(labelled), counts=counts,
                           transition_loss=loss_sum / counts.steps if counts.steps else float("nan"),
                           accuracy_gold_parse=correct_gold / len(labelled),
                           accuracy_predicted_parse=followed["accuracy"], followed=followed)


def format_parse_evaluation(result: ParseEvaluation) -> str:
    c = result.counts
    return (f"parses ({c.sentences:,} sentences, {c.steps:,} gold steps): teacher-forced transition accuracy "
            f"{c.transition_accuracy:.2%} (loss {result.transition_loss:.4f}), exact parses "
            f"{c.exact_parse_rate:.2%}, bracket F1 {c.bracket_f1:.2%}; class accuracy with gold parses "
            f"{result.accuracy_gold_parse:.2%}, with predicted parses {result.accuracy_predicted_parse:.2%}")
