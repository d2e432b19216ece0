"""Fixed-shape parses from the front end (``--parse``, docs/spec.md §1): the
baselines a learned parse is compared with."""

from __future__ import annotations

import argparse

import pytest

from bench.config import add_data_arguments, load_dataset
from shared.arithmetic import arithmetic_pairs
from shared.parse_metrics import ParseCounts
from shared.snli import PARSES, with_parse
from shared.transitions import REDUCE, SHIFT, build_tree, check_transitions, plain_transitions, to_bracket


def test_shapes_by_hand():
    words = ("a", "b", "c", "d", "e")
    trees = {shape: to_bracket(build_tree(words, plain_transitions(5, shape))) for shape in PARSES[1:]}
    assert trees == {"left": "( ( ( ( a b ) c ) d ) e )", "right": "( a ( b ( c ( d e ) ) ) )",
                     "balanced": "( ( ( a b ) c ) ( d e ) )"}  # the first ceil(n/2) words, then the rest


@pytest.mark.parametrize("parse", PARSES)
def test_with_parse_keeps_everything_but_the_trees(parse, sample_pairs):
    pairs = sample_pairs[:40]
    shaped = with_parse(pairs, parse)
    assert len(shaped) == len(pairs)
    for old, new in zip(pairs, shaped):
        assert (new.label, new.pair_id, new.row) == (old.label, old.pair_id, old.row)
        for before, after in ((old.premise, new.premise), (old.hypothesis, new.hypothesis)):
            assert after.tokens == before.tokens
            check_transitions(after.transitions, len(after.tokens))
            expected = before.transitions if parse == "gold" else tuple(plain_transitions(len(before.tokens), parse))
            assert after.transitions == expected


def test_unknown_parse_is_refused(sample_pairs):
    with pytest.raises(ValueError, match="gold, left, right, balanced"):
        with_parse(sample_pairs[:2], "random")


def test_parse_flag_when_reading_data():
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    args = parser.parse_args(["--data", "arithmetic", "--num-pairs", "30", "--parse", "right"])
    dataset = load_dataset(args)
    gold = arithmetic_pairs(30, seed=0)
    assert [p.row for p in dataset.pairs] == list(range(30))
    for pair, true in zip(dataset.pairs, gold):
        n = len(pair.premise.tokens)
        assert pair.premise.transitions == tuple([SHIFT] * n + [REDUCE] * (n - 1))
        assert pair.premise.tokens == true.premise.tokens
    assert load_dataset(parser.parse_args(["--data", "arithmetic", "--num-pairs", "30"])).pairs == gold
    short = load_dataset(parser.parse_args(["--data", "arithmetic", "--num-pairs", "30", "--numbers", "2:3"]))
    assert {len(p.premise.tokens) for p in short.pairs} <= {3, 5}


def test_fixed_shapes_against_the_arithmetic_trees():
    """No fixed shape is the precedence parse: each gets some brackets wrong,
    and the three disagree with each other."""
    pairs = arithmetic_pairs(200, seed=0)
    gold = [s.transitions for p in pairs for s in (p.premise, p.hypothesis)]
    width = max(map(len, gold))
    pad = lambda rows: [list(r) + [0] * (width - len(r)) for r in rows]  # noqa: E731
    f1 = {}
    for shape in PARSES[1:]:
        shaped = [s.transitions for p in with_parse(pairs, shape) for s in (p.premise, p.hypothesis)]
        f1[shape] = ParseCounts.of_parses(pad(shaped), pad(gold)).bracket_f1
    assert all(0.0 < value < 1.0 for value in f1.values()), f1
    assert len(set(f1.values())) == 3, f1


def test_parse_summary_shape_f1():
    """Two-number expressions `a op b` have the true tree ( a ( op b ) ): right-branching."""
    from bench.curves import shape_f1

    pairs = arithmetic_pairs(50, seed=2, min_len=2, max_len=2)
    assert shape_f1(pairs, "right") == 1.0 == shape_f1(pairs, "gold")
    assert shape_f1(pairs, "left") == 0.0
