"""Synthetic pairs: determinism, balance, validity, rules, shapes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shared.snli import LABELS, Pair
from shared.synthetic import (
    ADVERBS,
    AGENT_ADJECTIVES,
    AGENTS,
    PLACES,
    PREPOSITIONS,
    SHAPES,
    THING_ADJECTIVES,
    THINGS,
    VERBS,
    WORDS,
    random_transitions,
    shaped_pairs,
    synthetic_pairs,
)
from shared.transitions import check_transitions, plain_transitions
from shared.vocab import Vocabulary


def _valid(pair: Pair) -> None:
    for sentence in (pair.premise, pair.hypothesis):
        check_transitions(sentence.transitions, len(sentence.tokens))


def test_deterministic_by_seed():
    assert synthetic_pairs(50, seed=3) == synthetic_pairs(50, seed=3)
    assert synthetic_pairs(50, seed=3) != synthetic_pairs(50, seed=4)
    assert shaped_pairs(20, seed=3) == shaped_pairs(20, seed=3)
    assert shaped_pairs(20, seed=3) != shaped_pairs(20, seed=4)


def test_ids_labels_and_validity():
    pairs = synthetic_pairs(900, seed=0)
    assert [p.pair_id for p in pairs] == [f"synth-{i}" for i in range(900)]
    counts = Counter(p.label for p in pairs)
    assert set(counts) == {0, 1, 2}
    assert all(250 <= c <= 350 for c in counts.values()), counts
    for pair in pairs:
        _valid(pair)


def test_small_vocabulary():
    vocab = Vocabulary.from_pairs(synthetic_pairs(500, seed=1))
    assert 10 <= len(vocab) - 2 <= len(WORDS) <= 60
    assert set(vocab.words[2:]) <= set(WORDS)


def test_labels_follow_the_rules():
    """Check each label against its rule on the token lists."""
    modifiers = set(AGENT_ADJECTIVES) | set(THING_ADJECTIVES) | set(ADVERBS)
    core = set(AGENTS) | set(VERBS) | set(THINGS)
    place_phrases = {tuple(sorted((prep, "the", place))) for prep in PREPOSITIONS for place in PLACES}
    for pair in synthetic_pairs(600, seed=2):
        p, h = list(pair.premise.tokens), list(pair.hypothesis.tokens)
        p_core = [w for w in p if w in core]
        h_core = [w for w in h if w in core]
        label = LABELS[pair.label]
        if label == "contradiction":
            assert len(p_core) == len(h_core) == 3
            assert sum(a != b for a, b in zip(p_core, h_core)) == 1
        else:
            assert p_core == h_core
            shorter, longer = (h, p) if label == "entailment" else (p, h)
            extra = Counter(longer) - Counter(shorter)
            assert not Counter(shorter) - Counter(longer)
            # One modifier: an adjective or adverb, or a place phrase "in the park".
            words = sorted(extra.elements())
            is_word = len(words) == 1 and words[0] in modifiers
            is_place = tuple(words) in place_phrases
            assert is_word or is_place, (p, h)


def test_contradictions_hide_the_length_cue():
    pairs = [p for p in synthetic_pairs(600, seed=4) if LABELS[p.label] == "contradiction"]
    same = sum(len(p.premise) == len(p.hypothesis) for p in pairs)
    assert 0.3 < same / len(pairs) < 0.7


@pytest.mark.parametrize("shape", ["left", "right", "balanced"])
def test_shaped_pairs_plain_shapes(shape):
    pairs = shaped_pairs(40, length=17, shape=shape, seed=1, min_length=3)
    lengths = set()
    for pair in pairs:
        _valid(pair)
        for sentence in (pair.premise, pair.hypothesis):
            assert 3 <= len(sentence) <= 17
            assert sentence.transitions == tuple(plain_transitions(len(sentence), shape))
            assert set(sentence.tokens) <= set(WORDS)
            lengths.add(len(sentence))
    assert len(lengths) > 5
    assert [p.pair_id for p in pairs] == [f"shaped-{i}" for i in range(40)]
    assert {p.label for p in pairs} == {0, 1, 2}


def test_shaped_pairs_fixed_length_by_default():
    for pair in shaped_pairs(10, length=7, shape="random"):
        assert len(pair.premise) == len(pair.hypothesis) == 7
        _valid(pair)


def test_random_shape_varies():
    pairs = shaped_pairs(30, length=12, shape="random", seed=2)
    shapes = {p.premise.transitions for p in pairs}
    assert len(shapes) > 10
    for pair in pairs:
        _valid(pair)
    # Long random trees need no recursion.
    check_transitions(random_transitions(5000, np.random.default_rng(0)), 5000)


def test_shaped_pairs_arguments():
    assert set(SHAPES) == {"random", "left", "right", "balanced"}
    with pytest.raises(ValueError, match="unknown shape"):
        shaped_pairs(1, shape="zigzag")
    with pytest.raises(ValueError, match="min_length"):
        shaped_pairs(1, length=4, min_length=5)
    with pytest.raises(ValueError, match="min_length"):
        shaped_pairs(1, length=4, min_length=0)

