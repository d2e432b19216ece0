"""Synthetic SNLI-format pairs: a tiny grammar whose labels follow by rule.

Two generators:

* :func:`synthetic_pairs` — a learnable task for smoke-training a model
  without the SNLI download. Every premise is one clause of a small grammar
  (37 words)::

      S      = ( NP_agent VP )
      NP     = ( det noun ) | ( det ( adj noun ) )
      VP     = ( verb NP_thing ) | ( ( verb NP_thing ) adverb )
               | ( VP ( prep ( the place ) ) )

  e.g. ``( ( the ( tall man ) ) ( ( ( holds ( a ball ) ) slowly ) ( in ( the park ) ) ) )``.
  A clause has four optional *modifier* slots: the agent's adjective, the
  thing's adjective, the adverb and the place (prepositional phrase). The
  hypothesis is the premise changed by one rule, and the rule is the label:

  - entailment: one filled modifier slot is emptied ("a tall man holds a
    ball" -> "a man holds a ball"); dropping a detail keeps the statement true;
  - neutral: one empty modifier slot is filled ("a man holds a ball" ->
    "a man holds a red ball"); the added detail may or may not hold;
  - contradiction: the agent, the verb or the thing is replaced by a different
    word of its class ("a man holds a ball" -> "a woman holds a ball"); by
    rule, words of one class exclude each other. Half of the contradictions
    also drop or add a modifier, so that the length difference alone does not
    give the label away: the model must compare what the two trees say.

  The determiners of premise and hypothesis are the same. The label is a
  function of the pair (the three rules never produce the same pair), so a
  TreeLSTM classifier can learn it to well above 95% dev accuracy.

* :func:`shaped_pairs` — random words in trees of a chosen shape and length,
  with random labels, for throughput benchmarks where only the transitions
  matter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from shared.snli import LABEL_IDS, LABELS, Pair
from shared.transitions import (
    PLAIN_SHAPES,
    REDUCE,
    SHIFT,
    Sentence,
    Tree,
    parse,
    plain_transitions,
    to_bracket,
)

DETERMINERS = ("a", "the")
AGENTS = ("man", "woman", "boy", "girl", "dog", "cat")
THINGS = ("ball", "cup", "book", "box", "hat", "kite")
VERBS = ("holds", "sees", "throws", "carries", "finds", "drops")
AGENT_ADJECTIVES = ("tall", "young", "old", "happy")
THING_ADJECTIVES = ("red", "big", "small", "green")
ADVERBS = ("quickly", "slowly", "quietly")
PREPOSITIONS = ("in", "near")
PLACES = ("park", "street", "garden", "house")

# Every word of the grammar, in a fixed order ("the" is both a determiner and
# the article of the place phrase).
WORDS = tuple(
    dict.fromkeys(
        DETERMINERS + AGENTS + THINGS + VERBS + AGENT_ADJECTIVES + THING_ADJECTIVES + ADVERBS + PREPOSITIONS + PLACES
    )
)

SHAPES = ("random",) + PLAIN_SHAPES

# The optional slots of a clause and the words that may fill them (the place
# slot holds a (preposition, place) pair).
MODIFIER_SLOTS = ("agent_adjective", "thing_adjective", "adverb", "place")
_CORE_CHOICES = {"agent": AGENTS, "verb": VERBS, "thing": THINGS}


@dataclass(frozen=True)
class Clause:
    """One sentence of the grammar; a modifier slot is None when empty."""

    agent_det: str
    agent: str
    verb: str
    thing_det: str
    thing: str
    agent_adjective: str | None = None
    thing_adjective: str | None = None
    adverb: str | None = None
    place: tuple[str, str] | None = None  # (preposition, place)

    def tree(self) -> Tree:
        """The clause as nested pairs (see the grammar in the module docstring)."""
        agent_np = _noun_phrase(self.agent_det, self.agent_adjective, self.agent)
        thing_np = _noun_phrase(self.thing_det, self.thing_adjective, self.thing)
        vp: Tree = (self.verb, thing_np)
        if self.adverb is not None:
            vp = (vp, self.adverb)
        if self.place is not None:
            preposition, place = self.place
            vp = (vp, (preposition, ("the", place)))
        return (agent_np, vp)

    def sentence(self) -> Sentence:
        return parse(to_bracket(self.tree()))

    def filled_slots(self) -> list[str]:
        return [slot for slot in MODIFIER_SLOTS if getattr(self, slot) is not None]

    def empty_slots(self) -> list[str]:
        return [slot for slot in MODIFIER_SLOTS if getattr(self, slot) is None]


def _noun_phrase(det: str, adjective: str | None, noun: str) -> Tree:
    return (det, noun) if adjective is None else (det, (adjective, noun))


def _choice(rng: np.random.Generator, options):
    return options[int(rng.integers(len(options)))]


def _modifier(slot: str, rng: np.random.Generator):
    """A random filler for a modifier slot."""
    if slot == "agent_adjective":
        return _choice(rng, AGENT_ADJECTIVES)
    if slot == "thing_adjective":
        return _choice(rng, THING_ADJECTIVES)
    if slot == "adverb":
        return _choice(rng, ADVERBS)
    return (_choice(rng, PREPOSITIONS), _choice(rng, PLACES))


def _random_clause(rng: np.random.Generator) -> Clause:
    clause = Clause(
        agent_det=_choice(rng, DETERMINERS),
        agent=_choice(rng, AGENTS),
        verb=_choice(rng, VERBS),
        thing_det=_choice(rng, DETERMINERS),
        thing=_choice(rng, THINGS),
    )
    # Each modifier slot is filled with probability 1/2.
    fills = {slot: _modifier(slot, rng) for slot in MODIFIER_SLOTS if rng.random() < 0.5}
    return dataclasses.replace(clause, **fills)


def _drop_modifier(clause: Clause, rng: np.random.Generator) -> Clause:
    return dataclasses.replace(clause, **{_choice(rng, clause.filled_slots()): None})


def _add_modifier(clause: Clause, rng: np.random.Generator) -> Clause:
    slot = _choice(rng, clause.empty_slots())
    return dataclasses.replace(clause, **{slot: _modifier(slot, rng)})


def _swap_core_word(clause: Clause, rng: np.random.Generator) -> Clause:
    slot = _choice(rng, tuple(_CORE_CHOICES))
    current = getattr(clause, slot)
    others = tuple(word for word in _CORE_CHOICES[slot] if word != current)
    return dataclasses.replace(clause, **{slot: _choice(rng, others)})


def _hypothesis(premise: Clause, label: str, rng: np.random.Generator) -> Clause:
    if label == "entailment":
        return _drop_modifier(premise, rng)
    if label == "neutral":
        return _add_modifier(premise, rng)
    hypothesis = _swap_core_word(premise, rng)
    if rng.random() < 0.5:  # hide the length cue (see the module docstring)
        can_drop, can_add = bool(hypothesis.filled_slots()), bool(hypothesis.empty_slots())
        if can_drop and (not can_add or rng.random() < 0.5):
            hypothesis = _drop_modifier(hypothesis, rng)
        else:
            hypothesis = _add_modifier(hypothesis, rng)
    return hypothesis


def synthetic_pairs(n: int, *, seed: int = 0) -> list[Pair]:
    """``n`` pairs of the rule-labelled task; labels drawn uniformly at random.

    The same ``seed`` always gives the same pairs. Pair ids are ``synth-{i}``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        label = LABELS[int(rng.integers(len(LABELS)))]
        premise = _random_clause(rng)
        # Entailment needs a modifier to drop, neutral an empty slot to fill.
        while (label == "entailment" and not premise.filled_slots()) or (
            label == "neutral" and not premise.empty_slots()
        ):
            premise = _random_clause(rng)
        hypothesis = _hypothesis(premise, label, rng)
        pairs.append(Pair(premise.sentence(), hypothesis.sentence(), LABEL_IDS[label], f"synth-{i}"))
    return pairs


