"""``python -m bench train`` and ``python -m bench evaluate``: training over the Runner interface.

The loop is framework-free: it drives any implementation through
docs/runner-interface.md (``set_optimizer``, ``set_learning_rate``,
``train_step``, ``encode``, ``get_params``, ``optimizer_state``,
``load_optimizer_state``), so PyTorch, TensorFlow and JAX train from the same
batches in the same order, and checkpoints move between them.

What a run writes under ``--out DIR``::

    run.json                   the run's settings (checked again by --resume)
    metrics.jsonl              one JSON object a line: "run", "train" (every
                               --log-every steps), "eval" (dev and train
                               accuracy at every epoch end), "checkpoint", "resume"
    checkpoints/step-00001234/ model.npz (canonical, SPEC §4), optimizer.npz
                               (shared layout of shared/optimizers.py), state.json
    model.npz                  the latest weights (canonical)
    best.npz                   the weights with the best dev accuracy so far

Repeatability: the batches of epoch e are a pure function of (seed, e) and the
dropout masks of step s a pure function of (seed, s) in every framework, and a
checkpoint records the step, the epoch and the position inside it. So a run
resumed from a checkpoint takes exactly the steps the uninterrupted run takes.

Atomicity: a checkpoint is written into a temporary folder and renamed into
place (a rename is atomic), so a run killed at any moment leaves only complete
checkpoints; a half-written temporary folder is ignored and removed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from shared import optimizers
from shared.batching import DEFAULT_BUCKETS, make_batches, make_pair_batch, pair_length, plan_batches
from shared.params import ModelConfig, ParamFile, load_params, save_params
from shared.snli import LABELS, NO_LABEL, Pair
from shared.vocab import Vocabulary

EMBEDDING = "embed.embedding"


# --------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """How to train (the model sizes live in the parameter file's ModelConfig)."""

    framework: str = "pytorch"
    optimizer: str = "adam"  # sgd, adam or rmsprop (shared/optimizers.py)
    lr: float = 1e-3  # learning rate at step 0
    lr_decay: float = 1.0  # lr(step) = lr * lr_decay ** (step / lr_decay_steps); 1: constant
    lr_decay_steps: int = 10000
    hyper: dict = field(default_factory=dict)  # optimizer hyperparameters (momentum, beta1, eps, weight_decay, ...)
    batch_size: int = 32  # pairs per training step
    epochs: int = 1  # passes over the training pairs
    steps: int | None = None  # stop after this many steps in all, even mid-epoch (None: epochs decide)
    dropout: float = 0.0  # rate on the projected leaves and the classifier inputs
    seed: int = 0  # batch order and dropout masks (weights: the init seed)
    freeze_embeddings: bool = False  # leave embed.embedding untouched (the 2016 paper kept GloVe fixed)
    buckets: tuple = DEFAULT_BUCKETS  # token-count buckets of the batches (one compiled shape each)
    drop_last: bool = False  # drop the short last batch of each bucket (fewer shapes to compile)
    dtype: str = "float32"
    device: str = "cpu"
    eval_batch_size: int = 128
    train_eval_pairs: int = 2000  # training pairs whose accuracy is measured each epoch (0: none)
    log_every: int = 10  # steps per "train" metrics record (mean loss of those steps)
    keep_checkpoints: int = 2  # newest checkpoints kept on disk

    # Settings a resumed run must share with the run it continues (the rest,
    # e.g. epochs or the framework, may change).
    MUST_MATCH = ("optimizer", "lr", "lr_decay", "lr_decay_steps", "hyper", "batch_size", "dropout", "seed",
                  "freeze_embeddings", "buckets", "drop_last")

    def __post_init__(self) -> None:
        self.buckets = tuple(self.buckets)
        self.hyper = optimizers.resolve(self.optimizer, self.hyper)  # ValueError naming a bad one
        for name in ("batch_size", "epochs", "lr_decay_steps", "eval_batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not self.lr > 0 or not self.lr_decay > 0:
            raise ValueError(f"lr and lr-decay must be > 0, got {self.lr} and {self.lr_decay}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.train_eval_pairs < 0:
            raise ValueError(f"train-eval-pairs must be >= 0, got {self.train_eval_pairs}")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def learning_rate(self, step: int) -> float:
        return optimizers.learning_rate(self.lr, step, self.lr_decay, self.lr_decay_steps)

    @property
    def frozen(self) -> tuple[str, ...]:
        return (EMBEDDING,) if self.freeze_embeddings else ()


# --------------------------------------------------------------------------
# Batches: a pure function of (seed, epoch)
# --------------------------------------------------------------------------


def epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def epoch_plan(lengths: np.ndarray, cfg: TrainConfig, epoch: int) -> list[tuple[int | None, np.ndarray]]:
    """(N, pair indices) of every batch of epoch ``epoch`` (0-based), in order."""
    plan = plan_batches(lengths, cfg.batch_size, buckets=cfg.buckets, shuffle=True,
                        seed=epoch_seed(cfg.seed, epoch), drop_last=cfg.drop_last)
    return list(plan.batches)


def data_fingerprint(pairs: Sequence[Pair]) -> str:
    """A short hash of the pairs (ids, labels, tokens), so --resume can tell the data changed."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(f"{pair.pair_id}\t{pair.label}\t{' '.join(pair.premise.tokens)}\t"
                      f"{' '.join(pair.hypothesis.tokens)}\n".encode())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------


def confusion_matrix(gold: np.ndarray, predicted: np.ndarray, num_classes: int = 3) -> np.ndarray:
    """<int64>[C, C]: entry [g, p] counts pairs of gold label g predicted as p."""
    gold = np.asarray(gold, dtype=np.int64).reshape(-1)
    predicted = np.asarray(predicted, dtype=np.int64).reshape(-1)
    if gold.shape != predicted.shape:
        raise ValueError(f"{gold.size} gold labels but {predicted.size} predictions")
    for name, values in (("gold", gold), ("predicted", predicted)):
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise ValueError(f"{name} labels must be in 0..{num_classes - 1}, got {values.min()}..{values.max()}")
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (gold, predicted), 1)
    return matrix


@dataclass
class Evaluation:
    pairs: int  # labelled pairs evaluated
    accuracy: float
    loss: float  # mean cross-entropy (eval mode)
    confusion: np.ndarray  # <int64>[3, 3], rows gold, columns predicted
    skipped_unlabeled: int = 0  # rows without a gold label, left out

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "accuracy": self.accuracy, "loss": self.loss,
                "confusion": self.confusion.tolist(), "skipped_unlabeled": self.skipped_unlabeled}


def evaluate_pairs(runner, pairs: Sequence[Pair], vocab: Vocabulary, *, batch_size: int = 128,
                   buckets: Sequence[int] | None = DEFAULT_BUCKETS) -> Evaluation:
    """Accuracy, loss and confusion matrix of ``runner`` (eval mode) on the labelled ``pairs``."""
    labelled = [p for p in pairs if p.label != NO_LABEL]
    skipped = len(pairs) - len(labelled)
    if not labelled:
        raise ValueError(f"nothing to evaluate: none of the {len(pairs)} rows has a gold label")
    gold, predicted, losses = [], [], []
    for batch in make_batches(labelled, vocab, batch_size, buckets=buckets):
        _, _, logits = runner.encode(batch)
        logits = np.asarray(logits, dtype=np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        losses.append(-log_probs[np.arange(batch.size), batch.labels])
        gold.append(batch.labels)
        predicted.append(logits.argmax(axis=1))
    gold, predicted = np.concatenate(gold), np.concatenate(predicted)
    return Evaluation(pairs=len(labelled), accuracy=float(np.mean(gold == predicted)),
                      loss=float(np.concatenate(losses).mean()), confusion=confusion_matrix(gold, predicted),
                      skipped_unlabeled=skipped)


def format_confusion(matrix: np.ndarray) -> str:
    """A Markdown table: rows gold, columns predicted, with per-class recall and precision."""
    matrix = np.asarray(matrix)
    lines = ["| gold \\ predicted | " + " | ".join(LABELS) + " | recall |",
             "|---|" + "---:|" * (len(LABELS) + 1)]
    for g, label in enumerate(LABELS):
        total = matrix[g].sum()
        recall = f"{matrix[g, g] / total:.1%}" if total else "-"
        lines.append(f"| {label} | " + " | ".join(f"{n:,}" for n in matrix[g]) + f" | {recall} |")
    precision = [f"{matrix[p, p] / matrix[:, p].sum():.1%}" if matrix[:, p].sum() else "-" for p in range(len(LABELS))]
    lines.append("| precision | " + " | ".join(precision) + " | |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------

CHECKPOINT_FILES = ("model.npz", "optimizer.npz", "state.json")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not every platform opens folders
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_optimizer_state(path: Path, state: Mapping[str, np.ndarray], description: str) -> None:
    """The optimizer state as an .npz (entries ``step`` and ``{slot}/{param}``
    plus ``meta.optimizer``, a JSON string); read back without pickle."""
    arrays = {key: np.asarray(value) for key, value in state.items()}
    arrays["meta.optimizer"] = np.array(description)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


def load_optimizer_state(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    description = json.loads(str(arrays.pop("meta.optimizer")))
    return arrays, description


def save_checkpoint(out_dir: Path, *, params: Mapping[str, np.ndarray], model_config: ModelConfig,
                    vocab_words, optimizer_state: Mapping[str, np.ndarray], optimizer_description: str,
                    state: dict, keep: int = 2) -> Path:
    """Write ``checkpoints/step-{step:08d}/`` atomically; keep the newest ``keep``.

    Everything goes into a temporary folder first; one ``os.rename`` then
    publishes it. A crash before the rename leaves the earlier checkpoints
    as they were (the temporary folder is removed by the next run).
    """
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state['step']:08d}"
    tmp = root / f".tmp-step-{state['step']:08d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_params(tmp / "model.npz", params, model_config, vocab_words)
        save_optimizer_state(tmp / "optimizer.npz", optimizer_state, optimizer_description)
        with open(tmp / "state.json", "w") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():  # the same step saved before (a resumed run that had nothing left to do)
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary folders are never listed)."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.is_dir() and all((p / f).is_file() for f in CHECKPOINT_FILES)]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


@dataclass
class Checkpoint:
    path: Path
    model: ParamFile
    optimizer_state: dict
    optimizer: dict  # the description: name, lr, frozen, hyperparameters
    state: dict  # step, epoch, batch_in_epoch, elapsed_s, best_dev_accuracy, ...


def load_checkpoint(path: Path) -> Checkpoint:
    path = Path(path)
    for name in CHECKPOINT_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(f"checkpoint {path} lacks {name}")
    opt_state, description = load_optimizer_state(path / "optimizer.npz")
    state = json.loads((path / "state.json").read_text())
    return Checkpoint(path, load_params(path / "model.npz"), opt_state, description, state)


def _clean_temporaries(out_dir: Path) -> None:
    root = Path(out_dir) / "checkpoints"
    if root.is_dir():
        for tmp in root.glob(".tmp-step-*"):
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# Metrics and progress
# --------------------------------------------------------------------------


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl; a line cut short by a kill is ignored."""
    from bench.records import read_records

    path = Path(path)
    return read_records(path / "metrics.jsonl" if path.is_dir() else path)


class Metrics:
    """Appends JSON records to ``metrics.jsonl``, one a line, flushed at once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = open(self.path, "a")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def truncate(path: Path, step: int) -> None:
        """Drop the records a killed run wrote after its last checkpoint (step
        ``step``), so the resumed run's metrics read like an uninterrupted run's."""
        kept = [r for r in read_metrics(path) if r.get("step", 0) <= step]
        tmp = Path(path).with_name(Path(path).name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """One status line on the terminal: step, epoch, loss, pairs/s, ETA.

    On a terminal the line is rewritten in place (at most twice a second);
    into a file or a pipe a line is printed every ``interval`` seconds.
    """

    def __init__(self, label: str, total_steps: int, stream=None, enabled: bool = True):
        self.label = label
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 0.5 if self.tty else 15.0
        self._last = 0.0
        self._losses: list[float] = []
        self._pairs = 0
        self._busy = 0.0  # seconds spent in steps since the last line
        self._steps = 0
        self.step_s = None  # seconds per step in the last window (for the ETA)

    def update(self, step: int, epoch: float, loss: float, lr: float, pairs: int, seconds: float) -> None:
        self._losses.append(loss)
        self._pairs += pairs
        self._busy += seconds
        self._steps += 1
        now = time.perf_counter()
        if not self.enabled or (now - self._last < self.interval and step < self.total):
            return
        # Seconds per step over this line's window only: a window that held a
        # compilation (a new bucket shape) must not slow the ETA for long.
        self.step_s = self._busy / self._steps
        text = (f"[{self.label}] step {step:,}/{self.total:,} epoch {epoch:.2f} "
                f"loss {np.mean(self._losses):.4f} lr {lr:.2e} {self._pairs / max(self._busy, 1e-9):,.0f} pairs/s "
                f"ETA {_duration((self.total - step) * self.step_s)}")
        self.stream.write(("\r" + text + "\033[K") if self.tty else text + "\n")
        self.stream.flush()
        self._last = now
        self._losses, self._pairs, self._busy, self._steps = [], 0, 0.0, 0

    def message(self, text: str) -> None:
        if self.enabled:
            self.stream.write(("\r\033[K" if self.tty else "") + f"[{self.label}] {text}\n")
            self.stream.flush()


# --------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    epochs: float
    params: dict  # the final weights, canonical
    evals: list  # the "eval" records of this run
    elapsed_s: float


def _framework_version(framework: str) -> str:
    from importlib import metadata

    package = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax", "reference": "numpy"}.get(framework)
    for name in (package, f"{package}-cpu"):
        try:
            return metadata.version(name)
        except (metadata.PackageNotFoundError, TypeError):
            continue
    return "unknown"


def train(cfg: TrainConfig, out_dir: str | os.PathLike, train_pairs: Sequence[Pair], *,
          init: Callable[[], ParamFile] | ParamFile | None = None, dev_pairs: Sequence[Pair] | None = None,
          resume: bool = False, data_info: dict | None = None, progress: bool = True,
          runner_options: dict | None = None) -> TrainResult:
    """Train from ``init`` (or from the last checkpoint in ``out_dir`` with
    ``resume``) on ``train_pairs``; evaluate on ``dev_pairs`` at each epoch end.

    ``init`` is a ParamFile (weights, ModelConfig, vocabulary) or a function
    returning one (called only when there is no checkpoint to resume from).
    Unlabelled pairs are not trained on. Returns the final state; everything
    is also in ``out_dir`` (see the module docstring).
    """
    from bench.frameworks import runner_class

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_pairs = [p for p in train_pairs if p.label != NO_LABEL]
    if not train_pairs:
        raise ValueError("no labelled training pairs")
    dev_pairs = [p for p in dev_pairs if p.label != NO_LABEL] if dev_pairs else []
    run_file, metrics_file = out_dir / "run.json", out_dir / "metrics.jsonl"
    run_info = {"train": cfg.to_dict(), "data": dict(data_info or {}), "train_pairs": len(train_pairs),
                "train_fingerprint": data_fingerprint(train_pairs), "dev_pairs": len(dev_pairs)}

    _clean_temporaries(out_dir)
    checkpoint = None
    if resume:
        if not run_file.exists():
            raise FileNotFoundError(f"--resume: no run to resume in {out_dir} (no run.json)")
        saved = json.loads(run_file.read_text())
        _check_resume(saved, run_info)
        found = latest_checkpoint(out_dir)
        if found is not None:
            checkpoint = load_checkpoint(found)
    elif run_file.exists() or metrics_file.exists() or list_checkpoints(out_dir):
        raise ValueError(f"{out_dir} already holds a run: add --resume to continue it, or choose another --out "
                         "(nothing is overwritten)")

    if checkpoint is not None:
        model = checkpoint.model
        step = int(checkpoint.state["step"])
        epoch, position = int(checkpoint.state["epoch"]), int(checkpoint.state["batch_in_epoch"])
        elapsed0 = float(checkpoint.state.get("elapsed_s", 0.0))
        best = checkpoint.state.get("best_dev_accuracy")
        Metrics.truncate(metrics_file, step)
    else:
        if init is None:
            raise ValueError("no initial weights given and no checkpoint to resume from")
        model = init() if callable(init) else init
        step = epoch = position = 0
        elapsed0, best = 0.0, None
        if metrics_file.exists():  # a resumed run killed before its first checkpoint: start over
            metrics_file.unlink()
    tmp = run_file.with_name(run_file.name + ".tmp")
    tmp.write_text(json.dumps(run_info, indent=1) + "\n")
    os.replace(tmp, run_file)

    vocab = Vocabulary.from_array(model.vocab, lowercase=model.config.lowercase)
    runner = runner_class(cfg.framework)(model.params, model.config, dtype=cfg.dtype, device=cfg.device,
                                         dropout=cfg.dropout, seed=cfg.seed, **(runner_options or {}))
    runner.set_optimizer(cfg.optimizer, cfg.learning_rate(step), frozen=cfg.frozen, **cfg.hyper)
    description = optimizers.describe(cfg.optimizer, cfg.hyper, cfg.lr, cfg.frozen)
    if checkpoint is not None:
        runner.load_optimizer_state(checkpoint.optimizer_state)

    lengths = np.array([pair_length(p) for p in train_pairs])
    per_epoch = len(epoch_plan(lengths, cfg, 0))
    total = cfg.epochs * per_epoch if cfg.steps is None else cfg.steps
    rng = np.random.default_rng(cfg.seed)
    train_eval = [train_pairs[i] for i in np.sort(rng.permutation(len(train_pairs))[:cfg.train_eval_pairs])]

    metrics = Metrics(metrics_file)
    bar = Progress(cfg.framework, total, enabled=progress)
    if checkpoint is None:
        metrics.write({"kind": "run", "step": 0, "framework": cfg.framework,
                       "framework_version": _framework_version(cfg.framework), "config": cfg.to_dict(),
                       "model": json.loads(model.config.to_json()), "data": run_info["data"],
                       "train_pairs": len(train_pairs), "dev_pairs": len(dev_pairs),
                       "steps_per_epoch": per_epoch, "total_steps": total,
                       "weights": int(sum(np.size(v) for v in model.params.values())),
                       "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        bar.message(f"{len(train_pairs):,} training pairs, {per_epoch:,} steps per epoch, {total:,} steps; "
                    f"dev {len(dev_pairs):,} pairs; metrics -> {metrics_file}")
    else:
        metrics.write({"kind": "resume", "step": step, "framework": cfg.framework, "from": str(checkpoint.path),
                       "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        bar.message(f"resumed from {checkpoint.path} at step {step:,} (epoch {epoch}, batch {position})")

    started = time.perf_counter()
    window: list[float] = []
    window_pairs, window_s = 0, 0.0
    evals: list[dict] = []

    def elapsed() -> float:
        return elapsed0 + time.perf_counter() - started

    def flush_window(epoch_float: float, lr: float) -> None:
        nonlocal window, window_pairs, window_s
        if window:
            metrics.write({"kind": "train", "step": step, "epoch": epoch_float, "loss": float(np.mean(window)),
                           "steps": len(window),
                           "lr": lr, "pairs": window_pairs, "pairs_per_s": window_pairs / max(window_s, 1e-9),
                           "elapsed_s": elapsed()})
        window, window_pairs, window_s = [], 0, 0.0

    def end_of_period(epoch_float: float) -> None:
        """Evaluate, then checkpoint (at every epoch end and where the run stops)."""
        nonlocal best
        for split, pairs in (("dev", dev_pairs), ("train", train_eval)):
            if not pairs:
                continue
            t0 = time.perf_counter()
            result = evaluate_pairs(runner, pairs, vocab, batch_size=cfg.eval_batch_size, buckets=cfg.buckets)
            record = {"kind": "eval", "split": split, "step": step, "epoch": epoch_float, **result.to_dict(),
                      "eval_s": time.perf_counter() - t0, "elapsed_s": elapsed()}
            metrics.write(record)
            evals.append(record)
            bar.message(f"epoch {epoch_float:.2f} step {step:,}: {split} accuracy {result.accuracy:.2%} "
                        f"loss {result.loss:.4f} ({result.pairs:,} pairs)")
        params = runner.get_params()
        dev = [r for r in evals if r["split"] == "dev" and r["step"] == step]
        if dev and (best is None or dev[0]["accuracy"] > best):
            best = dev[0]["accuracy"]
            save_params(out_dir / "best.npz", params, model.config, model.vocab)
        state = {"step": step, "epoch": epoch, "batch_in_epoch": position, "elapsed_s": elapsed(),
                 "best_dev_accuracy": best, "framework": cfg.framework,
                 "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        path = save_checkpoint(out_dir, params=params, model_config=model.config, vocab_words=model.vocab,
                               optimizer_state=runner.optimizer_state(), optimizer_description=description,
                               state=state, keep=cfg.keep_checkpoints)
        save_params(out_dir / "model.npz", params, model.config, model.vocab)
        metrics.write({"kind": "checkpoint", "step": step, "epoch": epoch_float, "path": str(path),
                       "elapsed_s": elapsed()})

    try:
        while step < total:
            plan = epoch_plan(lengths, cfg, epoch)
            while position < len(plan) and step < total:
                t0 = time.perf_counter()
                size, indices = plan[position]
                batch = make_pair_batch([train_pairs[i] for i in indices], vocab, num_tokens=size)
                lr = cfg.learning_rate(step)
                if cfg.lr_decay != 1.0:
                    runner.set_learning_rate(lr)
                loss = runner.train_step(batch)
                if not math.isfinite(loss):
                    raise ValueError(f"loss is {loss} at step {step + 1} (epoch {epoch + 1}): "
                                             "try a lower --lr")
                step += 1
                position += 1
                seconds = time.perf_counter() - t0
                window.append(loss)
                window_pairs += batch.size
                window_s += seconds
                epoch_float = epoch + position / len(plan)
                bar.update(step, epoch_float, loss, lr, batch.size, seconds)
                if step % cfg.log_every == 0:
                    flush_window(epoch_float, lr)
            if position == len(plan):  # a whole epoch done
                epoch, position = epoch + 1, 0
            flush_window(epoch + position / len(plan), cfg.learning_rate(step - 1))
            end_of_period(epoch + position / len(plan))
    finally:
        metrics.close()
    params = runner.get_params()
    return TrainResult(out_dir=out_dir, steps=step, epochs=epoch + position / per_epoch, params=params,
                       evals=evals, elapsed_s=elapsed())


def _check_resume(saved: dict, now: dict) -> None:
    """A resumed run must have the settings and data of the run it continues."""
    old, new = saved.get("train", {}), now["train"]
    for key in TrainConfig.MUST_MATCH:
        a, b = old.get(key), new.get(key)
        if isinstance(a, list):
            a = tuple(a)
        if isinstance(b, list):
            b = tuple(b)
        if a != b:
            raise ValueError(f"--resume: {key} was {a!r} in the run being resumed, now {b!r}; "
                             "give the same settings as the first command")
    if saved.get("train_fingerprint") != now["train_fingerprint"]:
        raise ValueError(f"--resume: the training data differ from the run being resumed "
                         f"({saved.get('train_pairs')} pairs then, {now['train_pairs']} now): give the same --data")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def register(sub) -> None:
    from bench.config import add_size_arguments
    from bench.datasets import add_data_arguments
    from bench.frameworks import ALL

    p = sub.add_parser("train", help="train the SNLI classifier in one framework (checkpoints, metrics, resume)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--framework", required=True, choices=ALL)
    add_data_arguments(p)
    group = p.add_argument_group("dev data")
    group.add_argument("--dev", default="auto",
                       help="dev pairs for the accuracy at each epoch end: 'auto' (the dev split of an SNLI folder, "
                            "fresh pairs for synthetic, none otherwise), 'none', 'sample', 'synthetic', "
                            "or a path [default: %(default)s]")
    group.add_argument("--dev-pairs", type=int, default=None,
                       help="synthetic dev: how many pairs [default: 1000]; a path: read at most this many")
    group = p.add_argument_group("model")
    add_size_arguments(p)
    group.add_argument("--init", default=None,
                       help="start from this canonical parameter file (its sizes and vocabulary) "
                            "instead of fresh weights")
    group.add_argument("--glove", default=None, help="GloVe text file to fill the embedding from")
    group.add_argument("--freeze-embeddings", action="store_true",
                       help="do not train the embedding (the 2016 paper kept GloVe fixed)")
    group.add_argument("--min-freq", type=int, default=1, help="vocabulary: drop rarer words [default: %(default)s]")
    group.add_argument("--max-vocab", type=int, default=None, help="vocabulary: keep at most this many words")
    group.add_argument("--vocab-with-dev", action="store_true",
                       help="vocabulary: also the words of the dev pairs (sensible with frozen GloVe vectors)")
    group.add_argument("--init-seed", type=int, default=None, help="weight initialisation seed [default: --seed]")
    group = p.add_argument_group("optimization")
    group.add_argument("--optimizer", default="adam", choices=optimizers.OPTIMIZERS, help="[default: %(default)s]")
    group.add_argument("--lr", type=float, default=1e-3, help="learning rate at step 0 [default: %(default)s]")
    group.add_argument("--lr-decay", type=float, default=1.0,
                       help="lr(step) = lr * DECAY ** (step / --lr-decay-steps), the 2016 schedule "
                            "(0.75 every 10,000 steps) [default: %(default)s: constant]")
    group.add_argument("--lr-decay-steps", type=int, default=10000, help="[default: %(default)s]")
    group.add_argument("--momentum", type=float, default=None, help="sgd: momentum [default: 0]")
    group.add_argument("--beta1", type=float, default=None, help="adam [default: 0.9]")
    group.add_argument("--beta2", type=float, default=None, help="adam [default: 0.999]")
    group.add_argument("--rho", type=float, default=None, help="rmsprop: decay of the squared-gradient mean [0.9]")
    group.add_argument("--eps", type=float, default=None, help="adam, rmsprop [default: 1e-8]")
    group.add_argument("--weight-decay", type=float, default=None,
                       help="L2 term added to the gradient, g + wd * w [default: 0]")
    group.add_argument("--batch-size", type=int, default=32, help="pairs per step [default: %(default)s]")
    group.add_argument("--epochs", type=int, default=1, help="[default: %(default)s]")
    group.add_argument("--steps", type=int, default=None, help="stop after this many steps in all (even mid-epoch)")
    group.add_argument("--dropout", type=float, default=0.0,
                       help="dropout rate on the projected leaves and classifier inputs [default: %(default)s]")
    group.add_argument("--seed", type=int, default=0, help="batch order, dropout, init [default: %(default)s]")
    group.add_argument("--drop-last", action="store_true", help="drop each bucket's short last batch")
    group.add_argument("--buckets", default=",".join(map(str, DEFAULT_BUCKETS)),
                       help="token-count buckets, comma-separated [default: %(default)s]")
    group = p.add_argument_group("run")
    group.add_argument("--out", required=True, help="run folder: metrics, checkpoints, model.npz, best.npz")
    group.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    group.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    group.add_argument("--dtype", default=None, choices=("float32", "float64"),
                       help="[default: float64 for reference, else float32]")
    group.add_argument("--eval-batch-size", type=int, default=128, help="[default: %(default)s]")
    group.add_argument("--train-eval-pairs", type=int, default=2000,
                       help="training pairs whose accuracy is measured at each epoch end [default: %(default)s]")
    group.add_argument("--log-every", type=int, default=10, help="steps per metrics record [default: %(default)s]")
    group.add_argument("--keep-checkpoints", type=int, default=2, help="[default: %(default)s]")
    group.add_argument("--quiet", action="store_true", help="no progress on the terminal")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="accuracy and confusion matrix of a parameter file on SNLI-format data")
    p.add_argument("--framework", required=True, choices=ALL)
    p.add_argument("--params", required=True, help="canonical parameter file (.npz)")
    add_data_arguments(p)
    p.set_defaults(split="dev")
    p.add_argument("--batch-size", type=int, default=128, help="[default: %(default)s]")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--dtype", default=None, choices=("float32", "float64"))
    p.add_argument("--out", default=None, help="also write the result as JSON here")
    p.set_defaults(func=cmd_evaluate)


def _buckets(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--buckets: expected comma-separated token counts, got {text!r}") from None
    if not values:
        raise ValueError("--buckets: give at least one token count")
    return values


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    hyper = {key: getattr(args, key) for key in ("momentum", "beta1", "beta2", "rho", "eps", "weight_decay")
             if getattr(args, key) is not None}
    unknown = sorted(set(hyper) - set(optimizers.DEFAULTS[args.optimizer]))
    if unknown:
        flags = ", ".join("--" + key.replace("_", "-") for key in unknown)
        raise ValueError(f"--optimizer {args.optimizer} takes no {flags}")
    return TrainConfig(
        framework=args.framework, optimizer=args.optimizer, lr=args.lr, lr_decay=args.lr_decay,
        lr_decay_steps=args.lr_decay_steps, hyper=hyper, batch_size=args.batch_size, epochs=args.epochs,
        steps=args.steps, dropout=args.dropout, seed=args.seed, freeze_embeddings=args.freeze_embeddings,
        buckets=_buckets(args.buckets), drop_last=args.drop_last,
        dtype=args.dtype or ("float64" if args.framework == "reference" else "float32"), device=args.device,
        eval_batch_size=args.eval_batch_size, train_eval_pairs=args.train_eval_pairs, log_every=args.log_every,
        keep_checkpoints=args.keep_checkpoints)


def load_dev(args: argparse.Namespace) -> tuple[str, list[Pair]]:
    """The dev pairs that ``--dev`` names (see its help)."""
    from shared import synthetic
    from shared.snli import SAMPLE_PATH, read_snli

    dev = args.dev
    if dev == "auto":
        if args.data == "synthetic":
            dev = "synthetic"
        elif args.data not in ("sample", "shaped") and Path(args.data).is_dir():
            dev = args.data
        else:
            return "none", []
    if dev == "none":
        return "none", []
    if dev == "synthetic":
        # Another seed than the training pairs: fresh pairs of the same grammar.
        n = args.dev_pairs or 1000
        return f"synthetic-{n}-seed{args.data_seed + 1}", synthetic.synthetic_pairs(n, seed=args.data_seed + 1)
    path = SAMPLE_PATH if dev == "sample" else Path(dev)
    pairs, report = read_snli(path, split="dev", limit=args.dev_pairs)
    return str(report.path), pairs


def build_init(args: argparse.Namespace, train_pairs: Sequence[Pair], dev_pairs: Sequence[Pair]) -> ParamFile:
    """Fresh weights (sizes from the flags, vocabulary from the data, GloVe
    if given) or the parameter file of ``--init``."""
    from bench.config import model_config as model_config_from_args
    from shared.glove import load_glove
    from shared.params import init_params

    if args.init:
        if args.glove:
            raise ValueError("--init and --glove exclude each other (the file already holds its embedding)")
        return load_params(args.init)
    pairs = list(train_pairs) + (list(dev_pairs) if args.vocab_with_dev else [])
    vocab = Vocabulary.from_pairs(pairs, min_freq=args.min_freq, lowercase=True, max_size=args.max_vocab)
    config = model_config_from_args(args, len(vocab), lowercase=True)
    seed = args.seed if args.init_seed is None else args.init_seed
    params = init_params(config, seed=seed)
    if args.glove:
        print(load_glove(args.glove, vocab, params[EMBEDDING]), file=sys.stderr)
    return ParamFile(params, config, vocab.to_array())


def cmd_train(args: argparse.Namespace) -> int:
    from bench.config import quiet_frameworks as _quiet_frameworks
    from bench.datasets import load_dataset

    _quiet_frameworks()
    cfg = config_from_args(args)
    if cfg.dtype == "float64":
        os.environ.setdefault("JAX_ENABLE_X64", "1")  # before JAX is imported
    dataset = load_dataset(args)
    if dataset.report is not None:
        print(dataset.report, file=sys.stderr)
    dev_name, dev_pairs = load_dev(args)
    data_info = {"data": args.data, "name": dataset.name, "split": args.split, "num_pairs": args.num_pairs,
                 "data_seed": args.data_seed, "dev": dev_name}
    if args.data == "shaped":
        data_info.update(shape=args.shape, length=args.length)
    result = train(cfg, args.out, dataset.pairs, init=lambda: build_init(args, dataset.pairs, dev_pairs),
                   dev_pairs=dev_pairs, resume=args.resume, data_info=data_info, progress=not args.quiet)
    summary = {"steps": result.steps, "epochs": round(result.epochs, 3), "wall_s": round(result.elapsed_s, 1)}
    for split in ("dev", "train"):
        last = [r for r in result.evals if r["split"] == split]
        if last:
            summary[f"{split}_accuracy"] = round(last[-1]["accuracy"], 4)
    print(f"trained {cfg.framework}: {json.dumps(summary)}; weights in {Path(args.out) / 'model.npz'}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from bench.config import quiet_frameworks as _quiet_frameworks
    from bench.datasets import load_dataset
    from bench.frameworks import runner_class

    _quiet_frameworks()
    if args.dtype == "float64":
        os.environ.setdefault("JAX_ENABLE_X64", "1")  # before JAX is imported
    loaded = load_params(args.params)
    vocab = Vocabulary.from_array(loaded.vocab, lowercase=loaded.config.lowercase)
    dataset = load_dataset(args, keep_unlabeled=True)
    dtype = args.dtype or ("float64" if args.framework == "reference" else "float32")
    runner = runner_class(args.framework)(loaded.params, loaded.config, dtype=dtype, device=args.device)
    result = evaluate_pairs(runner, dataset.pairs, vocab, batch_size=args.batch_size)
    name = str(dataset.report.path) if dataset.report is not None else dataset.name  # the file actually read
    print(f"{args.framework} ({dtype}) on {name}: accuracy {result.accuracy:.2%} "
          f"({int(np.trace(result.confusion)):,} of {result.pairs:,} pairs; {result.skipped_unlabeled:,} rows "
          f"without gold label left out), loss {result.loss:.4f}")
    print(format_confusion(result.confusion))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        record = {"framework": args.framework, "dtype": dtype, "params": str(args.params), "data": name,
                  **result.to_dict()}
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, out)
    return 0
