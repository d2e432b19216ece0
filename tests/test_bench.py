"""The benchmark harness: FLOP counting, records, ratios and targets, report,
interruption, and a ``--quick`` run of every implementation in interleaved rounds."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from bench.benchmark.compare import compare, format_compare
from bench.benchmark.flops import TRAIN_FACTOR, batch_flops, classifier_flops, sentence_flops
from bench.benchmark.measure import pairwise_agreement
from bench.benchmark.report import format_matrix, round_ratios, targets
from bench.cli import main
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
    assert sentence_flops(config, transitions) == leaves + tracker + reduce == 892
    assert classifier_flops(config, 2) == 2 * (2 * 12 * 4 + 2 * 4 * 3)
    batch = types.SimpleNamespace(premise_transitions=transitions, hypothesis_transitions=transitions, size=1)
    assert batch_flops(config, batch, "infer") == 2 * 892 + 120
    assert batch_flops(config, batch, "train") == TRAIN_FACTOR * (2 * 892 + 120)
    no_tracker = config.replace(tracker_dim=0)
    assert sentence_flops(no_tracker, transitions) == leaves + 2 * 2 * (2 * 3 * 15)


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


def test_report_renders_table_ratios_targets_and_plots(quick_run, tmp_path, capsys):
    _, out = quick_run
    assert main(["report", str(out), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    for impl in IMPLEMENTATIONS:
        assert (f"| {impl} |" in text) == (impl not in OPT_IN)
    assert "## Ratios" in text and "| cpu | infer | predicted | 4 | jax |" in text
    assert "## Targets" in text and "| tensorflow traces, infer gold batch 4" in text
    assert "| PASS |" in text or "| MISS |" in text
    for name in ("throughput.png", "compile.png", "agreement.png"):
        assert (tmp_path / name).stat().st_size > 1000


def _record(impl, rounds, **extra):
    record = {"implementation": impl, "framework": impl.split("-")[0], "device": "cpu", "mode": "infer",
              "transitions": "gold", "batch_size": 1, "run_id": "r1", "round_pairs_per_s": rounds,
              "pairs_per_s": float(np.mean(rounds)), "data": "snli-dev-sample", "compile_s": 0.0, "traces": 0,
              "warmup_shapes": 1, "max_abs_err_encoding": 1e-7, "max_abs_err_logits": 1e-8,
              "useful_flops_per_s": 1.0, "device_peak_flops_per_s": 4.0, "matmul_peak_flops_per_s": 4.0}
    record.update(extra)
    return record


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
        (tmp_path / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "1 of 2 medians of the second run" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2


def test_targets_say_pass_or_miss_from_the_records():
    records = [_record("pytorch", [100.0, 100.0, 100.0]), _record("jax", [310.0, 290.0, 305.0]),
               _record("pytorch", [100.0, 100.0], batch_size=128),
               _record("tensorflow-xla", [140.0, 145.0], batch_size=128, useful_flops_per_s=1.6),
               _record("jax", [100.0, 100.0], mode="train", compile_s=8.0, warmup_shapes=4,
                       cached_compile={"compile_s": 2.4, "shapes": 4, "cache_hits": 4, "cache_misses": 0})]
    rows = {row["target"].split(" (")[0]: row for row in targets(records)}
    assert rows["best static / pytorch inference, batch 1"]["met"] is True  # median 3.05x
    assert rows["best static / pytorch inference, batch 1"]["measured"].startswith("3.05x")
    assert rows["best static / pytorch inference, batch 128"]["met"] is False  # median 1.43x
    assert rows["best useful FLOP/s, inference batch 128"]["measured"] == "40.0%"
    assert rows["jax train compile per shape, cold, batch 1"]["met"] is True  # 2 s per shape
    assert rows["jax train compile per shape, persistent cache, batch 1"]["met"] is False  # 0.6 s per shape


def test_matrix_has_one_table_per_mode_measured():
    """Variants measured for training only get a training matrix (not "no
    variant was measured"); inference and training together give both, in
    that order, each with its own figures."""
    train = [_record("pytorch", [15.0], mode="train"), _record("jax-vmap", [25.0], mode="train", compile_s=12.0)]
    text = format_matrix(train)
    assert text.startswith("Training pairs/s") and "Inference" not in text
    assert "**jax-vmap**: gold 25 (compile 12.0 s)" in text
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
            "--batch-sizes", "2",
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
