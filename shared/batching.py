"""Pairs -> padded NumPy batches (docs/spec.md §2), with length bucketing.

A batch of B pairs is four int32 arrays and the labels::

    premise_tokens         <int32>[B, N]   token ids, right-padded with PAD_ID (0)
    premise_transitions    <int32>[B, T]   SHIFT/REDUCE, right-padded with PAD (0)
    hypothesis_tokens      <int32>[B, N]
    hypothesis_transitions <int32>[B, T]
    labels                 <int32>[B]      0..2, or NO_LABEL (-1) for unlabeled rows

Design decision: premise and hypothesis of one batch share the same N and T,
so an implementation may stack them into one ``[2B, N]`` batch and run the
encoder once. T is 2N-1 (the most steps N tokens can need) unless a larger T
is asked for.

Bucketing: a compiled implementation traces (or compiles) once per distinct
(N, T), while padding to one global N wastes steps on every short
sentence. :func:`make_batches` rounds each pair's length up to a bucket
boundary (:data:`DEFAULT_BUCKETS`), which bounds the number of shapes and keeps
most slots real; bench/run/padding.py measures what was wasted.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from shared.snli import Pair
from shared.transitions import PAD, Sentence
from shared.vocab import PAD_ID, Vocabulary

logger = logging.getLogger(__name__)

# Token-count boundaries N. A sentence longer than the last boundary gets N
# rounded up to a multiple of it, so the number of shapes stays small.
DEFAULT_BUCKETS = (8, 16, 32, 64)


class BatchArrays(NamedTuple):
    """A batch as a framework's training and inference functions take it (their ``batch`` argument): the five
    arrays of a PairBatch by its names, NumPy int32 (PyTorch and DyNet read the transitions on the host) or
    the framework's own device arrays (TensorFlow, JAX: a nest and a pytree), and ``levels``, the host's level
    schedule of the batch for the families that run one (shared/levels.py), else ()."""

    premise_tokens: object
    premise_transitions: object
    hypothesis_tokens: object
    hypothesis_transitions: object
    labels: object
    levels: object = ()


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no single truth value
class PairBatch:
    """B premise/hypothesis pairs padded to one shared [B, N] / [B, T]."""

    premise_tokens: np.ndarray  # <int32>[B, N], right-padded with 0
    premise_transitions: np.ndarray  # <int32>[B, T], right-padded with PAD, T >= 2N-1
    hypothesis_tokens: np.ndarray  # <int32>[B, N]
    hypothesis_transitions: np.ndarray  # <int32>[B, T]
    labels: np.ndarray  # <int32>[B] (NO_LABEL = -1 allowed)
    pair_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        # Cheap checks that catch a hand-built batch breaking the contract.
        object.__setattr__(self, "pair_ids", tuple(self.pair_ids))
        if self.premise_tokens.ndim != 2 or self.premise_transitions.ndim != 2:
            raise ValueError("premise_tokens and premise_transitions must be 2-d [B, N] and [B, T]")
        b, n = self.premise_tokens.shape
        t = self.premise_transitions.shape[1]
        expected = {
            "premise_tokens": (b, n),
            "premise_transitions": (b, t),
            "hypothesis_tokens": (b, n),
            "hypothesis_transitions": (b, t),
            "labels": (b,),
        }
        for name, shape in expected.items():
            array = getattr(self, name)
            if array.shape != shape or array.dtype != np.int32:
                raise ValueError(f"{name}: expected int32 {shape}, got {array.dtype} {array.shape}")
        if len(self.pair_ids) != b:
            raise ValueError(f"{len(self.pair_ids)} pair ids for a batch of {b}")
        if t < 2 * n - 1:
            raise ValueError(f"T={t} steps cannot hold N={n} tokens (need T >= 2N-1 = {2 * n - 1})")

    @property
    def size(self) -> int:
        """B, the number of pairs."""
        return self.labels.shape[0]

    @property
    def num_tokens(self) -> int:
        """N, the padded token count (premise and hypothesis alike)."""
        return self.premise_tokens.shape[1]

    @property
    def num_steps(self) -> int:
        """T, the padded transition count (premise and hypothesis alike)."""
        return self.premise_transitions.shape[1]

    def arrays(self) -> BatchArrays:
        """The five arrays (no pair ids), as the frameworks' functions take them."""
        return BatchArrays(self.premise_tokens, self.premise_transitions, self.hypothesis_tokens,
                           self.hypothesis_transitions, self.labels)

    def to_dict(self) -> dict[str, np.ndarray]:
        """The five arrays by name (no pair ids), e.g. for ``np.savez``."""
        return dict(zip(BatchArrays._fields[:5], self.arrays()))

    def select(self, idx: Sequence[int] | np.ndarray) -> "PairBatch":
        """The sub-batch of rows ``idx`` (indices or a boolean mask), same N and T."""
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64).reshape(-1)
        arrays = {name: array[idx] for name, array in self.to_dict().items()}
        return PairBatch(**arrays, pair_ids=tuple(self.pair_ids[i] for i in idx))


