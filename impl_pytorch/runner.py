"""The PyTorch SPINN behind the shared Runner interface (docs/runner-interface.md).

Eager code: nothing is traced or compiled, so ``compile_stats()`` reports
zeros (and ``trace`` has nothing to hand out). What there is to see instead
is the autograd graph each batch records and how often the Python loop calls
Tracker and Reduce: ``bench explain`` (explain.py) reads both off the
runner's ``model``.

Options beyond the common interface, so that only the model differs between
the variants of docs/runner-interface.md (training, optimizers and parse
modes are the same code, train.py):

* ``family="lists" | "masked" | "levels"``: the family module whose
  ``SPINN`` the classifier runs, imported when the runner is built (only that
  one): lists.py's Python lists (the default), masked.py's padded arrays,
  pointers and masks (``pytorch-masked``), or levels.py's LevelClassifier,
  SPINN on a level schedule made on the host for every batch (levels.py's
  ``host_schedule``, the batch's ``levels``; ``pytorch-levels``; gold
  transitions only, the rest refused: ``unsupported``). With levels,
  ``last_rows`` holds the last batch's levels and rows and ``last_phases``
  its ``schedule`` (seconds on the host).
* ``compile=True``: torch.compile of the masked step (``pytorch-compiled``,
  compiled.py); ``compile_stats()`` then counts graphs, compile time,
  graph breaks and Inductor's cache per method. A string names another
  torch.compile backend (the tests use ``"aot_eager"``).
* ``compile_mode="reduce-overhead"``: the same, with Inductor's CUDA graphs
  (``pytorch-cudagraphs``): each compiled step is one graph replay on a GPU.
* ``replicas=K``: this process is one of K that DistributedDataParallel keeps
  in step (replicas.py, imported only then).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Mapping, Sequence

import numpy as np
import torch

from shared.batching import BatchArrays, PairBatch
from shared.params import ModelConfig
from shared.parsing import Parsed, split_pairs
from shared.runner import CompileStats, check_replicas, run_program
from shared.runner import Runner as RunnerBase

from . import convert, reinforce, train
from .dispatches import aten_ops
from .classifier import SNLIClassifier

# The families, by their modules (bench/frameworks.py FAMILIES): "lists", define-by-run
# (the default); "masked", the padded-array algorithm of impl_jax in PyTorch
# eager (and, with compile=True, under torch.compile); "levels", a level
# schedule made on the host, one batched Reduce per level.
FAMILIES = ("lists", "masked", "levels")


def resolve_device(device: str) -> torch.device:
    """"cpu" or "gpu" -> the torch.device: the CPU, or the first visible CUDA
    device ("cuda:N" also accepted); a ValueError where there is none."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "gpu" or str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but PyTorch sees no CUDA device")
        return torch.device("cuda" if device == "gpu" else device)
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


