"""The command line: init -> encode (docs/spec.md §5) with the reference, and data stats."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import frameworks
from bench.cli import COMMANDS, build_parser, main
from bench.frameworks import FRAMEWORKS, runner_class
from shared import reference
from shared.batching import make_pair_batch
from shared.params import load_params
from shared.snli import SAMPLE_PATH, read_snli
from shared.vocab import Vocabulary
from tests.helpers import run


@pytest.fixture(scope="module")
def small_rows(tmp_path_factory):
    """The first 40 rows of the sample (two without a gold label among them)."""
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    with open(SAMPLE_PATH) as f:
        lines = [next(f) for _ in range(40)]
    rows = [json.loads(line) for line in lines]
    rows[3]["gold_label"] = "-"
    rows[17]["gold_label"] = "-"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "model.npz"
    assert main(["init", "--size", "small", "--seed", "3", "--out", str(path)]) == 0
    return path


def test_init_writes_a_valid_parameter_file(small_model):
    loaded = load_params(small_model)
    assert loaded.config.hidden_dim == 32 and loaded.config.lowercase
    assert loaded.vocab[0] == "<pad>" and loaded.vocab[1] == "<unk>"
    assert loaded.config.vocab_size == len(loaded.vocab) > 1000


def test_encode_reference_follows_spec(small_rows, small_model, tmp_path, capsys):
    out = tmp_path / "enc.npz"
    assert main(["encode", "--framework", "reference", "--params", str(small_model),
                 "--data", str(small_rows), "--out", str(out), "--batch-size", "16"]) == 0
    assert "40 rows (2 without gold label)" in capsys.readouterr().out
    result = np.load(out, allow_pickle=False)
    assert sorted(result.files) == ["hypothesis", "logits", "pair_id", "premise"]
    assert result["premise"].shape == (40, 32) and result["premise"].dtype == np.float32
    assert result["logits"].shape == (40, 3) and result["logits"].dtype == np.float32
    rows = [json.loads(line) for line in small_rows.read_text().splitlines()]
    assert list(result["pair_id"]) == [row["pairID"] for row in rows]  # every row, file order
    # the numbers are the reference's, computed here on one batch of all rows
    loaded = load_params(small_model)
    pairs, _ = read_snli(small_rows, keep_unlabeled=True)
    vocab = Vocabulary.from_array(loaded.vocab, lowercase=True)
    expected = reference.forward(loaded.params, loaded.config, make_pair_batch(pairs, vocab))
    np.testing.assert_allclose(result["premise"], expected.premise, atol=1e-7, rtol=0)
    np.testing.assert_allclose(result["logits"], expected.logits, atol=1e-7, rtol=0)


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
def test_encode_each_framework_matches_reference(framework, small_rows, small_model, tmp_path):
    ref_out, fw_out = tmp_path / "ref.npz", tmp_path / "fw.npz"
    common = ["--params", str(small_model), "--data", str(small_rows), "--batch-size", "16"]
    assert main(["encode", "--framework", "reference", *common, "--out", str(ref_out)]) == 0
    assert main(["encode", "--framework", framework, *common, "--out", str(fw_out)]) == 0
    ref, got = np.load(ref_out), np.load(fw_out)
    assert list(got["pair_id"]) == list(ref["pair_id"])
    assert np.abs(got["premise"] - ref["premise"]).max() <= 1e-5
    assert np.abs(got["logits"] - ref["logits"]).max() <= 1e-4


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_is_registered_by_the_module_of_its_name_alone(command):
    """``bench.<command>`` registers the command and no other: the parser of one command is that module's."""
    parser = build_parser([command])
    assert list(parser._subparsers._group_actions[0].choices) == [command]


def test_the_process_settings_are_read_without_importing_a_framework():
    """The command line and every platform's process settings come before any
    library is imported (a fresh process: this one has imported them all)."""
    code = ("import sys\n"
            "from bench import cli, config, frameworks\n"
            "cli.build_parser()\n"
            "config.worker_env('float64')\n"
            "config.quiet_frameworks('float64')\n"
            "assert all(frameworks.platform(n).native_noise is not None for n in frameworks.ALL)\n"
            "print([n for n in frameworks.FRAMEWORKS if frameworks.framework(n).library in sys.modules])\n")
    done = run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not frameworks.installed("pytorch"), reason="torch is not installed")
def test_counting_pytorch_dispatches_writes_nothing_to_stderr():
    """The profiler a PyTorch runner counts its dispatches with writes its start and stop markers to file descriptor
    2 unless its own switch (the platform's default environment) says otherwise: with the settings, nothing."""
    code = ("from bench import config\n"
            "config.quiet_frameworks('float32', ['pytorch'])\n"
            "import torch\n"
            "from impl_pytorch.dispatches import aten_ops\n"
            "print(aten_ops(lambda: torch.ones(3) + 1)['ops'])\n")
    done = run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 1 and "profiler_st" not in done.stderr, done.stderr


