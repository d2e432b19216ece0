"""The DyNet SPINN behind the shared Runner interface (docs/runner-interface.md).

Define-by-run with automatic batching: every call builds a fresh
computation graph, one sentence after another (autobatch.py has no batch
dimension), and evaluates it once; with ``autobatch=True`` (the
implementation ``dynet``) DyNet groups the nodes of different sentences
into batched operations as it evaluates, with ``autobatch=False``
(``dynet-unbatched``) it runs them one by one. Both kinds of graph can live
in one process: autobatching is a property of each graph (``dy.renew_cg``).
``family="autobatch"`` is the one family (bench/frameworks.py), imported
when a runner is made.

Nothing is traced or compiled, so ``compile_stats()`` reports zeros. What
there is to see instead: ``last_phases`` (docs/runner-interface.md), where
the last call's seconds went (``build``: Python building the graph;
``evaluate``: DyNet's forward and backward passes; in training ``grads``:
copying the gradients out, ``update``: the optimizer), and
``last_host_syncs``, the evaluations a decided parse forced to read
decisions; train.Model keeps both for each call, and the runner reads them.

DyNet computes in float32 only, and the published wheel has no CUDA: both
are listed in ``unsupported`` and refused in one line.

The weights: the model (train.Model) keeps the canonical float32 arrays, from
which DyNet's ParameterCollection is written (convert.py). With
``trainer="shared"`` (the default) the optimizers update the canonical
arrays (train.py says why not DyNet's trainers), so ``get_params`` returns
exactly what was loaded or computed and the optimizer state is
checkpointed in the shared layout. With ``trainer="native"`` (the
benchmark's ``dynet`` and ``dynet-unbatched``: DyNet timed as its users run
it) DyNet's own trainer (train.NativeTrainer) updates DyNet's copy in C++;
``get_params`` reads it back, and ``optimizer_state`` is refused (the
trainer's state lives in C++).
"""

from __future__ import annotations

import importlib
from typing import Mapping, Sequence

import numpy as np

from shared.batching import PairBatch
from shared.params import ModelConfig
from shared.parsing import Parsed, split_pairs
from shared.runner import Runner as RunnerBase
from shared.runner import run_program

from . import convert, graph, reinforce, train
from .dispatches import autobatch_groups, census, graph_text
from .library import dy


def resolve_device(device: str) -> str:
    """"cpu" -> "cpu"; "gpu" is refused (NotImplementedError, see ``unsupported``)."""
    if device == "cpu":
        return device
    if device == "gpu" or str(device).startswith("cuda"):
        Runner.require("gpu")
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


FAMILIES = ("autobatch",)  # the family modules (bench/frameworks.py): SPINN for one sentence, batched by DyNet
TRAINERS = ("shared", "native")  # the shared rules in NumPy (default), or DyNet's own trainers


