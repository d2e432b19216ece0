"""Parses decided by the model (docs/spec.md §7), framework-free: NumPy only.

With a transition head, the tracker state scores the two actions at every
step, ``t = (t_S, t_R) = h_t @ tracker.transition.kernel + tracker.transition.bias``,
and the model may follow its own parse instead of the data's. This module
holds what every implementation shares about that, written once:

* the modes (:data:`MODES`) and the decision rule (:func:`decide`), with the
  stable log-probability and entropy helpers of sampled mode;
* how an implementation knows a sentence's length when it does not follow the
  gold transitions (:func:`sentence_lengths`);
* the uniform numbers of sampled mode, drawn here from (seed, epoch, row) so
  every framework takes the same samples (:func:`pair_uniforms`,
  :func:`batch_uniforms`);
* what every SPINN's parse returns for its 2B sentences
  (:class:`SentenceParses`, in the framework's own arrays), and the one
  place that splits it into the record every runner returns
  (:func:`split_pairs` -> :class:`Parsed`);
* the evaluation of parses against gold ones (:class:`ParseCounts`,
  :func:`teacher_forced_accuracy`, :func:`parse_agreement`,
  :func:`bracket_f1`).

Actions are indexed as the head's columns: 0 = SHIFT, 1 = REDUCE. Transition
codes are those of shared.transitions (PAD 0, SHIFT 1, REDUCE 2).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .transitions import PAD, REDUCE, SHIFT, check_transitions

MODES = ("gold", "predicted", "sampled")

# Column of each action in t = (t_S, t_R) and in the head's kernel.
SHIFT_COLUMN = 0
REDUCE_COLUMN = 1


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is one of :data:`MODES`, else raise ValueError."""
    if mode not in MODES:
        raise ValueError(f"unknown transitions mode {mode!r}; expected one of {MODES}")
    return mode


