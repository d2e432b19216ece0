"""Binary parses -> shift/reduce transition sequences (docs/spec.md §1).

A sentence reaches the model as two parallel sequences: its tokens, and the
transitions that build its tree bottom-up on a stack. Each token is one SHIFT;
each binary node is one REDUCE, emitted when its closing bracket is read.

    ( ( The church ) ( has cracks ) )
    tokens      The church has cracks
    transitions S   S      R  S   S      R R        (S = SHIFT, R = REDUCE)

Rules:
* a bracket group with one child is that child (no REDUCE);
* a group with more than two children is binarized left to right,
  ``( a b c )`` reads as ``( ( a b ) c )``;
* text with no brackets at all is one implicit group, so by the rule above it
  is a left-branching tree; ``plain_shape`` can ask for another shape;
* bad input raises :class:`ParseError` naming the input and the position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence, Union

PAD = 0  # no-op: nothing changes (padding at the end of a sequence)
SHIFT = 1  # move the buffer front onto the stack
REDUCE = 2  # pop right, pop left, push compose(left, right)

TRANSITION_NAMES = {PAD: "PAD", SHIFT: "SHIFT", REDUCE: "REDUCE"}

PLAIN_SHAPES = ("left", "right", "balanced")

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")

# A tree is a token (str) or a pair of trees.
Tree = Union[str, tuple]


class ParseError(ValueError):
    """A parse string that cannot be turned into a valid transition sequence."""

    def __init__(self, message: str, text: str, position: int | None = None):
        self.text = text
        self.position = position
        shown = text if len(text) <= 200 else text[:197] + "..."
        where = f" at character {position}" if position is not None else ""
        super().__init__(f"{message}{where} in {shown!r}")


@dataclass(frozen=True)
class Sentence:
    """One parsed sentence: its words and the transitions that build its tree."""

    tokens: tuple[str, ...]
    transitions: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.tokens)


def parse(text: str, plain_shape: str = "left") -> Sentence:
    """Parse a binary parse string, or plain tokenized text, into a Sentence.

    Text that contains no bracket at all is read as plain tokens and given the
    tree shape ``plain_shape`` (``left`` by default, docs/spec.md §1).
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a string to parse, got {type(text).__name__}")
    if "(" not in text and ")" not in text:
        tokens = tuple(text.split())
        if not tokens:
            raise ParseError("empty sentence", text, 0)
        return Sentence(tokens, tuple(plain_transitions(len(tokens), plain_shape)))
    return parse_binary(text)


def parse_binary(text: str) -> Sentence:
    """Read a bracketed binary parse, e.g. SNLI's ``sentence1_binary_parse``."""
    tokens: list[str] = []
    transitions: list[int] = []
    # One counter per open group: how many finished subtrees it holds (0 or 1
    # after binarization; a second one is reduced into the first at once).
    # The outermost counter is the implicit top-level group.
    children = [0]
    opened_at: list[int] = []

    def add_child() -> None:
        children[-1] += 1
        if children[-1] == 2:
            transitions.append(REDUCE)
            children[-1] = 1

    for match in _TOKEN_RE.finditer(text):
        piece, pos = match.group(), match.start()
        if piece == "(":
            children.append(0)
            opened_at.append(pos)
        elif piece == ")":
            if not opened_at:
                raise ParseError("unbalanced brackets: ')' with no matching '('", text, pos)
            start = opened_at.pop()
            if children.pop() == 0:
                raise ParseError("empty group '( )'", text, start)
            add_child()
        else:
            tokens.append(piece)
            transitions.append(SHIFT)
            add_child()
    if opened_at:
        raise ParseError("unbalanced brackets: '(' is never closed", text, opened_at[-1])
    if not tokens:
        raise ParseError("empty sentence", text, 0)
    return Sentence(tuple(tokens), tuple(transitions))


