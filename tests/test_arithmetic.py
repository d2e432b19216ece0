"""The arithmetic language: gold trees are the precedence parse, values are
Python's, labels are balanced and depend on the tree, not only the words."""

from __future__ import annotations

import numpy as np
import pytest

from shared.arithmetic import (arithmetic_pairs, expression_sentence, label_of, precedence_tree, random_expression,
                               tree_value)
from shared.snli import read_snli
from shared.transitions import build_tree, check_transitions, parse, plain_transitions, to_bracket
from tests.helpers import write_jsonl


def _reading(tokens, transitions) -> int:
    """The value an expression gets under the tree these transitions build."""
    return tree_value(build_tree(tokens, transitions))


@pytest.mark.parametrize("text,bracketed,value", [
    ("5", "5", 5),
    ("3 + 4", "( 3 ( + 4 ) )", 7),
    ("3 + 4 * 2 - 1", "( ( 3 ( + ( 4 ( * 2 ) ) ) ) ( - 1 ) )", 10),
    ("2 * 3 * 4", "( ( 2 ( * 3 ) ) ( * 4 ) )", 24),
    ("1 - 2 - 3", "( ( 1 ( - 2 ) ) ( - 3 ) )", -4),
    ("1 + 2 * 3 * 4 + 5", "( ( 1 ( + ( ( 2 ( * 3 ) ) ( * 4 ) ) ) ) ( + 5 ) )", 30),
    ("9 * 2 - 8 * 0", "( ( 9 ( * 2 ) ) ( - ( 8 ( * 0 ) ) ) )", 18),
    ("7 - 6 + 5 * 4 * 3 - 2", "( ( ( 7 ( - 6 ) ) ( + ( ( 5 ( * 4 ) ) ( * 3 ) ) ) ) ( - 2 ) )", 59),
], ids=["number", "sum", "mixed", "products", "differences", "product-in-sum", "two-products", "long"])
def test_precedence_trees_by_hand(text, bracketed, value):
    tokens = text.split()
    tree = precedence_tree(tokens)
    assert to_bracket(tree) == bracketed
    assert tree_value(tree) == value == eval(text)  # noqa: S307 - digits and operators only
    sentence = expression_sentence(tokens)
    assert sentence.tokens == tuple(tokens)
    assert sentence == parse(bracketed)
    assert _reading(sentence.tokens, sentence.transitions) == value


def test_values_match_python_evaluation():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        tokens = random_expression(rng, int(rng.integers(1, 10)))
        sentence = expression_sentence(tokens)
        check_transitions(sentence.transitions, len(tokens))
        assert len(sentence.transitions) == 2 * len(tokens) - 1
        assert tree_value(precedence_tree(tokens)) == eval(" ".join(tokens))  # noqa: S307


def test_other_trees_read_compositionally():
    tokens = "3 + 4 * 2 - 1".split()
    assert _reading(tokens, plain_transitions(7, "left")) == ((3 + 4) * 2) - 1  # left to right
    assert _reading(tokens, plain_transitions(7, "right")) == 3 + (4 * (2 - 1))  # right to left
    # ( ( 3 + ) ( 4 ( * 2 ) ) ) ... a tree may also join a pending "3 +" with a product
    assert tree_value(((("3", "+"), ("4", ("*", "2"))), ("-", "1"))) == 10
    with pytest.raises(ValueError, match="no arithmetic reading"):
        tree_value(("3", ("+", ("4", "*"))))  # "+" joined with the pending "4 *"
    with pytest.raises(ValueError, match="not a complete expression"):
        tree_value(("+", "4"))
    with pytest.raises(ValueError, match="token 1"):
        precedence_tree(["3", "3", "4"])
    with pytest.raises(ValueError, match="alternates"):
        precedence_tree(["3", "+"])


def test_labels():
    assert [label_of(7, 7), label_of(8, 7), label_of(9, 7), label_of(-2, 7)] == [0, 1, 2, 0]


def test_pairs_are_seeded_and_well_formed():
    pairs = arithmetic_pairs(200, seed=3)
    assert pairs == arithmetic_pairs(200, seed=3)
    assert pairs != arithmetic_pairs(200, seed=4)
    for i, pair in enumerate(pairs):
        assert pair.pair_id == f"arith-{i}" and pair.row == i
        for sentence in (pair.premise, pair.hypothesis):
            assert 4 <= (len(sentence.tokens) + 1) // 2 <= 8
            assert sentence == expression_sentence(sentence.tokens)
        values = [tree_value(build_tree(s.tokens, s.transitions)) for s in (pair.premise, pair.hypothesis)]
        assert pair.label == label_of(*values)
    short = arithmetic_pairs(50, seed=0, min_len=1, max_len=2)
    assert {len(p.premise.tokens) for p in short} == {1, 3}
    with pytest.raises(ValueError, match="min_len"):
        arithmetic_pairs(3, min_len=3, max_len=2)


def test_labels_are_balanced():
    counts = np.bincount([p.label for p in arithmetic_pairs(3000, seed=0)], minlength=3)
    # measured 0.324, 0.332, 0.344 for seed 0
    assert np.all(np.abs(counts / 3000 - 1 / 3) < 0.03), counts


def test_left_branching_reading_changes_the_label_often():
    """Read both sentences left-branching (left-to-right evaluation, no
    precedence) and recompute the label. Measured for 3,000 pairs of seed 0:
    the value of at least one sentence changes in 84% of the pairs and the
    label in 49%; the right-branching reading changes the label in 63%."""
    pairs = arithmetic_pairs(3000, seed=0)
    value_changed = label_changed = right_label_changed = 0
    for pair in pairs:
        gold, left, right = [], [], []
        for s in (pair.premise, pair.hypothesis):
            gold.append(_reading(s.tokens, s.transitions))
            left.append(_reading(s.tokens, plain_transitions(len(s.tokens), "left")))
            right.append(_reading(s.tokens, plain_transitions(len(s.tokens), "right")))
        value_changed += gold != left
        label_changed += label_of(*left) != pair.label
        right_label_changed += label_of(*right) != pair.label
    assert value_changed / 3000 > 0.75
    assert label_changed / 3000 > 0.4
    assert right_label_changed / 3000 > 0.5


def test_pairs_round_trip_through_jsonl(tmp_path):
    pairs = arithmetic_pairs(20, seed=1)
    path = tmp_path / "arith.jsonl"
    write_jsonl(pairs, path)
    read, report = read_snli(path)
    assert read == pairs and report.pairs == 20
    assert [p.row for p in read] == [p.row for p in pairs]