# --------------------------------------------------------------------------
# What an implementation returns
# --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no single truth value
class Parsed:
    """Encodings, logits and the parses a model followed, for one pair batch.

    Every implementation's ``parse`` returns this (the reference in float64,
    a framework in its own dtype). B = pairs, H = hidden size, T = the batch's
    transition width.
    """

    premise: np.ndarray  # <float>[B, H] sentence encodings
    hypothesis: np.ndarray  # <float>[B, H]
    logits: np.ndarray  # <float>[B, 3] class logits
    # The transitions actually followed: in gold mode the batch's own; in
    # predicted and sampled mode each sentence's 2n-1 decided steps, then PAD.
    premise_transitions: np.ndarray  # <int32>[B, T]
    hypothesis_transitions: np.ndarray  # <int32>[B, T]
    # t = (t_S, t_R) at each non-PAD step of the followed transitions, zeros
    # at PAD steps (gold mode: the teacher-forced logits).
    premise_transition_logits: np.ndarray  # <float>[B, T, 2]
    hypothesis_transition_logits: np.ndarray  # <float>[B, T, 2]
    # Per sentence, sums over choice steps; zeros unless mode == "sampled".
    premise_logprob: np.ndarray  # <float>[B]
    hypothesis_logprob: np.ndarray  # <float>[B]
    premise_entropy: np.ndarray  # <float>[B]
    hypothesis_entropy: np.ndarray  # <float>[B]

    def __post_init__(self) -> None:
        B, H = np.shape(self.premise) if np.ndim(self.premise) == 2 else (None, None)
        if B is None:
            raise ValueError(f"premise: expected [B, H], got shape {np.shape(self.premise)}")
        T = np.shape(self.premise_transitions)[-1] if np.ndim(self.premise_transitions) == 2 else -1
        expected = {
            "premise": (B, H), "hypothesis": (B, H), "logits": (B, 3),
            "premise_transitions": (B, T), "hypothesis_transitions": (B, T),
            "premise_transition_logits": (B, T, 2), "hypothesis_transition_logits": (B, T, 2),
            "premise_logprob": (B,), "hypothesis_logprob": (B,),
            "premise_entropy": (B,), "hypothesis_entropy": (B,),
        }
        for name, shape in expected.items():
            found = np.shape(getattr(self, name))
            if found != shape:
                raise ValueError(f"Parsed.{name}: expected shape {shape}, got {found}")
        for name in ("premise_transitions", "hypothesis_transitions"):
            if np.asarray(getattr(self, name)).dtype != np.int32:
                raise ValueError(f"Parsed.{name}: expected int32, got {np.asarray(getattr(self, name)).dtype}")

    def to_dict(self) -> dict[str, np.ndarray]:
        """The eleven arrays by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class SentenceParses(NamedTuple):
    """What a SPINN's ``parse`` returns for S sentences (docs/spec.md §7).

    A pair batch runs as one batch of S = 2B sentences, the B premises first,
    then the B hypotheses. The fields are the framework's own arrays (a
    tensor, an array inside a traced program, or NumPy), so the record can
    leave a traced or compiled function as it is (a NamedTuple is a structure
    the compiled frameworks understand) and keep its gradient where it has
    one; the runner turns it into :class:`Parsed` with :func:`split_pairs`.
    """

    encodings: Any  # <float>[S, H]
    # Followed: in gold mode the input; in predicted and sampled mode each
    # sentence's 2n-1 decided steps, then PAD.
    transitions: Any  # <int32>[S, T]
    transition_logits: Any  # <float>[S, T, 2] t = (t_S, t_R) at non-PAD steps, zeros at PAD
    logprob: Any  # <float>[S] sampled mode: sum over choice steps of log p(action taken); else zeros
    entropy: Any  # <float>[S] sampled mode: sum over choice steps of the step's entropy; else zeros


def split_pairs(parses: SentenceParses, logits, as_numpy: Callable[[Any], np.ndarray] = np.asarray) -> Parsed:
    """The :class:`Parsed` of a pair batch from its 2B sentences' parses
    (premises first) and its class logits <float>[B, 3]; ``as_numpy`` brings
    one of the framework's arrays to the host."""
    logits = as_numpy(logits)
    B = len(logits)
    arrays = {"logits": logits}
    for name, value in zip(SentenceParses._fields, parses):
        value = as_numpy(value)
        if name == "transitions":
            value = value.astype(np.int32, copy=False)
        side = {"encodings": ""}.get(name, f"_{name}")
        arrays[f"premise{side}"], arrays[f"hypothesis{side}"] = value[:B], value[B:]
    return Parsed(**arrays)


# --------------------------------------------------------------------------
# Lengths, the decision rule, stable logs
# --------------------------------------------------------------------------


def sentence_lengths(transitions: np.ndarray) -> np.ndarray:
    """n per row, <int64>[B]: the number of SHIFTs in ``transitions <int>[B, T]``.

    A batch always carries transitions (gold, or a fixed shape with the right
    number of SHIFTs). In predicted and sampled mode only this count is used:
    it is how an implementation knows how many leaves a sentence has and that
    it ends after 2n-1 steps.
    """
    transitions = np.asarray(transitions)
    if transitions.ndim != 2:
        raise ValueError(f"transitions: expected [B, T], got shape {transitions.shape}")
    return np.count_nonzero(transitions == SHIFT, axis=1).astype(np.int64)


def log_sigmoid(x) -> np.ndarray:
    """log σ(x) = -softplus(-x), finite for every finite x (0 for large x)."""
    return -np.logaddexp(0.0, -np.asarray(x, dtype=np.float64))


def sigmoid(x) -> np.ndarray:
    """σ(x) as exp(log σ(x)): never overflows, and keeps its relative precision
    for very negative x (σ(-60) ≈ 8.8e-27, where 1 + tanh(x/2) rounds to 0)."""
    return np.exp(log_sigmoid(x))


