"""``bench scale``: the data-parallel scaling command end to end on a tiny
model (its figures are the committed run's business, results/cpu-scaling),
and its arguments checked before anything runs."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.records import read_records


def test_scale_runs_each_k_and_reports_speedup_and_waits(tmp_path, capsys):
    out = tmp_path / "scale"
    argv = ["scale", "--out", str(out), "--frameworks", "pytorch", "--replicas", "1,2", "--rounds", "1",
            "--steps", "3", "--warmup", "1", "--batch-size", "8", "--size", "small"]
    assert main(argv) == 0
    records = read_records(out / "results.jsonl")
    assert [(r["framework"], r["replicas"]) for r in records] == [("pytorch", 1), ("pytorch", 2)]
    assert all(r["steps"] == 2 and len(r["step_s"]) == 2 and r["pairs_per_s"] > 0 for r in records)
    two = records[1]
    assert len(two["replica_allreduce_wait_s"]) == 2 and len(two["replica_compute_s"]) == 2
    assert 0 <= two["straggler_gap_share"] < 1 and two["straggler_gap_s"] >= 0
    assert not (out / "runs" / "pytorch-k2-r0" / "model.npz").exists()
    assert all(w >= 0 for w in two["replica_allreduce_wait_s"])
    report = (out / "report.md").read_text()
    assert "| pytorch | 2 |" in report and "x |" in report
    # The same folder again: refused, nothing overwritten; --report-only redraws.
    assert main(argv) == 2
    assert "results.jsonl exists" in capsys.readouterr().err
    assert main(["scale", "--out", str(out), "--report-only"]) == 0
    assert json.dumps(read_records(out / "results.jsonl")) == json.dumps(records)


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
