"""The DyNet SPINN behind the shared Runner interface (docs/runner-interface.md).

Define-by-run with automatic batching: every call builds a fresh
computation graph, one sentence after another (model.py has no batch
dimension), and evaluates it once; with ``autobatch=True`` (the
implementation ``dynet``) DyNet groups the nodes of different sentences
into batched operations as it evaluates, with ``autobatch=False``
(``dynet-unbatched``) it runs them one by one. Both kinds of graph can live
in one process: autobatching is a property of each graph (``dy.renew_cg``).

Nothing is traced or compiled, so ``compile_stats()`` reports zeros. What
there is to see instead: ``last_phases`` (docs/runner-interface.md), where
the last call's seconds went (``build``: Python building the graph;
``evaluate``: DyNet's forward and backward passes; in training ``grads``:
copying the gradients out, ``update``: the optimizer), and
``last_host_syncs``, the evaluations a decided parse forced to read
decisions.

DyNet computes in float32 only, and the published wheel has no CUDA: both
are listed in ``unsupported`` and refused in one line.

The weights: the runner keeps the canonical float32 arrays (``params``),
from which DyNet's ParameterCollection is written (convert.py). With
``trainer="shared"`` (the default) the optimizers update the canonical
arrays (train.py says why not DyNet's trainers), so ``get_params`` returns
exactly what was loaded or computed and the optimizer state is
checkpointed in the shared layout. With ``trainer="native"`` (the
benchmark's ``dynet`` and ``dynet-unbatched``: DyNet timed as its users run
it) DyNet's own trainer updates DyNet's copy in C++; ``get_params`` reads it
back, and ``optimizer_state`` is refused (the trainer's state lives in C++).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from shared.batching import PairBatch
from shared.params import ModelConfig, check_params
from shared.parsing import Parsed
from shared.runner import Runner as RunnerBase

from . import convert, reinforce, train
from .classifier import SNLIClassifier


def resolve_device(device: str) -> str:
    """"cpu" -> "cpu"; "gpu" is refused (NotImplementedError, see ``unsupported``)."""
    if device == "cpu":
        return device
    if device == "gpu" or str(device).startswith("cuda"):
        Runner.require("gpu")
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


TRAINERS = ("shared", "native")  # the shared rules in NumPy (default), or DyNet's own trainers


class Runner(RunnerBase):
    framework = "dynet"
    unsupported = {"float64": "DyNet computes in float32 only",
                   "gpu": "the dyNET38 wheel is built without CUDA (CPU only)"}
    # A decided parse evaluates the graph at each step with a choice and reads
    # the decisions back to Python (model.SPINN.parse).
    reads_decisions_on_host = True

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = 1.0, entropy_weight: float = 0.0, autobatch: bool = True,
                 trainer: str = "shared", **options):
        if options:
            raise TypeError(f"unknown DyNet runner options {sorted(options)}; known: autobatch, trainer")
        if trainer not in TRAINERS:
            raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight)
        if dtype == "float64":
            self.require("float64")
        convert.resolve_dtype(dtype)  # a ValueError for any other than float32
        self.device = resolve_device(device)
        self.autobatch = bool(autobatch)
        self.trainer = trainer
        check_params(params, config)  # as given: an integer or non-finite array is named before any cast
        # The canonical weights, float32 copies: the optimizer's arrays and what get_params returns.
        self.params = {name: np.array(value, dtype=np.float32) for name, value in params.items()}
        self.weights = convert.from_canonical(self.params, config)

    def _encode(self, batch: PairBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        classifier = SNLIClassifier(self.weights, autobatch=self.autobatch)
        run = classifier._forward(batch)
        encodings, logits = classifier._values(run.encodings(), run.class_logits())
        B, H = len(run.logits), self.config.hidden_dim
        encodings = encodings.reshape(H, 2 * B).T
        self.last_host_syncs = 0  # gold mode: Python reads the transitions, already on the host
        self.last_phases = classifier.clock.timings()
        return np.ascontiguousarray(encodings[:B]), np.ascontiguousarray(encodings[B:]), logits.reshape(3, B).T.copy()

    def _loss_and_grads(self, batch: PairBatch) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads, timings = train.loss_and_grads(self.weights, batch, autobatch=self.autobatch,
                                                       transition_weight=self.transition_weight)
        self.last_phases = timings
        self.last_host_syncs = 0  # gold mode
        return loss, grads

    def _parse(self, batch: PairBatch, mode: str, uniforms: tuple[np.ndarray, np.ndarray] | None) -> Parsed:
        parsed, self.last_host_syncs, timings = train.parse(self.weights, batch, mode, uniforms,
                                                            autobatch=self.autobatch)
        self.last_phases = timings
        return parsed

    def _reinforce_loss_and_grads(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray],
                                  baseline: float) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        loss, grads, rewards, self.last_host_syncs, timings = reinforce.loss_and_grads(
            self.weights, batch, uniforms, baseline, self.reinforce_weight, self.entropy_weight,
            autobatch=self.autobatch)
        self.last_phases = timings
        return loss, grads, rewards

    def _reinforce_step(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float) -> dict:
        record, self.last_host_syncs, timings = reinforce.train_step(
            self.weights, self.params, self.optimizer, batch, uniforms, baseline, self.reinforce_weight,
            self.entropy_weight, autobatch=self.autobatch, dropout=self.dropout, seed=self.seed, step=self.steps)
        self.last_phases = timings
        self.steps += 1
        return record

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        if self.trainer == "native":
            self.optimizer = train._native_trainer(self.weights, name, lr, self.config, frozen=frozen, **hyper)
        else:
            self.optimizer = train.make_optimizer(name, lr, self.config, frozen=frozen, **hyper)
        self._optimizer_spec = (name, self.optimizer.hyper, self.optimizer.frozen)

    def set_learning_rate(self, lr: float) -> None:
        self._need_optimizer()
        train.set_learning_rate(self.optimizer, lr)

    def _train_step(self, batch: PairBatch) -> float:
        loss, timings = train.train_step(
            self.weights, self.params, self.optimizer, batch, autobatch=self.autobatch, dropout=self.dropout,
            seed=self.seed, step=self.steps, transition_weight=self.transition_weight)
        self.last_phases = timings
        self.last_host_syncs = 0  # gold mode
        self.steps += 1
        return loss

    def optimizer_state(self) -> dict[str, np.ndarray]:
        self._need_optimizer()
        self._need_shared_trainer()
        return train.optimizer_state(self.optimizer, self.steps)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        self._need_shared_trainer()
        self.steps = train.load_optimizer_state(self.optimizer, state)

    def _need_shared_trainer(self) -> None:
        if self.trainer == "native":
            raise ValueError("DyNet's own trainers keep their state in C++, out of Python's reach: "
                             "an optimizer state (a checkpoint) needs trainer='shared'")

    def get_params(self) -> dict[str, np.ndarray]:
        if self.trainer == "native" and self.steps:  # DyNet's own updates moved its copy: read it back (a
            self.params = convert.to_canonical(self.weights)  # forget bias as (b - 1) + 1: convert.to_canonical)
        return {name: value.copy() for name, value in self.params.items()}
