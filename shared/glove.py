"""Filling an embedding matrix from a GloVe text file.

GloVe's text format is one word a line followed by its vector, all separated
by single spaces::

    the 0.418 0.24968 -0.41242 ...

Any dimension is read; it must equal the embedding width E. Some entries of
glove.840B contain spaces (``". . ."``), so a line is read as "the last E
fields are the vector, everything before them is the word". The file's
dimension is taken from its first line (a common word without spaces in every
GloVe release) so that a file of the wrong dimension is reported instead of
being misread. Files ending in ``.gz`` are decompressed on the fly.
"""

from __future__ import annotations

import gzip
import pathlib
from dataclasses import dataclass
from typing import IO, Callable, Union

import numpy as np

from shared.vocab import SPECIALS, Vocabulary

PathLike = Union[str, pathlib.Path]


@dataclass
class GloveReport:
    """How much of a vocabulary a GloVe file covered.

    ``total`` counts the vocabulary's words other than ``<pad>`` and ``<unk>``:
    those two are never looked up in GloVe (their rows keep whatever values
    they had), so they count neither as found nor as missing.
    """

    found: int  # vocabulary words whose row was filled
    total: int  # vocabulary words that could be filled (specials excluded)
    coverage: float  # found / total (0.0 for an empty vocabulary)
    dim: int  # vector width of the file (== E)
    path: pathlib.Path | None = None
    lines_read: int = 0

    def __str__(self) -> str:
        name = self.path.name if self.path is not None else "GloVe"
        return (
            f"{name}: {self.found:,} of {self.total:,} vocabulary words found "
            f"({self.coverage:.1%}), dim {self.dim}, {self.lines_read:,} lines read"
        )


def load_glove(path: PathLike, vocab: Vocabulary, embedding: np.ndarray,
               progress: Callable[[int], None] | None = None) -> GloveReport:
    """Copy GloVe vectors into the rows of ``embedding`` for the words of ``vocab``.

    Args:
      path: a GloVe text file (optionally ``.gz``).
      vocab: the vocabulary; words match after its lowercasing, if any.
      embedding: ``<float>[V, E]`` with ``V == len(vocab)``, filled in place.
        Rows of words the file lacks, and of the specials, are left untouched.
      progress: called with how many more lines were read, every 10,000
        lines and once at the end (glove.840B has 2.2 million).

    Returns:
      A GloveReport.

    Raises:
      ValueError: the embedding does not fit the vocabulary, or a line of the
        file has a dimension other than E or a field that is not a number (the
        message names the file and the line).
    """
    path = pathlib.Path(path)
    if embedding.ndim != 2 or embedding.shape[0] != len(vocab):
        raise ValueError(f"embedding must be [V={len(vocab)}, E], got shape {embedding.shape}")
    dim = embedding.shape[1]
    specials = {vocab.id(word) for word in SPECIALS}
    filled: set[int] = set()
    lines_read = 0
    with _open_text(path) as lines:
        line_no = 0
        for line_no, line in enumerate(lines, start=1):
            if progress is not None and line_no % 10_000 == 0:
                progress(10_000)
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            lines_read += 1
            if lines_read == 1:
                file_dim = len(line.rstrip(" ").split(" ")) - 1
                if file_dim != dim:
                    raise ValueError(
                        f"{path}, line {line_no}: vectors have dimension {file_dim}, the embedding has E={dim}"
                    )
            # rsplit keeps spaces inside the word: the word is whatever
            # precedes the last `dim` fields.
            fields = line.rstrip(" ").rsplit(" ", dim)
            if len(fields) != dim + 1:
                raise ValueError(f"{path}, line {line_no}: {len(fields) - 1} values, expected E={dim}")
            word = fields[0]
            if vocab.lowercase:
                word = word.lower()
            if word not in vocab:
                continue  # most lines: skip without parsing 300 floats
            index = vocab.id(word)
            # glove.840B is cased and sorted by frequency; after lowercasing,
            # the first (most frequent) spelling of a word wins.
            if index in specials or index in filled:
                continue
            try:
                embedding[index] = np.array(fields[1:], dtype=np.float64)
            except ValueError:
                raise ValueError(f"{path}, line {line_no}: a vector value is not a number") from None
            filled.add(index)
    if progress is not None and line_no % 10_000:
        progress(line_no % 10_000)
    total = len(vocab) - len(specials)
    return GloveReport(
        found=len(filled),
        total=total,
        coverage=len(filled) / total if total else 0.0,
        dim=dim,
        path=path,
        lines_read=lines_read,
    )


def _open_text(path: pathlib.Path) -> IO[str]:
    if not path.exists():
        raise FileNotFoundError(f"no GloVe file at {path}")
    # errors="replace": a stray bad byte deep in a multi-GB file should cost
    # one word, not the whole load.
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")
