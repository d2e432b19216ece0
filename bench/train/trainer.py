"""The training loop: a framework-free :class:`Trainer` over the Runner interface (docs/training.md)."""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench import frameworks
from bench.progress import Progress
from bench.provenance import machine, provenance, timestamp
from bench.records import RecordWriter, read_records, rewrite_records, write_json
from bench.train.checkpoints import check_folder, latest_checkpoint, resume_checkpoint, save_checkpoint
from bench.train.config import TrainConfig, check_resume, data_fingerprint, epoch_plan
from bench.train.evaluation import evaluate_pairs, evaluate_parses, format_parse_evaluation
from shared import optimizers
from shared.batching import make_pair_batch, pair_length
from shared.params import ParamFile, save_params
from shared.snli import NO_LABEL, Pair, labelled_pairs
from shared.vocab import Vocabulary

@dataclass
class TrainResult:
    steps: int
    epochs: float
    params: dict  # the final weights, canonical
    evals: list  # the "eval" records of this run
    elapsed_s: float


def _framework_version(framework: str) -> str:
    """The installed version of the library, read from the package metadata (nothing is imported)."""
    library = frameworks.framework(frameworks.resolve(framework)[0]).library  # a variant: its framework's
    for name in (library, f"{library}-cpu"):  # some libraries ship a CPU-only wheel under its own name
        try:
            return metadata.version(name)
        except (metadata.PackageNotFoundError, TypeError):
            continue
    return "unknown"


class TrainingInterrupted(KeyboardInterrupt):
    """The run stopped on SIGINT or SIGTERM after a step, its checkpoint written: the message says where."""


