"""The runner interface every implementation follows (docs/runner-interface.md).

Framework-free: ``impl_*/runner.py`` subclass :class:`Runner`, and everything
that drives an implementation (the benchmark, training, ``encode``, the
tests) sees only these methods. :class:`CompileStats` is the one record of
what tracing and compiling cost, with the same fields and types in every
framework (zeros where a framework has nothing to report), so the benchmark
subtracts and records them without asking which framework it measured.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

import numpy as np

from shared.params import ModelConfig


@dataclass
class CompileStats:
    """What building the programs has cost so far (for one program, or all).

    ``traces`` and ``compile_s`` are the record keys of docs/spec.md §6; the
    other numbers split them up where a framework can tell the parts apart.
    """

    traces: int = 0  # Python traced into a graph / jaxpr (JAX: one per compiled shape)
    compile_s: float = 0.0  # every second spent before a program's first result: the sum of the parts below
    trace_s: float = 0.0  # Python -> graph (TensorFlow: get_concrete_function; JAX: jit(...).trace)
    lower_s: float = 0.0  # JAX: jaxpr -> StableHLO
    xla_compile_s: float = 0.0  # JAX: StableHLO -> executable
    first_calls_s: float = 0.0  # TensorFlow: calls that optimised (Grappler) or XLA-compiled first, run included
    xla_compilations: int = 0  # executables XLA built (JAX; TensorFlow with xla=True); 0 otherwise
    cache_hits: int = 0  # JAX persistent compilation cache
    cache_misses: int = 0
    graph_breaks: int = 0  # PyTorch with compile=True: where Dynamo fell back to Python
    shapes: list[tuple] = field(default_factory=list)  # (program, B, N, T) of each compilation or first call

    # The additive numbers (everything but shapes).
    NUMBERS: ClassVar[tuple[str, ...]] = ("traces", "compile_s", "trace_s", "lower_s", "xla_compile_s",
                                          "first_calls_s", "xla_compilations", "cache_hits", "cache_misses",
                                          "graph_breaks")

    def since(self, earlier: "CompileStats") -> "CompileStats":
        """What was spent between ``earlier`` and these stats."""
        numbers = {name: getattr(self, name) - getattr(earlier, name) for name in self.NUMBERS}
        return CompileStats(**numbers, shapes=self.shapes[len(earlier.shapes):])

    def to_dict(self) -> dict:
        """JSON-ready (shapes as lists)."""
        out = dataclasses.asdict(self)
        out["shapes"] = [list(shape) for shape in self.shapes]
        return out

    @classmethod
    def total(cls, parts: Sequence["CompileStats"], shapes: Sequence[tuple] | None = None) -> "CompileStats":
        """The sum of several programs' stats; ``shapes`` in the order they
        happened, where the caller knows it (else program by program)."""
        numbers = {name: sum(getattr(p, name) for p in parts) for name in cls.NUMBERS}
        if shapes is None:
            shapes = [shape for p in parts for shape in p.shapes]
        return cls(**numbers, shapes=list(shapes))


class Runner(abc.ABC):
    """One implementation behind the shared interface.

    Subclasses set ``framework`` and implement the abstract methods; the
    constructor keeps what every implementation needs (config, dtype, seed,
    the dropout rate checked, the step count, no optimizer yet).
    """

    framework: ClassVar[str]
    # What this implementation cannot do: capability -> the one-line reason
    # (capabilities: "parse", "reinforce", "train", "float64", "gpu"). The
    # harness asks supports() instead of probing for methods.
    unsupported: ClassVar[dict[str, str]] = {}
    # Whether a parse decided by the model reads decisions back to the host
    # (define-by-run code): last_host_syncs then counts those reads.
    reads_decisions_on_host: ClassVar[bool] = False

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0):
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.config = config
        self.dtype = dtype
        self.dropout = dropout
        self.seed = seed
        self.steps = 0  # training steps taken: numbers the dropout draws (restored with the optimizer state)
        self.optimizer = None  # the framework's optimizer, once set_optimizer has run
        self._optimizer_spec: tuple | None = None  # (name, hyperparameters, frozen canonical names)
        self.last_host_syncs = 0  # device-to-host reads of decisions in the last call (define-by-run parses)

    @classmethod
    def supports(cls, capability: str) -> bool:
        """Whether this implementation can do ``capability`` (see ``unsupported``)."""
        return capability not in cls.unsupported

    @classmethod
    def require(cls, capability: str) -> None:
        """A NotImplementedError, in one line, where ``capability`` is unsupported."""
        if capability in cls.unsupported:
            raise NotImplementedError(f"{cls.framework}: no {capability}: {cls.unsupported[capability]}")

    # -- inference and gradients ------------------------------------------

    @abc.abstractmethod
    def encode(self, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eval mode: premise <dtype>[B, H], hypothesis <dtype>[B, H], logits <dtype>[B, 3]."""

    @abc.abstractmethod
    def loss_and_grads(self, batch) -> tuple[float, dict[str, np.ndarray]]:
        """Eval mode: mean cross-entropy and its gradient per canonical parameter."""

    # -- training ---------------------------------------------------------

    @abc.abstractmethod
    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        """The framework's own sgd, adam or rmsprop with the shared hyperparameters."""

    @abc.abstractmethod
    def set_learning_rate(self, lr: float) -> None:
        """The rate of the following steps; never retraces or recompiles."""

    @abc.abstractmethod
    def train_step(self, batch) -> float:
        """One optimizer step in place; the loss before the update."""

    @abc.abstractmethod
    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer state in the shared layout of shared/optimizers.py."""

    @abc.abstractmethod
    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Install a state of optimizer_state()'s layout, from any framework."""

    @abc.abstractmethod
    def get_params(self) -> dict[str, np.ndarray]:
        """The current weights, canonical names and layout."""

    # -- what building the programs cost ----------------------------------

    def compile_stats(self, program: str | None = None) -> CompileStats:
        """Tracing and compiling so far, of ``program`` or of all; eager code reports zeros."""
        return CompileStats()

    def _need_optimizer(self) -> None:
        if self.optimizer is None:
            raise RuntimeError("call set_optimizer first")
