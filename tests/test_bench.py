"""The benchmark harness: FLOP counting, records, ratios and targets, report,
interruption, and a ``--quick`` run of every implementation in interleaved rounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from bench.compare import compare, format_compare
from bench.run.limit import TRAIN_FACTOR, batch_flops, flops, products
from bench.run.agreement import pairwise_agreement
from bench.run import driver, limit, plan
from bench.report import format_load, format_matrix, format_ratios, render_markdown
from bench.run.measurement import Measurement
from bench.report import write_report
from bench.run.measurement import is_busy, round_ratios
from bench.run.targets import format_targets, targets
from bench.cli import build_parser, main
from bench import frameworks
from bench.frameworks import IMPLEMENTATIONS, OPT_IN
from bench.records import read_records
from shared.params import ModelConfig
from shared.transitions import parse

# docs/spec.md §6: the keys other tools read.
SPEC_KEYS = {
    "implementation": str, "framework": str, "framework_version": str, "mode": str, "device": str,
    "device_name": str, "dtype": str, "batch_size": int, "pairs_per_s": float, "step_s_median": float,
    "compile_s": float, "traces": int, "useful_flops_per_s": float, "matmul_peak_flops_per_s": float,
    "peak_mem_bytes": int, "max_abs_err_encoding": float, "max_abs_err_logits": float, "git_commit": str,
    "timestamp": str, "device_peak_flops_per_s": float, "useful_fraction_of_device_peak": float,
    "transitions": str,
}


def test_flops_by_hand_on_a_small_tree():
    config = ModelConfig(vocab_size=10, embed_dim=2, hidden_dim=3, tracker_dim=1, mlp_dim=4, mlp_layers=1)
    s = parse("( a ( b c ) )")  # 3 SHIFT, 2 REDUCE
    transitions = np.array([list(s.transitions) + [0, 0]])  # PAD is not counted
    leaves = 3 * (2 * 2 * 6)  # x[E=2] @ [2, 2H=6]
    tracker = 5 * 2 * (9 * 4 + 1 * 4)  # 5 steps: [3H=9] @ [9, 4D=4] and [D=1] @ [1, 4]
    reduce = 2 * 2 * (2 * 3 * 15 + 1 * 15)  # 2 reduces: two [3] @ [3, 15] and [1] @ [1, 15]
    assert leaves + tracker + reduce == 892  # a sentence's
    classifier = 2 * 12 * 4 + 2 * 4 * 3  # one pair: [4H=12] @ [12, M=4] and [4] @ [4, 3]
    tokens = np.ones((1, 3), dtype=np.int32)  # three token slots
    batch = types.SimpleNamespace(premise_transitions=transitions, hypothesis_transitions=transitions, size=1,
                                  premise_tokens=tokens, hypothesis_tokens=tokens)
    assert batch_flops(config, batch, "infer") == 2 * 892 + classifier == 2 * 892 + 120
    assert batch_flops(config, batch, "train") == TRAIN_FACTOR * (2 * 892 + 120)
    no_tracker = config.replace(tracker_dim=0)
    assert batch_flops(no_tracker, batch, "infer") == 2 * (leaves + 2 * 2 * (2 * 3 * 15)) + 120
    with pytest.raises(ValueError, match="unknown mode 'eval'"):
        batch_flops(config, batch, "eval")
    # The masked loop: 5 steps (the PADs after the last real one are not run), and at each of them both
    # sentences run the tracker and a composition; all 7 steps in a loop over the whole arrays.
    per_step = 2 * (9 * 4 + 1 * 4) + 2 * (2 * 3 * 15 + 1 * 15)
    assert flops(config, products(config, batch, "loop"), "infer") == 2 * (leaves + 5 * per_step) + 120
    assert flops(config, products(config, batch, "arrays"), "infer") == 2 * (leaves + 7 * per_step) + 120
    short = np.array([[1, 0, 0, 0, 0, 0, 0]])  # one word: one step, no composition used
    mixed = types.SimpleNamespace(premise_transitions=transitions, hypothesis_transitions=short, size=1,
                                  premise_tokens=tokens, hypothesis_tokens=tokens)
    # Both sentences' three token slots projected, the padded two of the one-word sentence included.
    assert flops(config, products(config, mixed, "loop"), "infer") == 2 * leaves + 2 * 5 * per_step + 120


def test_read_records_ignores_a_line_cut_by_interruption(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"implementation": "a"}) + "\n" + '{"implementation": "b", "pairs_per')
    assert read_records(path) == [{"implementation": "a"}]


def test_pairwise_agreement(tmp_path):
    (tmp_path / "agreement").mkdir()
    base = {"premise": np.zeros((2, 3)), "hypothesis": np.zeros((2, 3)), "logits": np.zeros((2, 3))}
    np.savez(tmp_path / "agreement" / "x.npz", **base)
    np.savez(tmp_path / "agreement" / "y.npz", **{**base, "logits": np.full((2, 3), 0.5)})
    table = pairwise_agreement(tmp_path, ["x", "y", "absent"])
    assert table == {"x vs y": {"max_abs_diff_encoding": 0.0, "max_abs_diff_logits": 0.5}}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One ``run --quick`` of every implementation, as CI's smoke test."""
    out = tmp_path_factory.mktemp("bench")
    # One batch size and one bucket (one shape to compile per program) keep it short.
    code = main(["run", "--quick", "--batch-sizes", "4", "--buckets", "64", "--out", str(out)])
    return code, out


