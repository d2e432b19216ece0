"""A training run's settings, each epoch's batches, and what a resumed run must share with the run it continues."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from shared import optimizers
from shared.batching import DEFAULT_BUCKETS, plan_batches
from shared.runner import check_replicas
from shared.snli import Pair

EMBEDDING = "embed.embedding"


@dataclass
class TrainConfig:
    """How to train (the model sizes live in the parameter file's ModelConfig)."""

    framework: str  # a name of bench.frameworks.NAMES: the reference, a framework or a variant
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
    # Steps between checkpoints inside an epoch (besides every epoch end and an interrupt); 0: epoch ends only.
    checkpoint_every: int = 1000
    transition_weight: float = 0.0  # the supervised transition loss of docs/spec.md §7 (> 0 needs a head)
    # Data-parallel replicas: the same steps with any K, so a run may resume with another.
    replicas: int = 1

    # Settings a resumed run must share with the run it continues (the rest, e.g. epochs or the framework, may change).
    MUST_MATCH = ("optimizer", "lr", "lr_decay", "lr_decay_steps", "hyper", "batch_size", "dropout", "seed",
                  "freeze_embeddings", "buckets", "drop_last", "transition_weight")

    def __post_init__(self) -> None:
        self.buckets = tuple(self.buckets)
        self.hyper = optimizers.resolve(self.optimizer, self.hyper)  # ValueError naming a bad one
        for name in ("batch_size", "epochs", "lr_decay_steps", "eval_batch_size", "log_every", "keep_checkpoints",
                     "steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:  # steps: None, the epochs decide
                raise ValueError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0 or not self.lr_decay > 0:
            raise ValueError(f"lr and lr-decay must be > 0, got {self.lr} and {self.lr_decay}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name in ("transition_weight", "checkpoint_every", "train_eval_pairs"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        check_replicas(self.replicas)
        if self.batch_size % self.replicas:
            raise ValueError(f"--batch-size {self.batch_size} does not split into {self.replicas} replicas: "
                             "give a batch size that is a multiple of --replicas")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def learning_rate(self, step: int) -> float:
        return optimizers.learning_rate(self.lr, step, self.lr_decay, self.lr_decay_steps)

    @property
    def frozen(self) -> tuple[str, ...]:
        return (EMBEDDING,) if self.freeze_embeddings else ()


def check_resume(saved: dict, now: dict) -> None:
    """A resumed run must have the settings and data of the run it continues (run.json documents)."""
    old, new = saved.get("train", {}), now["train"]
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for key in TrainConfig.MUST_MATCH:
        a, b = (tuple(v) if isinstance(v, list) else v  # a setting newer than the run: its default
                for v in (old.get(key, defaults[key]), new.get(key)))
        if a != b:
            raise ValueError(f"--resume: {key} was {a!r} in the run being resumed, now {b!r}; "
                             "give the same settings as the first command")
    if saved.get("train_fingerprint") != now["train_fingerprint"]:
        raise ValueError(f"--resume: the training data differ from the run being resumed "
                         f"({saved.get('train_pairs')} pairs then, {now['train_pairs']} now; words, labels or trees): "
                         "give the same --data and --parse")


def epoch_plan(lengths: np.ndarray, cfg: TrainConfig, epoch: int) -> list[tuple[int | None, np.ndarray]]:
    """(N, pair indices) of every batch of epoch ``epoch`` (0-based), in order."""
    seed = int(np.random.SeedSequence([cfg.seed, epoch]).generate_state(1)[0])
    return list(plan_batches(lengths, cfg.batch_size, buckets=cfg.buckets, shuffle=True, seed=seed,
                             drop_last=cfg.drop_last).batches)


def data_fingerprint(pairs: Sequence[Pair]) -> str:
    """A short hash of the pairs (ids, labels, tokens, parses): --resume tells the data changed."""
    digest = hashlib.sha256()
    for pair in pairs:
        trees = "\t".join("".join(map(str, s.transitions)) for s in (pair.premise, pair.hypothesis))
        digest.update(f"{pair.pair_id}\t{pair.label}\t{' '.join(pair.premise.tokens)}\t"
                      f"{' '.join(pair.hypothesis.tokens)}\t{trees}\n".encode())
    return digest.hexdigest()[:16]
