"""Accuracy, loss and the confusion matrix of a Runner on labelled pairs (eval mode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from shared.batching import DEFAULT_BUCKETS, make_batches
from shared.reference import cross_entropies
from shared import snli
from shared.snli import LABELS, Pair
from shared.vocab import Vocabulary


def confusion_matrix(gold: np.ndarray, predicted: np.ndarray, num_classes: int = 3) -> np.ndarray:
    """<int64>[C, C]: entry [g, p] counts pairs of gold label g predicted as p."""
    gold = np.asarray(gold, dtype=np.int64).reshape(-1)
    predicted = np.asarray(predicted, dtype=np.int64).reshape(-1)
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
    """The pairs with a gold label (the rest are left out and counted by the caller); ValueError if there are none, or
    none has one, in the words every command uses for a file of unlabelled rows (shared.snli.labelled_pairs)."""
    return snli.labelled_pairs(pairs, "nothing to evaluate", empty="nothing to evaluate: no pairs")


def scored(pairs: Sequence[Pair], labelled: Sequence[Pair], results: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Accuracy, mean cross-entropy and confusion matrix of (logits <float>[B, 3],
    labels <int>[B]) per batch over ``labelled``, as Evaluation's fields."""
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
    lines = ["| gold \\ predicted | " + " | ".join(LABELS) + " | recall |",
             "|---|" + "---:|" * (len(LABELS) + 1)]
    for g, label in enumerate(LABELS):
        total = matrix[g].sum()
        recall = f"{matrix[g, g] / total:.1%}" if total else "-"
        lines.append(f"| {label} | " + " | ".join(f"{n:,}" for n in matrix[g]) + f" | {recall} |")
    precision = [f"{matrix[p, p] / matrix[:, p].sum():.1%}" if matrix[:, p].sum() else "-" for p in range(len(LABELS))]
    lines.append("| precision | " + " | ".join(precision) + " | |")
    return "\n".join(lines)
