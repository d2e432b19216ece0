"""The JAX adapter of docs/runner-interface.md, with explicit, counted compilation.

``jax.jit`` normally compiles behind the scenes on the first call with a new
input shape. Here each program is compiled explicitly,
``jax.jit(fn).trace(*args).lower().compile()``, and the executable is kept in
a dict keyed by the batch shape (B, N, T). So a compilation happens exactly
once per bucket shape and program (encode, loss_and_grads, train_step,
one parse program per transitions mode, and the two REINFORCE programs,
docs/spec.md §7), and the time each stage takes (tracing, lowering, XLA) is
measured apart from running: ``compile_stats()``.

The programs are train.py's and reinforce.py's functions of values: the model
(train.Model: the Flax module, static, and its parameters), the optimizer
(train.Optimizer: optax's state and the learning rate), the batch
(shared.batching.BatchArrays of device arrays) and the step; the runner
keeps the current values and installs what a training step gives back.

Options beyond the common interface:

* ``family="masked" | "vmap" | "levels"``: the model, named by its family
  in bench/frameworks.py, whose module (``masked.py``, ``vmap.py``,
  ``levels.py``) is imported when the runner is built, and only that one.
  ``masked`` (the default) is batched by hand with masked arrays; ``vmap`` is
  SPINN written for one sentence and batched by ``jax.vmap`` (the
  ``jax-vmap`` implementation). The weights, the programs and everything
  below are the same. ``levels``: levels.py's LevelClassifier, SPINN on a
  level schedule made on the host for every batch (levels.py's
  ``host_schedule``), gold transitions only (the rest is refused:
  ``unsupported``). The schedule's index arrays are the batch's ``levels``,
  an input of every program, and their shape (shared.levels.static_shape)
  part of the compiled shape.
  ``last_rows`` holds the last batch's levels, padding and rows (levels.py),
  ``last_phases`` its ``schedule`` (seconds on the host).
* ``layout="thin" | "padded"``: masked.py's stack layout; ``thin`` is the default (and the only
  layout of the other families).
* ``compilation_cache_dir=PATH``: turn on JAX's persistent compilation cache
  (off by default). Executables are written to PATH and reused by later
  processes; ``compile_stats()`` then counts cache hits. Note that this cache is
  a process-wide JAX setting: it stays on for every later compilation.
* ``unroll=k``: unroll factor of the scan (speed only).
* ``replicas=K``: data parallelism over a mesh of K devices (replicas.py, imported only then).
* ``train_skip_tail``: keep masked.py's cond that skips the padded tail in
  the differentiated programs too (the registry's ``jax-tail-cond``).

The optimizer methods of the interface are train.py's: optax with the shared
names and hyperparameters (shared/optimizers.py), the learning rate an
argument of the compiled step (changing it recompiles nothing), the state in
the shared layout.

``trace(program, batch)`` hands out the traced program (its jaxpr) without
compiling it, counted like every other trace: ``bench explain`` (explain.py)
reads the scan and its carry there.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import time
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from shared import optimizers
from shared import reinforce as shared_reinforce
from shared.batching import BatchArrays
from shared.params import ModelConfig
from shared.parsing import MODES, Parsed, split_pairs
from shared.runner import CompileStats, check_replicas, run_program
from shared.runner import Runner as RunnerBase

from . import reinforce, train
from .classifier import SNLIClassifier
from .compilation_cache import cache_counts, enable_compilation_cache
from .convert import from_canonical, grads_to_canonical, resolve_dtype, to_canonical
from .dispatches import xla_ops
from .forward import forward
from .params import abstract
from .shift_reduce import DEFAULT_LAYOUT, LAYOUTS

# One parse program per transitions mode: the mode is a Python constant of the trace.
PARSE_PROGRAMS = tuple(f"parse:{mode}" for mode in MODES)
# REINFORCE (docs/spec.md §7): the sampled parse, its loss and gradient, and its optimizer step.
REINFORCE_PROGRAMS = ("reinforce_loss_and_grads", "reinforce_step")
PROGRAMS = ("encode", "loss_and_grads", "train_step") + PARSE_PROGRAMS + REINFORCE_PROGRAMS
STEP_PROGRAMS = ("train_step", "reinforce_step")  # the programs an optimizer is part of
# The model behind the programs, by its family in bench/frameworks.py: the module impl_jax/<family>.py,
# imported by the runner that runs it.
FAMILIES = ("masked", "vmap", "levels")


# ---------------------------------------------------------------------------
# Devices (the persistent compilation cache is compilation_cache.py's)
# ---------------------------------------------------------------------------


def resolve_device(device: str) -> jax.Device:
    """"cpu" or "gpu" -> this process's first such JAX device; a ValueError where there is none."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    try:
        return jax.local_devices(backend=device)[0]
    except RuntimeError as err:
        raise ValueError(f"no JAX {device} device here ({err}); install jax[cuda12] for a GPU") from err


