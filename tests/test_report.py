"""``bench report`` and ``bench compare`` from records: the tables, the ratios (round by round, over another
implementation), the targets graded once each, the breakdown of a step, the marks of a busy machine, and
the report without matplotlib. The report of a real ``--quick`` run is in test_run.py."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from bench.compare import compare, format_compare
from bench.report import format_load, format_matrix, format_ratios, render_markdown
from bench.run.measurement import Measurement
from bench.report import write_report
from bench.run.measurement import is_busy, round_ratios
from bench.run.targets import format_targets, targets
from bench.cli import main


def _record(impl, rounds, **extra):
    record = {"implementation": impl, "framework": impl.split("-")[0], "device": "cpu", "mode": "infer",
              "transitions": "gold", "batch_size": 1, "run_id": "r1", "round_pairs_per_s": rounds,
              "pairs_per_s": float(np.mean(rounds)), "data": "snli-dev-sample", "compile_s": 0.0, "traces": 0,
              "warmup_shapes": 1, "max_abs_err_encoding": 1e-7, "max_abs_err_logits": 1e-8,
              "useful_flops_per_s": 1.0, "device_peak_flops_per_s": 4.0, "matmul_peak_flops_per_s": 4.0}
    record.update(extra)
    return Measurement.from_dict(record)


# What render_markdown and plot read beside _record's figures.
REPORTED = {"framework_version": "1.0", "device_name": "a CPU", "dtype": "float32", "git_commit": "abc",
            "timestamp": "now", "step_s_median": 0.01, "step_s_p10": 0.01, "step_s_p90": 0.01, "peak_mem_bytes": 1,
            "first_call_s": 0.5}


def test_report_marks_the_rounds_of_a_busy_machine():
    """A round is busy when its 1-minute load average, less the run's own
    median CPU share, is above one core (on 2 cores); a per-round ratio is
    busy where either side's round was."""
    assert is_busy(2.01, 2, own=1.0) and not is_busy(2.0, 2, own=1.0) and is_busy(1.1, 2)
    base = _record("pytorch", [100.0, 100.0, 100.0], round_load=[1.0, 3.0, 1.0], round_cpu_share=[1.0, 0.5, 1.0],
                   cpu_count=2, **REPORTED)
    fast = _record("jax", [310.0, 300.0, 320.0], round_load=[1.0, 1.5, 2.5], round_cpu_share=[1.9, 1.8, 1.1],
                   cpu_count=2, **REPORTED)
    (row,) = round_ratios([base, fast])
    assert row["busy"] == [False, True, True]
    assert "| busy rounds |" in format_ratios([base, fast]) and "| 3 | **2 of 3** |" in format_ratios([base, fast])
    load = format_load([base, fast])
    assert load.startswith("Load: 2 of 6 timed rounds ran on a busy machine")
    assert "| jax | 1.00 1.50 **2.50** | 1.90 1.80 1.10 | 1 of 3 |" in load
    assert "## Load" in render_markdown([base, fast], ["x"])
    (speed,) = [t for t in targets([base, fast]) if t["target"].startswith("best static") and t["met"] is not None]
    assert speed["measured"] == "3.10x (IQR 3.05-3.15, 3 rounds, 2 on a busy machine)"
    # Runs from before the load was recorded render as they did: no column, no section.
    old = [_record("pytorch", [100.0, 100.0], **REPORTED), _record("jax", [200.0, 200.0], **REPORTED)]
    assert "busy" not in format_ratios(old) and "## Load" not in render_markdown(old, ["x"])


def test_report_is_written_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    records = [_record("pytorch", [100.0, 100.0], **REPORTED), _record("jax", [200.0, 200.0], **REPORTED)]
    markdown, written = write_report(records, ["x"], tmp_path)
    assert written == [tmp_path / "report.md"] and (tmp_path / "report.md").read_text() == markdown
    assert "## Ratios" in markdown and ".png" not in markdown
    err = capsys.readouterr().err
    assert "matplotlib is not installed" in err and len(err.strip().splitlines()) == 1


