"""Training end to end (bench/train/) in every framework.

Equivalence is measured against the float64 NumPy reference (its SGD, Adam
and RMSprop live in shared/optimizers.py), and between frameworks, never by
comparing a framework with itself. Small model, synthetic pairs, one bucket
shape (B=8, N=16), so compiled frameworks compile each program once.
Parametrized over frameworks with ids; nothing is skipped.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bench.cli import main
from bench.frameworks import FRAMEWORKS, runner_class
from bench.train import checkpoints
from bench.train.checkpoints import Checkpoint, latest_checkpoint, list_checkpoints, load_checkpoint
from bench.train.evaluation import confusion_matrix, evaluate_pairs
from bench.records import read_metrics
from bench.train.config import TrainConfig
from bench.train.trainer import Trainer
from shared import optimizers
from shared.compare import LOGITS_TOL_F32, TRAIN_LOSS_REL_TOL_ADAM, TRAIN_LOSS_REL_TOL_SGD, max_abs_err
from shared.batching import make_pair_batch
from shared.params import ModelConfig, ParamFile, init_params, load_params, save_params
from shared.snli import SAMPLE_PATH, with_parse
from shared.synthetic import synthetic_pairs
from shared.vocab import Vocabulary
from tests.helpers import curve_rel_err

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)

TRAIN_PAIRS = synthetic_pairs(64, seed=0)  # 8 batches of 8 per epoch
DEV_PAIRS = synthetic_pairs(16, seed=1)
VOCAB = Vocabulary.from_pairs(TRAIN_PAIRS, lowercase=True)
CONFIG = ModelConfig(vocab_size=len(VOCAB), embed_dim=8, hidden_dim=6, tracker_dim=3, mlp_dim=8, mlp_layers=1)
INIT = ParamFile(init_params(CONFIG, seed=0), CONFIG, VOCAB.to_array())  # float32: what every framework starts from
CURVE_STEPS = 20  # 2.5 epochs

# Every run: one bucket (N=16 holds every synthetic sentence) and batches of 8,
# evaluation in batches of 8 too: one shape for each compiled program.
COMMON = dict(batch_size=8, buckets=(16,), eval_batch_size=8)
TIMING_KEYS = {"elapsed_s", "pairs_per_s", "eval_s", "timestamp", "path", "from"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Memoized training runs, shared by the tests of this module:
    runs(name, framework, **TrainConfig fields) -> (run folder, TrainResult)."""
    root = tmp_path_factory.mktemp("runs")
    cache = {}

    def run(name: str, framework: str, **fields):
        key = (name, framework)
        if key not in cache:
            dev = fields.pop("dev", DEV_PAIRS)
            cfg = TrainConfig(framework=framework, dtype="float64" if framework == "reference" else "float32",
                              **{**COMMON, **fields})
            out = root / f"{name}-{framework}"
            cache[key] = (out, Trainer(cfg, out, TRAIN_PAIRS, init=INIT, dev_pairs=dev, progress=False).run())
        return cache[key]

    return run


def loss_curve(out) -> np.ndarray:
    return np.array([r["loss"] for r in read_metrics(out) if r["kind"] == "train"])


CURVES = {
    # The SGD curve also decays the learning rate (halving every 10 steps), so
    # set_learning_rate is checked against the reference too.
    "sgd": dict(optimizer="sgd", lr=1.0, lr_decay=0.5, lr_decay_steps=10),
    "adam": dict(optimizer="adam", lr=0.02),
}


def curve(runs, optimizer: str, framework: str) -> np.ndarray:
    out, _ = runs(f"curve-{optimizer}", framework, steps=CURVE_STEPS, log_every=1, train_eval_pairs=0,
                  dev=None, **CURVES[optimizer])
    losses = loss_curve(out)
    assert len(losses) == CURVE_STEPS
    return losses


# --------------------------------------------------------------------------
# Equivalence of training
# --------------------------------------------------------------------------


