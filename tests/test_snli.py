"""Reading SNLI: the embedded sample, the txt format, the folder, malformed rows."""

from __future__ import annotations

import json

import pytest

from bench.data import dataset_stats, format_stats
from shared.snli import (
    LABELS,
    NO_LABEL,
    SAMPLE_PATH,
    LoadReport,
    Pair,
    SNLIFormatError,
    read_snli,
    resolve_path,
)
from shared.batching import make_batches
from shared.transitions import parse
from shared.vocab import Vocabulary

SAMPLE_ROWS = 1289
SAMPLE_UNLABELED = 16

TXT_HEADER = [
    "gold_label",
    "sentence1_binary_parse",
    "sentence2_binary_parse",
    "sentence1_parse",
    "sentence2_parse",
    "sentence1",
    "sentence2",
    "captionID",
    "pairID",
    "label1",
]


def _row(label="entailment", premise="( ( A man ) sleeps )", hypothesis="( ( A person ) sleeps )", pair_id="p0"):
    return {
        "gold_label": label,
        "sentence1_binary_parse": premise,
        "sentence2_binary_parse": hypothesis,
        "pairID": pair_id,
    }


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _write_txt(path, rows, header=TXT_HEADER):
    lines = ["\t".join(header)]
    for row in rows:
        cells = {name: "" for name in header} | row
        lines.append("\t".join(cells[name] for name in header))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_sample_counts():
    pairs, report = read_snli(SAMPLE_PATH)
    assert len(pairs) == SAMPLE_ROWS - SAMPLE_UNLABELED == 1273
    assert report.rows_read == SAMPLE_ROWS
    assert report.pairs == 1273
    assert report.skipped_no_label == SAMPLE_UNLABELED
    assert report.skipped_malformed == 0 and report.malformed == []
    assert all(p.label in (0, 1, 2) for p in pairs)
    assert "1,273 pairs kept" in str(report) and "16 skipped" in str(report)


def test_sample_first_row():
    pairs, _ = read_snli(SAMPLE_PATH)
    first = pairs[0]
    assert first.pair_id == "4705552913.jpg#2r1n"
    assert first.label == LABELS.index("neutral")
    text = "( ( Two women ) ( ( are ( embracing ( while ( holding ( to ( go packages ) ) ) ) ) ) . ) )"
    assert first.premise == parse(text)
    assert first.premise.tokens[:2] == ("Two", "women")


def test_sample_keep_unlabeled_in_file_order():
    pairs, report = read_snli(SAMPLE_PATH, keep_unlabeled=True)
    assert len(pairs) == report.pairs == SAMPLE_ROWS
    assert report.skipped_no_label == 0
    file_ids = [json.loads(line)["pairID"] for line in SAMPLE_PATH.read_text(encoding="utf-8").splitlines()]
    assert [p.pair_id for p in pairs] == file_ids
    assert sum(p.label == NO_LABEL for p in pairs) == SAMPLE_UNLABELED


def test_limit():
    pairs, report = read_snli(SAMPLE_PATH, limit=10)
    assert len(pairs) == 10 == report.pairs
    assert [p.pair_id for p in pairs] == [p.pair_id for p in read_snli(SAMPLE_PATH)[0][:10]]
    assert read_snli(SAMPLE_PATH, limit=0)[0] == []


def test_txt_format(tmp_path):
    rows = [
        _row("neutral", pair_id="a"),
        _row("-", pair_id="b"),
        _row("contradiction", premise='( ( A " quoted " man ) sleeps )', pair_id="c"),
    ]
    # Columns are found by name, whatever their order.
    header = TXT_HEADER[::-1]
    path = _write_txt(tmp_path / "snli_1.0_dev.txt", rows, header)
    pairs, report = read_snli(path)
    assert [p.pair_id for p in pairs] == ["a", "c"]
    assert [p.label for p in pairs] == [1, 2]
    assert pairs[1].premise.tokens == ("A", '"', "quoted", '"', "man", "sleeps")
    assert report.rows_read == 3 and report.skipped_no_label == 1


def test_txt_and_jsonl_agree(tmp_path):
    rows = [_row(label, pair_id=str(i)) for i, label in enumerate(["entailment", "neutral", "-", "contradiction"])]
    from_txt, _ = read_snli(_write_txt(tmp_path / "x.txt", rows), keep_unlabeled=True)
    from_jsonl, _ = read_snli(_write_jsonl(tmp_path / "x.jsonl", rows), keep_unlabeled=True)
    assert from_txt == from_jsonl
    assert all(isinstance(p, Pair) for p in from_txt)


