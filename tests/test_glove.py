"""GloVe loading: filled rows, untouched rows, coverage, dimension errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from shared.glove import GloveReport, load_glove
from shared.vocab import PAD_ID, UNK_ID, Vocabulary

GLOVE_LINES = [
    "the 0.1 0.2 0.3",
    "The 9.0 9.0 9.0",  # a cased duplicate later in the file: the first spelling wins
    "cat -1.5 2.5e-1 3",
    ". . . 7 8 9",  # glove.840B-style word with spaces
    "zebra 1 1 1",  # not in the vocabulary
    "",
]


@pytest.fixture
def vocab():
    return Vocabulary(["<pad>", "<unk>", "the", "cat", "dog", ". . ."], lowercase=True)


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_fills_found_rows_and_leaves_the_rest(tmp_path, vocab):
    embedding = np.full((len(vocab), 3), -7.0, dtype=np.float32)
    report = load_glove(_write(tmp_path / "glove.txt", GLOVE_LINES), vocab, embedding)
    np.testing.assert_array_equal(embedding[vocab.id("the")], np.float32([0.1, 0.2, 0.3]))
    np.testing.assert_array_equal(embedding[vocab.id("cat")], [-1.5, 0.25, 3.0])
    np.testing.assert_array_equal(embedding[vocab.id(". . .")], [7, 8, 9])
    # Words the file lacks, and the specials, keep their values.
    for index in (PAD_ID, UNK_ID, vocab.id("dog")):
        np.testing.assert_array_equal(embedding[index], [-7.0, -7.0, -7.0])
    assert embedding.dtype == np.float32
    assert isinstance(report, GloveReport)
    assert (report.found, report.total, report.dim) == (3, 4, 3)
    assert report.coverage == pytest.approx(0.75)
    assert report.lines_read == 5
    assert "3 of 4" in str(report) and "75.0%" in str(report)


def test_cased_vocabulary_matches_exactly(tmp_path):
    vocab = Vocabulary(["<pad>", "<unk>", "The", "the"], lowercase=False)
    embedding = np.zeros((4, 3))
    report = load_glove(_write(tmp_path / "glove.txt", GLOVE_LINES), vocab, embedding)
    np.testing.assert_array_equal(embedding[2], [9, 9, 9])
    np.testing.assert_array_equal(embedding[3], [0.1, 0.2, 0.3])
    assert report.found == 2 and report.coverage == 1.0


def test_gzip(tmp_path, vocab):
    path = tmp_path / "glove.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(GLOVE_LINES))
    embedding = np.zeros((len(vocab), 3))
    assert load_glove(path, vocab, embedding).found == 3


def test_dimension_mismatch_first_line(tmp_path, vocab):
    path = _write(tmp_path / "glove.txt", GLOVE_LINES)
    with pytest.raises(ValueError, match=r"glove\.txt, line 1: vectors have dimension 3, the embedding has E=4"):
        load_glove(path, vocab, np.zeros((len(vocab), 4)))
    with pytest.raises(ValueError, match=r"line 1: .*dimension 3.*E=2"):
        load_glove(path, vocab, np.zeros((len(vocab), 2)))


def test_dimension_mismatch_later_line(tmp_path, vocab):
    path = _write(tmp_path / "glove.txt", ["the 1 2 3", "cat 1 2", "dog 1 2 3"])
    with pytest.raises(ValueError, match=r"glove\.txt, line 2: 2 values, expected E=3"):
        load_glove(path, vocab, np.zeros((len(vocab), 3)))


def test_not_a_number(tmp_path, vocab):
    path = _write(tmp_path / "glove.txt", ["the 1 2 3", "cat 1 x 3"])
    with pytest.raises(ValueError, match=r"line 2: .*not a number"):
        load_glove(path, vocab, np.zeros((len(vocab), 3)))


def test_embedding_must_fit_vocabulary(tmp_path, vocab):
    path = _write(tmp_path / "glove.txt", GLOVE_LINES)
    with pytest.raises(ValueError, match=r"\[V=6, E\]"):
        load_glove(path, vocab, np.zeros((5, 3)))


def test_missing_file(tmp_path, vocab):
    with pytest.raises(FileNotFoundError, match="no GloVe file"):
        load_glove(tmp_path / "nope.txt", vocab, np.zeros((len(vocab), 3)))


def test_documented_glove_commands_run(tmp_path):
    """Each ``bench init ... --glove`` line of docs/benchmark.md runs as written, given a GloVe
    file of the dimension its name says (300): the embedding it asks for must be that wide."""
    import re
    import shlex
    from pathlib import Path

    from bench.cli import main

    page = Path(__file__).resolve().parent.parent / "docs" / "benchmark.md"
    lines = [line.split("#")[0] for line in page.read_text().splitlines()
             if line.startswith("python -m bench init") and "--glove" in line]
    assert lines, "docs/benchmark.md shows no `bench init --glove` command"
    for i, line in enumerate(lines):
        words = shlex.split(line)[3:]
        glove_name = words[words.index("--glove") + 1]
        dim = int(re.search(r"(\d+)d\b", glove_name).group(1))
        glove = _write(tmp_path / glove_name, [f"{w} " + " ".join(["0.5"] * dim) for w in ("the", "a", "man")])
        words[words.index("--glove") + 1] = str(glove)
        words[words.index("--out") + 1] = str(tmp_path / f"model{i}.npz")
        assert main(words) == 0, line
        assert (tmp_path / f"model{i}.npz").exists()
