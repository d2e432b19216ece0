"""The lessons (lessons/*.py) run as a learner runs them, and each agrees with
the float64 reference: a lesson is short framework code without the suite's
contract machinery, so this is the only thing that keeps it right."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from lessons.setup import TOLERANCE

LESSONS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "lessons").glob("*.py")
                 if p.stem not in ("setup", "today") and not p.stem.startswith("_"))  # today: probes, not a lesson
MAX_LINES = 100  # one SPINN step and its loop, read whole in a few minutes


def test_every_paradigm_has_a_lesson():
    assert {name.split("_")[0] for name in LESSONS} == {"pytorch", "tensorflow", "jax", "dynet"}


@pytest.mark.parametrize("name", LESSONS)
def test_the_lesson_runs_and_agrees_with_the_reference(name, capsys):
    lesson = importlib.import_module(f"lessons.{name}")
    err = lesson.main()
    out = capsys.readouterr().out
    assert err <= TOLERANCE and "agrees" in out, out
    source = Path(lesson.__file__).read_text().splitlines()
    assert len(source) <= MAX_LINES, f"{name}: {len(source)} lines"
