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
import functools
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

import numpy as np

from shared import contract
from shared.params import ModelConfig
from shared.parsing import Parsed


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
    cudagraph_skips: int = 0  # PyTorch compiled with CUDA graphs: graphs run without one (on a CPU, all)
    shapes: list[tuple] = field(default_factory=list)  # (program, B, N, T) of each compilation or first call

    # The additive numbers (everything but shapes).
    NUMBERS: ClassVar[tuple[str, ...]] = ("traces", "compile_s", "trace_s", "lower_s", "xla_compile_s",
                                          "first_calls_s", "xla_compilations", "cache_hits", "cache_misses",
                                          "graph_breaks", "cudagraph_skips")

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


def check_replicas(replicas) -> int:
    """The data-parallel replica count a runner option or a training setting
    names (``bench train --replicas``): a whole number >= 1, or a ValueError."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be a whole number >= 1, got {replicas!r}")
    return replicas


# The programs a runner runs on a batch, each by its public method (a parse's mode after the colon; sampled mode
# takes its uniforms after the batch, REINFORCE its uniforms and baseline): Runner.dispatches counts one of them.
PROGRAMS = ("encode", "loss_and_grads", "train_step", "parse:gold", "parse:predicted", "parse:sampled",
            "reinforce_loss_and_grads", "reinforce_step")


def run_program(runner: "Runner", program: str, batch, *args):
    """``program`` (a name of PROGRAMS) run once on ``batch`` by ``runner``'s public method, with ``args`` after the
    batch (sampled mode's uniforms; REINFORCE's uniforms and baseline): its result."""
    check_program(program)
    if program.startswith("parse:"):
        return runner.parse(batch, program.split(":", 1)[1], *args)
    return getattr(runner, program)(batch, *args)


def check_program(program: str) -> str:
    """``program`` if PROGRAMS names it, else a one-line ValueError."""
    if program not in PROGRAMS:
        raise ValueError(f"unknown program {program!r}; choose from {', '.join(PROGRAMS)}")
    return program


# Why define-by-run code has no program to trace apart from running it (Runner.trace, Runner.program_args).
_EAGER = "define-by-run: the graph is built while the code runs, so there is no program to trace apart from a call"


class _class_or_instance:
    """A method bound to the runner when called on one, else to the class (like a classmethod)."""

    def __init__(self, function):
        self.function = function
        functools.update_wrapper(self, function)

    def __get__(self, instance, owner):
        return functools.partial(self.function, owner if instance is None else instance)


class Runner(abc.ABC):
    """One implementation behind the shared interface.

    Subclasses set ``framework`` and implement the abstract methods; the
    constructor keeps what every implementation needs (config, dtype, seed,
    the dropout rate and the loss weights checked, the algorithm family and
    what it cannot do, the step count, no optimizer yet).

    The methods that take a batch are template methods: the public one
    (``encode``, ``parse``, ``train_step``, ...) checks its inputs on the host
    with shared/contract.py and dispatches to the protected one an
    implementation defines (``_encode``, ``_parse``, ``_train_step``, ...),
    which may take its inputs as checked. So every implementation refuses the
    same inputs with the same one-line message, and a compiled program never
    sees an input it would silently misread.
    """

    framework: ClassVar[str]
    # What this implementation cannot do: capability -> the one-line reason
    # (capabilities: "parse", "predicted parse", "sampled parse", "reinforce",
    # "train", "float64", "gpu"). The harness asks supports() instead of
    # probing for methods. A runner whose options change what it can do sets
    # its own ``self.unsupported`` (the class's entries and more).
    unsupported: ClassVar[dict[str, str]] = {}
    # Whether a parse decided by the model reads decisions back to the host
    # (define-by-run code): last_host_syncs then counts those reads.
    reads_decisions_on_host: ClassVar[bool] = False

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = contract.DEFAULT_REINFORCE_WEIGHT,
                 entropy_weight: float = contract.DEFAULT_ENTROPY_WEIGHT, family: str | None = None):
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        # The losses' weights (docs/spec.md §7), checked here for every implementation:
        # the supervised transition loss's in loss_and_grads and train_step (> 0 needs
        # the head), and REINFORCE's in the reinforce_* methods.
        self.transition_weight = contract.check_transition_weight(config, transition_weight)
        self.reinforce_weight, self.entropy_weight = contract.check_weights(config, reinforce_weight,
                                                                            entropy_weight)
        self.config = config
        # The family the runner runs, named by its module (docs/runner-interface.md), where it has a choice of them.
        self.family = family
        if family == "levels":  # a schedule made on the host follows the given (gold) transitions only
            from shared.levels import LEVELS_UNSUPPORTED  # only where the levels run (what ran: docs/spec.md §6)
            self.unsupported = {**type(self).unsupported, **LEVELS_UNSUPPORTED}
        self.dtype = dtype
        self.dropout = dropout
        self.seed = seed
        self.steps = 0  # training steps taken: numbers the dropout draws (restored with the optimizer state)
        self.optimizer = None  # the framework's optimizer, once set_optimizer has run
        self._optimizer_spec: tuple | None = None  # (name, hyperparameters, frozen canonical names)
        self.last_host_syncs = 0  # device-to-host reads of decisions in the last call (define-by-run parses)
        # Where the last call's time went, for an implementation that can tell
        # (phase -> seconds, e.g. {"build": ..., "evaluate": ...}: building a
        # graph against running it), and the rows it computed where a schedule
        # says them (name -> count, shared.levels.level_row_counts: the levels,
        # their padding, each cell's rows). Empty where there is nothing to tell;
        # the benchmark records their per-batch means.
        self.last_phases: dict[str, float] = {}
        self.last_rows: dict[str, float] = {}
        # With data-parallel replicas (bench train --replicas), each replica's
        # seconds in the last step where the engine lets every one be seen
        # (phase -> one entry per replica, e.g. {"allreduce_wait": [...]}).
        self.last_replica_seconds: dict[str, list[float]] = {}
        # Calls of a new batch shape before its steady state: 1, the call that traces and compiles; 2 where
        # the second call still builds something (CUDA graphs are recorded on a shape's second call). The
        # benchmark's warm-up makes that many calls of every shape before it times any.
        self.warmup_calls = 1

    def program_shape(self, batch) -> tuple:
        """What a call compiles for, where the framework compiles: (B, N, T) here. A runner whose programs depend on
        more of the batch (the JAX levels' schedule) says so; the benchmark's warm-up calls every shape it meets."""
        return (batch.size, batch.num_tokens, batch.num_steps)

    @_class_or_instance
    def supports(self_or_cls, capability: str) -> bool:
        """Whether this implementation can do ``capability`` (see ``unsupported``).
        Asked of the class, the framework's answer; asked of a runner, its
        variant's (a family option may add to ``unsupported``)."""
        return capability not in self_or_cls.unsupported

    @_class_or_instance
    def require(self_or_cls, capability: str) -> None:
        """A NotImplementedError, in one line, where ``capability`` is unsupported."""
        if capability in self_or_cls.unsupported:
            raise NotImplementedError(f"{self_or_cls.framework}: no {capability}: "
                                      f"{self_or_cls.unsupported[capability]}")

    # -- inference and gradients ------------------------------------------

    def encode(self, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eval mode: premise <dtype>[B, H], hypothesis <dtype>[B, H], logits <dtype>[B, 3]."""
        contract.check_batch(batch, self.config)
        return self._encode(batch)

    def loss_and_grads(self, batch) -> tuple[float, dict[str, np.ndarray]]:
        """Eval mode: mean cross-entropy (plus ``transition_weight`` times the
        supervised transition loss) and its gradient per canonical parameter."""
        contract.check_batch(batch, self.config)
        contract.check_labels(batch)
        return self._loss_and_grads(batch)

    def parse(self, batch, mode: str = "predicted", uniforms=None) -> Parsed:
        """Eval mode: the batch in transitions ``mode`` (docs/spec.md §7):
        "gold" follows the batch's transitions (the head scores every step),
        "predicted" and "sampled" let the head decide. ``uniforms``
        (premise_u, hypothesis_u) <float>[B, T] of shared.parsing.uniforms_for,
        in sampled mode and only there. Needs the transition head."""
        self.require("parse")
        uniforms = contract.check_parse(self.config, batch, mode, uniforms)
        self.require(f"{mode} parse")  # a variant that can only follow given transitions refuses the others
        return self._parse(batch, mode, uniforms)

    def reinforce_loss_and_grads(self, batch, uniforms, baseline: float
                                 ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        """Eval mode: (REINFORCE loss, its gradient per canonical parameter,
        rewards <float>[B]), the parses sampled with ``uniforms`` and the
        scalar ``baseline`` b (docs/spec.md §7)."""
        uniforms, baseline = self._check_reinforce(batch, uniforms, baseline)
        return self._reinforce_loss_and_grads(batch, uniforms, baseline)

    def _check_reinforce(self, batch, uniforms, baseline) -> tuple[tuple[np.ndarray, np.ndarray], float]:
        self.require("reinforce")
        contract.require_head(self.config, "REINFORCE")
        uniforms = contract.check_uniforms(batch, uniforms, "REINFORCE")
        contract.check_batch(batch, self.config, "sampled")
        contract.check_labels(batch)
        return uniforms, contract.check_baseline(baseline)


    @abc.abstractmethod
    def _encode(self, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """encode, the batch checked."""

    @abc.abstractmethod
    def _loss_and_grads(self, batch) -> tuple[float, dict[str, np.ndarray]]:
        """loss_and_grads, the batch and its labels checked."""

    def _parse(self, batch, mode: str, uniforms: tuple[np.ndarray, np.ndarray] | None) -> Parsed:
        """parse, everything checked: ``uniforms`` float64 in sampled mode, else None.
        Required unless "parse" is in ``unsupported``."""
        raise NotImplementedError(f"{type(self).__name__} defines no _parse; list 'parse' in unsupported")

    def _reinforce_loss_and_grads(self, batch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float
                                  ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        """reinforce_loss_and_grads, everything checked (float64 uniforms, a float baseline).
        Required unless "reinforce" is in ``unsupported``."""
        raise NotImplementedError(f"{type(self).__name__} defines no _reinforce_loss_and_grads; "
                                  "list 'reinforce' in unsupported")

    @abc.abstractmethod
    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        """The framework's own sgd, adam or rmsprop with the shared hyperparameters."""

    @abc.abstractmethod
    def set_learning_rate(self, lr: float) -> None:
        """The rate of the following steps; never retraces or recompiles."""

    def train_step(self, batch) -> float:
        """One optimizer step in place; the loss before the update."""
        self.require("train")
        self._need_optimizer()
        contract.check_batch(batch, self.config)
        contract.check_labels(batch)
        return self._train_step(batch)

    def reinforce_step(self, batch, uniforms, baseline: float) -> dict:
        """One optimizer step on the REINFORCE loss, in place; the record of
        shared.reinforce.step_record, of the numbers computed before the update."""
        self.require("train")
        self._need_optimizer()
        uniforms, baseline = self._check_reinforce(batch, uniforms, baseline)
        return self._reinforce_step(batch, uniforms, baseline)

    @abc.abstractmethod
    def _train_step(self, batch) -> float:
        """train_step, the optimizer set and the batch checked."""

    def _reinforce_step(self, batch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float) -> dict:
        """reinforce_step, everything checked. Required unless "reinforce" is in ``unsupported``."""
        raise NotImplementedError(f"{type(self).__name__} defines no _reinforce_step; "
                                  "list 'reinforce' in unsupported")

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

    # -- what bench explain reads (docs/runner-interface.md) ----------------

    def trace(self, program: str, batch=None):
        """``program`` ("encode", "loss_and_grads", "train_step", "parse:MODE") as the framework builds it,
        not run: TensorFlow's traced function, JAX's traced (not yet compiled) program, counted in
        ``compile_stats`` like every trace. ``batch``: the batch it is traced for (a framework whose one
        trace serves every batch looks it up as a call would, and may be called without one). Code that
        builds no program apart from running it (define-by-run) has nothing to trace: NotImplementedError."""
        raise NotImplementedError(f"{self.framework}: {_EAGER}")

    def program_args(self, program: str, batch) -> Sequence:
        """What the program of ``trace(program, batch)`` is called with for ``batch``, on the device, the batch
        checked on the host first as the public methods check it. Define-by-run code: NotImplementedError."""
        if program.startswith("parse:"):  # "parse:gold", "parse:predicted" (sampled mode takes its uniforms too)
            contract.check_parse(self.config, batch, program.split(":", 1)[1], None)
        else:
            contract.check_batch(batch, self.config)
            if program != "encode":
                contract.check_labels(batch)
        return self._program_args(program, batch)

    def _program_args(self, program: str, batch) -> Sequence:
        """program_args, the batch checked (a framework that traces its programs defines it)."""
        raise NotImplementedError(f"{self.framework}: {_EAGER}")

    def encode_unchecked(self, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``encode`` without its host check (shared/contract.py): what the framework itself makes of a batch
        the contract refuses, which ``bench explain --bad-input`` shows. Its outputs are no results."""
        return self._encode(batch)

    # -- what a call dispatches (the benchmark counts it beside its times) ----

    def dispatches(self, program: str, batch, *args) -> dict | None:
        """Run ``program`` (a name of PROGRAMS: "encode", "train_step", "parse:predicted", ...) once on ``batch``, as
        its public method does, with ``args`` after the batch, and count the operations the framework dispatched
        for it: {"count": n, "counts": what n counts, ...the framework's own figures}. Slower than the call (a
        profiler or a second run may be on): never inside a timed round. A training program takes its step. The
        base class counts nothing and runs nothing: None (docs/spec.md §6 says what each framework counts)."""
        return self._dispatches(check_program(program), batch, tuple(args))

    def _dispatches(self, program: str, batch, args: tuple) -> dict | None:
        """dispatches, the program's name checked: a framework that counts defines it."""
        return None

    def _need_optimizer(self) -> None:
        if self.optimizer is None:
            raise RuntimeError("call set_optimizer first")