def random_transitions(n: int, rng: np.random.Generator) -> list[int]:
    """Transitions of a random binary tree over n tokens: every span is split
    at a uniformly chosen point. Iterative, so long sentences do not hit
    Python's recursion limit."""
    if n < 1:
        raise ValueError(f"a sentence needs at least one token, got n={n}")
    transitions: list[int] = []
    # Work items (span size, children already emitted?), processed in
    # post-order: left subtree, right subtree, then the REDUCE joining them.
    todo = [(n, False)]
    while todo:
        size, children_done = todo.pop()
        if size == 1:
            transitions.append(SHIFT)
        elif children_done:
            transitions.append(REDUCE)
        else:
            left = int(rng.integers(1, size))
            todo += [(size, True), (size - left, False), (left, False)]
    return transitions


def shaped_pairs(
    n: int,
    *,
    length: int = 12,
    shape: str = "random",
    seed: int = 0,
    min_length: int | None = None,
) -> list[Pair]:
    """``n`` pairs of random words in trees of one shape, with random labels.

    Each sentence has a length drawn uniformly from ``[min_length, length]``
    (``min_length`` defaults to ``length``: every sentence exactly ``length``
    tokens). ``shape`` is ``left``, ``right`` or ``balanced`` (the trees of
    :func:`shared.transitions.plain_transitions`) or ``random`` (a random
    binary tree per sentence). Pair ids are ``shaped-{i}``.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    min_length = length if min_length is None else min_length
    if not 1 <= min_length <= length:
        raise ValueError(f"need 1 <= min_length <= length, got min_length={min_length}, length={length}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)

    def sentence() -> Sentence:
        size = int(rng.integers(min_length, length + 1))
        tokens = tuple(WORDS[i] for i in rng.integers(len(WORDS), size=size))
        transitions = random_transitions(size, rng) if shape == "random" else plain_transitions(size, shape)
        return Sentence(tokens, tuple(transitions))

    pairs = []
    for i in range(n):
        premise, hypothesis = sentence(), sentence()
        pairs.append(Pair(premise, hypothesis, int(rng.integers(len(LABELS))), f"shaped-{i}"))
    return pairs