@framework
@pytest.mark.parametrize("optimizer,tol", [("sgd", TRAIN_LOSS_REL_TOL_SGD), ("adam", TRAIN_LOSS_REL_TOL_ADAM)],
                         ids=["sgd", "adam"])
def test_loss_curve_matches_reference(runs, framework, optimizer, tol):
    """Same initial weights, same batches, dropout off: the float32 loss curve
    follows the float64 NumPy reference step by step."""
    got, want = curve(runs, optimizer, framework), curve(runs, optimizer, "reference")
    err = curve_rel_err(got, want)
    print(f"{framework} {optimizer}: max relative loss difference to the reference {err:.1e}")
    assert err <= tol
    assert want[-1] != want[0]  # the weights moved


@pytest.mark.parametrize("variant", ["pytorch-masked", "tensorflow-eager", "jax-vmap"])
def test_a_variant_trains_like_the_reference(runs, variant):
    """``bench train --framework`` takes the benchmark's variants too: the
    same loop drives another algorithm in the same framework, and its Adam
    curve follows the float64 reference as the framework's own does."""
    got, want = curve(runs, "adam", variant), curve(runs, "adam", "reference")
    assert curve_rel_err(got, want) <= TRAIN_LOSS_REL_TOL_ADAM
    assert want[-1] != want[0]


@pytest.mark.parametrize("a,b", [("pytorch", "tensorflow"), ("pytorch", "jax"), ("tensorflow", "jax")],
                         ids=["pytorch-tensorflow", "pytorch-jax", "tensorflow-jax"])
@pytest.mark.parametrize("optimizer,tol", [("sgd", TRAIN_LOSS_REL_TOL_SGD), ("adam", TRAIN_LOSS_REL_TOL_ADAM)],
                         ids=["sgd", "adam"])
def test_loss_curves_agree_between_frameworks(runs, a, b, optimizer, tol):
    assert curve_rel_err(curve(runs, optimizer, a), curve(runs, optimizer, b)) <= tol


def test_curves_command_reports_the_agreement(runs, tmp_path, capsys):
    """`bench curves` renders the runs and measures each loss curve against the others."""
    folders = [runs("curve-sgd", fw, steps=CURVE_STEPS, log_every=1, train_eval_pairs=0, dev=None,
                    **CURVES["sgd"])[0] for fw in ("reference",) + FRAMEWORKS]
    assert main(["curves", *map(str, folders), "--out", str(tmp_path)]) == 0
    markdown = (tmp_path / "curves.md").read_text()
    rows = [line for line in markdown.splitlines()  # | run | against | steps compared | max rel. difference |
            if line.startswith("| ") and line.count("|") == 5 and line.split("|")[3].strip() == "20"]
    assert len(rows) == len(folders) * (len(folders) - 1) // 2  # every pair of runs
    assert all(float(row.split("|")[-2]) <= TRAIN_LOSS_REL_TOL_SGD for row in rows)
    assert (tmp_path / "curves.png").stat().st_size > 0


@framework
def test_learning_rate_schedule_is_recorded(runs, framework):
    out, _ = runs("curve-sgd", framework, steps=CURVE_STEPS, log_every=1, train_eval_pairs=0, dev=None,
                  **CURVES["sgd"])
    lrs = [r["lr"] for r in read_metrics(out) if r["kind"] == "train"]
    assert lrs == pytest.approx([1.0 * 0.5 ** (s / 10) for s in range(CURVE_STEPS)], rel=1e-12)


# --------------------------------------------------------------------------
# Resume, checkpoints
# --------------------------------------------------------------------------

RESUMABLE = dict(optimizer="adam", lr=0.01, dropout=0.2, train_eval_pairs=16, log_every=3)