def reduce_probability(logits) -> np.ndarray:
    """p_R = σ(t_R - t_S) for ``logits <float>[..., 2]``."""
    logits = np.asarray(logits, dtype=np.float64)
    return sigmoid(logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN])


def action_logprob(logits, actions) -> np.ndarray:
    """log p(action) under p_R = σ(t_R - t_S), for ``actions`` SHIFT or REDUCE codes.

    Computed as log σ(±(t_R - t_S)) so saturated logits give 0 or a large
    negative number, never NaN. This is the per-step term of a sampled
    sentence's logprob; the caller adds it at choice steps only.
    """
    logits = np.asarray(logits, dtype=np.float64)
    diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]
    return np.where(np.asarray(actions) == REDUCE, log_sigmoid(diff), log_sigmoid(-diff))


def bernoulli_entropy(logits) -> np.ndarray:
    """-(p_R log p_R + (1 - p_R) log(1 - p_R)) with p_R = σ(t_R - t_S), in nats.

    Written with σ(-d) for 1 - p_R and log σ for the logs, so a saturated
    difference gives 0 (0 · log 0 never appears as 0 · -inf).
    """
    logits = np.asarray(logits, dtype=np.float64)
    diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]
    return -(sigmoid(diff) * log_sigmoid(diff) + sigmoid(-diff) * log_sigmoid(-diff))


def decide(logits, uniform, can_shift, can_reduce, mode: str) -> np.ndarray:
    """The action each row takes, <int32>[...]: SHIFT, REDUCE, or PAD when neither is valid.

    Args:
      logits: <float>[..., 2], t = (t_S, t_R) after this step's tracker update.
      uniform: <float>[...], this step's uniform number (sampled mode; ignored
        and may be None in predicted mode).
      can_shift: <bool>[...], the buffer is not empty.
      can_reduce: <bool>[...], the stack holds at least two items.
      mode: "predicted" or "sampled" (gold mode follows the data, no decision).

    Where both actions are valid: predicted REDUCEs if t_R > t_S (a tie
    SHIFTs); sampled REDUCEs if u < σ(t_R - t_S). Otherwise the one valid
    action is taken, whatever the logits.
    """
    check_mode(mode)
    if mode == "gold":
        raise ValueError("gold mode follows the batch's transitions; decide() is for predicted or sampled mode")
    logits = np.asarray(logits, dtype=np.float64)
    can_shift = np.asarray(can_shift, dtype=bool)
    can_reduce = np.asarray(can_reduce, dtype=bool)
    if mode == "predicted":
        wants_reduce = logits[..., REDUCE_COLUMN] > logits[..., SHIFT_COLUMN]
    else:
        if uniform is None:
            raise ValueError("sampled mode needs the step's uniform numbers")
        wants_reduce = np.asarray(uniform, dtype=np.float64) < reduce_probability(logits)
    choice = can_shift & can_reduce
    action = np.where(can_shift, SHIFT, np.where(can_reduce, REDUCE, PAD))
    return np.where(choice, np.where(wants_reduce, REDUCE, SHIFT), action).astype(np.int32)


# --------------------------------------------------------------------------
# Uniform numbers of sampled mode
# --------------------------------------------------------------------------


def _check_seed_part(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}"
                         + (" (a pair that was not read from a data file has no row; give it one)"
                            if name == "row" else ""))
    return int(value)


