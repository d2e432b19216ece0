"""Vocabulary: specials, frequency order, lowercasing, meta.vocab round trip."""

from __future__ import annotations

import numpy as np
import pytest

from shared.snli import Pair
from shared.transitions import parse
from shared.vocab import PAD_ID, PAD_TOKEN, UNK_ID, UNK_TOKEN, Vocabulary

TEXTS = [["The", "cat", "sat"], ["the", "dog", "sat"], ["a", "cat", "ran"], ["The", "end"]]


def test_specials_first():
    vocab = Vocabulary.build(TEXTS)
    assert (PAD_ID, UNK_ID) == (0, 1)
    assert vocab.words[:2] == [PAD_TOKEN, UNK_TOKEN]
    assert vocab.id(PAD_TOKEN) == PAD_ID and vocab.id(UNK_TOKEN) == UNK_ID


def test_frequency_then_alphabetical_order():
    vocab = Vocabulary.build(TEXTS)
    # the: 3; cat, sat: 2; then the ones seen once, alphabetically.
    assert vocab.words == [PAD_TOKEN, UNK_TOKEN, "the", "cat", "sat", "a", "dog", "end", "ran"]


def test_deterministic_whatever_the_input_order():
    forward = Vocabulary.build(TEXTS)
    backward = Vocabulary.build([list(reversed(t)) for t in reversed(TEXTS)])
    assert forward == backward
    assert forward.words == Vocabulary.build(TEXTS).words


def test_min_freq_and_max_size():
    assert Vocabulary.build(TEXTS, min_freq=2).words == [PAD_TOKEN, UNK_TOKEN, "the", "cat", "sat"]
    assert Vocabulary.build(TEXTS, max_size=4).words == [PAD_TOKEN, UNK_TOKEN, "the", "cat"]
    assert len(Vocabulary.build(TEXTS, max_size=2)) == 2
    with pytest.raises(ValueError, match="min_freq"):
        Vocabulary.build(TEXTS, min_freq=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build(TEXTS, max_size=1)


def test_lowercase():
    vocab = Vocabulary.build(TEXTS, lowercase=True)
    assert vocab.lowercase
    assert vocab.id("THE") == vocab.id("The") == vocab.id("the") == 2
    assert "CAT" in vocab and "The" in vocab

    cased = Vocabulary.build(TEXTS, lowercase=False)
    assert not cased.lowercase
    assert cased.id("The") != cased.id("the")
    assert cased.id("THE") == UNK_ID
    assert "The" in cased and "THE" not in cased


def test_unknown_words():
    vocab = Vocabulary.build(TEXTS)
    assert vocab.id("zebra") == UNK_ID
    assert vocab.ids(["the", "zebra", "cat"]) == [2, UNK_ID, 3]
    assert "zebra" not in vocab
    assert 3 not in vocab


def test_specials_in_text_are_not_counted():
    vocab = Vocabulary.build([["<pad>", "<unk>", "x"]])
    assert vocab.words == [PAD_TOKEN, UNK_TOKEN, "x"]


def test_from_pairs():
    pair = Pair(parse("( A dog )"), parse("( a cat )"), 0, "p")
    assert Vocabulary.from_pairs([pair]).words == [PAD_TOKEN, UNK_TOKEN, "a", "cat", "dog"]
    cased = Vocabulary.from_pairs([pair], lowercase=False, min_freq=1)
    assert cased.words == [PAD_TOKEN, UNK_TOKEN, "A", "a", "cat", "dog"]


@pytest.mark.parametrize("lowercase", [True, False])
def test_array_round_trip(lowercase):
    vocab = Vocabulary.build(TEXTS + [["naïve", "café"]], lowercase=lowercase)
    array = vocab.to_array()
    assert array.ndim == 1 and array.dtype.kind == "U" and len(array) == len(vocab)
    # The array survives an npz file read without pickle (meta.vocab).
    back = Vocabulary.from_array(array, lowercase=lowercase)
    assert back == vocab and back.words == vocab.words and back.lowercase == lowercase


def test_from_array_rejects_non_unicode():
    with pytest.raises(ValueError, match="1-d unicode"):
        Vocabulary.from_array(np.array([[PAD_TOKEN, UNK_TOKEN]]), lowercase=True)
    with pytest.raises(ValueError, match="1-d unicode"):
        Vocabulary.from_array(np.array([0, 1]), lowercase=True)


@pytest.mark.parametrize(
    "words, message",
    [
        ([], "starts with"),
        (["<unk>", "<pad>", "a"], "starts with"),
        (["<pad>", "a"], "starts with"),
        (["<pad>", "<unk>", "a", "b", "a"], "duplicate word 'a'"),
        (["<pad>", "<unk>", "<pad>"], "duplicate word '<pad>'"),
        (["<pad>", "<unk>", ""], "non-empty"),
        (["<pad>", "<unk>", 5], "non-empty strings"),
        (["<pad>", "<unk>", "The"], "not lowercase"),
    ],
    ids=["empty", "swapped_specials", "no_unk", "duplicate", "duplicate_special", "empty_word", "not_str", "cased"],
)
def test_bad_word_lists_rejected(words, message):
    with pytest.raises(ValueError, match=message):
        Vocabulary(words, lowercase=True)


def test_cased_words_allowed_without_lowercasing():
    vocab = Vocabulary(["<pad>", "<unk>", "The", "the"], lowercase=False)
    assert vocab.ids(["The", "the"]) == [2, 3]
