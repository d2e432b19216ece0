"""Parses decided by the model (docs/spec.md §7), framework-free: NumPy only.

With a transition head, the tracker state scores the two actions at every
step, ``t = (t_S, t_R) = h_t @ tracker.transition.kernel + tracker.transition.bias``,
and the model may follow its own parse instead of the data's. This module
holds what every implementation shares about that, written once:

* the modes (:data:`MODES`) and the decision rule in NumPy, float64
  (:func:`decide`: the reference's and DyNet's; each framework's
  ``impl_*/head.py`` writes it once over its own ops, with the same return
  convention), with the stable log-probability and entropy helpers of
  sampled mode;
* how an implementation knows a sentence's length when it does not follow the
  gold transitions (:func:`sentence_lengths`);
* the uniform numbers of sampled mode, drawn here from (seed, epoch, row) so
  every framework takes the same samples (:func:`pair_uniforms`,
  :func:`batch_uniforms`);
* what every SPINN's parse returns for its 2B sentences
  (:class:`SentenceParses`, in the framework's own arrays), and the one
  place that splits it into the record every runner returns
  (:func:`split_pairs` -> :class:`Parsed`);
* the host side of a define-by-run parse (the lists family): what it keeps
  of the head step by step, and its per-sentence branches on the verdicts
  of the framework's rule, read back to Python (:class:`HeadRecord`).

The evaluation of parses against gold ones is shared/parse_metrics.py.

Actions are indexed as the head's columns: 0 = SHIFT, 1 = REDUCE. Transition
codes are those of shared.transitions (PAD 0, SHIFT 1, REDUCE 2).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .transitions import PAD, REDUCE, SHIFT

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


def decide(logits, uniform, can_shift, can_reduce, mode: str):
    """The decision rule of docs/spec.md §7 in NumPy, float64: the reference's, and DyNet's, which
    decides on the host.

    Args:
      logits: <float>[..., 2], t = (t_S, t_R) after this step's tracker update.
      uniform: <float>[...], this step's uniform number (sampled mode; ignored
        and may be None in predicted mode).
      can_shift: <bool>[...], the buffer is not empty.
      can_reduce: <bool>[...], the stack holds at least two items.
      mode: "predicted" or "sampled" (gold mode follows the data, no decision).

    Returns (is_shift, is_reduce, logprob, entropy), the convention of every
    framework's rule (impl_*/head.py): the masks <bool>[...] (both false: the
    sentence is finished, a PAD step) and, in sampled mode, the step's
    log p(action taken) and entropy <float64>[...], zero where the step is no
    choice; None in predicted mode.

    Where both actions are valid: predicted REDUCEs if t_R > t_S (a tie
    SHIFTs); sampled REDUCEs if u < p_R = σ(t_R - t_S). Otherwise the one valid
    action is taken, whatever the logits.
    """
    check_mode(mode)
    if mode == "gold":
        raise ValueError("gold mode follows the batch's transitions; decide() is for predicted or sampled mode")
    logits = np.asarray(logits, dtype=np.float64)
    can_shift = np.asarray(can_shift, dtype=bool)
    can_reduce = np.asarray(can_reduce, dtype=bool)
    choice = can_shift & can_reduce  # both actions possible: the head decides
    logprob = entropy = None
    if mode == "predicted":
        wants_reduce = logits[..., REDUCE_COLUMN] > logits[..., SHIFT_COLUMN]  # a tie SHIFTs
    else:
        if uniform is None:
            raise ValueError("sampled mode needs the step's uniform numbers")
        diff = logits[..., REDUCE_COLUMN] - logits[..., SHIFT_COLUMN]  # t_R - t_S
        log_p_reduce, log_p_shift = log_sigmoid(diff), log_sigmoid(-diff)
        p_reduce, p_shift = np.exp(log_p_reduce), np.exp(log_p_shift)
        wants_reduce = np.asarray(uniform, dtype=np.float64) < p_reduce
    # Where only one action is possible it is taken, whatever t says.
    is_reduce = can_reduce & (~can_shift | wants_reduce)
    is_shift = can_shift & ~is_reduce
    if mode == "sampled":  # a step with one possible action is no choice and adds nothing
        logprob = np.where(choice, np.where(is_reduce, log_p_reduce, log_p_shift), 0.0)
        entropy = np.where(choice, -(p_reduce * log_p_reduce + p_shift * log_p_shift), 0.0)
    return is_shift, is_reduce, logprob, entropy


# --------------------------------------------------------------------------
# Decisions read back to the host (define-by-run: the lists family)
# --------------------------------------------------------------------------


class HeadRecord:
    """What a define-by-run ``parse`` keeps of the head, step by step, to
    build its outputs after the loop: the logits of every active sentence,
    and where they go, and in sampled mode the terms of each choice. A
    framework's subclass applies its decision rule to a step's rows
    (``verdict``: the framework's ``head.decide``, the rule its masked family
    applies inside its loop), reads the verdict to the host (``to_host``) and
    builds its tensors (``outputs``)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.logits: list = []  # per step, the head's [K, 2] for its K active sentences (framework tensors)
        self.rows: list[int] = []  # ... and the sentence of each row
        self.columns: list[int] = []  # ... and its step
        self.logprob: list = []  # sampled mode, per step with a choice: log p(action taken) of its K rows [K]
        self.entropy: list = []  # ... and their entropies [K] (zero where a row had no choice; framework tensors)
        self.scored: list[int] = []  # ... and the sentence of each of those rows
        self.host_syncs = 0  # device-to-host reads of decisions

    def add(self, t: int, active: list[int], logits) -> None:
        """Record step t's logits <float>[K, 2], row k that of sentence active[k]."""
        self.logits.append(logits)
        self.rows.extend(active)
        self.columns.extend([t] * len(active))

    def decide(self, t: int, logits, active: list[int], buffers: list, stacks: list,
               uniforms: np.ndarray | None) -> list[int]:
        """The model's op at step t for each sentence (docs/spec.md §7): PAD
        unless active. The head's logits <float>[K, 2] (row k: sentence
        active[k]) decide where a sentence has a choice: the framework's rule
        on the device, its verdict read back here; sampled mode (``uniforms``
        <float64>[S, T] given) draws with p_R and keeps the terms of each choice.
        """
        # What is possible is read off the lists: SHIFT needs a word above the
        # buffer's zero item, REDUCE two items above the stack's two.
        can_shift = [len(buffers[s]) > 1 for s in active]
        can_reduce = [len(stacks[s]) > 3 for s in active]
        ops = [PAD] * len(buffers)
        if not any(a and b for a, b in zip(can_shift, can_reduce)):
            # No sentence has a choice: each takes its one possible action, and
            # the head's verdict is not needed, nor a read.
            for k, s in enumerate(active):
                ops[s] = SHIFT if can_shift[k] else REDUCE
            return ops
        # The host round trip of define-by-run: the `if` below is plain
        # Python, so it needs plain values. The rule runs on the device (the
        # step's K rows at once), and its verdict is copied off the device
        # here, while Python waits for it (on a GPU, for all the work queued
        # before it): once per step, for the K sentences together.
        uniform = uniforms[active, t] if uniforms is not None else None
        _, is_reduce, logprob, entropy = self.verdict(logits, uniform, can_shift, can_reduce)
        if logprob is not None:  # sampled mode: the terms of this step's choices
            self.logprob.append(logprob)
            self.entropy.append(entropy)
            self.scored.extend(active)
        reduces = self.to_host(is_reduce)
        self.host_syncs += 1
        for k, s in enumerate(active):
            # A real, data-dependent branch per sentence: what is recorded
            # next depends on what the model just said. An active sentence can
            # act, so what does not REDUCE SHIFTs.
            ops[s] = REDUCE if reduces[k] else SHIFT
        return ops

    def verdict(self, logits, uniform: np.ndarray | None, can_shift: list[bool], can_reduce: list[bool]) -> tuple:
        """The framework's decision rule (its head.decide) on one step's K
        rows, on the device, and what it returns: (is_shift, is_reduce,
        logprob, entropy), none of it read yet. ``uniform`` <float64>[K] in
        sampled mode, else None."""
        raise NotImplementedError

    def to_host(self, verdict) -> list[bool]:
        """The framework's read of one step's verdict <bool>[K] into host values."""
        raise NotImplementedError

    def outputs(self, encodings, T: int) -> tuple:
        """transition_logits <float>[S, T, 2] (zeros at PAD), logprob and
        entropy <float>[S] (zeros unless sampled), the framework's tensors."""
        raise NotImplementedError


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