def sentences_transitions(batch) -> np.ndarray:
    """<int32>[2B, T]: premises then hypotheses, as every implementation runs them (of a batch, or of the
    parses a runner followed: both name them alike)."""
    return np.concatenate([batch.premise_transitions, batch.hypothesis_transitions])


def sentence_arrays(
    sentences: Sequence[Sentence],
    vocab: Vocabulary,
    *,
    num_tokens: int | None = None,
    num_steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Pad sentences into ``tokens <int32>[B, N]`` and ``transitions <int32>[B, T]``.

    N defaults to the longest sentence and T to 2N-1. Raises ValueError when a
    sentence does not fit N or T, or when T < 2N-1.
    """
    if num_tokens is None:
        if not sentences:
            raise ValueError("no sentences: give num_tokens to build an empty batch")
        num_tokens = max(len(s) for s in sentences)
    if num_steps is None:
        num_steps = 2 * num_tokens - 1
    if num_tokens < 1 or num_steps < 2 * num_tokens - 1:
        raise ValueError(f"need N >= 1 and T >= 2N-1, got N={num_tokens}, T={num_steps}")
    tokens = np.full((len(sentences), num_tokens), PAD_ID, dtype=np.int32)
    transitions = np.full((len(sentences), num_steps), PAD, dtype=np.int32)
    for row, sentence in enumerate(sentences):
        n, t = len(sentence.tokens), len(sentence.transitions)
        if n > num_tokens or t > num_steps:
            raise ValueError(
                f"sentence {row} has {n} tokens and {t} transitions; "
                f"the batch holds N={num_tokens} tokens, T={num_steps} steps"
            )
        tokens[row, :n] = vocab.ids(sentence.tokens)
        transitions[row, :t] = sentence.transitions
    return tokens, transitions


def make_pair_batch(
    pairs: Sequence[Pair],
    vocab: Vocabulary,
    *,
    num_tokens: int | None = None,
    num_steps: int | None = None,
) -> PairBatch:
    """One PairBatch; N defaults to the longest premise or hypothesis, T to 2N-1."""
    if num_tokens is None:
        if not pairs:
            raise ValueError("no pairs: give num_tokens to build an empty batch")
        num_tokens = max(pair_length(pair) for pair in pairs)
    shape = {"num_tokens": num_tokens, "num_steps": num_steps}
    premise_tokens, premise_transitions = sentence_arrays([p.premise for p in pairs], vocab, **shape)
    hypothesis_tokens, hypothesis_transitions = sentence_arrays([p.hypothesis for p in pairs], vocab, **shape)
    return PairBatch(
        premise_tokens=premise_tokens,
        premise_transitions=premise_transitions,
        hypothesis_tokens=hypothesis_tokens,
        hypothesis_transitions=hypothesis_transitions,
        labels=np.array([p.label for p in pairs], dtype=np.int32).reshape(-1),
        pair_ids=tuple(p.pair_id for p in pairs),
    )


def pair_length(pair: Pair) -> int:
    """The token count a pair needs: the longer of its two sentences."""
    return max(len(pair.premise), len(pair.hypothesis))


def bucket_size(n_tokens: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> int:
    """The padded N for a sentence of ``n_tokens``: the smallest boundary that
    fits, or past the last boundary the next multiple of it."""
    _check_buckets(buckets)
    if n_tokens < 1:
        raise ValueError(f"a sentence has at least one token, got {n_tokens}")
    for boundary in buckets:
        if n_tokens <= boundary:
            return boundary
    last = buckets[-1]
    return math.ceil(n_tokens / last) * last


def length_buckets(lengths: Sequence[int], count: int = len(DEFAULT_BUCKETS)) -> tuple[int, ...]:
    """Bucket boundaries chosen from the data: the ``count`` quantiles of the
    pair lengths (the last one the longest pair), so each bucket holds about
    as many pairs and a batch is padded only to its own part of the length
    distribution. Fewer boundaries come back where quantiles coincide."""
    if count < 1 or not len(lengths):
        raise ValueError(f"need lengths and count >= 1, got {len(lengths)} lengths and count {count}")
    quantiles = np.quantile(np.asarray(lengths), np.linspace(0.0, 1.0, count + 1)[1:], method="inverted_cdf")
    return tuple(sorted({int(math.ceil(q)) for q in quantiles}))


def _check_buckets(buckets: Sequence[int]) -> None:
    if not buckets or any(b < 1 for b in buckets) or any(a >= b for a, b in zip(buckets, buckets[1:])):
        raise ValueError(f"buckets must be increasing positive token counts, got {tuple(buckets)}")


@dataclass(frozen=True)
class BatchPlan:
    """Which pairs go in which batch, before any array is built.

    ``batches`` holds (N, indices into the pair list) per batch, N None when
    the batch is padded to its own longest pair; ``dropped`` the indices that
    ``drop_last`` left out.
    """

    batches: tuple[tuple[int | None, np.ndarray], ...]
    dropped: np.ndarray


def plan_batches(
    lengths: Sequence[int],
    batch_size: int,
    *,
    buckets: Sequence[int] | None = DEFAULT_BUCKETS,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
) -> BatchPlan:
    """Group pair indices into batches; see :func:`make_batches` for the rules.

    ``lengths[i]`` is the token count of pair i (:func:`pair_length`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    rng = np.random.default_rng(seed)
    # Groups of pair indices that may share a batch, in file order.
    if buckets is None:
        groups: dict[int | None, np.ndarray] = {None: np.arange(len(lengths))}
    else:
        sizes = np.array([bucket_size(int(n), buckets) for n in lengths], dtype=np.int64)
        groups = {int(size): np.flatnonzero(sizes == size) for size in np.unique(sizes)}
    batches: list[tuple[int | None, np.ndarray]] = []
    dropped: list[np.ndarray] = []
    for size, members in groups.items():  # ascending N: np.unique sorts
        if shuffle:
            members = rng.permutation(members)
        for start in range(0, len(members), batch_size):
            chunk = members[start : start + batch_size]
            if drop_last and len(chunk) < batch_size:
                dropped.append(chunk)
            else:
                batches.append((size, chunk))
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    dropped_indices = np.concatenate(dropped) if dropped else np.zeros(0, dtype=np.int64)
    return BatchPlan(batches=tuple(batches), dropped=np.sort(dropped_indices))


def make_batches(
    pairs: Sequence[Pair],
    vocab: Vocabulary,
    batch_size: int,
    *,
    buckets: Sequence[int] | None = DEFAULT_BUCKETS,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[PairBatch]:
    """Split pairs into padded batches of at most ``batch_size``.

    Pairs are grouped by the bucket of their longer sentence, and each batch is
    padded to its bucket's N (T = 2N-1); ``buckets=None`` does no grouping and
    pads each batch to its own longest pair. Without shuffling, batches come in
    ascending N and keep file order inside a bucket. ``shuffle=True`` permutes
    the pairs inside each bucket and then the order of the batches, both from
    ``seed``, so one seed always gives the same batches.

    Every pair lands in exactly one batch, except with ``drop_last=True``,
    which drops the short final batch of each bucket (the number of pairs
    dropped is logged; :func:`plan_batches` returns their indices).
    ``progress`` is called with the pairs of each batch made.
    """
    plan = plan_batches(
        [pair_length(p) for p in pairs],
        batch_size,
        buckets=buckets,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
    )
    if len(plan.dropped):
        logger.info("drop_last: %d of %d pairs left out (short final batches)", len(plan.dropped), len(pairs))
    batches = []
    for size, indices in plan.batches:
        batches.append(make_pair_batch([pairs[i] for i in indices], vocab, num_tokens=size))
        if progress is not None:
            progress(len(indices))
    return batches


SORT_PROGRESS_PAIRS = 10_000  # sentence_order's progress callback: the pairs a call reports (two sentences each)


def sentence_order(pairs: Sequence[Pair], batch_size: int, *, seed: int = 0,
                   progress: Callable[[int], None] | None = None) -> np.ndarray:
    """The sentences of ``pairs`` (2i: pair i's premise, 2i+1: its hypothesis) sorted by token count, ties in
    an order drawn from ``seed``. The 2P mod 2B longest fill no batch and are left out (logged), as
    ``make_batches(drop_last=True)`` leaves out each bucket's short last batch: a batch across the long tail
    of lengths would be mostly padding. ``progress``: called with the sentences measured (seconds, at 550k pairs)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.zeros(2 * len(pairs), dtype=np.int64)
    for start in range(0, len(pairs), SORT_PROGRESS_PAIRS):
        chunk = pairs[start:start + SORT_PROGRESS_PAIRS]
        lengths[2 * start:2 * (start + len(chunk))] = [len(s) for p in chunk for s in (p.premise, p.hypothesis)]
        if progress is not None:
            progress(2 * len(chunk))
    order = np.random.default_rng(seed).permutation(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]  # by length; ties in the seed's order
    leftover = len(order) % (2 * batch_size)
    if leftover:
        logger.info("sentence batches: the %d longest of %d sentences left out (no full batch)",
                    leftover, len(order))
    return order[:len(order) - leftover]


def sentence_rows(pairs: Sequence[Pair], order: np.ndarray) -> list[Pair]:
    """The sentences ``order`` names (as :func:`sentence_order`) taken two by
    two, the first of each two as the premise. A row's label and data row
    (``Pair.row``, which seeds sampled parses) are those of its premise's pair,
    and its pair id names both sources (``"id7/p+id3/h"``)."""
    rows = []
    for a, b in zip(order[0::2].tolist(), order[1::2].tolist()):
        first, second = pairs[a // 2], pairs[b // 2]
        rows.append(Pair((first.premise, first.hypothesis)[a % 2], (second.premise, second.hypothesis)[b % 2],
                         first.label, f"{first.pair_id}/{'ph'[a % 2]}+{second.pair_id}/{'ph'[b % 2]}", row=first.row))
    return rows


def sentence_pairs(pairs: Sequence[Pair], batch_size: int, *, seed: int = 0) -> list[Pair]:
    """The rows of :func:`make_sentence_batches`, each run of ``batch_size``
    one batch: every premise and hypothesis is one sentence, sorted by length
    (:func:`sentence_order`) and paired in that order (:func:`sentence_rows`)."""
    return sentence_rows(pairs, sentence_order(pairs, batch_size, seed=seed))


def make_sentence_batches(pairs: Sequence[Pair], vocab: Vocabulary, batch_size: int, *,
                          buckets: Sequence[int] | None = DEFAULT_BUCKETS, shuffle: bool = False, seed: int = 0,
                          progress: Callable[[int], None] | None = None,
                          order: np.ndarray | None = None) -> list[PairBatch]:
    """Batches of length-adjacent sentences, for measuring speed (docs/spec.md §2).

    Each batch holds 2B neighbours in length order (:func:`sentence_pairs`),
    so a loop that stops at the batch's longest sentence runs few PAD steps,
    where a batch of real pairs pads every short hypothesis to its premise
    and every short pair to the batch's longest. The pairing is not the
    data's; what a step costs depends only on the sentences' lengths and
    trees, which are the data's own, so these batches measure what encoding
    sentences grouped by length costs. They are not for training a model or
    for accuracy.

    N is the bucket of the batch's longest sentence (``buckets=None``: that
    length itself) and T = 2N-1, as in :func:`make_batches`;
    ``shuffle=True`` permutes the batches (from ``seed``). ``progress`` is
    called with the rows (sentence pairs) of each batch made. ``order``: the
    :func:`sentence_order` of the same ``batch_size`` and ``seed``, if made
    already (by a caller that shows the sorting's progress apart)."""
    if order is None:
        order = sentence_order(pairs, batch_size, seed=seed)
    batches = []
    for start in range(0, len(order), 2 * batch_size):
        chunk = sentence_rows(pairs, order[start:start + 2 * batch_size])
        longest = max(len(s) for pair in chunk for s in (pair.premise, pair.hypothesis))
        size = longest if buckets is None else bucket_size(longest, buckets)
        batches.append(make_pair_batch(chunk, vocab, num_tokens=size))
        if progress is not None:
            progress(len(chunk))
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(batches))
        batches = [batches[i] for i in order]
    return batches
