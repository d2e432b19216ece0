"""The GPU preset (``bench run --preset gpu``) on this machine's CPU, as a GPU machine without TensorFlow or
DyNet runs it: the lent machines have PyTorch and JAX only, and a preset that needs the others would spend
their minutes on a failure. The two are made unimportable in the run's processes (a ``sitecustomize`` that
puts None in ``sys.modules``, as an uninstalled package looks to ``importlib.util.find_spec``).

What is tested is the preset's plumbing (what it runs, what it drops, what its records say), so torch.compile is
switched off by PyTorch's own ``TORCH_COMPILE_DISABLE``: the compiled variants run their programs eagerly, with
the same numbers, instead of spending most of the test's time in Inductor's C++ builds on a 2-core CPU.
tests/test_variants_pytorch.py builds both compiled variants with Inductor and checks that pytorch-cudagraphs
says where it ran without CUDA graphs."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.frameworks import PRESETS
from bench.records import read_records
from tests.helpers import run

HIDE = "import sys\nfor name in ('tensorflow', 'dynet'):\n    sys.modules[name] = None\n"


def test_the_gpu_preset_runs_one_quick_round_without_tensorflow_and_dynet(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")])),
           "TORCH_COMPILE_DISABLE": "1"}
    out = tmp_path / "run"
    # The device is the one flag changed for the CPU (gpu-host would refuse a machine without a GPU); one round of
    # inference at batch 1 in one length bucket keeps the Inductor builds to one shape per compiled variant.
    done = run([sys.executable, "-m", "bench", "run", "--preset", "gpu", "--quick", "--device", "cpu", "--rounds", "1",
                "--batch-sizes", "1", "--modes", "infer", "--buckets", "64", "--out", str(out)], env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    missing = [n for n in PRESETS["gpu"]["implementations"] if n.split("-")[0] in ("tensorflow", "dynet")]
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: not installed")]
    assert notes == [f"note: not installed, not measured: {', '.join(missing)}"], done.stderr[-4000:]
    records = read_records(out / "results.jsonl")
    measured = [n for n in PRESETS["gpu"]["implementations"] if n not in missing]
    assert sorted({r["implementation"] for r in records}) == sorted(measured)
    assert {(r["mode"], r["batch_size"], r["transitions"]) for r in records} == {("infer", 1, "gold")}
    assert all(r["device"] == "cpu" and r["rounds"] == 1 and r["agreement_ok"] for r in records)
    # torch.compile was off, and the records say so: nothing traced, nothing compiled.
    compiled = [r for r in records if r["implementation"] in ("pytorch-compiled", "pytorch-cudagraphs")]
    assert len(compiled) == 2 and all(r["traces"] == 0 and r["compile_s"] == 0 for r in compiled)
    assert (out / "report.md").exists()


def test_the_gpu_preset_fits_a_lent_machine_by_the_last_gpu_records(capsys):
    """A lent GPU machine gives a command 10 minutes; the preset is planned to take under 8 by the estimate the
    run makes from the last GPU run's records (bench/run/estimate.py), its levels and limit included."""
    from bench.cli import main

    assert main(["run", "--preset", "gpu", "--estimate", "results/gpu-h100", "--out", "unused"]) == 0
    said = capsys.readouterr().out
    minutes, seconds = (int(word) for word in said.split()[2:5:2])  # "estimate: about M min S s, ..."
    assert 60 * minutes + seconds < 8 * 60, said
    assert {"pytorch-levels", "jax-levels"} <= set(PRESETS["gpu"]["implementations"])
    assert "pytorch-levels: no record" in said  # estimated from its framework's records, and said so


def test_the_estimate_counts_what_the_records_cost(tmp_path):
    """Warm-up (the longer of compile and first calls, scaled to the planned shapes), timed rounds (scaled to the
    planned rounds), the products timed for the limit and the breakdown, the start-up and the time between
    measurements as the records' timestamps tell."""
    from bench.run.estimate import estimate
    from bench.run.plan import RunPlan
    from bench.run.measurement import Measurement

    def record(name, mode, timestamp, **extra):
        return Measurement.from_dict({"implementation": name, "framework": name.split("-")[0], "mode": mode,
                                      "batch_size": 1, "transitions": "gold", "device": "gpu", "run_id":
                                      "20261126T100000", "timestamp": timestamp, "rounds": 2, "batches_per_round": 3,
                                      "round_step_s": [0.5, 0.5], "warmup_shapes": 2, "useful_s": 0.1,
                                      "computed_s": 0.2, "own_computed_s": 0.3 if name == "jax" else 0.2, **extra})

    records = [record("pytorch", "infer", "2026-11-26T10:01:10+0000", compile_s=0.0, first_call_s=1.0),
               record("jax", "infer", "2026-11-26T10:01:10+0000", compile_s=20.0, first_call_s=21.0),
               record("pytorch", "train", "2026-11-26T10:01:45+0000", compile_s=0.0, first_call_s=2.0),
               record("jax", "train", "2026-11-26T10:01:45+0000", compile_s=20.0, first_call_s=20.0)]
    # infer: 1 + 3 + 21 + 3 = 28 s of the 70 s to its end: start-up 42; train: 2 + 3 + 20 + 3 = 28 of 35: 7 between.
    plan = RunPlan(["pytorch", "jax"], [("infer", 1, "gold"), ("train", 1, "gold")], {}, rounds=4, round_time=0.4)
    seconds, notes = estimate(plan, records, {("infer", 1): 1, ("train", 1): 2}, measure_cache=False)
    warm = (1 + 21) / 2 + (2 + 20)  # the infer warm-ups for 1 of their 2 shapes
    timed = 4 * 6  # 4 rounds of 3 batches of 0.5 s, each implementation, each measurement
    # Each measurement: on each framework's own routine (on a GPU, no other), its useful products and its own
    # kind's, three times over on 5 of the 12 timed batches.
    products = 2 * 3 * 5 * (0.1 + 0.2 + 0.1 + 0.3)
    assert abs(seconds - (42 + warm + timed + products + 7 + 7)) < 1e-6, (seconds, notes)
