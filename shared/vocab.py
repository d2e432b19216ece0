"""Token <-> id mapping (docs/spec.md §2): id 0 is ``<pad>``, id 1 is ``<unk>``.

The word list is the whole vocabulary: ``words[i]`` is the word of id ``i``.
It is stored in a parameter file as ``meta.vocab`` (:meth:`Vocabulary.to_array`)
together with the ``lowercase`` flag, so any implementation can look tokens up
the same way (docs/spec.md §5).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:  # only for annotations; keeps vocab importable on its own
    from shared.snli import Pair

PAD_ID, UNK_ID = 0, 1
PAD_TOKEN, UNK_TOKEN = "<pad>", "<unk>"
SPECIALS = (PAD_TOKEN, UNK_TOKEN)


class Vocabulary:
    """An ordered word list; ``id(word)`` is the word's index, or UNK_ID.

    With ``lowercase=True`` every word is lowercased before lookup, so the
    stored words must be lowercase themselves (an uppercase entry could never
    be found, and that is rejected rather than left as a silent dead id).
    """

    def __init__(self, words: Sequence[str], lowercase: bool):
        words = list(words)
        if words[:2] != list(SPECIALS):
            raise ValueError(f"a vocabulary starts with {SPECIALS[0]!r}, {SPECIALS[1]!r}; got {words[:2]!r}")
        index: dict[str, int] = {}
        for i, word in enumerate(words):
            if not isinstance(word, str) or not word:
                raise ValueError(f"word {i} is {word!r}; words are non-empty strings")
            if word in index:
                raise ValueError(f"duplicate word {word!r} at ids {index[word]} and {i}")
            if lowercase and word != word.lower():
                raise ValueError(f"word {word!r} (id {i}) is not lowercase, but the vocabulary lowercases")
            index[word] = i
        self.words: list[str] = words
        self.lowercase: bool = bool(lowercase)
        self._index = index

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Sequence[str]],
        *,
        min_freq: int = 1,
        lowercase: bool = True,
        max_size: int | None = None,
    ) -> "Vocabulary":
        """A vocabulary of the words seen at least ``min_freq`` times.

        Order is deterministic: most frequent first, ties alphabetically, after
        the two specials. ``max_size`` bounds ``len(vocab)``, specials included.
        The special strings are never counted as words.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(token.lower() if lowercase else token for token in tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        kept = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
        if max_size is not None:
            kept = kept[: max_size - len(SPECIALS)]
        return cls(list(SPECIALS) + kept, lowercase=lowercase)

    @classmethod
    def from_pairs(cls, pairs: Iterable["Pair"], progress: Callable[[int], None] | None = None,
                   **kwargs) -> "Vocabulary":
        """:meth:`build` over the premise and hypothesis tokens of every pair;
        ``progress`` is called with how many more pairs were counted, every
        1,000 pairs and once at the end."""

        def token_lists() -> Iterable[Sequence[str]]:
            done = 0
            for done, pair in enumerate(pairs, start=1):
                yield pair.premise.tokens
                yield pair.hypothesis.tokens
                if progress is not None and done % 1000 == 0:
                    progress(1000)
            if progress is not None and done % 1000:
                progress(done % 1000)

        return cls.build(token_lists(), **kwargs)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self._normalize(word) in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.words == other.words and self.lowercase == other.lowercase

    def __repr__(self) -> str:
        return f"Vocabulary({len(self):,} words, lowercase={self.lowercase})"

    def _normalize(self, word: str) -> str:
        return word.lower() if self.lowercase else word

    def id(self, word: str) -> int:
        """The id of ``word`` (lowercased first if the vocabulary lowercases); UNK_ID if unknown."""
        return self._index.get(self._normalize(word), UNK_ID)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """``[id(t) for t in tokens]``."""
        return [self.id(token) for token in tokens]

    def to_array(self) -> np.ndarray:
        """``<str>[V]``: the words as a 1-d unicode array (``meta.vocab``)."""
        return np.array(self.words, dtype=np.str_)

    @classmethod
    def from_array(cls, arr: np.ndarray, lowercase: bool) -> "Vocabulary":
        """The inverse of :meth:`to_array`; ``lowercase`` comes from ``meta.config``."""
        arr = np.asarray(arr)
        if arr.ndim != 1 or arr.dtype.kind != "U":
            raise ValueError(f"meta.vocab must be a 1-d unicode array, got dtype {arr.dtype} shape {arr.shape}")
        return cls([str(word) for word in arr.tolist()], lowercase=lowercase)
