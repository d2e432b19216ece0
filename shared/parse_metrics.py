"""The evaluation of parses decided by the model against gold ones (docs/spec.md §7), NumPy only.

:class:`ParseCounts` holds additive counts (sum them over batches, then read
the rates): teacher-forced transition accuracy, exact parses, unlabeled
bracket F1; :func:`parse_agreement` is the exact-parse rate of one array
pair. Transition codes are those of shared.transitions; the head's columns
those of shared.parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from .parsing import REDUCE_COLUMN, SHIFT_COLUMN, Parsed
from .transitions import PAD, REDUCE, SHIFT, check_transitions

def strip_pad(transitions: Sequence[int]) -> tuple[int, ...]:
    """One sentence's transitions without PAD."""
    return tuple(int(op) for op in transitions if op != PAD)


def constituent_spans(transitions: Sequence[int]) -> list[tuple[int, int]]:
    """The token spans [start, end) of the constituents REDUCE builds, in build order.

    A sentence of n tokens has n-1 of them; the last is the whole sentence.
    Single words are leaves, never REDUCE constituents.
    """
    check_transitions(transitions)
    stack: list[tuple[int, int]] = []
    spans = []
    position = 0
    for op in transitions:
        if op == SHIFT:
            stack.append((position, position + 1))
            position += 1
        elif op == REDUCE:
            (start, _), (_, end) = stack[-2], stack[-1]
            del stack[-2:]
            stack.append((start, end))
            spans.append((start, end))
    return spans


def _rows(transitions) -> list[tuple[int, ...]]:
    return [strip_pad(row) for row in np.asarray(transitions)]


def _paired_rows(a, b, names=("a", "b")) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    rows_a, rows_b = _rows(a), _rows(b)
    if len(rows_a) != len(rows_b):
        raise ValueError(f"{names[0]} has {len(rows_a)} sentences, {names[1]} {len(rows_b)}")
    for i, (x, y) in enumerate(zip(rows_a, rows_b)):
        if x.count(SHIFT) != y.count(SHIFT):
            raise ValueError(f"sentence {i}: {x.count(SHIFT)} SHIFTs in {names[0]}, "
                             f"{y.count(SHIFT)} in {names[1]}: not the same sentence")
    return list(zip(rows_a, rows_b))


def parse_agreement(a, b) -> float:
    """Share of sentences whose two transition sequences are identical, PAD ignored.

    ``a`` and ``b`` are <int>[B, T] and <int>[B, T'] (T and T' may differ).
    Against the gold transitions this is the exact-parse rate.
    """
    pairs = _paired_rows(a, b)
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else float("nan")



@dataclass(frozen=True)
class ParseCounts:
    """Additive counts behind the parse metrics; sum them over batches, then read the rates.

    Build with :meth:`of_teacher_forced` (transition accuracy, from gold mode)
    and :meth:`of_parses` (exact-parse rate and bracket F1, from the followed
    transitions), or :func:`parse_counts` for both sides of a pair batch.
    """

    steps: int = 0  # non-PAD gold steps scored by teacher forcing
    steps_correct: int = 0
    sentences: int = 0
    sentences_exact: int = 0
    brackets_predicted: int = 0
    brackets_gold: int = 0
    brackets_matched: int = 0

    def __add__(self, other: "ParseCounts") -> "ParseCounts":
        return ParseCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def transition_accuracy(self) -> float:
        return self.steps_correct / self.steps if self.steps else float("nan")

    @property
    def exact_parse_rate(self) -> float:
        return self.sentences_exact / self.sentences if self.sentences else float("nan")

    @property
    def bracket_f1(self) -> float:
        """Unlabeled bracket F1 of predicted trees against gold trees, over the sentences counted.

        Brackets are the token spans of REDUCE constituents. Single words are not
        brackets, and neither is the whole sentence: every tree has it, so it
        would only raise the score (the convention of the unsupervised-parsing
        literature). Counts are summed over all sentences before dividing
        (corpus-level F1). A binary tree of n words has n-2 such brackets, so
        sentences of one or two words, which have exactly one tree, add nothing;
        when no sentence has any bracket every tree is right and F1 is 1.
        """
        if self.brackets_predicted == 0 and self.brackets_gold == 0:
            return 1.0 if self.sentences else float("nan")
        precision = self.brackets_matched / self.brackets_predicted if self.brackets_predicted else 0.0
        recall = self.brackets_matched / self.brackets_gold if self.brackets_gold else 0.0
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"transition_accuracy": self.transition_accuracy, "exact_parse_rate": self.exact_parse_rate,
                "bracket_f1": self.bracket_f1, "sentences": self.sentences, "steps": self.steps}

    @classmethod
    def of_teacher_forced(cls, transition_logits, gold) -> "ParseCounts":
        logits = np.asarray(transition_logits, dtype=np.float64)
        gold = np.asarray(gold)
        if logits.shape != gold.shape + (2,):
            raise ValueError(f"transition logits of shape {logits.shape} for transitions of shape {gold.shape}")
        predicted = np.where(logits[..., REDUCE_COLUMN] > logits[..., SHIFT_COLUMN], REDUCE, SHIFT)
        real = gold != PAD
        return cls(steps=int(real.sum()), steps_correct=int(((predicted == gold) & real).sum()))

    @classmethod
    def of_parses(cls, predicted, gold) -> "ParseCounts":
        sentences = exact = n_pred = n_gold = matched = 0
        for pred, ref in _paired_rows(predicted, gold, ("predicted", "gold")):
            sentences += 1
            exact += pred == ref
            whole = (0, ref.count(SHIFT))  # every tree has it: not counted
            pred_spans = set(constituent_spans(pred)) - {whole}
            gold_spans = set(constituent_spans(ref)) - {whole}
            n_pred += len(pred_spans)
            n_gold += len(gold_spans)
            matched += len(pred_spans & gold_spans)
        return cls(sentences=sentences, sentences_exact=exact, brackets_predicted=n_pred,
                   brackets_gold=n_gold, brackets_matched=matched)


def parse_counts(teacher_forced: Parsed | None, followed: Parsed, premise_gold, hypothesis_gold) -> ParseCounts:
    """Counts over both sides of a pair batch.

    ``teacher_forced`` is the gold-mode Parsed of the batch (None: no
    transition accuracy), ``followed`` the Parsed of the mode being evaluated,
    and ``premise_gold`` / ``hypothesis_gold`` the batch's gold transitions.
    """
    counts = ParseCounts()
    for side, gold in (("premise", premise_gold), ("hypothesis", hypothesis_gold)):
        if teacher_forced is not None:
            counts += ParseCounts.of_teacher_forced(getattr(teacher_forced, f"{side}_transition_logits"), gold)
        counts += ParseCounts.of_parses(getattr(followed, f"{side}_transitions"), gold)
    return counts
