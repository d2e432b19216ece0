"""Binary parses -> transitions (docs/spec.md §1): examples, bad input, properties."""

from __future__ import annotations

import json
import re
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.snli import SAMPLE_PATH
from shared.transitions import (
    PAD,
    PLAIN_SHAPES,
    REDUCE,
    SHIFT,
    ParseError,
    build_tree,
    check_transitions,
    max_stack_depth,
    parse,
    plain_transitions,
    to_bracket,
    tree_depth,
)

S, R = SHIFT, REDUCE


# --- examples ---------------------------------------------------------------


def test_spec_example():
    sentence = parse("( ( The church ) ( ( has ( cracks ( in ( the ceiling ) ) ) ) . ) )")
    assert sentence.tokens == ("The", "church", "has", "cracks", "in", "the", "ceiling", ".")
    assert sentence.transitions == (S, S, R, S, S, S, S, S, R, R, R, R, S, R, R)
    check_transitions(sentence.transitions, len(sentence.tokens))
    assert len(sentence.transitions) == 2 * len(sentence.tokens) - 1


def test_one_word():
    assert parse("hello").transitions == (S,)
    assert parse("( hello )").transitions == (S,)
    assert parse("hello").tokens == ("hello",)


def test_unary_group_is_its_child():
    assert parse("( a )") == parse("a")
    assert parse("( ( ( a ) ) )") == parse("a")
    # Unary groups around subtrees add no REDUCE either.
    assert parse("( ( ( a b ) ) ( ( c ) ) )") == parse("( ( a b ) c )")
    assert parse("( ( ( a ) ( ( b ) ) ) )") == parse("( a b )")


def test_nary_group_binarizes_left_to_right():
    assert parse("( a b c )") == parse("( ( a b ) c )")
    assert parse("( a b c d )") == parse("( ( ( a b ) c ) d )")
    assert parse("( a ( b c ) d )") == parse("( ( a ( b c ) ) d )")
    # Several top-level items are one implicit group.
    assert parse("( a b ) ( c d )") == parse("( ( a b ) ( c d ) )")


def test_brackets_need_no_spaces():
    assert parse("((a b)(c d))") == parse("( ( a b ) ( c d ) )")


def test_plain_text_is_left_branching():
    sentence = parse("the cat sat down")
    assert sentence.tokens == ("the", "cat", "sat", "down")
    assert sentence.transitions == (S, S, R, S, R, S, R)
    assert build_tree(sentence.tokens, sentence.transitions) == ((("the", "cat"), "sat"), "down")


def test_plain_text_other_shapes():
    assert parse("a b c d", plain_shape="right").transitions == (S, S, S, S, R, R, R)
    assert parse("a b c d", plain_shape="balanced").transitions == (S, S, R, S, S, R, R)
    right = parse("a b c", plain_shape="right")
    assert build_tree(right.tokens, right.transitions) == ("a", ("b", "c"))
    with pytest.raises(ValueError, match="unknown tree shape"):
        parse("a b", plain_shape="sideways")


def test_tree_helpers():
    sentence = parse("( ( a b ) ( c ( d e ) ) )")
    tree = build_tree(sentence.tokens, sentence.transitions)
    assert tree == (("a", "b"), ("c", ("d", "e")))
    assert to_bracket(tree) == "( ( a b ) ( c ( d e ) ) )"
    assert tree_depth(tree) == 3
    assert tree_depth("a") == 0
    assert max_stack_depth(sentence.transitions) == 4
    assert max_stack_depth(plain_transitions(10, "left")) == 2
    assert max_stack_depth(plain_transitions(10, "right")) == 10


# --- bad input ----------------------------------------------------------------

BAD_INPUTS = {
    "unclosed": "( ( a b )",
    "unopened": "( a b ) )",
    "close_first": ") a (",
    "empty": "",
    "whitespace": "   \t ",
    "empty_group": "( )",
    "nested_empty_group": "( ( ) a )",
    "brackets_only": "( ( ) )",
}