def test_row_counts_every_data_row(tmp_path):
    """Pair.row (which seeds sampled parses, docs/spec.md §7) is the 0-based
    index among non-empty lines: blank lines are not rows, while malformed
    and unlabeled rows still take their index."""
    rows = [_row(pair_id="a"), "", _row(label="-", pair_id="b"), "{oops", "", _row(pair_id="c")]
    path = _write_jsonl(tmp_path / "pairs.jsonl", rows)
    pairs, _ = read_snli(path, skip_malformed=True)
    assert [(p.pair_id, p.row) for p in pairs] == [("a", 0), ("c", 3)]
    kept, _ = read_snli(path, skip_malformed=True, keep_unlabeled=True)
    assert [(p.pair_id, p.row) for p in kept] == [("a", 0), ("b", 1), ("c", 3)]
    txt, _ = read_snli(_write_txt(tmp_path / "pairs.txt", [_row(pair_id="a"), _row(pair_id="b")]))
    assert [p.row for p in txt] == [0, 1]  # the header is not a row
    whole, _ = read_snli(SAMPLE_PATH, keep_unlabeled=True)
    assert [p.row for p in whole] == list(range(SAMPLE_ROWS))


def test_row_is_not_part_of_equality():
    pair = Pair(parse("( a b )"), parse("c"), 0, "p")
    assert pair.row == -1
    assert pair == Pair(parse("( a b )"), parse("c"), 0, "p", row=7)


def test_txt_header_must_name_columns(tmp_path):
    path = _write_txt(tmp_path / "bad.txt", [_row()], header=["gold_label", "sentence1_binary_parse", "pairID"])
    with pytest.raises(SNLIFormatError, match=r"line 1: .*sentence2_binary_parse"):
        read_snli(path)


def test_folder_form(tmp_path):
    folder = tmp_path / "snli_1.0"
    folder.mkdir()
    _write_jsonl(folder / "snli_1.0_dev.jsonl", [_row(pair_id="dev")])
    _write_txt(folder / "snli_1.0_dev.txt", [_row(pair_id="dev-txt")])
    _write_txt(folder / "snli_1.0_test.txt", [_row(pair_id="test")])
    assert read_snli(folder)[0][0].pair_id == "dev"  # jsonl preferred
    assert read_snli(folder, split="test")[0][0].pair_id == "test"  # txt fallback
    assert read_snli(tmp_path, split="test")[0][0].pair_id == "test"  # the folder it was unzipped into
    with pytest.raises(FileNotFoundError, match="train"):
        read_snli(folder, split="train")
    with pytest.raises(ValueError, match="unknown split"):
        read_snli(folder, split="validation")
    assert resolve_path(folder) == folder / "snli_1.0_dev.jsonl"


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        read_snli(tmp_path / "nowhere.jsonl")


MALFORMED = {
    "bad_json": ('{"gold_label": "neutral", ', "invalid JSON"),
    "not_object": ("[1, 2]", "expected a JSON object"),
    "missing_field": ({k: v for k, v in _row().items() if k != "sentence2_binary_parse"}, "missing field 'sentence2"),
    "unknown_label": (_row(label="maybe"), "unknown gold label 'maybe'"),
    "bad_parse": (_row(premise="( ( A man ) sleeps"), "sentence1_binary_parse.*never closed"),
    "empty_group": (_row(hypothesis="( ( ) sleeps )"), "sentence2_binary_parse.*empty group"),
    "not_string": (_row(premise=7), "must be a string"),
    "label_not_string": (_row(label=["neutral"]), "field 'gold_label' must be a string, got list"),
    "huge_integer": (json.dumps(_row())[:-1] + ', "n": ' + "1" * 5000 + "}", r"invalid JSON \(Exceeds the limit"),
    "deep_nesting": ("[" * 100_000, r"invalid JSON \(maximum recursion depth"),
}


