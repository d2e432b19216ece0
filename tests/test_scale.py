"""``bench scale``: the data-parallel scaling command end to end on a tiny
model (its figures are the committed run's business, results/cpu-scaling),
and its arguments checked before anything runs."""

from __future__ import annotations

import pytest

from bench.cli import main
from bench.records import read_records
from bench.scale import render


def test_scale_runs_and_reports(tmp_path, capsys):
    """The command end to end with one replica (the two-replica summary of a
    real run is checked in test_train_replicas.py, on its PyTorch job's metrics)."""
    out = tmp_path / "scale"
    argv = ["scale", "--out", str(out), "--frameworks", "pytorch", "--replicas", "1", "--rounds", "1",
            "--steps", "3", "--warmup", "1", "--batch-size", "8", "--size", "small"]
    assert main(argv) == 0
    (record,) = read_records(out / "results.jsonl")
    assert (record["framework"], record["replicas"], record["steps"], len(record["step_s"])) == ("pytorch", 1, 2, 2)
    assert record["pairs_per_s"] > 0 and "straggler_gap_s" not in record  # one replica: nobody waits
    assert not (out / "runs" / "pytorch-k1-r0" / "model.npz").exists()  # weights removed, metrics kept
    assert (out / "runs" / "pytorch-k1-r0" / "metrics.jsonl").exists()
    assert "| pytorch | 1 | " in (out / "report.md").read_text()
    # The same folder again: refused, nothing overwritten; --report-only redraws.
    assert main(argv) == 2
    assert "results.jsonl exists" in capsys.readouterr().err
    assert main(["scale", "--out", str(out), "--report-only"]) == 0
    assert read_records(out / "results.jsonl") == [record]


def test_report_reads_speedup_efficiency_and_waits():
    """render() on two records of one round: the per-step speed-up, efficiency
    and each replica's wait, as computed by hand here."""
    one = {"framework": "f", "replicas": 1, "round": 0, "batch_size": 8, "size": "small", "data": "d", "steps": 2,
           "step_s": [1.0, 2.0], "pairs_per_s": 6.0, "load": 0.5, "cpu_count": 2}
    two = {**one, "replicas": 2, "step_s": [0.5, 2.0], "pairs_per_s": 9.0, "replica_compute_s": [0.3, 0.4],
           "replica_allreduce_wait_s": [0.1, 0.0], "straggler_gap_s": 0.1, "straggler_gap_share": 0.25}
    text = render([one, two])
    # per-step ratios 2.0 and 1.0: median 1.5, efficiency 75 %
    assert "| f | 2 | 9.0 | 1.50 (1.50-1.50)x | 75% | 0.300 / 0.400 | 0.100 / 0.000 | 0.100 s (25%) |" in text


@pytest.mark.parametrize("extra,message", [
    (["--replicas", "2,4"], "start with 1"),
    (["--frameworks", "dynet"], "DyNet has no data-parallel engine"),
    (["--frameworks", "nonesuch"], "unknown framework 'nonesuch'"),
    (["--batch-size", "9"], "does not split into 2 replicas"),
    (["--steps", "3", "--warmup", "3"], "--steps > --warmup"),
], ids=["k1-first", "no-engine", "unknown", "split", "warmup"])
def test_scale_arguments_are_checked_first(tmp_path, capsys, extra, message):
    assert main(["scale", "--out", str(tmp_path / "s")] + extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
