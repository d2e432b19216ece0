"""Reading SNLI pairs (docs/spec.md §2): premise, hypothesis, gold label, pair id.

Three input forms are accepted by :func:`read_snli`:

* SNLI's jsonl, one JSON object a line with the fields
  ``sentence1_binary_parse``, ``sentence2_binary_parse``, ``gold_label`` and
  ``pairID`` (other fields are ignored);
* SNLI's tab-separated ``.txt``/``.tsv``, whose first row names the columns
  (they are found by name, so column order does not matter);
* the unzipped ``snli_1.0/`` folder, where ``split`` picks
  ``snli_1.0_{split}.jsonl`` (or the ``.txt`` when there is no jsonl).

Every row is checked whole (JSON, fields, label, both parses) before it is
counted, so a broken row is reported whatever its label. A row whose gold
label is ``-`` (annotators did not agree) is skipped and counted, or kept with
``NO_LABEL`` when ``keep_unlabeled=True``: the ``encode`` command needs every
row, in file order. A malformed row raises :class:`SNLIFormatError`, naming the
file and line, or is skipped and listed in the :class:`LoadReport` with
``skip_malformed=True``; it is never dropped silently. A line with bytes that
are not UTF-8 is such a row (the reason gives the byte and its offset in the
line), not the end of the file.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Union

from shared.transitions import PLAIN_SHAPES, ParseError, Sentence, parse, plain_transitions

LABELS = ("entailment", "neutral", "contradiction")  # ids 0, 1, 2 (docs/spec.md §2)
LABEL_IDS = {name: i for i, name in enumerate(LABELS)}
NO_LABEL = -1  # a kept row whose gold label is '-'
UNLABELED = "-"  # SNLI's gold label when annotators did not agree

SPLITS = ("train", "dev", "test")

# The rows shipped with the repository (see data/README.md for attribution).
SAMPLE_PATH = pathlib.Path(__file__).resolve().parent.parent / "data" / "snli_1.0_dev_sample.jsonl"

# The fields a row needs, under their SNLI names.
PREMISE_FIELD = "sentence1_binary_parse"
HYPOTHESIS_FIELD = "sentence2_binary_parse"
LABEL_FIELD = "gold_label"
ID_FIELD = "pairID"
REQUIRED_FIELDS = (LABEL_FIELD, PREMISE_FIELD, HYPOTHESIS_FIELD, ID_FIELD)

# Suffixes read as tab-separated text; everything else is read as jsonl.
_TSV_SUFFIXES = (".txt", ".tsv")

# Files are decoded with errors="surrogateescape": a byte that is not UTF-8
# becomes one of these lone surrogates instead of stopping the whole file at an
# offset into the decoder's buffer, so the row that holds it can be named.
# Valid UTF-8 never decodes to them. "utf-8-sig" drops a leading byte-order mark.
_ENCODING = "utf-8-sig"
_UNDECODABLE = re.compile("[\udc80-\udcff]")

PathLike = Union[str, pathlib.Path]


PROGRESS_ROWS = 1000  # read_snli's progress callback: how many rows a call reports

NO_ROW = -1  # a pair that did not come from a data file


@dataclass(frozen=True)
class Pair:
    """One premise/hypothesis pair and its label (0..2, or NO_LABEL).

    ``row`` is where the pair sits in its data file: the 0-based index of its
    line among the file's data rows (every non-empty line of a jsonl file;
    the lines after the header of a txt file), malformed and unlabeled rows
    included. It seeds the pair's uniform numbers in sampled mode
    (docs/spec.md §7), so the same pair draws the same samples however the
    file is batched. It is bookkeeping, not content: two pairs with the same
    sentences, label and id are equal whatever their rows.
    """

    premise: Sentence
    hypothesis: Sentence
    label: int
    pair_id: str
    row: int = field(default=NO_ROW, compare=False)


# How a reader may replace the parses of the data (``--parse``): the data's
# own trees, or one fixed shape for every sentence (docs/spec.md §1).
PARSES = ("gold",) + PLAIN_SHAPES


def with_parse(pairs: Iterable[Pair], parse: str = "gold") -> list[Pair]:
    """The pairs with every sentence's tree replaced by the fixed shape
    ``parse`` ("left", "right", "balanced"; shared.transitions.plain_transitions),
    or unchanged ("gold"). Words, labels, ids and rows stay as they were.

    The balanced tree of n words joins a balanced tree of the first ⌈n/2⌉
    words with one of the other ⌊n/2⌋ (so 5 words are ((a b) c) (d e)).
    """
    if parse not in PARSES:
        raise ValueError(f"unknown parse {parse!r}; choose from {', '.join(PARSES)}")
    if parse == "gold":
        return list(pairs)

    def shaped(sentence: Sentence) -> Sentence:
        return Sentence(sentence.tokens, tuple(plain_transitions(len(sentence.tokens), parse)))

    return [dataclasses.replace(p, premise=shaped(p.premise), hypothesis=shaped(p.hypothesis)) for p in pairs]


@dataclass
class LoadReport:
    """What :func:`read_snli` read, kept and skipped."""

    path: pathlib.Path
    rows_read: int = 0  # data rows seen (not the header, not blank lines)
    pairs: int = 0  # rows kept as Pairs
    skipped_no_label: int = 0  # gold label '-' and keep_unlabeled=False
    skipped_malformed: int = 0  # only ever non-zero with skip_malformed=True
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)

    def __str__(self) -> str:
        text = (
            f"{self.path.name}: {self.rows_read:,} rows read, {self.pairs:,} pairs kept, "
            f"{self.skipped_no_label:,} skipped without gold label, "
            f"{self.skipped_malformed:,} skipped as malformed"
        )
        if self.malformed:
            line_no, reason = self.malformed[0]
            text += f" (first: line {line_no}: {reason})"
        return text


class SNLIFormatError(ValueError):
    """A row that cannot be read; the message names the file and the line."""

    def __init__(self, path: pathlib.Path, line_no: int, reason: str):
        self.path = path
        self.line_no = line_no
        self.reason = reason
        super().__init__(f"{path}, line {line_no}: {reason}")


class EmptyDataError(ValueError):
    """A data file, or the rows selected of it, with no data row at all."""


class UnlabelledDataError(EmptyDataError):
    """Data rows, but none with a gold label (every one ``-``): nothing to
    train, evaluate or count labels of. Every command that needs labels says so
    in these words (encode, which needs none, encodes such a file)."""

    def __init__(self, source: PathLike, rows: int):
        read = "the row read has" if rows == 1 else f"the {rows:,} rows read all have"
        super().__init__(f"{source}: no labelled rows ({read} gold label {UNLABELED!r})")


def labelled_pairs(pairs: Iterable[Pair], source: PathLike = "the data", *, rows: int | None = None,
                   empty: str | None = None) -> list[Pair]:
    """The pairs with a gold label, in order. UnlabelledDataError, naming
    ``source`` and ``rows`` (the rows the pairs were read from; by default
    the pairs), if there were rows and none has a label; ValueError(``empty``)
    if ``empty`` is given and there are no pairs at all."""
    pairs = list(pairs)
    if empty is not None and not pairs:
        raise ValueError(empty)
    labelled = [p for p in pairs if p.label != NO_LABEL]
    rows = len(pairs) if rows is None else rows
    if rows and not labelled:
        raise UnlabelledDataError(source, rows)
    return labelled


class _RowError(Exception):
    """Internal: why one row is malformed (turned into SNLIFormatError or counted)."""


def resolve_path(path: PathLike, split: str = "dev") -> pathlib.Path:
    """The data file that ``path`` names: the file itself, or for an SNLI folder
    the file of ``split`` in it (jsonl preferred over txt)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no SNLI data at {path} (expected a .jsonl or .txt file, or the snli_1.0/ folder)")
    if not path.is_dir():
        return path
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    # Accept both the snli_1.0/ folder and the folder it was unzipped into.
    folders = [path, path / "snli_1.0"]
    candidates = [folder / f"snli_1.0_{split}.{ext}" for folder in folders for ext in ("jsonl", "txt")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"no {split} split in folder {path} (tried {tried})")


