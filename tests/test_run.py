"""``bench run``, the benchmark harness: FLOP counting, records, agreement, the arguments it refuses before any
worker starts, interruption and resuming, and a ``--quick`` run of every implementation in interleaved rounds (and
the report it writes). The report and compare commands on records are in test_report.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from bench.run.limit import TRAIN_FACTOR, batch_flops, flops, products
from bench.run.agreement import pairwise_agreement
from bench.run import driver, limit, plan
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