def test_quick_run_measures_every_implementation_in_rounds(quick_run):
    code, out = quick_run
    assert code == 0
    records = read_records(out / "results.jsonl")
    measured = {(r["implementation"], r["mode"], r["batch_size"], r["transitions"]) for r in records}
    default = [impl for impl in IMPLEMENTATIONS if impl not in OPT_IN]
    expected = {(impl, mode, 4, "gold") for impl in default for mode in ("infer", "train")}
    expected |= {(impl, "infer", 4, "predicted") for impl in default}
    assert measured == expected
    peaks = {r["matmul_peak_flops_per_s"] for r in records}
    for r in records:
        for key, kind in SPEC_KEYS.items():
            assert isinstance(r[key], kind), (r["implementation"], key, r[key])
        assert r["pairs_per_s"] > 0 and r["useful_flops_per_s"] > 0 and r["peak_mem_bytes"] > 0
        assert r["agreement_ok"] is True
        assert r["device"] == "cpu" and r["dtype"] == "float32"
        assert r["buckets"] == [64] and r["warmup_shapes"] == 1
        # Interleaved: three rounds, every implementation in each, the same batches per round.
        assert r["rounds"] == 3 and len(r["round_pairs_per_s"]) == 3 and len(r["round_step_s"]) == 3
        assert sorted(r["interleaved_with"]) == sorted(default)
        assert r["timed_batches"] == 3 * r["batches_per_round"]
        # One device peak: the best of the frameworks' own peaks, the same in every record.
        assert r["device_peak_flops_per_s"] == max(peaks) >= r["matmul_peak_flops_per_s"]
        assert r["useful_fraction_of_device_peak"] == pytest.approx(
            r["useful_flops_per_s"] / r["device_peak_flops_per_s"])
        assert 0.0 <= r["parse_agreement"] <= 1.0  # the float32 predicted parses against the reference's
    same_key = {}
    for r in records:
        same_key.setdefault((r["mode"], r["batch_size"], r["transitions"]), set()).add(r["batches_per_round"])
    assert all(len(counts) == 1 for counts in same_key.values())
    by_impl = {(r["implementation"], r["mode"], r["transitions"]): r for r in records}
    assert by_impl["pytorch", "infer", "gold"]["compile_s"] == 0 and by_impl["pytorch", "infer", "gold"]["traces"] == 0
    assert by_impl["jax", "infer", "gold"]["traces"] >= 1
    assert all(r["traces"] == 1 for r in records if r["implementation"] == "tensorflow")
    # Define-by-run reads each decision back to Python; the static graphs keep it on the device.
    assert by_impl["pytorch", "infer", "predicted"]["host_syncs_per_batch"] > 0
    assert "host_syncs_per_batch" not in by_impl["pytorch", "infer", "gold"]
    assert "host_syncs_per_batch" not in by_impl["jax", "infer", "predicted"]
    # The JAX train step compiled again from the run's private persistent cache.
    cached = by_impl["jax", "train", "gold"]["cached_compile"]
    assert cached["cache_hits"] >= 1 and cached["cache_misses"] == 0
    assert (out / "agreement.json").exists()
    # Timed on sentence batches; the PAD share is that of the slots each implementation computes.
    for r in records:
        assert r["batching"] == "sentences"
        assert 0.0 <= r["padding_waste_loop"] < r["padding_waste_arrays"] < 1.0
        impl = frameworks.implementation(r["implementation"])
        padding = (impl.train_padding or impl.padding) if r["mode"] == "train" else impl.padding
        expected = {"arrays": r["padding_waste_arrays"], "loop": r["padding_waste_loop"], "none": 0.0}[padding]
        assert r["padding_waste"] == expected, r["implementation"]
    assert {frameworks.implementation(r["implementation"]).padding for r in records} >= {"loop", "none"}
    # The load of every round: the machine's load average and the CPU share the worker got.
    for r in records:
        assert r["cpu_count"] == os.cpu_count()
        assert len(r["round_load"]) == len(r["round_cpu_share"]) == 3
        assert all(load >= 0 for load in r["round_load"]) and all(share > 0 for share in r["round_cpu_share"])
    # Where the time goes: the useful products (the limit), what the algorithm computes, and the step, per timed
    # batch; the limit's routine and the kernel its BLAS ran; the framework's own routine where it has one.
    for r in records:
        assert 0 < r["useful_s"] <= r["computed_s"] and r["useful_flops"] <= r["computed_flops"]
        assert r["step_s"] == pytest.approx(r["timed_pairs"] / r["pairs_per_s"] / r["timed_batches"])
        assert r["fraction_of_limit"] == pytest.approx(r["useful_s"] / r["step_s"])
        assert r["limit_flops_per_s"] == pytest.approx(r["useful_flops"] / (r["useful_s"] * r["timed_batches"]))
        assert r["limit_matmul"] in ("numpy", "pytorch") and "threads" in r["limit_kernel"]
        sample, rates = r["limit_sample"], r["limit_sample"]["useful_flops_per_s"]
        assert sample["batches"] == min(limit.SAMPLE, r["timed_batches"]) and sample["of"] == r["timed_batches"]
        assert 0 < rates[0] <= rates[1]
        # PyTorch's own routine times its products too (MKL); the others have none but the limit's process.
        assert ("own_computed_s" in r) == (r["framework"] == "pytorch")
        kind = r["computed_kind"]
        assert kind == limit.computed_kind(r["implementation"], r["mode"])  # asked of the worker, the registry's
        if kind == "useful":  # DyNet: the useful products, exactly
            assert r["computed_flops"] == r["useful_flops"] and r["computed_s"] == r["useful_s"]
        if kind in ("loop", "arrays"):  # every sentence's tracker and composition at every step the loop runs
            assert r["computed_flops"] > r["useful_flops"]
    assert {r["computed_kind"] for r in records} >= {"useful", "lists", "loop"}
    # The limit's NumPy ran the kernel its BLAS chooses for this CPU, whatever the environment pins.
    free = {key: value for key, value in os.environ.items() if key not in driver.KERNEL_PINS}
    chosen = subprocess.run([sys.executable, "-c", "import numpy, threadpoolctl; print(*(i.get('architecture') for i "
                             "in threadpoolctl.threadpool_info() if i['user_api'] == 'blas'))"],
                            env=free, capture_output=True, text=True, check=True).stdout.strip()
    assert all(f" {chosen}, " in r["limit_kernel"] for r in records if r["limit_matmul"] == "numpy")