@pytest.mark.parametrize("text", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_raises_with_input_and_position(text):
    with pytest.raises(ParseError) as info:
        parse(text)
    message = str(info.value)
    assert repr(text) in message
    assert re.search(r"at character \d+", message)
    assert info.value.position is not None and 0 <= info.value.position <= len(text)
    assert info.value.text == text


def test_bad_input_positions():
    assert _error_position("( ( a b )") == 0  # the '(' that is never closed
    assert _error_position("( a b ) )") == 8  # the stray ')'
    assert _error_position("( a ( ) )") == 4  # the empty group's '('


def _error_position(text: str) -> int:
    with pytest.raises(ParseError) as info:
        parse(text)
    return info.value.position


def test_parse_rejects_non_strings():
    with pytest.raises(TypeError):
        parse(None)


# --- check_transitions ---------------------------------------------------------


@pytest.mark.parametrize(
    "transitions, n_tokens, message",
    [
        ((S, R), 1, "REDUCE with 1 item"),
        ((R, S, S), 2, "REDUCE with 0 item"),
        ((S, S, R, R), 2, "REDUCE with 1 item"),
        ((S, S, S, R), 3, "1 REDUCEs for 3 SHIFTs"),
        ((S, S, R), 3, "2 SHIFTs for 3 tokens"),
        ((S, S, S, R, R), 2, "SHIFT from an empty buffer"),
        ((S, 3, S, R), 2, "unknown transition code 3"),
        ((S, -1), 1, "unknown transition code -1"),
        ((), None, "no SHIFT"),
        ((PAD, PAD), None, "no SHIFT"),
    ],
    ids=[
        "reduce_one_item",
        "reduce_empty",
        "reduce_too_many",
        "reduce_too_few",
        "shift_too_few",
        "shift_too_many",
        "unknown_code",
        "negative_code",
        "empty",
        "only_pad",
    ],
)
def test_check_transitions_rejects(transitions, n_tokens, message):
    with pytest.raises(ValueError, match=message):
        check_transitions(transitions, n_tokens)


def test_check_transitions_pad_anywhere():
    for transitions in [
        (PAD, S, S, R),
        (S, PAD, S, R),
        (S, S, PAD, PAD, R),
        (S, S, R, PAD, PAD, PAD),
        (PAD, S, PAD, S, PAD, R, PAD),
    ]:
        check_transitions(transitions, 2)
    check_transitions((S, S, R, PAD), None)


# --- properties ------------------------------------------------------------

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz.,'-", min_size=1, max_size=6)
trees = st.recursive(words, lambda sub: st.tuples(sub, sub), max_leaves=30)


def _leaves(tree) -> list[str]:
    return [tree] if isinstance(tree, str) else _leaves(tree[0]) + _leaves(tree[1])


@settings(max_examples=200, deadline=None)
@given(trees)
def test_random_trees_round_trip(tree):
    sentence = parse(to_bracket(tree))
    n = len(_leaves(tree))
    assert sentence.tokens == tuple(_leaves(tree))
    check_transitions(sentence.transitions, n)
    assert sentence.transitions.count(SHIFT) == n
    assert sentence.transitions.count(REDUCE) == n - 1
    assert build_tree(sentence.tokens, sentence.transitions) == tree


@settings(max_examples=200, deadline=None)
@given(st.lists(words, min_size=1, max_size=40))
def test_plain_text_shapes(tokens):
    text = " ".join(tokens)
    left = parse(text)
    assert left.tokens == tuple(tokens)
    check_transitions(left.transitions, len(tokens))
    assert build_tree(left.tokens, left.transitions) == reduce(lambda acc, word: (acc, word), tokens)
    for shape in PLAIN_SHAPES:
        sentence = parse(text, plain_shape=shape)
        assert sentence.transitions == tuple(plain_transitions(len(tokens), shape))
        check_transitions(sentence.transitions, len(tokens))
    right = parse(text, plain_shape="right")
    assert build_tree(right.tokens, right.transitions) == reduce(lambda acc, word: (word, acc), reversed(tokens))
    balanced = parse(text, plain_shape="balanced")
    depth = tree_depth(build_tree(balanced.tokens, balanced.transitions))
    assert depth == (len(tokens) - 1).bit_length()  # ceil(log2 n)


def test_every_sample_row_parses():
    rows = [json.loads(line) for line in SAMPLE_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) == 1289
    for row in rows:
        for field in ("sentence1_binary_parse", "sentence2_binary_parse"):
            sentence = parse(row[field])
            check_transitions(sentence.transitions, len(sentence.tokens))
            # SNLI's parses are strictly binary, so writing the tree back
            # gives the input again.
            assert to_bracket(build_tree(sentence.tokens, sentence.transitions)).split() == row[field].split()