def pair_uniforms(seed: int, epoch: int, row: int, n_premise: int,
                  n_hypothesis: int) -> tuple[np.ndarray, np.ndarray]:
    """The uniform numbers of one pair: <float64>[2n_p - 1] and <float64>[2n_h - 1].

    ``rng = numpy.random.default_rng([seed, epoch, row])`` draws the
    premise's numbers first, then the hypothesis's; step t of a sentence
    uses element t. ``row`` is the pair's data row (shared.snli.Pair.row),
    ``epoch`` the 0-based pass over the data (0 for encoding).
    """
    seed, epoch, row = (_check_seed_part(k, v) for k, v in (("seed", seed), ("epoch", epoch), ("row", row)))
    for name, n in (("n_premise", n_premise), ("n_hypothesis", n_hypothesis)):
        if n < 1:
            raise ValueError(f"{name} must be >= 1 (a sentence has at least one token), got {n}")
    rng = np.random.default_rng([seed, epoch, row])
    premise = rng.random(2 * int(n_premise) - 1)
    hypothesis = rng.random(2 * int(n_hypothesis) - 1)
    return premise, hypothesis


def batch_uniforms(seed: int, epoch: int, rows: Sequence[int], premise_lengths: Sequence[int],
                   hypothesis_lengths: Sequence[int], T: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_uniforms` for every pair of a batch, laid out like its transitions.

    Returns (premise_u, hypothesis_u), each <float64>[B, T]: row i holds pair
    i's numbers in its first 2n-1 columns and zeros after them. A pair's
    numbers depend only on (seed, epoch, row) and its lengths, never on its
    batch mates or on T.
    """
    rows, premise_lengths, hypothesis_lengths = (np.asarray(a).reshape(-1) for a in
                                                 (rows, premise_lengths, hypothesis_lengths))
    if not len(rows) == len(premise_lengths) == len(hypothesis_lengths):
        raise ValueError(f"{len(rows)} rows, {len(premise_lengths)} premise lengths and "
                         f"{len(hypothesis_lengths)} hypothesis lengths: one of each per pair")
    longest = 2 * int(max(premise_lengths.max(initial=1), hypothesis_lengths.max(initial=1))) - 1
    if T < longest:
        raise ValueError(f"T={T} steps cannot hold a sentence of {longest} steps")
    premise_u = np.zeros((len(rows), T))
    hypothesis_u = np.zeros((len(rows), T))
    for i, (row, n_p, n_h) in enumerate(zip(rows, premise_lengths, hypothesis_lengths)):
        u_p, u_h = pair_uniforms(seed, epoch, row, int(n_p), int(n_h))
        premise_u[i, :len(u_p)] = u_p
        hypothesis_u[i, :len(u_h)] = u_h
    return premise_u, hypothesis_u


def uniforms_for(batch, rows: Sequence[int], seed: int, epoch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`batch_uniforms` for a PairBatch: lengths from its transitions, T its width.

    ``rows`` are the data rows of the batch's pairs, in batch order.
    """
    return batch_uniforms(seed, epoch, rows, sentence_lengths(batch.premise_transitions),
                          sentence_lengths(batch.hypothesis_transitions), batch.premise_transitions.shape[1])


# --------------------------------------------------------------------------
# Evaluation against gold parses
# --------------------------------------------------------------------------


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


def teacher_forced_accuracy(transition_logits, gold) -> float:
    """Share of non-PAD gold steps where the argmax of t is the gold action.

    ``transition_logits <float>[B, T, 2]`` come from gold mode (the model
    follows ``gold <int>[B, T]``); a tie counts as SHIFT. No validity mask:
    this scores the head exactly where the supervised loss trains it.
    """
    counts = ParseCounts.of_teacher_forced(transition_logits, gold)
    return counts.transition_accuracy


def bracket_f1(predicted, gold) -> float:
    """Unlabeled bracket F1 of predicted trees against gold trees, over a set of sentences.

    Brackets are the token spans of REDUCE constituents. Single words are not
    brackets, and neither is the whole sentence: every tree has it, so it
    would only raise the score (the convention of the unsupervised-parsing
    literature). Counts are summed over all sentences before dividing
    (corpus-level F1). A binary tree of n words has n-2 such brackets, so
    sentences of one or two words, which have exactly one tree, add nothing;
    when no sentence has any bracket every tree is right and F1 is 1.
    """
    return ParseCounts.of_parses(predicted, gold).bracket_f1


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
