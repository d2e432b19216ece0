"""The batch ``explain`` looks at, and the variants its recompilation check feeds."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

import numpy as np

from bench.config import model_config
from shared.batching import PairBatch, make_pair_batch, sentences_transitions
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, Pair, read_snli
from shared.synthetic import random_transitions, shaped_pairs
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, plain_transitions
from shared.vocab import Vocabulary

OTHER_SHAPES = ("left", "right", "balanced", "random")  # the define-by-run "same words, other trees" table
EXTRA_PADDING = 4  # the padded variant: N + 4 token slots (and T = 2(N + 4) - 1 steps)


@dataclass
class Batches:
    """The batch, and the variants the recompilation check feeds."""

    main: PairBatch
    reshaped: dict[str, PairBatch]  # shape -> the same words as other trees (same B, N, T)
    padded: PairBatch  # the same pairs with EXTRA_PADDING more token slots
    other_trees: str  # the shape of the variant that the recompilation check uses
    vocab_size: int
    source: str  # the batch in words, for the reader
    trees: str  # the trees' shape: "left", "right", "balanced", "random", or "SNLI parse" (the sample's own)


def _reshape(sentence: Sentence, shape: str, rng) -> Sentence:
    n = len(sentence)
    transitions = random_transitions(n, rng) if shape == "random" else plain_transitions(n, shape)
    return Sentence(sentence.tokens, tuple(transitions))


@functools.lru_cache(maxsize=1)
def _sample_pairs() -> tuple:
    return tuple(read_snli(SAMPLE_PATH)[0])


def make_batches(args: argparse.Namespace) -> Batches:
    if args.batch_size < 1 or args.length < 1:
        raise ValueError("--batch-size and --length must be >= 1")
    if args.shape == "sample":
        pairs = _sample_pairs()[:args.batch_size]  # labelled rows, in file order
        if len(pairs) < args.batch_size:
            raise ValueError(f"the sample has only {len(pairs)} labelled pairs")
        source, trees = "the SNLI sample (its own parse trees)", "SNLI parse"
    else:
        pairs = shaped_pairs(args.batch_size, length=args.length, shape=args.shape, seed=args.data_seed)
        source, trees = f"random words, {args.shape} trees of {args.length} words", args.shape
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    n = max(max(len(p.premise), len(p.hypothesis)) for p in pairs)
    reshaped = {}
    for shape in OTHER_SHAPES:
        rng = np.random.default_rng(args.data_seed + 1)
        other = [Pair(_reshape(p.premise, shape, rng), _reshape(p.hypothesis, shape, rng), p.label, p.pair_id)
                 for p in pairs]
        reshaped[shape] = make_pair_batch(other, vocab, num_tokens=n)
    other_trees = "random" if args.shape in ("left", "right", "balanced") else "left"
    return Batches(main=make_pair_batch(pairs, vocab, num_tokens=n), reshaped=reshaped,
                   padded=make_pair_batch(pairs, vocab, num_tokens=n + EXTRA_PADDING),
                   other_trees=other_trees, vocab_size=len(vocab), source=source, trees=trees)


def setup(args: argparse.Namespace) -> tuple[Batches, ModelConfig, dict]:
    """The batch and its variants, the model ``args`` describe and its initial weights."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size, lowercase=True)
    return batches, config, init_params(config, seed=args.seed)


def summary(batches: Batches) -> dict:
    """The figures of the batch itself (the first lines of the output)."""
    b = batches.main
    transitions = sentences_transitions(b)
    return {
        "source": batches.source,
        "trees": batches.trees,
        "pairs": b.size,
        "sentences": 2 * b.size,
        "num_tokens": b.num_tokens,
        "num_steps": b.num_steps,
        "shift": int(np.count_nonzero(transitions == SHIFT)),
        "reduce": int(np.count_nonzero(transitions == REDUCE)),
        "pad": int(np.count_nonzero(transitions == PAD)),
        "other_trees": batches.other_trees,
        "padded_num_tokens": batches.padded.num_tokens,
        "padded_num_steps": batches.padded.num_steps,
    }