def test_report_takes_ratios_over_another_implementation(tmp_path, capsys):
    """``--over IMPL``: the ratios over IMPL as well, round by round; an IMPL
    the results do not hold is refused in one line."""
    records = [_record("pytorch", [100.0, 100.0], **REPORTED), _record("jax", [200.0, 220.0], **REPORTED),
               _record("jax-padded", [100.0, 110.0], **REPORTED)]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    assert main(["report", str(tmp_path), "--over", "jax-padded", "--no-plots"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "Speed over pytorch" in text and "Speed over jax-padded" in text
    assert "| cpu | infer | gold | 1 | jax | 2.00x |" in text.split("Speed over jax-padded")[1]
    assert f"python -m bench report {tmp_path} --over jax-padded" in text
    assert main(["report", str(tmp_path), "--over", "dynet", "--no-plots"]) == 2
    assert "--over dynet: not measured in these results" in capsys.readouterr().err


def test_ratios_are_taken_round_by_round():
    """A load spike in round 2 slows both implementations: the per-round ratio
    stays 2, where the ratio of the overall means would not."""
    base = _record("pytorch", [100.0, 10.0, 100.0])
    fast = _record("jax", [200.0, 20.0, 200.0])
    (row,) = round_ratios([base, fast])
    assert (row["median"], row["min"], row["max"], row["rounds"]) == (2.0, 2.0, 2.0, 3)
    other_run = _record("jax", [150.0, 150.0, 150.0], run_id="r2")
    (row,) = round_ratios([base, other_run])
    assert row["rounds"] == 0 and row["median"] == pytest.approx(150.0 / 70.0)  # not interleaved: overall means


def test_compare_says_which_ratios_held_between_two_runs(tmp_path, capsys):
    """The second run's median per-round ratio, inside or outside the first
    run's min-max; a measurement of one run only is listed, not counted."""
    first = [_record("pytorch", [100.0, 100.0, 100.0]), _record("jax", [180.0, 200.0, 220.0]),
             _record("pytorch", [100.0, 100.0], batch_size=128), _record("jax", [90.0, 95.0], batch_size=128)]
    second = [_record("pytorch", [50.0, 50.0, 50.0], run_id="r2"),  # a slower machine, the same ratio
              _record("jax", [100.0, 95.0, 105.0], run_id="r2"),
              _record("pytorch", [100.0, 100.0], batch_size=128, run_id="r2"),
              _record("jax", [120.0, 130.0], batch_size=128, run_id="r2"),  # 1.25x: outside 0.90-0.95
              _record("pytorch", [100.0], batch_size=32, run_id="r2"), _record("jax", [80.0], batch_size=32, run_id="r2")]
    result = compare(first, second)
    held = {row["key"][3]: row["inside"] for row in result["rows"]}
    assert held == {1: True, 128: False, 32: None}
    assert (result["inside"], result["compared"]) == (1, 2)
    text = format_compare(result)
    assert "1 of 2 medians" in text and "not measured" in text and "**no**" in text

    for name, records in (("a", first), ("b", second)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "1 of 2 medians of the second run" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2


def test_targets_say_pass_or_miss_from_the_records():
    records = [_record("pytorch", [100.0, 100.0, 100.0]), _record("jax", [310.0, 290.0, 305.0]),
               _record("pytorch", [100.0, 100.0], batch_size=128),
               _record("tensorflow-xla", [140.0, 145.0], batch_size=128),
               _record("jax", [100.0, 100.0], mode="train", compile_s=8.0, warmup_shapes=4,
                       cached_compile={"compile_s": 2.4, "shapes": 4, "cache_hits": 4, "cache_misses": 0})]
    rows = {row["target"].split(" (")[0]: row for row in targets(records)}
    assert rows["best static / pytorch, infer batch 1"]["met"] is True  # median 3.05x against 3x
    assert rows["best static / pytorch, infer batch 1"]["measured"].startswith("3.05x")
    assert rows["best static / pytorch, infer batch 128"]["met"] is False  # median 1.43x against 2x
    assert rows["jax train compile per shape, cold, batch 1"]["met"] is True  # 2 s per shape
    assert rows["jax train compile per shape, persistent cache, batch 1"]["met"] is False  # 0.6 s per shape
    # Records without the limit are not graded on it: its goals are printed, not measured.
    limit_rows = [row for name, row in rows.items() if name.startswith("best share of the limit")]
    assert len(limit_rows) == 2 and all(row["met"] is None and row["measured"] == "not measured" for row in limit_rows)
    assert "| best share of the limit, infer batch 128 | >= 70% of the limit | not measured | - |" in \
        format_targets(records)  # every report prints every goal


def test_one_set_of_goals_each_graded_once():
    """The limit's goals (best implementation >= 70 % of it in inference, >= 50 % in training, batch 128, and the
    limit's own FLOP/s >= 70 % of the run's best dense peak), the best static's over the baseline (>= 3x at batch 1
    and 2x at 128 in inference, 1.5x in training at 128), computed over useful FLOPs for the levels: one row each,
    whichever implementation it is; a MISS says where the time of the records behind it went."""
    graph = {"levels": 30.0, "computed_over_useful": 1.1}  # a record of before the breakdown: the schedule's figure
    limit = {"limit_pairs_per_s": 400.0, "limit_matmul": "numpy", "limit_kernel": "openblas SkylakeX, 2 threads",
             "limit_flops_per_s": 3.0, "device_peak_flops_per_s": 4.0, "device_peak_implementation": "jax"}
    parts = {"useful_s": 0.3, "computed_s": 0.5, "step_s": 1.0, "useful_flops": 10, "computed_flops": 13}
    records = [_record("pytorch", [100.0, 100.0, 100.0], batch_size=128, fraction_of_limit=0.25, **limit),
               _record("jax-levels", [210.0, 190.0, 230.0], batch_size=128, graph_per_batch=graph,
                       fraction_of_limit=0.71, **limit),
               _record("jax", [150.0, 150.0, 150.0], batch_size=128, fraction_of_limit=0.37, **limit),
               _record("pytorch", [10.0, 10.0], batch_size=128, mode="train", fraction_of_limit=0.2,
                       **{**limit, "limit_flops_per_s": 2.0}),  # the limit of a measurement is every record's
               _record("tensorflow-levels", [14.0, 15.0], batch_size=128, mode="train", fraction_of_limit=0.3,
                       graph_per_batch=graph, **{**limit, "limit_flops_per_s": 2.0}, **parts)]
    rows = {row["target"].split(" (")[0]: row for row in targets(records)}
    assert rows["best share of the limit, infer batch 128"]["measured"] == "71.0%"
    assert rows["best share of the limit, infer batch 128"]["met"] is True
    assert "jax-levels" in next(row["target"] for row in targets(records) if "limit, infer" in row["target"])
    assert rows["best share of the limit, train batch 128"]["met"] is False  # 30 % against 50 %
    assert rows["best share of the limit, train batch 128"]["why"] == (
        "tensorflow-levels: useful 30%, waste 20%, overhead 50% of 1,000.0 ms")
    assert rows["best share of the limit, infer batch 128"]["why"] == ""  # a PASS needs no reason
    peak = "the limit's FLOP/s over the run's best dense peak"
    assert rows[f"{peak}, infer batch 128"]["measured"].startswith("75.0% (0 of 0 GFLOP/s, jax)")
    assert "openblas SkylakeX" in next(row["target"] for row in targets(records) if peak + ", infer" in row["target"])
    assert rows[f"{peak}, infer batch 128"]["met"] is True and rows[f"{peak}, train batch 128"]["met"] is False
    assert rows["best static / pytorch, infer batch 128"]["met"] is True  # jax-levels, median 2.1x against 2x
    assert "30 levels a batch" in rows["best static / pytorch, infer batch 128"]["measured"]
    assert rows["best static / pytorch, train batch 128"]["met"] is False  # median 1.45x against 1.5x
    assert rows["jax-levels computed / useful FLOPs, infer batch 128"]["measured"].startswith("1.10x")
    assert rows["tensorflow-levels computed / useful FLOPs, train batch 128"]["measured"].startswith("1.30x")
    assert rows["tensorflow-levels computed / useful FLOPs, train batch 128"]["met"] is False
    graded = [row["target"] for row in targets(records)]
    assert len(graded) == len(set(graded)) and not any("jax-levels /" in t for t in graded)


def test_the_breakdown_splits_the_step_and_keeps_a_negative_overhead(tmp_path):
    """useful + waste + slow BLAS + overhead = the step; a compiled program faster than its own products timed back
    to back keeps its negative overhead, and the report marks it."""
    from bench.report import format_breakdown
    from bench.run.measurement import breakdown

    limit = {"limit_matmul": "numpy", "limit_kernel": "openblas SkylakeX, 2 threads", "limit_flops_per_s": 3e9,
             "limit_sample": {"batches": 6, "of": 21, "useful_flops_per_s": [2e9, 3e9]}, "useful_flops": 10}
    eager = _record("pytorch", [100.0], useful_s=0.2, computed_s=0.21, own_computed_s=0.4, step_s=1.0,
                    computed_flops=11, matmul_peak_flops_per_s=218e9, phase_s_per_batch={"build": 0.5, "evaluate": 0.3},
                    graph_per_batch={"nodes": 120}, **limit, **REPORTED)
    fast = _record("jax", [500.0], useful_s=0.2, computed_s=0.35, step_s=0.3, computed_flops=17, **limit, **REPORTED)
    assert breakdown(eager) == pytest.approx({"useful": 0.2, "waste": 0.01, "slow_blas": 0.19, "overhead": 0.6})
    assert breakdown(fast) == pytest.approx({"useful": 0.2, "waste": 0.15, "slow_blas": 0.0, "overhead": -0.05})
    assert breakdown(_record("dynet", [1.0])) is None  # a record of before the breakdown
    text = format_breakdown([eager, fast])
    assert ("- cpu: numpy (openblas SkylakeX, 2 threads), 3 GFLOP/s at infer gold batch 1, timed on 6 of 21 timed "
            "batches (2-3 GFLOP/s)") in text
    # Its framework's dense peak, and the phases and graph of an implementation that reports them.
    assert ("| pytorch | 1,000.00 | 20 % | 1 % | 19 % | 60 % | 1.10x | 218 | build 500.0, evaluate 300.0; "
            "nodes 120.0 |") in text
    assert "| 300.00 | 67 % | 50 % | - | **-17 %** (below its products) | 1.70x |" in text
    assert "## Where the time goes" in render_markdown([eager, fast], ["x"])


def test_matrix_has_one_table_per_mode_measured():
    """Variants measured for training only get a training matrix (not "no
    variant was measured"); inference and training together give both, in
    that order, each with its own figures."""
    train = [_record("pytorch", [15.0], mode="train"), _record("jax-vmap", [25.0], mode="train", compile_s=12.0)]
    text = format_matrix(train)
    assert text.startswith("Training pairs/s") and "Inference" not in text
    assert "**jax-vmap**: gold 25 (compile 12.0 s)" in text
    assert "| per-sentence code + vmap (`vmap.py`) |" in text  # each family's row names its module
    infer = [_record("pytorch", [88.0]), _record("pytorch-masked", [33.0], batch_size=128)]
    both = format_matrix(infer + train)
    assert both.index("Inference pairs/s") < both.index("Training pairs/s")
    assert "**pytorch-masked**: gold 33 (compile 0.0 s)" in both.split("Training")[0]
    assert "no variant was measured" in format_matrix([_record("pytorch", [1.0]), _record("jax", [2.0])])
