"""What a full SNLI corpus (550,152 pairs) meets that the sample does not:
sentences deep enough to exhaust Python's recursion, damaged parameter
files, empty files, and minutes of loading. Each ends in one line and an exit
code (docs/spec.md, "Exit codes"), never a traceback or silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from tests.helpers import started

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """The environment of a ``python -m bench`` child: this checkout's code first."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _row(premise="( ( A man ) sleeps )", hypothesis="( ( A person ) sleeps )", label="entailment", pair_id="p0"):
    """One row in SNLI's jsonl format (the fields shared/snli.py reads)."""
    return {"gold_label": label, "sentence1_binary_parse": premise, "sentence2_binary_parse": hypothesis,
            "sentence1": " ".join(w for w in premise.split() if w not in "()"),
            "sentence2": " ".join(w for w in hypothesis.split() if w not in "()"), "pairID": pair_id}


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _one_line_error(err: str) -> str:
    """The error line of stderr, which holds it alone but for the data's
    one-line load report ("FILE: N rows read, ...")."""
    lines = [line for line in err.strip().splitlines() if " rows read, " not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# --------------------------------------------------------------------------
# deep trees
# --------------------------------------------------------------------------


def test_data_reports_a_sentence_of_5000_words(tmp_path):
    """A right-branching parse of 5,000 words is 4,999 pairs deep: its
    statistics come out (the tree depth walked without recursion)."""
    words = [f"w{i}" for i in range(5000)]
    parse = words[-1]
    for word in reversed(words[:-1]):
        parse = f"( {word} {parse} )"
    data = _write_jsonl(tmp_path / "deep.jsonl", [_row(premise=parse)])
    done = subprocess.run([sys.executable, "-m", "bench", "data", "--data", str(data), "--out",
                           str(tmp_path / "stats.json")], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    stats = json.loads((tmp_path / "stats.json").read_text())["pairs"]
    assert stats["tree_depth"]["max"] == 4999
    assert stats["length"]["max"] == 5000


# --------------------------------------------------------------------------
# damaged parameter files
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "model.npz"
    assert main(["init", "--size", "small", "--out", str(path)]) == 0
    return path


def _truncated(model_file: Path, folder: Path) -> Path:
    data = model_file.read_bytes()
    path = folder / "cut.npz"
    path.write_bytes(data[: len(data) // 2])  # a copy or download cut short
    return path


def _text(folder: Path) -> Path:
    path = folder / "text.npz"
    path.write_text("not an archive\n")
    return path


def _damaged_member(model_file: Path, folder: Path) -> Path:
    data = bytearray(model_file.read_bytes())
    data[3000:3100] = b"x" * 100  # inside the first array, the zip directory intact
    path = folder / "damaged.npz"
    path.write_bytes(bytes(data))
    return path


COMMANDS = {
    "encode": lambda params, tmp: ["encode", "--framework", "reference", "--params", str(params),
                                   "--out", str(tmp / "enc.npz"), "--data", "sample"],
    "evaluate": lambda params, tmp: ["evaluate", "--framework", "reference", "--params", str(params),
                                     "--num-pairs", "8"],
    "train --init": lambda params, tmp: ["train", "--framework", "reference", "--init", str(params), "--steps", "1",
                                         "--out", str(tmp / "run")],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", ["truncated", "text", "damaged member"])
def test_an_unreadable_parameter_file_is_one_line_and_exit_2(command, damage, model_file, tmp_path, capsys):
    params = {"truncated": lambda: _truncated(model_file, tmp_path), "text": lambda: _text(tmp_path),
              "damaged member": lambda: _damaged_member(model_file, tmp_path)}[damage]()
    argv = COMMANDS[command](params, tmp_path)
    if argv[0] == "encode":
        argv[argv.index("sample")] = str(ROOT / "data" / "snli_1.0_dev_sample.jsonl")
    code = main(argv)
    line = _one_line_error(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"error: {params}: not a readable .npz (")
    assert "pickled" not in line
    assert not (tmp_path / "enc.npz").exists()


def test_train_refuses_a_damaged_init_file_before_reading_the_data(model_file, tmp_path, capsys):
    """A full corpus takes most of a minute to read: --init is read first."""
    params = _truncated(model_file, tmp_path)
    code = main(["train", "--framework", "reference", "--init", str(params), "--steps", "1",
                 "--data", str(tmp_path / "not-read.jsonl"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        f"error: {params}: not a readable .npz (not a zip archive: truncated, or not written by numpy)"], err


# --------------------------------------------------------------------------
# empty files
# --------------------------------------------------------------------------


EMPTY_COMMANDS = {
    "data": lambda data, tmp: ["data", "--data", str(data), "--out", str(tmp / "stats.json")],
    "encode": lambda data, tmp: ["encode", "--framework", "reference", "--params", "MODEL", "--data", str(data),
                                 "--out", str(tmp / "enc.npz")],
    "train": lambda data, tmp: ["train", "--framework", "reference", "--size", "small", "--data", str(data),
                                "--steps", "1", "--out", str(tmp / "run")],
    "init": lambda data, tmp: ["init", "--size", "small", "--data", str(data), "--out", str(tmp / "init.npz")],
}


@pytest.mark.parametrize("command", list(EMPTY_COMMANDS))
def test_an_empty_data_file_is_refused_alike_by_every_command(command, model_file, tmp_path, capsys):
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    argv = [str(model_file) if word == "MODEL" else word for word in EMPTY_COMMANDS[command](data, tmp_path)]
    code = main(argv)
    line = _one_line_error(capsys.readouterr().err)
    assert code == 2
    assert line == f"error: {data}: no data rows (the file is empty)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]


UNLABELLED_COMMANDS = {
    **{name: EMPTY_COMMANDS[name] for name in ("data", "train", "init")},
    "evaluate": lambda data, tmp: ["evaluate", "--framework", "reference", "--params", "MODEL", "--data", str(data),
                                   "--out", str(tmp / "eval.json")],
}


@pytest.mark.parametrize("command", list(UNLABELLED_COMMANDS))
def test_a_file_of_unlabelled_rows_is_refused_alike_by_every_command_that_needs_labels(command, model_file, tmp_path,
                                                                                       capsys):
    """Gold label '-' on every row: no statistics of nothing, no vocabulary of
    no words, the same line as train and evaluate (encode encodes such rows)."""
    data = _write_jsonl(tmp_path / "unlabelled.jsonl", [_row(label="-", pair_id=f"p{i}") for i in range(3)])
    argv = [str(model_file) if word == "MODEL" else word for word in UNLABELLED_COMMANDS[command](data, tmp_path)]
    code = main(argv)
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {data}: no labelled rows (the 3 rows read all have gold label '-')"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unlabelled.jsonl"]


def test_a_header_alone_is_an_empty_file(tmp_path, capsys):
    data = tmp_path / "pairs.txt"
    data.write_text("gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tpairID\n")
    assert main(["data", "--data", str(data)]) == 2
    assert _one_line_error(capsys.readouterr().err) == f"error: {data}: no data rows (the file is empty but for its header)"


@pytest.mark.parametrize("name,text,said", [
    ("blank.jsonl", "\n\n   \n", "the file has only blank lines"),
    ("blank.txt", "gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tpairID\n\n\t\n",
     "the file has only blank lines after its header"),
    ("bom.jsonl", "\ufeff", "the file is empty"),  # a byte-order mark alone is no line
])
def test_a_file_of_blank_lines_is_not_called_empty(name, text, said, tmp_path, capsys):
    data = tmp_path / name
    data.write_text(text, encoding="utf-8")
    assert main(["data", "--data", str(data)]) == 2
    assert _one_line_error(capsys.readouterr().err) == f"error: {data}: no data rows ({said})"


def test_rows_past_the_end_of_the_file_are_refused(tmp_path, capsys):
    data = _write_jsonl(tmp_path / "pairs.jsonl", [_row(pair_id=f"p{i}") for i in range(3)])
    assert main(["data", "--data", str(data), "--rows", "10:"]) == 2
    assert _one_line_error(capsys.readouterr().err) == f"error: {data}: no data rows in rows 10: (the file has 3)"


def test_an_unterminated_string_is_worded_once(tmp_path, capsys):
    """json's message "Unterminated string starting at" already ends in "at"."""
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"gold_label": "entailment", "pairID": "p0", "sentence1_binary_parse": "( a b')  # no newline
    assert main(["data", "--data", str(data)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.endswith("line 1: invalid JSON (Unterminated string starting at column 72)"), line


# --------------------------------------------------------------------------
# progress while loading
# --------------------------------------------------------------------------


def test_loading_a_large_file_shows_progress_before_it_ends(tmp_path):
    """bench data on 50,000 rows, stdout and stderr on one terminal: the reading stage's bar (rows, then
    rows/s) comes before the first line of the command's results. The terminal keeps the order of the writes,
    so the test reads events, not a clock."""
    import pty

    line = json.dumps(_row(premise="( ( A man ) ( is ( sleeping ( on ( a bench ) ) ) ) )")) + "\n"
    data = tmp_path / "big.jsonl"
    data.write_text(line * 50_000)
    master, slave = pty.openpty()
    seen = b""
    try:
        with started([sys.executable, "-m", "bench", "data", "--data", str(data)], cwd=ROOT,
                     env={**_env(), "PYTHONUNBUFFERED": "1"}, stdout=slave, stderr=slave) as proc:
            os.close(slave)
            while True:  # drain the terminal until no process holds it
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the command closed it
                    break
                if not chunk:
                    break
                seen += chunk
            assert proc.wait() == 0, seen.decode(errors="replace")
    finally:
        os.close(master)
    results = seen.index(b"rows read")  # a line of the results
    assert b"[read]" in seen[:results] and b"rows" in seen[:results], seen.decode(errors="replace")
    assert b"rows/s" in seen[:results] and b"50,000" in seen[results:]


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_stage_off_a_terminal_is_silent_when_quick_and_counts_when_slow(monkeypatch):
    """Plain lines (stderr not a terminal): none for a stage done within the
    delay; past it, a line with the count and the rate, then one at the end."""
    import io

    from bench import progress as progress_module

    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", clock)
    quick = io.StringIO()
    with progress_module.stage("read", stream=quick) as progress:
        clock.now += 1.0
        progress.update(1000)
    assert quick.getvalue() == ""

    slow = io.StringIO()
    with progress_module.stage("read", stream=slow) as progress:
        clock.now += 1.0
        progress.update(1000)
        assert slow.getvalue() == ""
        clock.now += 1.5
        progress.update(1000)
        clock.now += 1.0
        progress.update(500)
    lines = slow.getvalue().splitlines()
    assert lines == ["[read] rows 2,000, 800 rows/s", "[read] rows 2,500, 714 rows/s, done in 4 s"]


# --------------------------------------------------------------------------
# exit codes (docs/spec.md §5, "Exit codes")
# --------------------------------------------------------------------------


def test_scale_says_in_one_line_that_a_training_run_failed(tmp_path, capsys):
    """A child bench train that fails is the work failing: one line, exit 1."""
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    code = main(["scale", "--out", str(tmp_path / "scale"), "--frameworks", "pytorch", "--replicas", "1",
                 "--rounds", "1", "--steps", "2", "--warmup", "1", "--size", "small", "--data", str(data)])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("round ")]
    assert code == 1 and len(lines) == 1, err
    assert lines[0] == f"error: bench train --framework pytorch --replicas 1 failed: error: {data}: no data rows " \
                       "(the file is empty)"


def test_the_exit_code_convention_is_written_where_the_code_cites_it():
    spec = (ROOT / "docs" / "spec.md").read_text()
    section = spec.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    for code, meaning in (("0", "done"), ("1", "the work failed"), ("2", "bad input or usage"), ("130", "interrupted")):
        assert f"| {code} | {meaning} |" in section


# --------------------------------------------------------------------------
# any bad row: one line, exit 2, nothing half-written
# --------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

GOOD = _row()
REQUIRED = ("gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "pairID")
PARSE_FIELDS = ("sentence1_binary_parse", "sentence2_binary_parse")


def _cut_json(cut: int) -> str:
    """A good row's JSON cut short (never at a point where it still parses)."""
    text = json.dumps(GOOD)
    return text[: max(1, min(cut, len(text) - 1))]


BAD_LINES = st.one_of(
    st.integers(1, 200).map(_cut_json),  # bad JSON: a line cut short
    st.sampled_from(["nope", "{", "[1, 2", '{"gold_label": "entailment",}', "{'single': 'quotes'}"]),
    st.sampled_from(REQUIRED).map(lambda name: json.dumps({k: v for k, v in GOOD.items() if k != name})),
    st.tuples(st.sampled_from(REQUIRED), st.sampled_from([None, 3, [], {}, True])).map(
        lambda f: json.dumps({**GOOD, f[0]: f[1]})),  # a field of the wrong type
    st.sampled_from(["contradicts", "", "ENTAILMENT"]).map(lambda label: json.dumps({**GOOD, "gold_label": label})),
    st.tuples(st.sampled_from(PARSE_FIELDS), st.sampled_from(["( a b", "a b )", "( )", "", "   ", ") (", "( ( a ) b"])
              ).map(lambda f: json.dumps({**GOOD, f[0]: f[1]})),  # a bad parse string
    st.tuples(st.sampled_from(PARSE_FIELDS), st.integers(1000, 6000)).map(
        lambda f: json.dumps({**GOOD, f[0]: "( " * f[1] + "word"})),  # a huge parse never closed
    st.integers(10_000, 100_000).map(lambda n: "[" * n + "]" * n),  # JSON nested past the recursion limit
    st.just(json.dumps([GOOD])),  # JSON, but not an object
)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(before=st.integers(0, 3), after=st.integers(0, 2), bad=BAD_LINES,
       command=st.sampled_from(["data", "encode", "train"]))
def test_a_bad_row_anywhere_is_one_error_line_and_exit_2_with_nothing_written(model_file, before, after, bad,
                                                                              command):
    import contextlib
    import io
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        data = folder / "pairs.jsonl"
        good = [json.dumps(_row(pair_id=f"p{i}")) for i in range(before + after)]
        data.write_text("\n".join(good[:before] + [bad] + good[before:]) + "\n")
        out = folder / "out"
        out.mkdir()
        argv = {"data": ["data", "--data", str(data), "--out", str(out / "stats.json")],
                "encode": ["encode", "--framework", "reference", "--params", str(model_file), "--data", str(data),
                           "--out", str(out / "enc.npz")],
                "train": ["train", "--framework", "reference", "--size", "small", "--data", str(data), "--steps", "1",
                          "--dev", "none", "--out", str(out / "run")]}[command]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        lines = err.getvalue().strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {data}, line {before + 1}: "), \
            err.getvalue()
        assert list(out.iterdir()) == []


def test_a_5000_word_tree_goes_to_a_parse_string_and_back():
    """to_bracket writes trees (the figures, the tests' write_jsonl) and parse
    reads them: a sentence as deep as its length must not exhaust Python's
    recursion either."""
    from shared.transitions import build_tree, parse, plain_transitions, to_bracket

    words = tuple(f"w{i}" for i in range(5000))
    for shape in ("left", "right", "balanced"):
        transitions = tuple(plain_transitions(len(words), shape))
        sentence = parse(to_bracket(build_tree(words, transitions)))
        assert (sentence.tokens, sentence.transitions) == (words, transitions)
    assert to_bracket((("a", "b"), "c")) == "( ( a b ) c )" and to_bracket("a") == "a"