@pytest.mark.skipif(not frameworks.installed("tensorflow"), reason="tensorflow is not installed")
def test_an_import_drops_the_notices_no_switch_silences_and_passes_the_rest_on(tmp_path):
    """A library whose native code writes notices no switch silences (Platform.native_noise, TensorFlow's among them)
    is imported with only those lines dropped: the rest of what it wrote passes on, and stderr stays what it was. The
    library here writes its own lines, so that the test does not hang on which notices a TensorFlow build writes."""
    (tmp_path / "noisy_library.py").write_text(
        "import os\nos.write(2, b'kept: a warning of its own\\nNOISE to drop\\nkept: another\\n')\n")
    code = ("import os, sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from bench import config, frameworks\n"
            "config.quiet_frameworks('float32', ['tensorflow'])\n"
            "platform = type(frameworks.platform('tensorflow'))\n"
            "assert config._QuietImport.notices['tensorflow'] == platform.native_noise, config._QuietImport.notices\n"
            "config._QuietImport.notices['noisy_library'] = (b'NOISE',)\n"
            "before = os.fstat(2).st_ino\n"
            "import noisy_library\n"
            "print(os.fstat(2).st_ino == before)\n")
    done = run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert "kept: a warning of its own\nkept: another\n" in done.stderr
    assert "NOISE" not in done.stderr


# Frameworks whose platform switches 64-bit mode on before the library is imported.
SWITCHED_FOR_FLOAT64 = [name for name in FRAMEWORKS
                        if frameworks.platform(name).forced_env("float64") != frameworks.platform(name).forced_env()]


@pytest.mark.parametrize("framework", SWITCHED_FOR_FLOAT64)
def test_encode_in_float64_switches_the_framework_before_importing_it(framework, small_rows, small_model, tmp_path):
    """``encode --dtype float64`` works in a fresh process, as ``train`` and
    ``evaluate`` do: the platform's settings are applied before the import."""
    ref_out, fw_out = tmp_path / "ref.npz", tmp_path / "fw.npz"
    common = ["--params", str(small_model), "--data", str(small_rows), "--batch-size", "16", "--dtype", "float64"]
    assert main(["encode", "--framework", "reference", *common, "--out", str(ref_out)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in frameworks.platform(framework).forced_env("float64")}
    done = run([sys.executable, "-m", "bench", "encode", "--framework", framework, *common, "--out", str(fw_out)],
               cwd=Path(__file__).resolve().parents[1], env=env)
    assert done.returncode == 0, done.stderr
    assert f"framework {framework} (float64)" in done.stdout
    ref, got = np.load(ref_out), np.load(fw_out)
    np.testing.assert_allclose(got["premise"], ref["premise"], atol=1e-7, rtol=0)
    np.testing.assert_allclose(got["logits"], ref["logits"], atol=1e-7, rtol=0)


# Implementations that refuse a dtype or a device (listed in the Runner's ``unsupported``).
REFUSING = [(name, capability) for name in FRAMEWORKS for capability in ("float64",)
            if not frameworks.runner_class(name).supports(capability)]


@pytest.mark.parametrize("framework,capability", REFUSING)
def test_encode_refuses_what_an_implementation_cannot_do_in_one_line(framework, capability, small_rows,
                                                                     small_model, tmp_path, capsys):
    code = main(["encode", "--framework", framework, "--params", str(small_model), "--data", str(small_rows),
                 "--dtype", capability, "--out", str(tmp_path / "o.npz")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {framework}: no {capability}: "), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o.npz").exists()


def test_encode_errors_are_clear(small_rows, tmp_path, capsys):
    code = main(["encode", "--framework", "reference", "--params", str(tmp_path / "missing.npz"),
                 "--data", str(small_rows), "--out", str(tmp_path / "o.npz")])
    assert code == 2
    assert "missing.npz" in capsys.readouterr().err


def test_data_command_reports_the_sample(capsys):
    assert main(["data"]) == 0
    out = capsys.readouterr().out
    assert "1,289" in out and "1,273" in out and "16 without gold label" in out
    assert "padding" in out
    # The benchmark's sentence batches at the default batch size, 128: 2,546 sentences, 9 batches of 256.
    assert "sentence batches (the benchmark's): 9 batches of 256 sentences" in out
    assert "the masked algorithm" in out and "x the useful FLOPs" in out


def test_all_frameworks_are_installed():
    """CI installs all three; a missing one must fail here, not be skipped."""
    missing = []
    for name in FRAMEWORKS:
        try:
            runner_class(name)  # imports the framework and its runner
        except ImportError as err:
            missing.append(f"{name} ({err})")
    assert not missing, f"frameworks not importable: {missing}"