def _records(out) -> list[dict]:
    """The train and eval records without wall-clock fields."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(out)
            if r["kind"] in ("train", "eval")]


@framework
def test_resume_equals_uninterrupted(runs, framework, tmp_path):
    """2 epochs straight == 1 epoch, then --resume for the second: the same
    batches, dropout masks and optimizer state, so the same weights exactly."""
    straight, result = runs("straight", framework, epochs=2, **RESUMABLE)
    cfg = TrainConfig(framework=framework, epochs=1, **COMMON, **RESUMABLE)
    Trainer(cfg, tmp_path, TRAIN_PAIRS, init=INIT, dev_pairs=DEV_PAIRS, progress=False).run()
    assert latest_checkpoint(tmp_path).name == "step-00000008"
    cfg.epochs = 2
    resumed = Trainer(cfg, tmp_path, TRAIN_PAIRS, init=None, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    assert resumed.steps == result.steps == 16
    for name, value in result.params.items():
        assert np.array_equal(resumed.params[name], value), name
    assert _records(tmp_path) == _records(straight)
    kinds = [r["kind"] for r in read_metrics(tmp_path)]
    assert kinds.count("run") == 1 and kinds.count("resume") == 1
    # The dropout was on: training loss differs from a dropout-free run's.
    assert not np.array_equal(result.params["output.kernel"], INIT.params["output.kernel"])


def test_crash_during_checkpoint_keeps_the_previous_one(runs, tmp_path, monkeypatch):
    """A run killed while writing its checkpoint leaves the previous checkpoint
    intact and resumable; the resumed run ends where an uninterrupted one does."""
    cfg = TrainConfig(framework="pytorch", epochs=1, **COMMON, **RESUMABLE)
    Trainer(cfg, tmp_path, TRAIN_PAIRS, init=INIT, dev_pairs=DEV_PAIRS, progress=False).run()
    first = latest_checkpoint(tmp_path)
    before = {f.name: f.read_bytes() for f in first.iterdir()}

    class Killed(BaseException):  # like a signal: not an Exception, nothing catches it
        pass

    def crash(path, state, description):
        path.write_bytes(b"half an npz")
        raise Killed()

    monkeypatch.setattr(checkpoints, "save_optimizer_state", crash)
    cfg.epochs = 2
    with pytest.raises(Killed):
        Trainer(cfg, tmp_path, TRAIN_PAIRS, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    monkeypatch.undo()
    assert list_checkpoints(tmp_path) == [first]
    assert {f.name: f.read_bytes() for f in first.iterdir()} == before
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    # A hard kill leaves its temporary folder behind: never taken for a checkpoint, removed on resume.
    stale = tmp_path / "checkpoints" / ".tmp-step-00000016-99999"
    stale.mkdir()
    (stale / "model.npz").write_bytes(b"junk")
    assert latest_checkpoint(tmp_path) == first
    resumed = Trainer(cfg, tmp_path, TRAIN_PAIRS, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    assert not stale.exists()
    _, straight = runs("straight", "pytorch", epochs=2, **RESUMABLE)
    for name, value in straight.params.items():
        assert np.array_equal(resumed.params[name], value), name


def test_resume_skips_a_damaged_newest_checkpoint(runs, tmp_path, capsys):
    """A newest checkpoint whose model.npz was cut short is passed over, named
    on stderr and in the "resume" record; the run goes on from the newest
    intact one and ends with the weights of an uninterrupted run."""
    cfg = TrainConfig(framework="pytorch", epochs=2, keep_checkpoints=3, **COMMON, **RESUMABLE)
    Trainer(cfg, tmp_path, TRAIN_PAIRS, init=INIT, dev_pairs=DEV_PAIRS, progress=False).run()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000008", "step-00000016"]
    damaged = tmp_path / "checkpoints" / "step-00000016" / "model.npz"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    with pytest.raises(Exception):
        load_checkpoint(damaged.parent)
    resumed = Trainer(cfg, tmp_path, TRAIN_PAIRS, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step-00000016" in err and "not a readable .npz" in err
    resume = [r for r in read_metrics(tmp_path) if r["kind"] == "resume"]
    assert resume[-1]["from"].endswith("step-00000008") and resume[-1]["skipped"][0]["path"] == str(damaged.parent)
    _, straight = runs("straight", "pytorch", epochs=2, **RESUMABLE)
    for name, value in straight.params.items():
        assert np.array_equal(resumed.params[name], value), name
    load_checkpoint(damaged.parent)  # written again, whole
    # With every checkpoint damaged there is nothing to go back to: one clear error.
    for path in list_checkpoints(tmp_path):
        (path / "optimizer.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="no checkpoint in .* loads"):
        Trainer(cfg, tmp_path, TRAIN_PAIRS, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()


TRAIN_ARGV = ["train", "--framework", "pytorch", "--data", "synthetic", "--num-pairs", "16", "--size", "small",
              "--epochs", "1", "--quiet"]


def _no_partial_files(folder) -> None:
    """Nothing half-written: no temporary file or folder, every record whole."""
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
        assert all(json.loads(line) for line in metrics.read_text().splitlines())


def test_a_full_disk_ends_in_one_line(tmp_path):
    """A file-size limit makes every write past it fail (EFBIG), as a full
    disk does: the command ends with one line naming the file, and nothing
    half-written is left."""
    import subprocess
    import sys

    # The child limits itself before it runs the command (no preexec_fn: this
    # process has threads); SIGXFSZ ignored, a write past 8 kB fails instead
    # of killing the process.
    limited = ("import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               "resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000)); sys.argv[0] = 'bench'; "
               "runpy.run_module('bench', run_name='__main__')")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", limited, *TRAIN_ARGV, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "File too large" in lines[0], done.stderr
    assert f"cannot write {out}" in lines[0] and ".npz" in lines[0]
    _no_partial_files(out)


def test_a_failed_checkpoint_write_names_the_file(tmp_path, capsys, monkeypatch):
    """ENOSPC while the optimizer state is written: one line naming the
    checkpoint's file, and the checkpoint folder not left half-made."""
    import errno

    def full(path, state, description):
        path.write_bytes(b"half an npz")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_optimizer_state", full)
    assert main(TRAIN_ARGV + ["--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "No space left on device" in err, err
    assert f"cannot write {tmp_path / 'checkpoints' / 'step-00000002' / 'optimizer.npz'}" in err
    assert "checkpoint not written" in err
    assert list_checkpoints(tmp_path) == []
    _no_partial_files(tmp_path)
    # A folder that cannot be made: one line naming it.
    (tmp_path / "file").write_text("")
    assert main(TRAIN_ARGV + ["--out", str(tmp_path / "file" / "run")]) == 1
    assert str(tmp_path / "file" / "run") in capsys.readouterr().err


def test_checkpoint_files_are_canonical(runs):
    out, result = runs("straight", "pytorch", epochs=2, **RESUMABLE)
    checkpoint: Checkpoint = load_checkpoint(latest_checkpoint(out))
    assert checkpoint.state["step"] == 16 and checkpoint.state["epoch"] == 2
    assert checkpoint.state["batch_in_epoch"] == 0
    # model.npz is exactly docs/spec.md §4: the canonical loader accepts it, nothing extra.
    with np.load(checkpoint.path / "model.npz", allow_pickle=False) as data:
        assert sorted(data.files) == sorted(list(INIT.params) + ["meta.config", "meta.vocab"])
    assert checkpoint.optimizer["name"] == "adam"
    expected = optimizers.state_shapes("adam", checkpoint.optimizer, {k: v.shape for k, v in INIT.params.items()})
    optimizers.check_state(checkpoint.optimizer_state, expected)
    assert int(checkpoint.optimizer_state["step"]) == 16
    assert len(list_checkpoints(out)) == 2  # keep_checkpoints
    for name, value in result.params.items():
        assert np.array_equal(load_params(out / "model.npz").params[name], value)
    assert (out / "best.npz").exists()


# --------------------------------------------------------------------------
# Checkpoints move between frameworks
# --------------------------------------------------------------------------


@pytest.mark.parametrize("trained_in", FRAMEWORKS, ids=[f"trained-in-{f}" for f in FRAMEWORKS])
def test_trained_model_evaluates_alike_in_every_framework(runs, trained_in):
    out, result = runs("straight", trained_in, epochs=2, **RESUMABLE)
    model = load_params(out / "model.npz")
    pairs = DEV_PAIRS + TRAIN_PAIRS
    ref_runner = runner_class("reference")(model.params, model.config)
    want = evaluate_pairs(ref_runner, pairs, VOCAB, batch_size=8, buckets=(16,))
    assert 0.0 < want.accuracy < 1.0
    _, _, ref_logits = ref_runner.encode(make_pair_batch(DEV_PAIRS, VOCAB, num_tokens=16))
    for fw in FRAMEWORKS:
        runner = runner_class(fw)(model.params, model.config)
        got = evaluate_pairs(runner, pairs, VOCAB, batch_size=8, buckets=(16,))
        assert got.accuracy == want.accuracy, fw
        assert np.array_equal(got.confusion, want.confusion), fw
        _, _, logits = runner.encode(make_pair_batch(DEV_PAIRS, VOCAB, num_tokens=16))
        assert max_abs_err(logits, ref_logits) <= LOGITS_TOL_F32, fw
    # and the dev accuracy the training run recorded is the one every framework measures
    last_dev = [r for r in result.evals if r["split"] == "dev"][-1]
    dev_only = evaluate_pairs(ref_runner, DEV_PAIRS, VOCAB, batch_size=8, buckets=(16,))
    assert last_dev["accuracy"] == dev_only.accuracy


@framework
def test_optimizer_state_moves_between_frameworks(runs, framework):
    """An Adam state saved while training in PyTorch loads into every framework;
    the next step matches the NumPy reference update from the same state."""
    out, _ = runs("straight", "pytorch", epochs=2, **RESUMABLE)
    checkpoint = load_checkpoint(latest_checkpoint(out))
    params, state = checkpoint.model.params, checkpoint.optimizer_state
    runner = runner_class(framework)(params, CONFIG)
    runner.set_optimizer("adam", 0.01)
    runner.load_optimizer_state(state)
    for key, value in runner.optimizer_state().items():
        assert np.array_equal(value, state[key]), key
    batch = make_pair_batch(TRAIN_PAIRS[:8], VOCAB, num_tokens=16)
    loss = runner.train_step(batch)
    ref_loss, grads = runner_class("reference")(params, CONFIG).loss_and_grads(batch)
    ref_state = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    hyper = optimizers.resolve("adam")
    expected = optimizers.apply("adam", hyper, 0.01, params, grads, ref_state)
    assert abs(loss - ref_loss) <= 1e-5
    updated = runner.get_params()
    for name in expected:
        # Adam's step is about lr=1e-2 per entry; this checks it to 0.1%.
        assert max_abs_err(updated[name], expected[name]) <= 1e-5, name
    assert int(runner.optimizer_state()["step"]) == 17


@framework
def test_frozen_embedding_is_not_trained(framework):
    runner = runner_class(framework)(INIT.params, CONFIG)
    runner.set_optimizer("adam", 0.05, frozen=("embed.embedding",))
    batch = make_pair_batch(TRAIN_PAIRS[:8], VOCAB, num_tokens=16)
    runner.train_step(batch)
    runner.train_step(batch)
    after = runner.get_params()
    assert np.array_equal(after["embed.embedding"], INIT.params["embed.embedding"])
    assert not np.array_equal(after["projection.kernel"], INIT.params["projection.kernel"])
    state = runner.optimizer_state()
    assert "m/embed.embedding" not in state and "m/projection.kernel" in state


@framework
def test_optimizer_errors_are_clear(framework):
    runner = runner_class(framework)(INIT.params, CONFIG)
    with pytest.raises(RuntimeError, match="set_optimizer"):
        runner.optimizer_state()
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'"):
        runner.set_optimizer("adagrad", 0.1)
    with pytest.raises(ValueError, match="unknown: betas"):
        runner.set_optimizer("adam", 0.1, betas=(0.9, 0.99))
    runner.set_optimizer("rmsprop", 0.1)
    with pytest.raises(ValueError, match="unexpected entry 'm/"):
        runner.load_optimizer_state(optimizers.zero_state("adam", optimizers.resolve("adam"),
                                                          {k: v.shape for k, v in INIT.params.items()}))


# --------------------------------------------------------------------------
# evaluate, the command line
# --------------------------------------------------------------------------


def test_confusion_matrix_by_hand():
    gold = np.array([0, 0, 1, 2, 2, 2])
    predicted = np.array([0, 1, 1, 0, 2, 2])
    assert confusion_matrix(gold, predicted).tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    with pytest.raises(ValueError, match="labels must be in 0..2"):
        confusion_matrix([0, 3], [0, 0])


def test_evaluate_command_on_a_hand_made_case(tmp_path, capsys):
    """A model whose output layer ignores its input and always says
    'neutral': the confusion matrix is one column, the accuracy the share of
    neutral rows; a row without a gold label is left out."""
    rows = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines()[:40]]
    rows = [r for r in rows if r["gold_label"] != "-"]
    chosen = [r for r in rows if r["gold_label"] == "entailment"][:3] + \
        [r for r in rows if r["gold_label"] == "neutral"][:2] + \
        [r for r in rows if r["gold_label"] == "contradiction"][:1]
    chosen.append(dict(chosen[0], gold_label="-", pairID="no-label"))
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    params = dict(INIT.params)
    params["output.kernel"] = np.zeros_like(params["output.kernel"])
    params["output.bias"] = np.array([0.0, 5.0, 0.0], dtype=np.float32)
    model = tmp_path / "neutral.npz"
    save_params(model, params, CONFIG, VOCAB.to_array())
    for fw in ("reference",) + FRAMEWORKS:
        result = tmp_path / f"eval-{fw}.json"
        assert main(["evaluate", "--framework", fw, "--params", str(model), "--data", str(data),
                     "--out", str(result)]) == 0
        record = json.loads(result.read_text())
        assert record["confusion"] == [[0, 3, 0], [0, 2, 0], [0, 1, 0]], fw
        assert record["accuracy"] == pytest.approx(2 / 6) and record["pairs"] == 6
        assert record["skipped_unlabeled"] == 1
    out = capsys.readouterr().out
    assert "accuracy 33.33%" in out and "| neutral | 0 | 2 | 0 | 100.0% |" in out


def test_train_command_on_an_snli_folder(tmp_path, capsys):
    """The full-SNLI layout (snli_1.0/ with train and dev files): the dev split
    is found, progress and metrics are written, curves and evaluate work."""
    folder = tmp_path / "snli_1.0"
    folder.mkdir()
    lines = SAMPLE_PATH.read_text().splitlines()
    (folder / "snli_1.0_train.jsonl").write_text("\n".join(lines[:40]) + "\n")
    (folder / "snli_1.0_dev.jsonl").write_text("\n".join(lines[40:60]) + "\n")
    out = tmp_path / "run"
    argv = ["train", "--framework", "pytorch", "--data", str(folder), "--size", "small", "--embed-dim", "8",
            "--hidden-dim", "6", "--tracker-dim", "3", "--mlp-dim", "8", "--optimizer", "rmsprop", "--lr", "0.01",
            "--lr-decay", "0.75", "--lr-decay-steps", "4", "--weight-decay", "1e-4", "--dropout", "0.1",
            "--batch-size", "16", "--epochs", "2", "--freeze-embeddings", "--out", str(out)]
    assert main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["data"]["dev"].endswith("snli_1.0_dev.jsonl")
    records = read_metrics(out)
    assert {r["split"] for r in records if r["kind"] == "eval"} == {"dev", "train"}
    assert [r["kind"] for r in records][0] == "run"
    err = capsys.readouterr().err
    assert "step" in err and "pairs/s" in err and "ETA" in err and "dev accuracy" in err
    assert main(argv) == 2  # the folder holds a run: refused without --resume
    assert "already holds a run" in capsys.readouterr().err
    assert main(argv + ["--resume"]) == 0  # nothing left to do: ends at once
    assert main(["curves", str(out), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "curves.png").stat().st_size > 0
    assert "| pytorch (run) | rmsprop |" in (tmp_path / "plots" / "curves.md").read_text()
    assert main(["evaluate", "--framework", "pytorch", "--params", str(out / "model.npz"),
                 "--data", str(folder)]) == 0
    assert "snli_1.0_dev.jsonl: accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--optimizer", "sgd", "--beta1", "0.5"], "--optimizer sgd takes no --beta1"),
    (["--lr", "0"], "lr and lr-decay must be > 0"),
    (["--dropout", "1.5"], "dropout must be in [0, 1)"),
    (["--buckets", "8,x"], "--buckets: expected comma-separated token counts"),
    (["--resume"], "no run to resume"),
    (["--init", "/nonexistent/model.npz"], "parameter file not found"),
    (["--data", "/nonexistent/snli"], "no SNLI data at /nonexistent/snli"),
], ids=["sgd-beta1", "lr-zero", "dropout", "buckets", "resume-nothing", "init-missing", "data-missing"])
def test_bad_train_arguments_give_clear_errors(tmp_path, capsys, extra, message):
    argv = ["train", "--framework", "pytorch", "--data", "synthetic", "--num-pairs", "16", "--size", "small",
            "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv + extra) == 2
    assert message in capsys.readouterr().err


def test_resume_with_other_settings_is_refused(runs, tmp_path, capsys):
    out, _ = runs("straight", "pytorch", epochs=2, **RESUMABLE)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    cfg = TrainConfig(framework="pytorch", epochs=3, **{**COMMON, **RESUMABLE, "batch_size": 4})
    with pytest.raises(ValueError, match="batch_size was 8 in the run being resumed, now 4"):
        Trainer(cfg, copy, TRAIN_PAIRS, dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    cfg = TrainConfig(framework="pytorch", epochs=3, **COMMON, **RESUMABLE)
    with pytest.raises(ValueError, match="training data differ"):
        Trainer(cfg, copy, TRAIN_PAIRS[:32], dev_pairs=DEV_PAIRS, resume=True, progress=False).run()
    with pytest.raises(ValueError, match="training data differ"):  # the same words, other trees (--parse left)
        Trainer(cfg, copy, with_parse(TRAIN_PAIRS, "left"), dev_pairs=DEV_PAIRS, resume=True, progress=False).run()


def test_evaluate_errors_are_clear(tmp_path, capsys):
    assert main(["evaluate", "--framework", "pytorch", "--params", str(tmp_path / "none.npz")]) == 2
    assert "parameter file not found" in capsys.readouterr().err
    model = tmp_path / "m.npz"
    save_params(model, INIT.params, CONFIG, VOCAB.to_array())
    data = tmp_path / "unlabeled.jsonl"
    row = json.loads(SAMPLE_PATH.read_text().splitlines()[0])
    data.write_text(json.dumps(dict(row, gold_label="-")) + "\n")
    assert main(["evaluate", "--framework", "pytorch", "--params", str(model), "--data", str(data)]) == 2
    assert f"error: {data}: no labelled rows (the row read has gold label '-')" in capsys.readouterr().err
