"""The benchmark harness: FLOP counting, records, report, interruption, and a
``--quick`` run of every implementation."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from bench.benchmark.flops import TRAIN_FACTOR, batch_flops, classifier_flops, sentence_flops
from bench.benchmark.measure import pairwise_agreement
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
    "timestamp": str,
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
    code = main(["run", "--quick", "--batch-sizes", "1,4", "--out", str(out)])
    return code, out


def test_quick_run_measures_every_implementation(quick_run):
    code, out = quick_run
    assert code == 0
    records = read_records(out / "results.jsonl")
    measured = {(r["implementation"], r["mode"], r["batch_size"]) for r in records}
    default = [impl for impl in IMPLEMENTATIONS if impl not in OPT_IN]
    expected = {(impl, mode, b) for impl in default for mode in ("infer", "train") for b in (1, 4)}
    assert measured == expected
    for r in records:
        for key, kind in SPEC_KEYS.items():
            assert isinstance(r[key], kind), (r["implementation"], key, r[key])
        assert r["pairs_per_s"] > 0 and r["useful_flops_per_s"] > 0 and r["peak_mem_bytes"] > 0
        assert r["agreement_ok"] is True
        assert r["device"] == "cpu" and r["dtype"] == "float32"
        assert r["buckets"] == [8, 16, 32, 64]  # the default of shared.batching
    by_impl = {r["implementation"]: r for r in records}
    assert by_impl["pytorch"]["compile_s"] == 0 and by_impl["pytorch"]["traces"] == 0
    assert by_impl["jax"]["traces"] >= 1
    assert all(r["traces"] == 1 for r in records if r["implementation"] == "tensorflow")
    assert (out / "agreement.json").exists()


def test_report_renders_table_targets_and_plots(quick_run, tmp_path, capsys):
    _, out = quick_run
    assert main(["report", str(out), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    for impl in IMPLEMENTATIONS:
        assert (f"| {impl} |" in text) == (impl not in OPT_IN)
    assert "## Targets" in text and "batch 1" in text
    for name in ("throughput.png", "compile.png", "agreement.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_resume_completes_without_duplicates(tmp_path):
    out = tmp_path / "run"
    args = ["run", "--quick", "--implementations", "pytorch", "--batch-sizes", "2", "--buckets", "12,64",
            "--out", str(out)]
    assert main(args + ["--modes", "infer"]) == 0
    assert main(args) == 2  # refuses to overwrite existing results
    assert main(args + ["--resume"]) == 0
    records = read_records(out / "results.jsonl")
    assert sorted((r["mode"], r["batch_size"]) for r in records) == [("infer", 2), ("train", 2)]
    assert all(r["buckets"] == [12, 64] for r in records)


def test_jax_compilation_cache_flag_fills_the_cache(tmp_path):
    cache = tmp_path / "cache"
    args = ["run", "--quick", "--implementations", "jax", "--modes", "infer", "--batch-sizes", "2",
            "--out", str(tmp_path / "run"), "--jax-compilation-cache", str(cache)]
    assert main(args) == 0
    assert cache.is_dir() and any(cache.iterdir())
    record = read_records(tmp_path / "run" / "results.jsonl")[0]
    assert record["options"]["compilation_cache_dir"] == str(cache.resolve())