# ---------------------------------------------------------------------------
# The programs, as the runner compiles them
# ---------------------------------------------------------------------------


def _parse_program(model, batch, uniforms, *, mode: str):
    """train.parse with the mode bound: one program per mode."""
    return train.parse(model, batch, mode, uniforms)


def _step_last(step_function: Callable) -> Callable:
    """``step_function`` (train.train_step, reinforce.train_step, settings bound) taking its ``step`` as
    its last positional argument: the order the runner's programs take their arguments in."""
    return lambda *args: step_function(*args[:-1], step=args[-1])


# ---------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------


class Runner(RunnerBase):
    framework = "jax"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = 1.0, entropy_weight: float = 0.0, layout: str = DEFAULT_LAYOUT,
                 compilation_cache_dir: str | os.PathLike | None = None, unroll: int = 1,
                 family: str = "masked", replicas: int = 1, train_skip_tail: bool = False, **options):
        if options:
            raise TypeError(f"unknown JAX runner options {sorted(options)}; "
                            "known: layout, compilation_cache_dir, unroll, family, replicas, train_skip_tail")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown stack layout {layout!r}; choose from {LAYOUTS}")
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
        if family in ("vmap", "levels") and layout != "thin":
            raise ValueError(f"family {family!r} has its own stack; layout must be 'thin'")
        if family == "levels" and replicas != 1:
            raise ValueError("family 'levels' runs on one device (replicas=1)")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight, family=family)
        if compilation_cache_dir is not None:
            enable_compilation_cache(compilation_cache_dir)
        self.dtype = resolve_dtype(dtype)
        self.replicas = check_replicas(replicas)
        processes = 1
        if self.replicas > 1:
            from .distributed import join_processes

            processes = join_processes()  # before JAX touches a device
        self.device = resolve_device(device)
        # In a job of several processes, only the training steps run on the job's mesh: everything else
        # (encode, parse, gradients without a step) runs on this process's own device, on its own, so that one
        # process can evaluate while the others wait at the next step.
        self._local_device = self.device if processes > 1 else None
        # Where the weights, optimizer state and scalars live (self.device) and
        # where a batch goes (self._batch_sharding): one device, or with
        # replicas a mesh of K devices, the weights replicated on every one and
        # the batch split along its first axis. jit then compiles one program
        # for the mesh (GSPMD): each device runs its share of the pairs, and
        # the gradient's sum over pairs becomes an all-reduce across devices (replicas.py).
        self._batch_sharding = self.device
        if self.replicas > 1:
            from .replicas import replica_devices, replica_train_step

            self.mesh = replica_devices(device, self.replicas)
            self.device, self._batch_sharding = replica_train_step(self.mesh)
        self.layout = layout
        # The family's module, and only it: impl_jax/<family>.py.
        self._family_module = importlib.import_module(f"{__package__}.{family}")
        classifier = self._family_module.LevelClassifier if family == "levels" else SNLIClassifier
        module = classifier(config, encoder=self._family_module.SPINN, layout=layout, dropout_rate=dropout,
                            dtype=jnp.dtype(self.dtype), unroll=unroll)
        self.model = from_canonical(params, train.Model(module, abstract(module, self.device)))
        # The module of the programs that differentiate: training mode (train.py's functions run it in eval
        # mode where they are asked to), and its loop runs every step (impl_jax/masked.py, SPINN.skip_tail).
        # train_skip_tail keeps the cond that skips the padded tail there too (the registry's jax-tail-cond,
        # which measures what that choice costs).
        self._train_module = module.clone(training=True, skip_tail=train_skip_tail)
        # program -> its Python function, its jax.jit (whose trace cache is
        # keyed on shapes), and what tracing and compiling it has cost.
        self._functions = {
            "encode": forward,
            # train.py's pure functions, the settings bound: each program is a function of values.
            "loss_and_grads": functools.partial(train.loss_and_grads, transition_weight=self.transition_weight),
            "reinforce_loss_and_grads": functools.partial(reinforce.loss_and_grads,
                                                          reinforce_weight=self.reinforce_weight,
                                                          entropy_weight=self.entropy_weight),
        }
        for mode in MODES:  # the mode is bound before jit: one program per mode
            self._functions[f"parse:{mode}"] = functools.partial(_parse_program, mode=mode)
        self._jitted: dict[str, Callable] = {}
        self._stats = {program: CompileStats() for program in PROGRAMS}
        self._compiled_shapes: list[tuple] = []  # (program, B, N, T) of every compilation, in order
        # (program, batch shape) -> compiled executable
        self._executables: dict[tuple, jax.stages.Compiled] = {}

    # -- tracing and compilation -----------------------------------------

    def _jit(self, program: str):
        """``jax.jit`` of the program; its Python function counts the traces
        (it runs only when JAX traces it, once per new input shape)."""
        if program not in self._jitted:
            function, stats = self._functions[program], self._stats[program]

            def traced(*args):
                stats.traces += 1
                return function(*args)

            # Donating the model and the optimizer lets XLA update the weights and the state in place.
            self._jitted[program] = jax.jit(traced, donate_argnums=(0, 1) if program in STEP_PROGRAMS else ())
        return self._jitted[program]

    def _executable(self, program: str, args: tuple, shape: tuple):
        """The compiled ``program`` for this batch shape, compiling it on first use."""
        key = (program, shape)
        compiled = self._executables.get(key)
        if compiled is None:
            hits0, misses0 = cache_counts()
            start = time.perf_counter()
            traced = self._jit(program).trace(*args)
            traced_at = time.perf_counter()
            lowered = traced.lower()
            lowered_at = time.perf_counter()
            compiled = lowered.compile()
            done = time.perf_counter()
            self._executables[key] = compiled
            s = self._stats[program]
            s.trace_s += traced_at - start
            s.lower_s += lowered_at - traced_at
            s.xla_compile_s += done - lowered_at
            s.compile_s += done - start
            s.xla_compilations += 1
            hits, misses = cache_counts()
            s.cache_hits += hits - hits0
            s.cache_misses += misses - misses0
            s.shapes.append((program,) + shape)
            self._compiled_shapes.append((program,) + shape)
        return compiled

    def _program_args(self, program: str, batch) -> tuple:
        """program_args, the batch checked: the arguments ``program`` ("encode", "loss_and_grads",
        "train_step", "parse:gold", "parse:predicted") takes for ``batch``, on the device, what its
        executable is called with (the batch's arrays second, with the level schedule its index arrays,
        made here on the host)."""
        if program == "train_step":
            self._need_optimizer()
        elif program not in PROGRAMS:
            raise ValueError(f"unknown program {program!r}; choose from {PROGRAMS}")
        if program == "encode":
            return (self._model(local=True), self._arrays(batch, local=True, labels=False))
        if program in ("parse:gold", "parse:predicted"):  # no uniforms (bench explain traces these)
            return (self._model(local=True), self._arrays(batch, local=True, labels=False), None)
        if program == "parse:sampled":
            raise ValueError("parse:sampled takes uniform numbers: call parse(batch, 'sampled', uniforms)")
        if program == "loss_and_grads":
            return (self._model(local=True, training=True), self._arrays(batch, local=True))
        if program == "train_step":
            return (self._model(training=True), self.optimizer, self._arrays(batch), self._step())
        raise ValueError(f"{program} takes uniform numbers and a baseline: call reinforce_loss_and_grads or "
                         "reinforce_step")

    def _run(self, program: str, batch) -> tuple:
        """Run ``program`` on ``batch`` (compiling it first for a new batch
        shape); its outputs, and the arguments it was called with."""
        args = self._program_args(program, batch)
        arrays = args[2] if program in STEP_PROGRAMS else args[1]
        return self._executable(program, args, self._shape(arrays))(*args), args

    def _shape(self, arrays: BatchArrays) -> tuple:
        """What a program compiles for: (B, N, T), and with the level schedule its (L, A, W)."""
        (B, N), T = arrays.premise_tokens.shape, arrays.premise_transitions.shape[1]
        shape = (B, N, T)
        if self.family == "levels":
            from shared.levels import static_shape  # only where the levels run (what ran: docs/spec.md §6)

            shape += static_shape(arrays.levels)
        return shape

    def program_shape(self, batch) -> tuple:
        """The shape of the program a batch runs (``_shape``), its level schedule made here where it has one."""
        shape = super().program_shape(batch)
        if self.family == "levels":
            from shared.levels import static_shape

            shape += static_shape(self._family_module.host_schedule(batch, self.config.tracker_dim > 0)[0])
        return shape

    def _put_rows(self, array: np.ndarray, local: bool = False):
        """A per-pair array ([B, ...]) on the device; with replicas, split by
        rows across the mesh when B divides evenly (else copied to every device).
        ``local``: for a program that runs on this process's device alone (a job of several processes)."""
        if local and self._local_device is not None:
            return jax.device_put(array, self._local_device)
        sharding = self._batch_sharding if len(array) % self.replicas == 0 else self.device
        return jax.device_put(array, sharding)

    def _model(self, local: bool = False, training: bool = False) -> train.Model:
        """The model as a program takes it: its weights on the mesh, or (``local``, in a job of several
        processes) this process's own copy of them, on its device; ``training``: with the module of the
        programs that differentiate."""
        model = self.model.replace(module=self._train_module) if training else self.model
        if local and self._local_device is not None:
            return model.replace(params=jax.tree.map(lambda a: a.addressable_data(0), model.params))
        return model

    def _arrays(self, batch, local: bool = False, labels: bool = True) -> BatchArrays:
        """The batch's int32 arrays on the device (``labels=False``: without the labels, for the programs
        that read none); with the level schedule its index arrays too (made here, on the host)."""
        names = ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions")
        if labels:
            names += ("labels",)
        arrays = {n: self._put_rows(np.asarray(getattr(batch, n), dtype=np.int32), local) for n in names}
        arrays.setdefault("labels", None)
        if self.family == "levels":
            tracker = self.config.tracker_dim > 0
            levels, self.last_rows, self.last_phases = self._family_module.host_schedule(batch, tracker)
            device = self._local_device if local and self._local_device is not None else self.device
            arrays["levels"] = jax.tree.map(lambda a: jax.device_put(a, device), levels)
        return BatchArrays(**arrays)

    def _step(self) -> jax.Array:
        """The step count as the training programs take it: an array, so a new step never recompiles."""
        return jax.device_put(np.int32(self.steps), self.device)

    # -- the interface ----------------------------------------------------

    def _encode(self, batch):
        (premise, hypothesis, logits), _ = self._run("encode", batch)
        return np.asarray(premise), np.asarray(hypothesis), np.asarray(logits)

    def _parse(self, batch, mode: str, uniforms) -> Parsed:
        """One compiled call per batch: in predicted and sampled mode every
        decision is taken on the device inside the scan (masked.py), nothing
        comes back to Python between steps."""
        arrays = self._arrays(batch, local=True, labels=False)
        u = None
        if mode == "sampled":
            u = tuple(self._put_rows(side_u.astype(self.dtype), local=True) for side_u in uniforms)
        args = (self._model(local=True), arrays, u)
        parses, logits = self._executable(f"parse:{mode}", args, self._shape(arrays))(*args)
        return split_pairs(parses, logits)

    def _loss_and_grads(self, batch):
        (loss, grads), _ = self._run("loss_and_grads", batch)
        return float(loss), grads_to_canonical(self.model, grads)

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        """optax's "sgd", "adam" or "rmsprop" with the shared hyperparameters
        (shared/optimizers.py); ``frozen`` canonical names are not trained."""
        self.optimizer = train.make_optimizer(name, self.model, lr, frozen=frozen, **hyper)
        train_step = functools.partial(train.train_step, seed=self.seed, transition_weight=self.transition_weight)
        reinforce_step = functools.partial(reinforce.train_step, seed=self.seed,
                                           reinforce_weight=self.reinforce_weight,
                                           entropy_weight=self.entropy_weight)
        self._functions["train_step"] = _step_last(train_step)
        self._functions["reinforce_step"] = _step_last(reinforce_step)
        # A new optimizer is a new program: forget the old training steps (their costs stay counted).
        for program in STEP_PROGRAMS:
            self._jitted.pop(program, None)
        self._executables = {k: v for k, v in self._executables.items() if k[0] not in STEP_PROGRAMS}

    def set_learning_rate(self, lr: float) -> None:
        """The rate is an argument of the compiled step: changing it recompiles nothing."""
        self._need_optimizer()
        self.optimizer = train.set_learning_rate(self.optimizer, lr)

    def _train_step(self, batch) -> float:
        (model, self.optimizer, loss), _ = self._run("train_step", batch)
        self.model = self.model.replace(params=model.params)
        self.steps += 1
        return float(loss)

    def _reinforce_loss_and_grads(self, batch, uniforms, baseline):
        """Eval mode: (REINFORCE loss, canonical gradients, rewards <float>[B]);
        one compiled program per batch shape, the baseline an argument of it."""
        arrays = self._arrays(batch, local=True)
        args = (self._model(local=True, training=True), arrays) + self._reinforce_inputs(uniforms, baseline, True)
        loss, grads, rewards = self._executable("reinforce_loss_and_grads", args, self._shape(arrays))(*args)
        return float(loss), grads_to_canonical(self.model, grads), np.asarray(rewards)

    def _reinforce_step(self, batch, uniforms, baseline) -> dict:
        """One compiled optimizer step on the REINFORCE loss (dropout as train_step);
        shared.reinforce.step_record of the numbers computed before the update."""
        arrays = self._arrays(batch)
        args = ((self._model(training=True), self.optimizer, arrays) + self._reinforce_inputs(uniforms, baseline)
                + (self._step(),))
        model, self.optimizer, loss, numbers = self._executable("reinforce_step", args, self._shape(arrays))(*args)
        self.model = self.model.replace(params=model.params)
        self.steps += 1
        return shared_reinforce.step_record(float(loss), **{k: np.asarray(v) for k, v in numbers.items()})

    def _reinforce_inputs(self, uniforms, baseline, local: bool = False) -> tuple:
        """(uniforms, baseline) on the device, as the Runner checked them (``local``: the gradients alone,
        with no step, on this process's device in a job of several)."""
        u = tuple(self._put_rows(side.astype(self.dtype), local) for side in uniforms)
        b = jax.device_put(np.asarray(baseline, dtype=self.dtype),
                           self._local_device if local and self._local_device is not None else self.device)
        return u, b

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer state in the shared layout (``step``, ``{slot}/{param}``)."""
        self._need_optimizer()
        return train.optimizer_state(self.model, self.optimizer, self.steps)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        self.optimizer = train.load_optimizer_state(self.model, self.optimizer, state)
        self.steps = int(state[optimizers.STEP])

    def get_params(self) -> dict[str, np.ndarray]:
        return to_canonical(self.model)

    def compile_stats(self, program: str | None = None) -> CompileStats:
        """traces (Python traces: one per program and shape), compile_s =
        trace_s + lower_s + xla_compile_s, executables built, persistent-cache
        hits and misses, and the (program, B, N, T) compiled, in order."""
        if program is not None:
            return copy.deepcopy(self._stats[program])
        return CompileStats.total([self._stats[p] for p in PROGRAMS], shapes=self._compiled_shapes)

    def _dispatches(self, program: str, batch, args: tuple) -> dict:
        """The operations of the compiled programs XLA's runtime executed for one call (dispatches.py): fusions,
        library calls, copies, the loops' and branches' control, each loop's body once per iteration it ran."""
        found = xla_ops(lambda: run_program(self, program, batch, *args))
        return {"count": found["ops"], "counts": "operations of XLA's compiled programs executed",
                "by_op": found["by_op"]}

    # -- what jit builds (bench explain) ------------------------------------

    def trace(self, program: str, batch=None) -> jax.stages.Traced:
        """``program`` ("encode", "loss_and_grads", "train_step", "parse:gold", "parse:predicted")
        traced for ``batch``'s shape, not compiled: ``.jaxpr`` is what XLA will be given,
        ``.lower().compile()`` compiles it. A shape traced before is not
        traced again (jit's cache), exactly as when it is compiled."""
        if batch is None:
            raise ValueError("jax: a program is traced for a batch's shapes; give the batch")
        return self._jit(program).trace(*self.program_args(program, batch))