@pytest.mark.parametrize("bad, reason", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_row_raises_with_file_and_line(tmp_path, bad, reason):
    path = _write_jsonl(tmp_path / "pairs.jsonl", [_row(pair_id="ok1"), "", bad, _row(pair_id="ok2")])
    with pytest.raises(SNLIFormatError, match=reason) as info:
        read_snli(path)
    assert info.value.line_no == 3  # the blank line 2 counts as a line, not a row
    assert str(path) in str(info.value) and "line 3" in str(info.value)


@pytest.mark.parametrize("bad, reason", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_row_with_unlabeled_gold_still_raises(tmp_path, bad, reason):
    # A broken row is reported whatever its label: it is checked before the
    # '-' rows are skipped.
    if isinstance(bad, dict) and bad.get("gold_label") == "entailment":
        bad = bad | {"gold_label": "-"}
    with pytest.raises(SNLIFormatError, match=reason):
        read_snli(_write_jsonl(tmp_path / "pairs.jsonl", [bad]))


def test_skip_malformed_counts(tmp_path):
    rows = [_row(pair_id="ok1"), "{oops", _row(label="maybe"), _row(label="-"), _row(pair_id="ok2")]
    pairs, report = read_snli(_write_jsonl(tmp_path / "pairs.jsonl", rows), skip_malformed=True)
    assert [p.pair_id for p in pairs] == ["ok1", "ok2"]
    assert report == LoadReport(
        path=tmp_path / "pairs.jsonl",
        rows_read=5,
        pairs=2,
        skipped_no_label=1,
        skipped_malformed=2,
        malformed=report.malformed,
    )
    assert [line for line, _ in report.malformed] == [2, 3]
    assert "invalid JSON" in report.malformed[0][1]
    assert "2 skipped as malformed" in str(report)


def test_txt_short_row_is_malformed(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("\t".join(TXT_HEADER) + "\nneutral\t( a b )\n", encoding="utf-8")
    with pytest.raises(SNLIFormatError, match=r"line 2: missing field 'sentence2_binary_parse'"):
        read_snli(path)
    _, report = read_snli(path, skip_malformed=True)
    assert report.skipped_malformed == 1 and report.malformed[0][0] == 2


def test_sample_stats():
    pairs, report = read_snli(SAMPLE_PATH)
    batches = make_batches(pairs, Vocabulary.from_pairs(pairs), 64)
    stats = dataset_stats(pairs, report, batches)
    assert (stats["rows"], stats["kept"], stats["skipped"], stats["skipped_no_label"]) == (1289, 1273, 16, 16)
    assert stats["labels"] == {"entailment": 433, "neutral": 421, "contradiction": 419, "unlabeled": 0}
    assert stats["sentences"] == 2 * 1273
    assert sum(b["count"] for b in stats["length_histogram"]) == 2 * 1273
    assert stats["length"]["max"] == 40 and 11 < stats["length"]["mean"] < 13
    assert stats["tree_depth"]["max"] >= stats["max_stack_depth"] - 1 > 0
    assert 0 < stats["padding"]["waste"] < 1
    json.dumps(stats)  # plain values only
    text = format_stats(stats)
    assert "1,273" in text and "#" in text and "PAD" in text
    # Without a report or batches.
    bare = dataset_stats(pairs[:5])
    assert bare["rows"] == bare["kept"] == 5 and bare["padding"] is None
    assert "PAD" not in format_stats(bare)


# --------------------------------------------------------------------------
# Bytes that are not UTF-8 (issue #17): the file, the line and the byte
# --------------------------------------------------------------------------

# A row whose premise has a two-byte character before the bad bytes, so the
# byte offset and the character offset differ.
_CAFE_ROW = json.dumps(_row(premise="( ( A café ) sleeps )", pair_id="p-BAD-"), ensure_ascii=False).encode()

UNDECODABLE = {
    "invalid_start": (b"\xff", "invalid start byte: byte 0xff"),
    "cut_sequence": (b"\xc3(", "invalid continuation byte: byte 0xc3"),
    "encoded_surrogate": (b"\xed\xa0\x80", "invalid continuation byte: byte 0xed"),
}


@pytest.mark.parametrize("bad, reason", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_undecodable_row_names_file_line_and_byte(tmp_path, bad, reason):
    good = json.dumps(_row(pair_id="ok")).encode()
    line = _CAFE_ROW.replace(b"-BAD-", bad)
    offset = line.index(bad)
    assert len(line[:offset].decode("utf-8")) == offset - 1  # 'é' is two bytes: the offset counts bytes
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(good + b"\n\n" + line + b"\n" + good + b"\n")
    with pytest.raises(SNLIFormatError) as info:
        read_snli(path)
    assert info.value.line_no == 3
    assert str(info.value) == f"{path}, line 3: not valid UTF-8 ({reason} at byte offset {offset} of the line)"
    # Like any malformed row it can be skipped, and the rows after it keep their numbers.
    pairs, report = read_snli(path, skip_malformed=True)
    assert [(p.pair_id, p.row) for p in pairs] == [("ok", 0), ("ok", 2)]
    assert report.malformed == [(3, f"not valid UTF-8 ({reason} at byte offset {offset} of the line)")]


def test_undecodable_last_byte_of_the_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(json.dumps(_row()).encode() + b"\n" + b'{"gold_label": "neutral\xc3')
    with pytest.raises(SNLIFormatError, match=r"line 2: not valid UTF-8 \(unexpected end of data: byte 0xc3 "
                                              r"at byte offset 23 of the line\)"):
        read_snli(path)


def test_undecodable_txt_row_and_header(tmp_path):
    path = _write_txt(tmp_path / "pairs.txt", [_row(pair_id="a"), _row(pair_id="b")])
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:2] + [lines[2].replace(b"\tb\t", b"\tb\xff\t")] + lines[3:]))
    offset = lines[2].index(b"\tb\t") + 2
    with pytest.raises(SNLIFormatError, match=rf"pairs.txt, line 3: not valid UTF-8 \(invalid start byte: "
                                              rf"byte 0xff at byte offset {offset} of the line\)"):
        read_snli(path)
    path.write_bytes(b"\n".join([lines[0].replace(b"pairID", b"pair\xffID")] + lines[1:]))
    with pytest.raises(SNLIFormatError, match=r"pairs.txt, line 1: header row is not valid UTF-8 "
                                              r"\(invalid start byte: byte 0xff at byte offset \d+ of the line\)"):
        read_snli(path, skip_malformed=True)


def test_byte_order_mark_is_accepted(tmp_path):
    rows = [_row(pair_id="a"), _row(pair_id="b")]
    for path in (_write_jsonl(tmp_path / "pairs.jsonl", rows), _write_txt(tmp_path / "pairs.txt", rows)):
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        pairs, report = read_snli(path)
        assert [p.pair_id for p in pairs] == ["a", "b"] and report.skipped_malformed == 0, path
