"""Progress (bench/progress.py): an ETA only once the rate behind it rests on
enough work, and no loading step of ``bench data`` without a stage. Time is
a fake clock: nothing here sleeps."""

from __future__ import annotations

import io

import pytest

from bench import progress as progress_module
from bench.cli import main


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", clock)
    return clock


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_stage_after_a_long_setup_shows_no_eta_until_the_rate_is_timed(clock):
    """20 s of sorting before the first batch: the first line says how far
    and how fast so far, but promises no finish; 5 s of batches later it does."""
    out = io.StringIO()
    with progress_module.stage("sentence batches", 100_000, unit="pairs", stream=out) as progress:
        clock.now += 20.0
        progress.update(128)
        clock.now += 1.0
        progress.update(20_000)
        clock.now += 4.0
        progress.update(20_000)
    assert out.getvalue().splitlines()[:2] == [
        "[sentence batches] pairs 128/100,000, 6 pairs/s",  # one update, timed with the setup: no ETA
        "[sentence batches] pairs 40,128/100,000, 8,000 pairs/s ETA 7 s",  # 59,872 left at 8,000/s
    ]


def test_no_eta_from_too_small_a_share_of_the_work(clock):
    """A steady rate, but over less than ETA_MIN_FRACTION of the total: no ETA
    yet; past it, one. Training lines (no delay) follow the same rule."""
    out = io.StringIO()
    progress = progress_module.Progress("pytorch", 1_000_000, unit="step", stream=out, interval=15.0)
    clock.now += 14.0  # a compilation, then the first step
    progress.update(1)
    clock.now += 1.0
    progress.update(1)  # the first line, 1 s after the first step
    for _ in range(3):
        clock.now += 15.0
        progress.update(3_000)  # 200 steps/s: 0.3%, 0.6%, 0.9% of the total
    clock.now += 15.0
    progress.update(3_000)  # 1.2%
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and not any("ETA" in line for line in lines[:4]), lines
    assert lines[4] == "[pytorch] step 12,002/1,000,000 ETA 1 h 22 min"  # 987,998 steps at 200/s


def test_a_finished_stage_says_eta_0s_at_once(clock):
    out = io.StringIO()
    progress = progress_module.Progress("encode reference", 3, unit="pairs", stream=out)
    progress.update(3)
    assert out.getvalue() == "[encode reference] pairs 3/3 ETA 0 s\n"


def test_the_bar_on_a_terminal_follows_the_same_rule(clock):
    progress = progress_module.Progress("read", 1000, unit="rows", stream=_Terminal())
    clock.now += 20.0
    progress.update(10)
    assert "<" not in str(progress)
    clock.now += 6.0
    progress.update(100)  # 100 rows in the 6 s since the first update: 890 left, 53 s
    assert "<00:53" in str(progress)
    progress.close()


def test_bench_data_shows_the_sorting_of_sentences_as_a_stage(monkeypatch, capsys):
    """A full corpus spends seconds sorting its 1.1 million sentences before
    the first sentence batch: that step is a stage of its own."""
    monkeypatch.setattr(progress_module, "STAGE_DELAY_S", 0.0)  # every stage says something, however quick
    assert main(["data", "--data", "sample"]) == 0
    stages = [line.split("]")[0] + "]" for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert "[sorting sentences]" in stages
    assert stages.index("[sorting sentences]") < stages.index("[sentence batches]")


def test_sorting_reports_every_sentence():
    from shared.batching import sentence_order
    from shared.snli import SAMPLE_PATH, read_snli

    pairs, _ = read_snli(SAMPLE_PATH)
    counts = []
    order = sentence_order(pairs, 128, progress=counts.append)
    assert sum(counts) == 2 * len(pairs)
    assert len(order) == 2 * len(pairs) // 256 * 256


def test_one_duration_format():
    """bench/progress.py's duration is the suite's one way to write a duration (progress, bench reproduce's
    stamps, the documents' quotes of them): seconds, minutes and seconds, hours and minutes."""
    assert [progress_module.duration(s) for s in (0.4, 42.4, 296.4, 3600, 4921, float("inf"))] == \
        ["0 s", "42 s", "4 min 56 s", "1 h 0 min", "1 h 22 min", "?"]
