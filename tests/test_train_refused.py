"""A refused ``bench train`` leaves nothing behind and says only why: one
line on stderr, exit 2 (docs/spec.md, "Exit codes"), no new folder, no lock
file, and a folder that held a run exactly as it was. Refusals that the
folder alone decides come before any data is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from tests.helpers import dead_holder

TRAIN = ["train", "--framework", "reference", "--size", "small", "--num-pairs", "16", "--batch-size", "8",
         "--steps", "2", "--quiet"]
DEAD_HOLDER = dead_holder("bench train --out X")


def _error_lines(err: str) -> list[str]:
    """stderr but for the data's one-line load report ("FILE: N rows read, ...")."""
    return [line for line in err.strip().splitlines() if " rows read, " not in line]


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A folder holding a finished run, and a parameter file."""
    root = tmp_path_factory.mktemp("finished")
    assert main([*TRAIN, "--out", str(root / "run")]) == 0
    assert main(["init", "--size", "small", "--out", str(root / "model.npz")]) == 0
    return root


def _used(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run whose lock file still names a process that died holding it."""
    out = tmp_path / "used"
    shutil.copytree(finished / "run", out)
    (out / ".lock").write_text(DEAD_HOLDER)
    return out


def _unlabelled(tmp_path: Path) -> Path:
    row = {"gold_label": "-", "sentence1_binary_parse": "( ( A man ) sleeps )",
           "sentence2_binary_parse": "( ( A person ) sleeps )", "pairID": "p0"}
    path = tmp_path / "unlabelled.jsonl"
    path.write_text("".join(json.dumps(dict(row, pairID=f"p{i}")) + "\n" for i in range(3)))
    return path


def test_resume_in_a_folder_with_no_run_refuses_before_reading_and_creates_nothing(tmp_path, capsys):
    out = tmp_path / "new" / "run"
    code = main([*TRAIN, "--resume", "--data", str(tmp_path / "not-read.jsonl"), "--out", str(out)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --resume: no run to resume in {out} (no run.json)"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra", [[], ["--init", "MODEL"]], ids=["again", "init"])
def test_a_folder_that_holds_a_run_is_refused_before_reading_and_left_as_it_was(extra, finished, tmp_path, capsys):
    """Also when its lock names a dead process: no "taking over" note for a run that does not run."""
    out = _used(finished, tmp_path)
    before = _contents(out)
    argv = [str(finished / "model.npz") if word == "MODEL" else word for word in extra]
    code = main([*TRAIN, *argv, "--data", str(tmp_path / "not-read.jsonl"), "--out", str(out)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {out} already holds a run: add --resume to continue it, or choose another --out "
        "(nothing is overwritten)"]
    assert _contents(out) == before


def test_a_resume_refused_under_the_lock_says_only_why(finished, tmp_path, capsys):
    """Refused once the data are read and the folder locked (other settings):
    the lock's dead holder is not announced as taken over."""
    out = _used(finished, tmp_path)
    code = main([*TRAIN, "--resume", "--seed", "1", "--out", str(out)])
    assert code == 2
    lines = _error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("error: --resume: seed was 0 in the run being resumed"), lines


def test_an_unlabelled_data_file_leaves_no_folder(tmp_path, capsys):
    data = _unlabelled(tmp_path)
    code = main([*TRAIN, "--data", str(data), "--out", str(tmp_path / "run")])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [  # refused as it is read, before the folder is made
        f"error: {data}: no labelled rows (the 3 rows read all have gold label '-')"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unlabelled.jsonl"]


def test_a_run_whose_runner_is_refused_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """No run.json for a run that never started (a device that is not there, say)."""
    from bench.train import trainer

    def no_device(*args, **kwargs):
        raise ValueError("device 'gpu' asked for, but there is none")

    monkeypatch.setattr(trainer.frameworks, "make_runner", no_device)
    code = main([*TRAIN, "--out", str(tmp_path / "run")])
    assert code == 2
    assert _error_lines(capsys.readouterr().err) == ["error: device 'gpu' asked for, but there is none"]
    assert list(tmp_path.iterdir()) == []