def test_report_renders_table_ratios_targets_and_plots(quick_run, tmp_path, capsys):
    _, out = quick_run
    assert main(["report", str(out), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    for impl in IMPLEMENTATIONS:
        assert (f"| {impl} |" in text) == (impl not in OPT_IN)
    assert "## Ratios" in text and "| cpu | infer | predicted | 4 | jax |" in text
    assert "## Targets" in text and "| tensorflow traces, infer gold batch 4" in text
    assert "| PASS |" in text or "| MISS |" in text
    assert "## Load" in text and "| busy rounds |" in text  # the run recorded its load
    for name in ("throughput.png", "ratios.png", "compile.png", "agreement.png"):
        assert (tmp_path / name).stat().st_size > 1000
        assert (out / name).stat().st_size > 1000  # the run wrote them too
    assert (out / "report.md").read_text() == text  # what `bench run` wrote is what `bench report` writes


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


def _no_workers(*args, **kwargs):
    raise AssertionError("a worker was started")


@pytest.mark.parametrize("arguments, message", [
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--rounds", "-2"], "--rounds must be at least 1, got -2"),
    (["--round-time", "0"], "--round-time must be a positive number of seconds"),
    (["--timeout", "-1"], "--timeout must be a positive number of seconds"),
    (["--num-pairs", "0"], "--num-pairs must be at least 1, got 0"),
    (["--batch-sizes", "65"], "batch size 65 is larger than the 64 pairs of snli-dev-sample (infer)"),
    (["--num-pairs", "3", "--batch-sizes", "4"], "batch size 4 is larger than the 3 pairs"),
    (["--batch-sizes", "60", "--buckets", "8,16,32,64", "--batching", "pairs"], "no length bucket of the 64 pairs"),
    (["--frameworks", ","], "nothing to measure: no implementation left"),
    (["--modes", ","], "nothing to measure: --modes and --transitions need at least one value"),
], ids=["rounds-0", "rounds-negative", "round-time-0", "timeout", "num-pairs-0", "batch-over-data",
        "num-pairs-under-batch", "batch-over-buckets", "no-implementation", "no-mode"])
def test_arguments_that_would_measure_nothing_are_refused_before_any_worker(arguments, message, tmp_path,
                                                                           monkeypatch, capsys):
    monkeypatch.setattr(driver, "WorkerPool", _no_workers)
    out = tmp_path / "run"
    assert main(["run", "--quick", *arguments, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # refused before the output folder was even locked


def test_an_explicit_rounds_value_wins_over_quick():
    parse = build_parser().parse_args
    assert plan.plan_run(parse(["run", "--quick"])).rounds == 3
    assert plan.plan_run(parse(["run", "--quick", "--rounds", "1"])).rounds == 1
    assert plan.plan_run(parse(["run", "--quick", "--round-time", "0.2"])).round_time == 0.2


def test_a_busy_machine_is_said_in_one_line_before_the_workers_start(tmp_path, monkeypatch, capsys):
    def stop(*args, **kwargs):
        raise ValueError("stopped where the workers would start")

    monkeypatch.setattr(driver, "WorkerPool", stop)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    arguments = ["run", "--quick", "--implementations", "pytorch", "--out"]
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 1.0, 1.0))
    assert main(arguments + [str(tmp_path / "busy")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("note: the machine is busy: 1-minute load average 2.50 on 2 cores")
    assert lines[-1] == "error: stopped where the workers would start"
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # one core of other work: not yet busy
    assert main(arguments + [str(tmp_path / "quiet")]) == 2
    assert "note:" not in capsys.readouterr().err


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


def test_resume_completes_without_duplicates(tmp_path):
    out = tmp_path / "run"
    args = ["run", "--quick", "--implementations", "pytorch", "--batch-sizes", "2", "--buckets", "12,64",
            "--out", str(out)]
    assert main(args + ["--modes", "infer"]) == 0
    assert main(args) == 2  # refuses to overwrite existing results
    assert main(args + ["--resume"]) == 0
    records = read_records(out / "results.jsonl")
    assert sorted((r["mode"], r["batch_size"], r["transitions"]) for r in records) == [
        ("infer", 2, "gold"), ("infer", 2, "predicted"), ("train", 2, "gold")]
    assert all(r["buckets"] == [12, 64] for r in records)


def test_compilation_cache_flag_fills_the_cache_of_the_frameworks_that_have_one(tmp_path):
    cache = tmp_path / "cache"
    args = ["run", "--quick", "--implementations", "pytorch,jax", "--modes", "infer", "--transitions", "gold",
            "--batch-sizes", "2", "--buckets", "64",  # one shape: one compilation is enough to fill the cache
            "--out", str(tmp_path / "run"), "--compilation-cache", str(cache)]
    assert main(args) == 0
    assert cache.is_dir() and any(cache.iterdir())
    records = {r["implementation"]: r for r in read_records(tmp_path / "run" / "results.jsonl")}
    assert records["jax"]["compilation_cache"] == str(cache.resolve())
    assert records["pytorch"]["compilation_cache"] is None  # its platform has no persistent cache


def test_sampled_training_step_is_measured(tmp_path):
    """The REINFORCE step (docs/spec.md §7) as a benchmark measurement: the
    uniforms come from each pair's data row, as in training."""
    out = tmp_path / "run"
    assert main(["run", "--quick", "--implementations", "pytorch,jax", "--modes", "train", "--transitions", "sampled",
                 "--batch-sizes", "2", "--buckets", "64", "--out", str(out)]) == 0
    records = read_records(out / "results.jsonl")
    assert {(r["implementation"], r["mode"], r["transitions"]) for r in records} == {
        ("pytorch", "train", "sampled"), ("jax", "train", "sampled")}
    assert all(r["pairs_per_s"] > 0 and r["rounds"] == 3 for r in records)
    assert main(["run", "--quick", "--modes", "infer", "--transitions", "sampled", "--out", str(tmp_path / "x")]) == 2


def test_an_implementation_says_which_pad_slots_it_computes():
    entry = frameworks.Framework("padless", "padless_pkg", "numpy", "test",
                                 (frameworks.Implementation("padless", frameworks.MASKED, padding="sometimes"),))
    with pytest.raises(ValueError, match="unknown padding 'sometimes'"):
        frameworks.register(entry)
    assert "padless" not in frameworks.IMPLEMENTATIONS