def plain_transitions(n: int, shape: str = "left") -> list[int]:
    """Transitions for n tokens arranged as a left-branching, right-branching or
    balanced binary tree."""
    if n < 1:
        raise ValueError(f"a sentence needs at least one token, got n={n}")
    if shape == "left":
        return [SHIFT] + [SHIFT, REDUCE] * (n - 1)
    if shape == "right":
        return [SHIFT] * n + [REDUCE] * (n - 1)
    if shape == "balanced":
        if n == 1:
            return [SHIFT]
        half = (n + 1) // 2
        return plain_transitions(half, "balanced") + plain_transitions(n - half, "balanced") + [REDUCE]
    raise ValueError(f"unknown tree shape {shape!r}; expected one of {PLAIN_SHAPES}")


def check_transitions(transitions: Sequence[int], n_tokens: int | None = None) -> None:
    """Raise ValueError unless ``transitions`` is valid (docs/spec.md §1).

    Valid: only PAD/SHIFT/REDUCE codes; n SHIFTs for n tokens (n >= 1); n-1
    REDUCEs; never a REDUCE with fewer than two items on the stack and never a
    SHIFT from an empty buffer. PAD may appear anywhere and changes nothing.
    """
    shifts = reduces = depth = 0
    for step, op in enumerate(transitions):
        op = int(op)
        if op == PAD:
            continue
        if op == SHIFT:
            shifts += 1
            depth += 1
            if n_tokens is not None and shifts > n_tokens:
                raise ValueError(f"step {step}: SHIFT from an empty buffer ({n_tokens} tokens)")
        elif op == REDUCE:
            if depth < 2:
                raise ValueError(f"step {step}: REDUCE with {depth} item(s) on the stack")
            reduces += 1
            depth -= 1
        else:
            raise ValueError(f"step {step}: unknown transition code {op}")
    if shifts == 0:
        raise ValueError("no SHIFT: an empty sentence")
    if n_tokens is not None and shifts != n_tokens:
        raise ValueError(f"{shifts} SHIFTs for {n_tokens} tokens")
    if reduces != shifts - 1:
        raise ValueError(f"{reduces} REDUCEs for {shifts} SHIFTs (expected {shifts - 1})")


def build_tree(tokens: Sequence[str], transitions: Sequence[int]) -> Tree:
    """Run the transitions on the tokens and return the tree as nested pairs."""
    check_transitions(transitions, len(tokens))
    buffer = list(tokens)[::-1]
    stack: list[Tree] = []
    for op in transitions:
        if op == SHIFT:
            stack.append(buffer.pop())
        elif op == REDUCE:
            right, left = stack.pop(), stack.pop()
            stack.append((left, right))
    return stack[0]


def to_bracket(tree: Tree) -> str:
    """The binary-parse string of a tree: ``( left right )`` for every pair.

    Iterative, as :func:`tree_depth`: a sentence of a thousand words may be
    a thousand pairs deep."""
    pieces: list[str] = []
    pending: list = [tree]  # trees still to write, and the ")" that closes a pair
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            pieces.append(node)
        elif node is _CLOSE:
            pieces.append(")")
        else:
            pieces.append("(")
            pending += [_CLOSE, node[1], node[0]]
    return " ".join(pieces)


_CLOSE = object()  # to_bracket: the end of a pair


def tree_depth(tree: Tree) -> int:
    """Number of pairs on the longest root-to-leaf path (a single word: 0).

    Iterative, with a stack of (subtree, depth): a left- or right-branching
    sentence of a thousand words or more is that many pairs deep, past
    Python's recursion limit, and a full SNLI corpus has such rows.
    """
    best = 0
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, str):
            best = max(best, depth)
        else:
            pending.append((node[0], depth + 1))
            pending.append((node[1], depth + 1))
    return best


def reduce_heights(transitions: Sequence[int]) -> list[int]:
    """The height of each REDUCE's node, in order (its leaves are height 0, a node 1 + its taller child): the
    level at which a schedule by tree height can compute it, no earlier."""
    stack: list[int] = []
    heights = []
    for op in transitions:
        if op == SHIFT:
            stack.append(0)
        elif op == REDUCE:
            right, left = stack.pop(), stack.pop()
            heights.append(1 + max(left, right))
            stack.append(heights[-1])
    return heights


def max_stack_depth(transitions: Sequence[int]) -> int:
    """The most items the stack ever holds while running these transitions."""
    depth = best = 0
    for op in transitions:
        if op == SHIFT:
            depth += 1
            best = max(best, depth)
        elif op == REDUCE:
            depth -= 1
    return best