def read_snli(
    path: PathLike,
    *,
    split: str = "dev",
    keep_unlabeled: bool = False,
    skip_malformed: bool = False,
    limit: int | None = None,
    rows: tuple[int, int | None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Pair], LoadReport]:
    """Read SNLI pairs from a jsonl file, a tab-separated txt file or the SNLI folder.

    Args:
      path: a ``.jsonl`` file, a ``.txt``/``.tsv`` file, or the ``snli_1.0/`` folder.
      split: with a folder, which of ``train``/``dev``/``test`` to read.
      keep_unlabeled: keep rows whose gold label is ``-`` with label NO_LABEL
        (every row then becomes a Pair, in file order) instead of skipping them.
      skip_malformed: skip and count malformed rows instead of raising.
      limit: stop once this many pairs are kept (None: read everything).
      rows: (start, end): read only the data rows start..end-1 (0-based, in
        file order, blank lines not counted; end None: to the end). A pair
        keeps its row number in the whole file.
      progress: called with how many more data rows were met (skipped ones
        too), every PROGRESS_ROWS rows and once at the end: a full corpus
        takes tens of seconds to read.

    Returns:
      The kept pairs in file order, and a LoadReport.

    Raises:
      FileNotFoundError: ``path`` does not exist, or the folder lacks the split.
      SNLIFormatError: a malformed row, when ``skip_malformed`` is False.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    file = resolve_path(path, split)
    report = LoadReport(path=file)
    pairs: list[Pair] = []
    start, end = rows or (0, None)
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"rows must be START:END with 0 <= START <= END, got {start}:{'' if end is None else end}")
    tsv = file.suffix.lower() in _TSV_SUFFIXES
    found = _tsv_rows(file) if tsv else _jsonl_rows(file)
    seen = 0  # data rows met in the file, up to where reading stopped
    for index, (line_no, row) in enumerate(found):
        seen = index + 1
        if progress is not None and seen % PROGRESS_ROWS == 0:
            progress(PROGRESS_ROWS)
        if index < start:
            continue
        if (end is not None and index >= end) or (limit is not None and len(pairs) >= limit):
            break
        report.rows_read += 1
        try:
            pair = _pair_from_row(row, index)
        except _RowError as error:
            if not skip_malformed:
                raise SNLIFormatError(file, line_no, str(error)) from None
            report.skipped_malformed += 1
            report.malformed.append((line_no, str(error)))
            continue
        if pair.label == NO_LABEL and not keep_unlabeled:
            report.skipped_no_label += 1
            continue
        pairs.append(pair)
    if progress is not None and seen % PROGRESS_ROWS:
        progress(seen % PROGRESS_ROWS)
    # A file with no rows is refused here, so every command says so alike
    # (rather than statistics of nothing, or a model with an empty vocabulary).
    if seen == 0:
        after = " after its header" if tsv else ""
        what = f"has only blank lines{after}" if _blank_lines(file, tsv) else \
            f"is empty{' but for its header' if tsv else ''}"
        raise EmptyDataError(f"{file}: no data rows (the file {what})")
    if report.rows_read == 0 and limit != 0:
        raise EmptyDataError(f"{file}: no data rows in rows {start}:{'' if end is None else end} "
                             f"(the file has {seen:,})")
    report.pairs = len(pairs)
    return pairs, report


# A row is (line number, fields by name), or (line number, _RowError) when the
# line itself cannot be split into fields; the caller decides what to do.
_Row = tuple[int, Union[dict, _RowError]]


def _blank_lines(file: pathlib.Path, tsv: bool) -> bool:
    """Whether a file with no data row has lines (after a txt file's header),
    which can then only be blank: a file of blank lines is not an empty one."""
    with open(file, encoding=_ENCODING, errors="surrogateescape", newline="" if tsv else None) as lines:
        if tsv:
            next(lines, "")
        return next(lines, None) is not None


def _undecodable(line: str) -> _RowError | None:
    """Why ``line`` (decoded with surrogateescape) is not UTF-8, or None if it is."""
    if line.isascii() or not _UNDECODABLE.search(line):  # isascii is O(1): almost every line stops there
        return None
    raw = line.encode("utf-8", "surrogateescape")  # the line's bytes as they are in the file
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return _RowError(f"not valid UTF-8 ({error.reason}: byte 0x{raw[error.start]:02x} "
                         f"at byte offset {error.start} of the line)")
    return None  # not reached: only undecodable bytes give these code points


def _jsonl_rows(file: pathlib.Path) -> Iterator[_Row]:
    with open(file, encoding=_ENCODING, errors="surrogateescape") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # a trailing newline or blank line is not a row
            undecodable = _undecodable(line)
            if undecodable:
                yield line_no, undecodable
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                # Some messages end in "at" already ("Unterminated string starting at").
                where = "column" if error.msg.endswith(" at") else "at column"
                yield line_no, _RowError(f"invalid JSON ({error.msg} {where} {error.colno})")
                continue
            except (ValueError, RecursionError) as error:  # an integer too long, nesting too deep
                yield line_no, _RowError(f"invalid JSON ({error})")
                continue
            if not isinstance(row, dict):
                yield line_no, _RowError(f"expected a JSON object, got {type(row).__name__}")
                continue
            yield line_no, row


def _tsv_rows(file: pathlib.Path) -> Iterator[_Row]:
    # No csv module: SNLI's txt has no quoting, and sentences contain '"'.
    with open(file, encoding=_ENCODING, errors="surrogateescape", newline="") as lines:
        header_line = next(lines, "")
        undecodable = _undecodable(header_line)
        if undecodable:
            raise SNLIFormatError(file, 1, f"header row is {undecodable}")
        header = header_line.rstrip("\r\n").split("\t")
        missing = [name for name in REQUIRED_FIELDS if name not in header]
        if missing:
            raise SNLIFormatError(file, 1, f"header row lacks column(s) {', '.join(missing)}")
        columns = {name: header.index(name) for name in REQUIRED_FIELDS}
        for line_no, line in enumerate(lines, start=2):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            undecodable = _undecodable(line)
            if undecodable:
                yield line_no, undecodable
                continue
            cells = line.split("\t")
            # A short row simply lacks the fields past its end; _pair_from_row
            # names the first missing one.
            yield line_no, {name: cells[i] for name, i in columns.items() if i < len(cells)}


def _pair_from_row(row: dict | _RowError, index: int) -> Pair:
    if isinstance(row, _RowError):
        raise row
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise _RowError(f"missing field {name!r}")
    gold = row[LABEL_FIELD]
    if not isinstance(gold, str):  # a list or object would not even be hashable
        raise _RowError(f"field {LABEL_FIELD!r} must be a string, got {type(gold).__name__}")
    if gold == UNLABELED:
        label = NO_LABEL
    elif gold in LABEL_IDS:
        label = LABEL_IDS[gold]
    else:
        raise _RowError(f"unknown gold label {gold!r}; expected one of {LABELS} or {UNLABELED!r}")
    pair_id = row[ID_FIELD]
    if isinstance(pair_id, bool) or not isinstance(pair_id, (str, int)):
        raise _RowError(f"field {ID_FIELD!r} must be a string, got {type(pair_id).__name__}")
    return Pair(
        premise=_parse_field(row, PREMISE_FIELD),
        hypothesis=_parse_field(row, HYPOTHESIS_FIELD),
        label=label,
        pair_id=str(pair_id),
        row=index,
    )


def _parse_field(row: dict, name: str) -> Sentence:
    text = row[name]
    if not isinstance(text, str):
        raise _RowError(f"field {name!r} must be a string, got {type(text).__name__}")
    try:
        return parse(text)
    except ParseError as error:
        raise _RowError(f"field {name!r}: {error}") from None