class Trainer:
    """One training run in ``out_dir``, new or resumed; ``init``: a ParamFile or a function returning one."""

    def __init__(self, cfg: TrainConfig, out_dir: str | os.PathLike, train_pairs: Sequence[Pair], *,
                 init: Callable[[], ParamFile] | ParamFile | None = None, dev_pairs: Sequence[Pair] | None = None,
                 resume: bool = False, data_info: dict | None = None, progress: bool = True,
                 runner_options: dict | None = None, writer: bool = True, stop_on_signal: bool = False):
        self.cfg = cfg
        self.stop_on_signal = stop_on_signal
        self._stop_signal: str | None = None  # set by a signal handler, read between steps
        self.out_dir = Path(out_dir)
        # with replicas in several processes, one writes the folder and evaluates; the others only train
        self.writer = writer
        if writer:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self.train_pairs = labelled_pairs(train_pairs, "the training pairs", empty="no training pairs")
        self.dev_pairs = [p for p in dev_pairs if p.label != NO_LABEL] if dev_pairs else []
        self.metrics_file = self.out_dir / "metrics.jsonl"
        self.run_info = {"train": cfg.to_dict(), "data": dict(data_info or {}), "train_pairs": len(self.train_pairs),
                         "train_fingerprint": data_fingerprint(self.train_pairs), "dev_pairs": len(self.dev_pairs)}
        self.checkpoint = self._find_checkpoint(resume)
        self._restore(init)
        if cfg.transition_weight > 0 and not self.model.config.transition_head:
            raise ValueError(f"--transition-weight {cfg.transition_weight} needs a model with a transition head "
                             "('tracker.transition.kernel'): add --transition-head, or --init a file that has one")

        self.vocab = Vocabulary.from_array(self.model.vocab, lowercase=self.model.config.lowercase)
        replicas = {"replicas": cfg.replicas} if cfg.replicas > 1 else {}
        self.runner = frameworks.make_runner(cfg.framework, self.model.params, self.model.config, dtype=cfg.dtype,
                                  device=cfg.device, dropout=cfg.dropout, seed=cfg.seed,
                                  transition_weight=cfg.transition_weight, **replicas, **(runner_options or {}))
        self.runner.set_optimizer(cfg.optimizer, cfg.learning_rate(self.step), frozen=cfg.frozen, **cfg.hyper)
        self.optimizer_description = optimizers.describe(cfg.optimizer, cfg.hyper, cfg.lr, cfg.frozen)
        if self.checkpoint is not None:
            self.runner.load_optimizer_state(self.checkpoint.optimizer_state)
        if writer:  # once nothing can refuse the run: a refused one leaves no run.json behind
            write_json(self.out_dir / "run.json", self.run_info)

        self.lengths = np.array([pair_length(p) for p in self.train_pairs])
        self.steps_per_epoch = len(epoch_plan(self.lengths, cfg, 0))
        self.total = cfg.epochs * self.steps_per_epoch if cfg.steps is None else cfg.steps
        chosen = np.sort(np.random.default_rng(cfg.seed).permutation(len(self.train_pairs))[:cfg.train_eval_pairs])
        self.train_eval = [self.train_pairs[i] for i in chosen]
        self.progress = Progress(cfg.framework, self.total, unit="step", enabled=progress)
        self.evals: list[dict] = []
        # (loss, pairs, seconds, the runner's last_replica_seconds) of each step since the last "train" record
        self._window: list[tuple[float, int, float, dict]] = []
        self._recent = collections.deque(maxlen=20)  # (loss, pairs, seconds) of the last steps, for the progress line
        self._started = time.perf_counter()

    # -- the folder: a new run, or the one to resume ------------------------

    def _find_checkpoint(self, resume: bool):
        """The checkpoint to resume from: the newest that loads (those that do not are named)."""
        self.skipped: list[tuple[Path, str]] = []
        for tmp in (self.out_dir / "checkpoints").glob(".tmp-step-*") if self.writer else ():  # a killed run's
            shutil.rmtree(tmp, ignore_errors=True)
        if resume or self.writer:  # a replica that does not write may find the writer's new run already there
            check_folder(self.out_dir, resume)
        if not resume:
            return None
        check_resume(json.loads((self.out_dir / "run.json").read_text()), self.run_info)
        found, self.skipped = resume_checkpoint(self.out_dir, self.writer)
        return found

    def _restore(self, init) -> None:
        """Weights and position: the checkpoint's, or ``init`` at step 0."""
        if self.checkpoint is not None:
            state = self.checkpoint.state
            self.model = self.checkpoint.model
            self.step, self.epoch, self.position = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
            self.elapsed0, self.best = float(state.get("elapsed_s", 0.0)), state.get("best_dev_accuracy")
            self._saved_step = self.step
            if self.writer:  # the records a killed run wrote after its last checkpoint: gone, as if never written
                rewrite_records(self.metrics_file, [r for r in read_records(self.metrics_file)
                                                    if r.get("step", 0) <= self.step])
            return
        if init is None:
            raise ValueError("no initial weights given and no checkpoint to resume from")
        self.model = init() if callable(init) else init
        self.step = self.epoch = self.position = 0
        self.elapsed0, self.best = 0.0, None
        self._saved_step = None
        if self.writer and self.metrics_file.exists():  # a resumed run killed before its first checkpoint: start over
            self.metrics_file.unlink()

    def elapsed(self) -> float:
        return self.elapsed0 + time.perf_counter() - self._started

    def epoch_float(self) -> float:
        """Where the run is, in epochs (every epoch has steps_per_epoch batches: only their order changes)."""
        return self.epoch + self.position / self.steps_per_epoch

    # -- the loop -----------------------------------------------------------

    def run(self) -> TrainResult:
        self.metrics = RecordWriter(self.metrics_file if self.writer else os.devnull)  # a replica's: nowhere
        try:
            self._announce()
            with self._stop_requests():
                while self.step < self.total:
                    plan = epoch_plan(self.lengths, self.cfg, self.epoch)
                    while self.position < len(plan) and self.step < self.total:
                        self._between_steps()
                        self._train_step(*plan[self.position])
                    if self.position == len(plan):  # a whole epoch done
                        self.epoch, self.position = self.epoch + 1, 0
                    self._log_window()
                    self._end_of_period()
            self._end()
        except TrainingInterrupted:  # stopped after a step, its checkpoint written: this part ends here
            self._end()
            raise
        finally:
            self.metrics.close()
            self.progress.close()
        return TrainResult(steps=self.step, epochs=self.epoch_float(), params=self.runner.get_params(),
                           evals=self.evals, elapsed_s=self.elapsed())

    @contextlib.contextmanager
    def _stop_requests(self):
        """SIGINT and SIGTERM stop the loop after the step under way; a second SIGINT interrupts at once."""
        if not self.stop_on_signal or threading.current_thread() is not threading.main_thread():
            yield
            return

        def request(signum, frame):
            if self._stop_signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._stop_signal = signal.Signals(signum).name

        previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _between_steps(self) -> None:
        """Before a step: a checkpoint every ``checkpoint_every`` steps, and one before a signalled stop."""
        unsaved = self.position > 0 and self.step != self._saved_step
        if self._stop_signal is None:
            if unsaved and self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
                self._save()
            return
        if unsaved:
            self._log_window()
        path = self._save() if unsaved else latest_checkpoint(self.out_dir)
        where = f"; checkpoint {path}: add --resume to the same command to continue" if self.writer and path else ""
        raise TrainingInterrupted(f"{self._stop_signal} at step {self.step:,}{where}")

    def _announce(self) -> None:
        cfg, model = self.cfg, self.model
        versions = {"framework": cfg.framework, "framework_version": _framework_version(cfg.framework)}
        if self.checkpoint is None:
            self.metrics.write({"kind": "run", "step": 0, **versions, "config": cfg.to_dict(),
                                "model": json.loads(model.config.to_json()), "data": self.run_info["data"],
                                "train_pairs": len(self.train_pairs), "dev_pairs": len(self.dev_pairs),
                                "steps_per_epoch": self.steps_per_epoch, "total_steps": self.total,
                                "weights": int(sum(np.size(v) for v in model.params.values())),
                                **machine(), "timestamp": timestamp()})
            self.progress.write(f"{len(self.train_pairs):,} training pairs, {self.steps_per_epoch:,} steps per epoch, "
                                f"{self.total:,} steps; dev {len(self.dev_pairs):,} pairs; metrics -> "
                                f"{self.metrics_file}")
        else:
            self.metrics.write({"kind": "resume", "step": self.step, **versions, "from": str(self.checkpoint.path),
                                **machine(), "timestamp": timestamp(),
                                "skipped": [{"path": str(path), "reason": reason} for path, reason in self.skipped]})
            self.progress.write(f"resumed from {self.checkpoint.path} at step {self.step:,} "
                                f"(epoch {self.epoch}, batch {self.position})")

    def _end(self) -> None:
        """The "end" record of this run or of its resumed part: the files it ran (bench/provenance.py), and when."""
        if self.writer:
            self.metrics.write({"kind": "end", "step": self.step, **provenance(), "timestamp": timestamp()})

    def _train_step(self, size: int | None, indices: np.ndarray) -> None:
        t0 = time.perf_counter()
        pairs = [self.train_pairs[i] for i in indices]
        batch = make_pair_batch(pairs, self.vocab, num_tokens=size)
        lr = self.cfg.learning_rate(self.step)
        if self.cfg.lr_decay != 1.0:
            self.runner.set_learning_rate(lr)
        loss = self._optimizer_step(batch, pairs)
        if not math.isfinite(loss):
            raise ValueError(f"loss is {loss} at step {self.step + 1} (epoch {self.epoch + 1}): try a lower --lr")
        self.step += 1
        self.position += 1
        seconds = time.perf_counter() - t0
        self._window.append((loss, batch.size, seconds, dict(self.runner.last_replica_seconds)))
        self._recent.append((loss, batch.size, seconds))
        losses, pairs, busy = zip(*self._recent)
        self.progress.update(1, f"epoch {self.epoch_float():.2f} loss {np.mean(losses):.4f} lr {lr:.2e} "
                                f"{sum(pairs) / max(sum(busy), 1e-9):,.0f} pairs/s")
        if self.step % self.cfg.log_every == 0:
            self._log_window()

    # Hooks a variant of the loop overrides (bench/train/reinforce.py).

    def _optimizer_step(self, batch, pairs: Sequence[Pair]) -> float:
        """One step on ``batch`` (made of ``pairs``); the loss before the update."""
        return self.runner.train_step(batch)

    def _window_fields(self) -> dict:
        """More fields of a "train" record, about the steps since the last one."""
        return {}

    def _evaluate(self, pairs: Sequence[Pair]):
        """The eval-mode result (.accuracy, .loss, .pairs, .to_dict()) on ``pairs``; how a head parses them, or None."""
        shape = dict(batch_size=self.cfg.eval_batch_size, buckets=self.cfg.buckets)
        result = evaluate_pairs(self.runner, pairs, self.vocab, **shape)
        head = self.model.config.transition_head  # how well it parses (docs/spec.md §7)
        return result, evaluate_parses(self.runner, pairs, self.vocab, **shape) if head else None

    def _state_fields(self) -> dict:
        """More entries of a checkpoint's state.json."""
        return {}

    def _log_window(self) -> None:
        """One "train" record: the mean loss of the steps since the last one (at the rate of the last step)."""
        if self._window:
            losses, pairs, seconds, replicas = zip(*self._window)
            steps = [r for r in replicas if r]  # per phase, each replica's mean seconds a step, where shown
            self.metrics.write({"kind": "train", "step": self.step, "epoch": self.epoch_float(),
                                "loss": float(np.mean(losses)), "steps": len(losses),
                                "lr": self.cfg.learning_rate(self.step - 1), "pairs": sum(pairs),
                                "pairs_per_s": sum(pairs) / max(sum(seconds), 1e-9), "elapsed_s": self.elapsed(),
                                **({"replica_s_per_step": {phase: np.mean([s[phase] for s in steps], axis=0).tolist()
                                                          for phase in steps[0]}} if steps else {}),
                                **self._window_fields()})
        self._window = []

    def _end_of_period(self) -> None:
        """Evaluate, then checkpoint (at every epoch end and where the run stops)."""
        epoch_float = self.epoch_float()
        if not self.writer:
            return
        for split, pairs in (("dev", self.dev_pairs), ("train", self.train_eval)):
            if not pairs:
                continue
            t0 = time.perf_counter()
            result, parses = self._evaluate(pairs)
            record = {"kind": "eval", "split": split, "step": self.step, "epoch": epoch_float, **result.to_dict(),
                      **({} if parses is None else {"parsing": parses.to_dict()}),
                      "eval_s": time.perf_counter() - t0, "elapsed_s": self.elapsed()}
            self.metrics.write(record)
            self.evals.append(record)
            self.progress.write(f"epoch {epoch_float:.2f} step {self.step:,}: {split} accuracy {result.accuracy:.2%} "
                                f"loss {result.loss:.4f} ({result.pairs:,} pairs)")
            if parses is not None:
                self.progress.write(f"  {split} {format_parse_evaluation(parses)}")
        self._save()

    def _save(self) -> Path | None:
        """The checkpoint of this step (model.npz and best.npz beside it); its path."""
        cfg, model = self.cfg, self.model
        if not self.writer:
            return None
        params = self.runner.get_params()
        dev = [r for r in self.evals if r["split"] == "dev" and r["step"] == self.step]
        if dev and (self.best is None or dev[0]["accuracy"] > self.best):
            self.best = dev[0]["accuracy"]
            save_params(self.out_dir / "best.npz", params, model.config, model.vocab)
        state = {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.position,
                 "elapsed_s": self.elapsed(), "best_dev_accuracy": self.best, "framework": cfg.framework,
                 "timestamp": timestamp(), **self._state_fields()}
        path = save_checkpoint(self.out_dir, params=params, model_config=model.config, vocab_words=model.vocab,
                               optimizer_state=self.runner.optimizer_state(),
                               optimizer_description=self.optimizer_description, state=state, keep=cfg.keep_checkpoints)
        save_params(self.out_dir / "model.npz", params, model.config, model.vocab)
        self.metrics.write({"kind": "checkpoint", "step": self.step, "epoch": self.epoch_float(), "path": str(path),
                            "elapsed_s": self.elapsed()})
        self._saved_step = self.step
        return path