class Runner(RunnerBase):
    framework = "dynet"
    unsupported = {"float64": "DyNet computes in float32 only",
                   "gpu": "the dyNET38 wheel is built without CUDA (CPU only)"}
    # A decided parse evaluates the graph at each step with a choice and reads
    # the decisions back to Python (autobatch.SPINN.parse).
    reads_decisions_on_host = True

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = 1.0, entropy_weight: float = 0.0, family: str = "autobatch",
                 autobatch: bool = True, trainer: str = "shared", **options):
        if options:
            raise TypeError(f"unknown DyNet runner options {sorted(options)}; known: family, autobatch, trainer")
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
        if trainer not in TRAINERS:
            raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight, family=family)
        if dtype == "float64":
            self.require("float64")
        convert.resolve_dtype(dtype)  # a ValueError for any other than float32
        self.device = resolve_device(device)
        self.trainer = trainer
        module = importlib.import_module(f"{__package__}.{family}")
        self.model = convert.from_canonical(params, train.Model(config, encoder=module.SPINN, autobatch=autobatch,
                                                                dropout=dropout))

    def _encode(self, batch: PairBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        classifier = graph.new_graph(self.model, batch)
        roots, logits = graph.encode_batch(classifier, batch)
        B, H = len(logits), self.config.hidden_dim
        encodings, logits = graph.values(classifier, dy.concatenate_cols(roots), dy.concatenate_cols(logits))
        encodings = encodings.reshape(H, 2 * B).T
        graph.finish(classifier, self.model)
        self._read_model()
        return np.ascontiguousarray(encodings[:B]), np.ascontiguousarray(encodings[B:]), logits.reshape(3, B).T.copy()

    def _loss_and_grads(self, batch: PairBatch) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = train.loss_and_grads(self.model, batch.arrays(), transition_weight=self.transition_weight)
        self._read_model()
        return loss, convert.grads_to_canonical(self.model, grads)

    def _parse(self, batch: PairBatch, mode: str, uniforms: tuple[np.ndarray, np.ndarray] | None) -> Parsed:
        parses, logits = train.parse(self.model, batch.arrays(), mode, uniforms)
        self._read_model()
        return split_pairs(parses, logits)

    def _reinforce_loss_and_grads(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray],
                                  baseline: float) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        loss, grads, rewards = reinforce.loss_and_grads(self.model, batch.arrays(), uniforms, baseline,
                                                        reinforce_weight=self.reinforce_weight,
                                                        entropy_weight=self.entropy_weight)
        self._read_model()
        return loss, convert.grads_to_canonical(self.model, grads), rewards

    def _reinforce_step(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float) -> dict:
        record = reinforce.train_step(self.model, self.optimizer, batch.arrays(), uniforms, baseline, seed=self.seed,
                                      step=self.steps, reinforce_weight=self.reinforce_weight,
                                      entropy_weight=self.entropy_weight)
        self._read_model()
        self.steps += 1
        return record

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        if self.trainer == "native":
            self.optimizer = train.NativeTrainer(name, self.model, lr, frozen=frozen, **hyper)
        else:
            self.optimizer = train.make_optimizer(name, self.model, lr, frozen=frozen, **hyper)
        self._optimizer_spec = (name, self.optimizer.hyper, self.optimizer.frozen)

    def set_learning_rate(self, lr: float) -> None:
        self._need_optimizer()
        train.set_learning_rate(self.optimizer, lr)

    def _train_step(self, batch: PairBatch) -> float:
        loss = train.train_step(self.model, self.optimizer, batch.arrays(), seed=self.seed, step=self.steps,
                                transition_weight=self.transition_weight)
        self._read_model()
        self.steps += 1
        return loss

    def optimizer_state(self) -> dict[str, np.ndarray]:
        self._need_optimizer()
        return train.optimizer_state(self.model, self.optimizer, self.steps)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        train.load_optimizer_state(self.model, self.optimizer, state)
        self.steps = int(state["step"])

    def get_params(self) -> dict[str, np.ndarray]:
        if self.trainer == "native" and self.steps:  # DyNet's own updates moved its copy: read it back (a
            self.model.params = convert.to_canonical(self.model)  # forget bias as (b - 1) + 1: convert.to_canonical)
        return {name: value.copy() for name, value in self.model.params.items()}

    def _dispatches(self, program: str, batch: PairBatch, args: tuple) -> dict:
        """The nodes of the graph one call built, and the groups autobatching ran its forward pass in, read by a
        child process with DyNet's profiler on that runs the same call from the same weights (dispatches.py);
        without autobatching every node runs by itself, so the nodes are the count."""
        groups = autobatch_groups(self, program, batch, args) if self.model.autobatch else None
        if groups is not None and "error" in groups:
            raise RuntimeError(f"dynet: the profiled child process failed: {groups['error']}")
        run_program(self, program, batch, *args)
        types = census(graph_text())  # the call's graph is still the current one
        nodes = sum(types.values())
        if groups is None:
            return {"count": nodes, "counts": "graph nodes, each run by itself", "nodes": nodes,
                    "node_types": dict(types.most_common())}
        return {"count": groups["groups"], "counts": "groups autobatching ran the forward pass's nodes in",
                "nodes": nodes, "groups": groups["groups"], "grouped_nodes": groups["nodes"],
                "by_operation": groups["by_operation"], "node_types": dict(types.most_common())}

    def _read_model(self) -> None:
        """What the model kept of the last call: its host reads of decisions and its timings."""
        self.last_host_syncs = self.model.last_host_syncs
        self.last_phases = self.model.last_phases