class Runner(RunnerBase):
    framework = "pytorch"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 family: str = "lists", compile: bool | str = False, compile_mode: str | None = None,
                 reinforce_weight: float = 1.0,
                 entropy_weight: float = 0.0, replicas: int = 1, **options):
        if options:
            raise TypeError(f"unknown PyTorch runner options {sorted(options)}; known: family, compile, compile_mode, "
                            "replicas")
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
        if family == "levels" and replicas != 1:
            raise ValueError("family 'levels' runs on one device (replicas=1)")
        if compile and family != "masked":
            raise ValueError("compile=True needs family='masked': the list-based loop branches in Python "
                             "on every batch's trees, so there is no one graph per shape to compile")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight, family=family)
        self.device = resolve_device(device)
        # The lists family reads each decision back to Python (last_host_syncs counts
        # those reads per parse); the masked one keeps decisions on the device.
        self.reads_decisions_on_host = family == "lists"
        # replicas > 1: this process is one of K that DistributedDataParallel
        # keeps in step (replicas.py); each trains on its share of every batch.
        self.replicas = check_replicas(replicas)
        if self.replicas > 1:
            if compile:
                raise ValueError("replicas and compile exclude each other here")
            from .replicas import replica_devices
            self.device = replica_devices(self.device, self.replicas)
        self._family_module = importlib.import_module(f"{__package__}.{family}")
        classifier = self._family_module.LevelClassifier if family == "levels" else SNLIClassifier
        self.model = convert.from_canonical(params, _build(config, classifier, self._family_module.SPINN,
                                                           convert.resolve_dtype(dtype), self.device, dropout))
        # compile=True: torch.compile (Inductor) of the masked step, its cost counted per runner
        # method; a string names another torch.compile backend (e.g. "aot_eager": capture and
        # autograd without code generation).
        self._compiled = None
        if compile:
            from .compiled import compile_model
            backend = "inductor" if compile is True else str(compile)
            self._compiled = compile_model(self.model, backend, compile_mode)
            if compile_mode == "reduce-overhead":
                self.warmup_calls = 2  # Inductor runs a new graph once, then records its CUDA graph
        elif compile_mode is not None:
            raise ValueError("compile_mode needs compile=True")

    def _arrays(self, batch: PairBatch) -> BatchArrays:
        """The batch as the model takes it: its five arrays, NumPy on the host, and with the level schedule its
        ``levels`` (levels.py's host_schedule, made here, on the host)."""
        arrays = batch.arrays()
        if self.family == "levels":
            tracker = self.config.tracker_dim > 0
            levels, self.last_rows, self.last_phases = self._family_module.host_schedule(batch, tracker)
            arrays = arrays._replace(levels=levels)
        return arrays

    def _encode(self, batch: PairBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.model.eval()
        arrays = self._arrays(batch)
        with self._counted("encode", batch), torch.inference_mode():  # no graph is recorded at all
            premise, hypothesis, logits = self.model(*arrays[:4], **({"levels": arrays.levels} if arrays.levels
                                                                     else {}))
        self.last_host_syncs = 0  # gold mode: Python reads the transitions, already on the host
        return tuple(t.cpu().numpy() for t in (premise, hypothesis, logits))

    def _loss_and_grads(self, batch: PairBatch) -> tuple[float, dict[str, np.ndarray]]:
        with self._counted("loss_and_grads", batch):
            loss, grads = train.loss_and_grads(self.model, self._arrays(batch),
                                               transition_weight=self.transition_weight)
        return loss, convert.grads_to_canonical(self.model, grads)

    def _parse(self, batch: PairBatch, mode: str, uniforms: tuple[np.ndarray, np.ndarray] | None) -> Parsed:
        with self._counted(f"parse:{mode}", batch):
            parses, logits = train.parse(self.model, self._arrays(batch), mode, uniforms)
            parsed = split_pairs(parses, logits, lambda t: t.cpu().numpy() if torch.is_tensor(t) else t)
        self.last_host_syncs = self.model.spinn.last_host_syncs
        return parsed

    def _reinforce_loss_and_grads(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray],
                                  baseline: float) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        loss, grads, rewards = reinforce.loss_and_grads(self.model, batch.arrays(), uniforms, baseline,
                                                        reinforce_weight=self.reinforce_weight,
                                                        entropy_weight=self.entropy_weight)
        return loss, convert.grads_to_canonical(self.model, grads), rewards

    def _reinforce_step(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float) -> dict:
        if self.replicas > 1:
            raise NotImplementedError("REINFORCE steps with replicas are not built for PyTorch (its sampled "
                                      "parses would need the shared uniforms of each replica's rows)")
        record = reinforce.train_step(self.model, self.optimizer, batch.arrays(), uniforms, baseline, seed=self.seed,
                                      step=self.steps, reinforce_weight=self.reinforce_weight,
                                      entropy_weight=self.entropy_weight)
        self.steps += 1
        return record

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        self.optimizer = train.make_optimizer(name, self.model, lr, frozen=frozen, **hyper)

    def set_learning_rate(self, lr: float) -> None:
        self._need_optimizer()
        train.set_learning_rate(self.optimizer, lr)

    def _train_step(self, batch: PairBatch) -> float:
        if self.replicas > 1:
            from .replicas import replica_train_step
            loss, self.last_phases, self.last_replica_seconds = replica_train_step(
                self.model, self.optimizer, batch.arrays(), seed=self.seed, step=self.steps,
                transition_weight=self.transition_weight)
            self.steps += 1
            return loss
        with self._counted("train_step", batch):
            loss = train.train_step(self.model, self.optimizer, self._arrays(batch), seed=self.seed,
                                    step=self.steps, transition_weight=self.transition_weight)
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
        return convert.to_canonical(self.model)

    def compile_stats(self, program: str | None = None) -> CompileStats:
        """Eager (compile=False): zeros. compile=True: what torch.compile cost
        per program (impl_pytorch/compiled.py)."""
        if self._compiled is None:
            return CompileStats()
        return self._compiled.stats(program)

    def _dispatches(self, program: str, batch: PairBatch, args: tuple) -> dict:
        """The aten operations one call dispatched, read from PyTorch's profiler (dispatches.py); with
        compile=True, those the compiled code calls (Inductor's fused kernels are not seen)."""
        found = aten_ops(lambda: run_program(self, program, batch, *args))
        return {"count": found["ops"], "counts": "aten operations dispatched",
                **{key: found[key] for key in ("nested", "by_op", "compiled_calls")}}

    def _counted(self, program: str, batch: PairBatch):
        """Count what compiling cost during the block (a no-op when eager)."""
        if self._compiled is None:
            return contextlib.nullcontext()
        B, N = np.shape(batch.premise_tokens)
        return self._compiled.count(program, (B, N, np.shape(batch.premise_transitions)[1]))


def _build(config: ModelConfig, classifier: type, encoder, dtype: torch.dtype, device: torch.device,
           dropout: float) -> SNLIClassifier:
    """A ``classifier`` (SNLIClassifier, or the levels family's) with ``encoder`` (a family's SPINN class) on
    ``device`` in ``dtype``, its parameters allocated and not yet set (convert.from_canonical sets
    them): built on the meta device, so PyTorch's own initialisers never run."""
    with torch.device("meta"):
        model = classifier(config, encoder=encoder, dropout=dropout)
    return model.to_empty(device=device).to(dtype)
