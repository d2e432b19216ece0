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

from bench.benchmark.plan import PRESETS
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
