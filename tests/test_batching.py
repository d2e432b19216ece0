"""Batching: padding layout, buckets, shuffling, no pair lost, padding report."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.run.padding import padding_share
from shared.batching import (
    DEFAULT_BUCKETS,
    PairBatch,
    bucket_size,
    make_batches,
    make_pair_batch,
    make_sentence_batches,
    pair_length,
    plan_batches,
    sentence_arrays,
    sentence_pairs,
)
from shared.snli import NO_LABEL, Pair
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, check_transitions, parse, plain_transitions
from shared.vocab import PAD_ID, UNK_ID, Vocabulary

WORDS = ["w0", "w1", "w2", "w3", "w4"]
VOCAB = Vocabulary(["<pad>", "<unk>"] + WORDS, lowercase=True)


def _sentence(n: int, shape: str = "left") -> Sentence:
    return Sentence(tuple(WORDS[i % len(WORDS)] for i in range(n)), tuple(plain_transitions(n, shape)))


def _pairs(lengths: list[tuple[int, int]]) -> list[Pair]:
    return [
        Pair(_sentence(p, "left"), _sentence(h, "right"), i % 3, f"id{i}") for i, (p, h) in enumerate(lengths)
    ]


def _check_layout(tokens: np.ndarray, transitions: np.ndarray, sentences: list[Sentence]) -> None:
    """Real content first, then only padding: 0 ids and PAD steps."""
    for row, sentence in enumerate(sentences):
        n, t = len(sentence.tokens), len(sentence.transitions)
        assert tokens[row, :n].tolist() == VOCAB.ids(sentence.tokens)
        assert (tokens[row, n:] == PAD_ID).all()
        assert tuple(transitions[row, :t]) == sentence.transitions
        assert (transitions[row, t:] == PAD).all()
        check_transitions(transitions[row], n)


def test_sentence_arrays_layout():
    sentences = [parse("( ( the w1 ) w2 )"), parse("w3"), _sentence(5, "balanced")]
    tokens, transitions = sentence_arrays(sentences, VOCAB)
    assert tokens.dtype == transitions.dtype == np.int32
    assert tokens.shape == (3, 5) and transitions.shape == (3, 9)
    assert tokens[0].tolist() == [UNK_ID, VOCAB.id("w1"), VOCAB.id("w2"), 0, 0]
    _check_layout(tokens, transitions, sentences)


def test_sentence_arrays_sizes():
    sentences = [_sentence(3)]
    tokens, transitions = sentence_arrays(sentences, VOCAB, num_tokens=6, num_steps=20)
    assert tokens.shape == (1, 6) and transitions.shape == (1, 20)
    _check_layout(tokens, transitions, sentences)
    with pytest.raises(ValueError, match="sentence 0 has 3 tokens"):
        sentence_arrays(sentences, VOCAB, num_tokens=2)
    with pytest.raises(ValueError, match="T >= 2N-1"):
        sentence_arrays(sentences, VOCAB, num_tokens=4, num_steps=6)
    with pytest.raises(ValueError, match="no sentences"):
        sentence_arrays([], VOCAB)
    assert sentence_arrays([], VOCAB, num_tokens=4)[1].shape == (0, 7)


def test_pair_batch_shares_shape():
    pairs = _pairs([(2, 7), (5, 1)]) + [Pair(_sentence(3), _sentence(3), NO_LABEL, "unlabeled")]
    batch = make_pair_batch(pairs, VOCAB)
    assert (batch.size, batch.num_tokens, batch.num_steps) == (3, 7, 13)
    assert batch.premise_tokens.shape == batch.hypothesis_tokens.shape == (3, 7)
    assert batch.premise_transitions.shape == batch.hypothesis_transitions.shape == (3, 13)
    assert batch.labels.tolist() == [0, 1, NO_LABEL] and batch.labels.dtype == np.int32
    assert batch.pair_ids == ("id0", "id1", "unlabeled")
    _check_layout(batch.premise_tokens, batch.premise_transitions, [p.premise for p in pairs])
    _check_layout(batch.hypothesis_tokens, batch.hypothesis_transitions, [p.hypothesis for p in pairs])
    assert set(batch.to_dict()) == {
        "premise_tokens",
        "premise_transitions",
        "hypothesis_tokens",
        "hypothesis_transitions",
        "labels",
    }
    wide = make_pair_batch(pairs, VOCAB, num_tokens=8, num_steps=32)
    assert (wide.num_tokens, wide.num_steps) == (8, 32)


def test_select():
    pairs = _pairs([(2, 3), (4, 1), (1, 1), (3, 3)])
    batch = make_pair_batch(pairs, VOCAB)
    sub = batch.select([3, 1])
    assert sub.pair_ids == ("id3", "id1")
    assert (sub.num_tokens, sub.num_steps) == (batch.num_tokens, batch.num_steps)
    np.testing.assert_array_equal(sub.premise_transitions, batch.premise_transitions[[3, 1]])
    np.testing.assert_array_equal(sub.labels, [0, 1])
    assert batch.select(np.array([False, True, False, True])).pair_ids == ("id1", "id3")
    assert batch.select([]).size == 0


def test_pair_batch_checks_its_arrays():
    batch = make_pair_batch(_pairs([(2, 2)]), VOCAB)
    arrays = batch.to_dict()
    with pytest.raises(ValueError, match="hypothesis_tokens"):
        PairBatch(**(arrays | {"hypothesis_tokens": arrays["hypothesis_tokens"][:, :1]}), pair_ids=("a",))
    with pytest.raises(ValueError, match="labels: expected int32"):
        PairBatch(**(arrays | {"labels": arrays["labels"].astype(np.int64)}), pair_ids=("a",))
    with pytest.raises(ValueError, match="pair ids"):
        PairBatch(**arrays, pair_ids=())


def test_bucket_size():
    assert DEFAULT_BUCKETS == (8, 16, 32, 64)
    assert [bucket_size(n) for n in (1, 8, 9, 16, 17, 33, 64)] == [8, 8, 16, 16, 32, 64, 64]
    assert [bucket_size(n) for n in (65, 128, 129)] == [128, 128, 192]
    assert bucket_size(5, buckets=(4, 10)) == 10
    assert bucket_size(11, buckets=(4, 10)) == 20
    with pytest.raises(ValueError):
        bucket_size(0)
    with pytest.raises(ValueError, match="increasing"):
        bucket_size(3, buckets=(8, 8))
    with pytest.raises(ValueError, match="increasing"):
        bucket_size(3, buckets=())


def test_batches_follow_buckets():
    pairs = _pairs([(3, 2), (10, 4), (2, 9), (40, 5), (7, 8), (1, 1), (70, 3)])
    batches = make_batches(pairs, VOCAB, batch_size=2)
    assert [(b.num_tokens, b.num_steps) for b in batches] == [(8, 15), (8, 15), (16, 31), (64, 127), (128, 255)]
    # File order inside each bucket, buckets in ascending N.
    assert [b.pair_ids for b in batches] == [
        ("id0", "id4"),
        ("id5",),
        ("id1", "id2"),
        ("id3",),
        ("id6",),
    ]
    for batch in batches:
        assert batch.num_steps == 2 * batch.num_tokens - 1


def test_no_buckets_pads_to_own_max():
    pairs = _pairs([(3, 2), (10, 4), (2, 9), (5, 5)])
    batches = make_batches(pairs, VOCAB, batch_size=2, buckets=None)
    assert [b.pair_ids for b in batches] == [("id0", "id1"), ("id2", "id3")]
    assert [(b.num_tokens, b.num_steps) for b in batches] == [(10, 19), (9, 17)]


def test_shuffle_deterministic_by_seed():
    pairs = _pairs([(1 + i % 20, 1 + (7 * i) % 13) for i in range(60)])

    def ids(**kw):
        return [b.pair_ids for b in make_batches(pairs, VOCAB, batch_size=4, **kw)]

    assert ids(shuffle=True, seed=1) == ids(shuffle=True, seed=1)
    assert ids(shuffle=True, seed=1) != ids(shuffle=True, seed=2)
    assert ids(shuffle=True, seed=1) != ids(shuffle=False)
    assert ids(shuffle=False, seed=1) == ids(shuffle=False, seed=2)
    # Shuffling never mixes buckets.
    by_id = {p.pair_id: p for p in pairs}
    for batch in make_batches(pairs, VOCAB, batch_size=4, shuffle=True, seed=3):
        members = [by_id[i] for i in batch.pair_ids]
        assert {bucket_size(pair_length(p)) for p in members} == {batch.num_tokens}


def test_drop_last():
    pairs = _pairs([(2, 2)] * 5 + [(12, 3)] * 3)
    batches = make_batches(pairs, VOCAB, batch_size=2, drop_last=True)
    assert [b.size for b in batches] == [2, 2, 2]
    plan = plan_batches([max(2, 2)] * 5 + [12] * 3, 2, drop_last=True)
    assert plan.dropped.tolist() == [4, 7]
    kept = [i for pair_ids in (b.pair_ids for b in batches) for i in pair_ids]
    assert len(kept) + len(plan.dropped) == len(pairs)


def test_batches_encode_the_sentences():
    pairs = _pairs([(3, 2), (10, 4), (2, 9), (40, 5)])
    by_id = {p.pair_id: p for p in pairs}
    for batch in make_batches(pairs, VOCAB, batch_size=3, shuffle=True, seed=5):
        chosen = [by_id[i] for i in batch.pair_ids]
        _check_layout(batch.premise_tokens, batch.premise_transitions, [p.premise for p in chosen])
        _check_layout(batch.hypothesis_tokens, batch.hypothesis_transitions, [p.hypothesis for p in chosen])
        np.testing.assert_array_equal(batch.labels, [p.label for p in chosen])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 80), st.integers(1, 80)), min_size=0, max_size=40),
    batch_size=st.integers(1, 9),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**16),
    bucketed=st.booleans(),
)
def test_every_pair_once(lengths, batch_size, shuffle, seed, bucketed):
    pairs = _pairs(lengths)
    buckets = DEFAULT_BUCKETS if bucketed else None
    batches = make_batches(pairs, VOCAB, batch_size, buckets=buckets, shuffle=shuffle, seed=seed)
    seen = Counter(i for b in batches for i in b.pair_ids)
    assert seen == Counter(p.pair_id for p in pairs)
    for batch in batches:
        assert 1 <= batch.size <= batch_size
        assert batch.num_steps == 2 * batch.num_tokens - 1
        longest = max(pair_length(pairs[int(i[2:])]) for i in batch.pair_ids)
        assert batch.num_tokens == (bucket_size(longest) if bucketed else longest)
        # Real steps are a prefix of every row; the rest is PAD.
        for transitions in (batch.premise_transitions, batch.hypothesis_transitions):
            real = transitions != PAD
            assert (np.sort(real, axis=1)[:, ::-1] == real).all()
    dropped = make_batches(pairs, VOCAB, batch_size, buckets=buckets, shuffle=shuffle, seed=seed, drop_last=True)
    plan = plan_batches(
        [max(p, h) for p, h in lengths], batch_size, buckets=buckets, shuffle=shuffle, seed=seed, drop_last=True
    )
    kept = Counter(i for b in dropped for i in b.pair_ids)
    assert all(b.size == batch_size for b in dropped)
    assert sum(kept.values()) + len(plan.dropped) == len(pairs)
    assert not set(kept) & {f"id{i}" for i in plan.dropped.tolist()}


def test_padding_share_hand_made():
    # Batch 1 (N=3, T=5): premise lengths 3, 1; hypothesis lengths 2, 3.
    # Batch 2 (N=2, T=3): premise length 2; hypothesis length 1.
    batch1 = make_pair_batch(
        [Pair(_sentence(3), _sentence(2), 0, "a"), Pair(_sentence(1), _sentence(3), 1, "b")], VOCAB
    )
    batch2 = make_pair_batch([Pair(_sentence(2), _sentence(1), 2, "c")], VOCAB)
    share = padding_share([batch1, batch2])
    # Real steps: 2n-1 per sentence: (5 + 1 + 3 + 5) + (3 + 1) = 18.
    # Slots: batch1 2 sentences x 2 rows x 5 + batch2 2 x 1 x 3 = 26.
    assert share.real_steps == 18
    assert share.total_steps == 26
    assert share.padded_steps == 8
    assert share.waste == pytest.approx(8 / 26)
    assert share.real_tokens == 3 + 1 + 2 + 3 + 2 + 1
    assert share.token_slots == 2 * 2 * 3 + 2 * 1 * 2
    assert share.num_batches == 2
    assert share.shapes == [(2, 3), (3, 5)]
    # Both batches are as long as their longest sentence: a loop that stops there runs every slot.
    assert (share.loop_steps, share.loop_waste) == (26, pytest.approx(8 / 26))
    empty = padding_share([])
    assert (empty.total_steps, empty.waste, empty.shapes, empty.loop_steps, empty.loop_waste) == (0, 0.0, [], 0, 0.0)


def test_padding_share_loop_stops_at_the_last_real_step():
    # N=4, T=7; the longest sentence has 3 tokens, 5 steps: a loop that stops
    # there runs 4 rows x 5 steps, of which 5 + 1 + 3 + 5 = 14 are real.
    batch = make_pair_batch(
        [Pair(_sentence(3), _sentence(2), 0, "a"), Pair(_sentence(1), _sentence(3), 1, "b")], VOCAB, num_tokens=4
    )
    # A PAD in the middle of a row does not end it: the last real step counts.
    transitions = batch.hypothesis_transitions.copy()
    transitions[1, :6] = np.r_[transitions[1, :2], PAD, transitions[1, 2:5]]
    batch = PairBatch(**{**batch.to_dict(), "hypothesis_transitions": transitions}, pair_ids=batch.pair_ids)
    report = padding_share([batch])
    assert (report.real_steps, report.total_steps) == (14, 28)
    assert (report.loop_steps, report.loop_waste) == (24, pytest.approx(10 / 24))


def _sentence_pairs_data():
    lengths = [(9, 4), (3, 3), (12, 6), (5, 2), (7, 7), (20, 1), (4, 8)]
    return [Pair(_sentence(p), _sentence(h, "right"), i % 3, f"id{i}", row=10 + i) for i, (p, h) in enumerate(lengths)]


def test_sentence_pairs_sorts_sentences_and_leaves_out_the_longest():
    pairs = _sentence_pairs_data()
    rows = sentence_pairs(pairs, 3, seed=4)
    # 14 sentences, batches of 6: the 2 longest (20 and 12 tokens) are left out.
    assert len(rows) == 6
    sentences = [s for pair in rows for s in (pair.premise, pair.hypothesis)]
    assert [len(s) for s in sentences] == sorted(n for p in pairs for n in (len(p.premise), len(p.hypothesis)))[:12]
    by_id = {p.pair_id: p for p in pairs}
    for pair in rows:
        (first, first_side), (second, second_side) = (part.split("/") for part in pair.pair_id.split("+"))
        source = {"p": "premise", "h": "hypothesis"}
        assert pair.premise == getattr(by_id[first], source[first_side])
        assert pair.hypothesis == getattr(by_id[second], source[second_side])
        assert (pair.label, pair.row) == (by_id[first].label, by_id[first].row)
    # Every sentence kept appears once.
    assert len({part for pair in rows for part in pair.pair_id.split("+")}) == 12
    with pytest.raises(ValueError, match="batch_size"):
        sentence_pairs(pairs, 0)


@pytest.mark.parametrize("buckets", [DEFAULT_BUCKETS, None])
def test_sentence_batches_are_padded_little(buckets):
    pairs = _pairs([(n % 13 + 1, (7 * n) % 11 + 1) for n in range(40)])
    batches = make_sentence_batches(pairs, VOCAB, 4, buckets=buckets, shuffle=True, seed=1)
    assert len(batches) == 10 and all(b.size == 4 for b in batches)
    def words(batch):  # the token count of each of the batch's 8 sentences
        return [int(np.count_nonzero(t == SHIFT)) for t in (*batch.premise_transitions, *batch.hypothesis_transitions)]

    real_steps = loop_steps = 0
    every = sorted(n for p in pairs for n in (len(p.premise), len(p.hypothesis)))
    for batch in batches:
        lengths = words(batch)
        assert batch.num_tokens == (bucket_size(max(lengths)) if buckets else max(lengths))
        # 8 neighbours in length order: a run of the sorted lengths.
        assert any(sorted(lengths) == every[k:k + 8] for k in range(0, len(every), 8))
        real_steps += sum(2 * n - 1 for n in lengths)
        loop_steps += 8 * (2 * max(lengths) - 1)
    report = padding_share(batches)
    assert report.loop_steps == loop_steps and report.real_steps == real_steps
    pair_report = padding_share(make_batches(pairs, VOCAB, 4, buckets=buckets, shuffle=True, seed=1))
    assert report.loop_waste < pair_report.loop_waste / 3
    # The same seed gives the same batches; shuffling only reorders them.
    again = make_sentence_batches(pairs, VOCAB, 4, buckets=buckets, shuffle=True, seed=1)
    assert [b.pair_ids for b in again] == [b.pair_ids for b in batches]
    ordered = make_sentence_batches(pairs, VOCAB, 4, buckets=buckets, seed=1)
    assert sorted(b.pair_ids for b in ordered) == sorted(b.pair_ids for b in batches)


def test_transition_codes_survive():
    batch = make_pair_batch(_pairs([(4, 4)]), VOCAB)
    assert set(np.unique(batch.premise_transitions)) <= {PAD, SHIFT, REDUCE}


def test_length_buckets_follow_the_data():
    from shared.batching import length_buckets

    lengths = [3] * 10 + [7] * 10 + [20] * 10 + [41] * 10
    assert length_buckets(lengths, 4) == (3, 7, 20, 41)
    assert length_buckets(lengths, 2) == (7, 41)
    assert length_buckets([5] * 8, 4) == (5,)  # coinciding quantiles give one boundary
    with pytest.raises(ValueError):
        length_buckets([], 4)
