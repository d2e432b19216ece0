"""A synthetic language whose correct tree follows from its words: arithmetic.

SNLI's parses come from a parser; a model that decides its own parse
(docs/spec.md §7) can only be judged against them as one more opinion. Here
the right tree is fixed by the words themselves, and a wrong tree gives a
wrong answer, so a parse can be scored for what it computes.

Sentences are infix expressions without brackets over single digits and the
operators ``+ - *``, one token each::

    3 + 4 * 2 - 1

The gold tree is the precedence parse: ``*`` binds tighter than ``+`` and
``-``, and operators of equal precedence group to the left, so the example
means ``(3 + (4 * 2)) - 1 = 10``. It is binarized with one rule: an operator
first combines with its right operand, then the result with the left
operand, ``a op b`` -> ``( a ( op b ) )``::

    ( ( 3 ( + ( 4 ( * 2 ) ) ) ) ( - 1 ) )

A sentence of k numbers has 2k-1 tokens and 4k-3 transitions.

Any binary tree over the tokens is read compositionally
(:func:`tree_value`): a constituent is a number, an operator, an operator
with its right operand (``+ 4``, waiting for a left operand) or a number with
its operator (``3 +``, waiting for a right one). So the left-branching tree,
``( ( ( ( ( ( 3 + ) 4 ) * ) 2 ) - ) 1 )``, means left-to-right evaluation
without precedence (13 here) and the right-branching tree means
right-to-left evaluation; trees that pair two operators have no reading.

Pairs: a premise and a hypothesis expression, drawn independently, and the
label from the values of their gold trees: (premise - hypothesis) mod 3,
0 = entailment, 1 = neutral, 2 = contradiction. The names mean nothing here;
the classes are balanced (each label is drawn first, then a hypothesis until
its value fits), and every change of a value changes the label unless the
change is a multiple of 3. How often the left-branching reading changes the
label is measured in tests/test_arithmetic.py.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shared.snli import Pair
from shared.transitions import Sentence, Tree, parse, to_bracket

NUMBERS = tuple(str(d) for d in range(10))
OPERATORS = ("+", "-", "*")
PRECEDENCE = {"+": 1, "-": 1, "*": 2}
NUM_LABELS = 3

# Each operator is equally likely. Precedence and left-to-right evaluation
# part ways where a '*' follows a '+' or '-'; with the default lengths (4 to 8
# numbers) that happens in most sentences.
_OPERATOR_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)


def _check_tokens(tokens: Sequence[str]) -> None:
    if not tokens or len(tokens) % 2 == 0:
        raise ValueError(f"an expression alternates numbers and operators, got {' '.join(tokens)!r}")
    for i, token in enumerate(tokens):
        expected = NUMBERS if i % 2 == 0 else OPERATORS
        if token not in expected:
            kind = "a digit" if i % 2 == 0 else f"an operator {OPERATORS}"
            raise ValueError(f"token {i} of {' '.join(tokens)!r} is {token!r}, expected {kind}")


def precedence_tree(tokens: Sequence[str]) -> Tree:
    """The gold tree of an expression: precedence, left associativity, and
    ``a op b`` -> ``(a, (op, b))``."""
    _check_tokens(tokens)
    tokens = list(tokens)

    def climb(position: int, min_precedence: int) -> tuple[Tree, int]:
        # Precedence climbing: read an operand, then absorb operators that bind
        # at least as tightly as min_precedence; a tighter operator to the right
        # takes the right operand first.
        left: Tree = tokens[position]
        position += 1
        while position < len(tokens) and PRECEDENCE[tokens[position]] >= min_precedence:
            op = tokens[position]
            right, position = climb(position + 1, PRECEDENCE[op] + 1)
            left = (left, (op, right))
        return left, position

    tree, _ = climb(0, 1)
    return tree


def expression_sentence(tokens: Sequence[str]) -> Sentence:
    """The expression with the transitions of its gold tree."""
    return parse(to_bracket(precedence_tree(tokens)))


def _apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def _meaning(tree: Tree):
    """("num", value), ("op", op), ("needs-left", op, b) or ("needs-right", a, op)."""
    if isinstance(tree, str):
        return ("num", int(tree)) if tree in NUMBERS else ("op", tree)
    left, right = _meaning(tree[0]), _meaning(tree[1])
    kinds = (left[0], right[0])
    if kinds == ("num", "needs-left"):  # 3 (+ 4)
        return ("num", _apply(right[1], left[1], right[2]))
    if kinds == ("num", "op"):  # (3 +)
        return ("needs-right", left[1], right[1])
    if kinds == ("needs-right", "num"):  # (3 +) 4
        return ("num", _apply(left[2], left[1], right[1]))
    if kinds == ("op", "num"):  # (+ 4)
        return ("needs-left", left[1], right[1])
    raise ValueError(f"no arithmetic reading for {to_bracket(tree)!r}: it joins a {kinds[0]} and a {kinds[1]}")


def tree_value(tree: Tree) -> int:
    """The value of a binary tree over an expression's tokens (see the module
    docstring); ValueError for a tree without an arithmetic reading."""
    meaning = _meaning(tree)
    if meaning[0] != "num":
        raise ValueError(f"{to_bracket(tree)!r} is not a complete expression")
    return meaning[1]


def label_of(premise_value: int, hypothesis_value: int) -> int:
    """(premise - hypothesis) mod 3: 0 entailment, 1 neutral, 2 contradiction."""
    return (premise_value - hypothesis_value) % NUM_LABELS


def random_expression(rng: np.random.Generator, num_numbers: int) -> list[str]:
    """``num_numbers`` digits joined by random operators."""
    tokens = []
    for i in range(num_numbers):
        if i:
            tokens.append(OPERATORS[rng.choice(len(OPERATORS), p=_OPERATOR_WEIGHTS)])
        tokens.append(NUMBERS[rng.integers(len(NUMBERS))])
    return tokens


def arithmetic_pairs(n: int, seed: int = 0, min_len: int = 4, max_len: int = 8) -> list[Pair]:
    """``n`` seeded premise/hypothesis pairs with gold trees and balanced labels.

    ``min_len`` and ``max_len`` bound the count of numbers in each expression
    (inclusive), so a sentence has 2k-1 tokens for k in [min_len, max_len].
    Shorter expressions leave precedence less to decide: with two numbers
    every tree gives the same value.
    Pair i has id ``arith-{i}`` and row i.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        label = int(rng.integers(NUM_LABELS))
        premise = random_expression(rng, int(rng.integers(min_len, max_len + 1)))
        premise_value = tree_value(precedence_tree(premise))
        while True:  # about three draws on average: the residues are close to uniform
            hypothesis = random_expression(rng, int(rng.integers(min_len, max_len + 1)))
            if label_of(premise_value, tree_value(precedence_tree(hypothesis))) == label:
                break
        pairs.append(Pair(expression_sentence(premise), expression_sentence(hypothesis), label, f"arith-{i}", row=i))
    return pairs
