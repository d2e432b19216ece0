"""Property tests of the readers: whatever text or bytes arrive, the result is
either valid (docs/spec.md §1: n SHIFTs, n-1 REDUCEs, never a REDUCE on fewer
than two items) or one of the project's own errors, naming where it failed.

Any other exception (a TypeError, a UnicodeDecodeError, a bare ValueError
from a library) fails these tests. The examples are derandomized, so CI sees
the same ones on every run.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.snli import (HYPOTHESIS_FIELD, ID_FIELD, LABEL_FIELD, LABELS, NO_LABEL, PREMISE_FIELD, REQUIRED_FIELDS,
                         UNLABELED, EmptyDataError, SNLIFormatError, read_snli)
from shared.transitions import REDUCE, SHIFT, ParseError, build_tree, check_transitions, parse

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)

# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

# Whitespace that str.split and the tokenizer must agree on, Unicode included;
# the inline ones neither end a line nor a cell of a tab-separated file.
INLINE_SPACES = st.sampled_from([" ", "  ", "\u00a0", "\u2028", "\u3000", "\x1c", "\x0b"])
SPACES = st.one_of(INLINE_SPACES, st.sampled_from(["\t", "\n", "\r\n"]))
WORDS = st.one_of(
    st.sampled_from(["a", "man", "sleeps", ".", '"', "n't", "café", "(a", "b)"]),
    st.text(string.ascii_letters + string.punctuation + "é東", min_size=1, max_size=6),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=4),  # any character, brackets too
)
# Random sequences of brackets, words and spaces: balanced or not, empty groups, no brackets at all.
RANDOM_TEXT = st.lists(st.one_of(st.just("("), st.just(")"), WORDS, SPACES), max_size=30).map("".join)

# Well-formed trees, with groups of one to four children (binarized by the
# reader); a word is a tree, a list of trees is a bracket group.
TOKENS = st.text(string.ascii_letters + string.digits + ".,;:!?'\"-é東", min_size=1, max_size=6)
TREES = st.recursive(TOKENS, lambda inner: st.lists(inner, min_size=1, max_size=4), max_leaves=12)


def pieces(tree) -> list[str]:
    return [tree] if isinstance(tree, str) else ["(", *(p for child in tree for p in pieces(child)), ")"]


@st.composite
def tree_text(draw, tree=TREES, mutate: bool = True, spaces=SPACES) -> str:
    """A tree written out with random whitespace between the pieces, with
    ``mutate`` sometimes one bracket dropped or one added (nearly right, and wrong)."""
    parts = pieces(draw(tree))
    change = draw(st.sampled_from(["none", "none", "none", "drop", "add"])) if mutate else "none"
    brackets = [i for i, part in enumerate(parts) if part in "()"]
    if change == "drop" and brackets:
        del parts[draw(st.sampled_from(brackets))]
    elif change == "add":
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from("()")))
    gaps = draw(st.lists(spaces, min_size=len(parts) + 1, max_size=len(parts) + 1))
    return gaps[0] + "".join(part + gap for part, gap in zip(parts, gaps[1:]))


BRACKET_TEXT = st.one_of(RANDOM_TEXT, tree_text())

# Field values of every JSON type, and strings with lone surrogates (JSON's "\ud800").
ANY_STRING = st.text(st.characters(), max_size=8)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), ANY_STRING)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(ANY_STRING, inner, max_size=3)),
                           max_leaves=6)
LABEL_VALUES = st.one_of(st.sampled_from(LABELS + (UNLABELED, "", "Entailment")), JSON_VALUES)
FIELD_VALUES = {
    LABEL_FIELD: LABEL_VALUES,
    PREMISE_FIELD: st.one_of(BRACKET_TEXT, BRACKET_TEXT, JSON_VALUES),
    HYPOTHESIS_FIELD: st.one_of(BRACKET_TEXT, BRACKET_TEXT, JSON_VALUES),
    ID_FIELD: st.one_of(ANY_STRING, JSON_VALUES),
}
# A row has each field or not, and maybe fields SNLI does not have.
ROWS = st.fixed_dictionaries({}, optional={**FIELD_VALUES, "sentence1": ANY_STRING, "": JSON_VALUES})


def good_rows(spaces=SPACES):
    """Rows as SNLI writes them, whose parses are mostly right."""
    text = st.one_of(tree_text(mutate=False, spaces=spaces), tree_text(mutate=False, spaces=spaces), BRACKET_TEXT)
    return st.fixed_dictionaries({LABEL_FIELD: st.sampled_from(LABELS + (UNLABELED,)), PREMISE_FIELD: text,
                                  HYPOTHESIS_FIELD: text, ID_FIELD: st.one_of(ANY_STRING, st.integers())})


GOOD_ROWS = good_rows()
GOOD_JSON_LINES = GOOD_ROWS.map(lambda row: json.dumps(row).encode("utf-8", "surrogatepass"))
GOOD_TXT_ROWS = good_rows(INLINE_SPACES)


@st.composite
def json_lines(draw) -> bytes:
    """One line of a jsonl file (no newline): a JSON object with or without the
    fields, JSON of another kind, text, or raw bytes (often not UTF-8)."""
    kind = draw(st.sampled_from(["good", "good", "good", "row", "row", "json", "text", "bytes", "blank"]))
    if kind == "good":
        text = json.dumps(draw(GOOD_ROWS), ensure_ascii=draw(st.booleans()))
    elif kind == "row":
        text = json.dumps(draw(ROWS), ensure_ascii=draw(st.booleans()))
    elif kind == "json":
        text = json.dumps(draw(JSON_VALUES))
    elif kind == "text":
        text = draw(st.text(max_size=40))
    elif kind == "blank":
        text = draw(SPACES)
    else:
        return draw(st.binary(max_size=40))
    line = text.encode("utf-8", "surrogatepass")  # a lone surrogate becomes bytes that are not UTF-8
    if draw(st.integers(0, 9)) == 0:  # now and then a bad byte inside an otherwise good line
        at = draw(st.integers(0, len(line)))
        line = line[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + line[at:]
    return line


@st.composite
def txt_lines(draw, columns: list[str], clean: bool = False) -> bytes:
    """One data line of a tab-separated file with these columns: a row as SNLI
    writes it, cells of any text, or raw bytes; only the first when ``clean``."""
    kind = "good" if clean else draw(st.sampled_from(["good", "good", "cells", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    if kind == "good":
        row = draw(GOOD_TXT_ROWS)
        cells = [str(row.get(name, "A man sleeps .")) for name in columns]
    else:
        cells = draw(st.lists(st.one_of(BRACKET_TEXT, st.sampled_from(LABELS + (UNLABELED,)), ANY_STRING),
                              max_size=6))
    return "\t".join(cells).encode("utf-8", "surrogatepass")


NEWLINES = st.sampled_from([b"\n", b"\n", b"\r\n"])

# --------------------------------------------------------------------------
# parse: valid transitions or ParseError
# --------------------------------------------------------------------------


def assert_valid(sentence) -> None:
    n = len(sentence.tokens)
    assert n >= 1
    check_transitions(sentence.transitions, n)
    assert sentence.transitions.count(SHIFT) == n and sentence.transitions.count(REDUCE) == n - 1
    assert len(sentence.transitions) == 2 * n - 1  # no PAD in a parsed sentence


@PROPERTY_SETTINGS
@given(text=BRACKET_TEXT)
def test_parse_gives_valid_transitions_or_parse_error(text):
    try:
        sentence = parse(text)
    except ParseError as error:
        assert error.text == text
        assert error.position is None or 0 <= error.position <= len(text)
        return
    assert_valid(sentence)
    # The tokens are exactly the words between the brackets and the spaces.
    assert sentence.tokens == tuple(text.replace("(", " ").replace(")", " ").split())


def binarized(tree):
    """The binary tree the reader builds (docs/spec.md §1): a group of one is its
    child, a longer group is folded left to right."""
    if isinstance(tree, str):
        return tree
    result = binarized(tree[0])
    for child in tree[1:]:
        result = (result, binarized(child))
    return result


@PROPERTY_SETTINGS
@given(tree=TREES, data=st.data())
def test_parse_builds_the_written_tree(tree, data):
    text = data.draw(tree_text(tree=st.just(tree)))
    try:
        sentence = parse(text)
    except ParseError:
        return  # a bracket was dropped or added
    assert_valid(sentence)
    if "".join(text.split()) == "".join(pieces(tree)):  # written as generated
        assert build_tree(sentence.tokens, sentence.transitions) == binarized(tree)


# --------------------------------------------------------------------------
# read_snli: valid pairs or SNLIFormatError, on jsonl and txt files
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    # Module-scoped: hypothesis runs many examples inside one test call, and
    # each example overwrites the same files.
    return tmp_path_factory.mktemp("reader_properties")


def check_read(path, *, fatal_header: bool = False) -> None:
    """The properties every file must have, jsonl or txt."""
    # Lenient: nothing in a row is fatal; every data row is kept or counted.
    try:
        lenient, report = read_snli(path, keep_unlabeled=True, skip_malformed=True)
    except SNLIFormatError as error:
        # Only a txt file's header can stop a lenient read.
        assert fatal_header and error.line_no == 1 and str(path) in str(error)
        return
    except EmptyDataError as error:
        # Or a file with no data row at all, which both reads refuse alike, saying
        # whether it has any line (after a txt file's header), which can only be blank.
        txt = path.suffix == ".txt"
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as text:
            if txt:
                text.readline()
            said = f"has only blank lines{' after its header' if txt else ''}" if text.read() else \
                f"is empty{' but for its header' if txt else ''}"
        assert str(error) == f"{path}: no data rows (the file {said})"
        with pytest.raises(EmptyDataError):
            read_snli(path)
        return
    assert report.rows_read == report.pairs + report.skipped_malformed == len(lenient) + len(report.malformed)
    assert report.skipped_no_label == 0
    for pair in lenient:
        assert_valid(pair.premise)
        assert_valid(pair.hypothesis)
        assert pair.label in (0, 1, 2, NO_LABEL)
        assert isinstance(pair.pair_id, str)
    rows = [pair.row for pair in lenient]
    assert rows == sorted(set(rows)) and all(0 <= row < report.rows_read for row in rows)
    line_numbers = [line for line, _ in report.malformed]
    assert line_numbers == sorted(set(line_numbers)) and all(line >= 1 for line in line_numbers)
    # Strict: the first malformed row, named by file and line, or the same pairs.
    try:
        strict, strict_report = read_snli(path)
    except SNLIFormatError as error:
        assert report.malformed, "strict read failed on a file the lenient read found no fault in"
        assert error.line_no == report.malformed[0][0]
        assert str(error) == f"{path}, line {error.line_no}: {report.malformed[0][1]}"
        return
    assert not report.malformed
    assert strict == [pair for pair in lenient if pair.label != NO_LABEL]
    assert strict_report.skipped_no_label == len(lenient) - len(strict)


@PROPERTY_SETTINGS
@given(lines=st.one_of(st.lists(json_lines(), max_size=8), st.lists(GOOD_JSON_LINES, max_size=8)),
       newline=NEWLINES, final_newline=st.booleans())
def test_read_jsonl_gives_valid_pairs_or_format_error(workdir, lines, newline, final_newline):
    path = workdir / "pairs.jsonl"
    path.write_bytes(newline.join(lines) + (newline if final_newline else b""))
    check_read(path)


@PROPERTY_SETTINGS
@given(columns=st.permutations([LABEL_FIELD, PREMISE_FIELD, HYPOTHESIS_FIELD, ID_FIELD, "sentence1"]),
       bad_header=st.one_of(st.none(), st.none(), st.binary(max_size=20)), clean=st.booleans(), data=st.data(),
       newline=NEWLINES)
def test_read_txt_gives_valid_pairs_or_format_error(workdir, columns, bad_header, clean, data, newline):
    header = "\t".join(columns).encode() if bad_header is None else bad_header
    lines = data.draw(st.lists(txt_lines(columns, clean), max_size=8))
    path = workdir / "pairs.txt"
    path.write_bytes(newline.join([header] + lines) + newline)
    check_read(path, fatal_header=True)


def test_fields_cover_what_the_reader_requires():
    # The row strategy must be able to produce every field the reader needs.
    assert set(FIELD_VALUES) == set(REQUIRED_FIELDS)
