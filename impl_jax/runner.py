"""The JAX adapter of docs/runner-interface.md, with explicit, counted compilation.

``jax.jit`` normally compiles behind the scenes on the first call with a new
input shape. Here each program is compiled explicitly,
``jax.jit(fn).trace(*args).lower().compile()``, and the executable is kept in
a dict keyed by the batch shape (B, N, T). So a compilation happens exactly
once per bucket shape and program (encode, loss_and_grads, train_step,
one parse program per transitions mode, and the two REINFORCE programs,
docs/spec.md §7), and
the time each stage takes (tracing, lowering, XLA) is measured apart from
running: ``compile_stats()``.

Options beyond the common interface:

* ``layout="thin" | "padded"``: the stack layout (model.py); ``thin`` is the default.
* ``compilation_cache_dir=PATH``: turn on JAX's persistent compilation cache
  (off by default). Executables are written to PATH and reused by later
  processes; ``compile_stats()`` then counts cache hits. Note that this cache is
  a process-wide JAX setting: it stays on for every later compilation.
* ``unroll=k``: unroll factor of the scan (speed only).
* ``algorithm="masked" | "vmap"``: the model, named by its family in
  bench/frameworks.py. ``masked`` (the default) is model.py, batched by hand
  with masked arrays; ``vmap`` is vmap.py, SPINN written for one sentence and
  batched by ``jax.vmap`` (the ``jax-vmap`` implementation). The weights, the
  programs and everything below are the same.
* ``replicas=K``: data parallelism over a mesh of K devices (replicas.py).
* ``algorithm="levels"``: levels.py's LevelClassifier, SPINN on a level
  schedule made on the host for every batch (levels.py's ``host_schedule``),
  gold transitions only (the rest is refused: ``unsupported``). The
  schedule's index arrays are the programs' fifth argument, and their widths
  part of the compiled shape. ``last_graph`` holds the last batch's levels,
  padding and rows (levels.py), ``last_phases`` its ``schedule`` (seconds on the host).

The optimizer methods of the interface are train.py's: optax with the shared
names and hyperparameters (shared/optimizers.py), the learning rate an
argument of the compiled step (changing it recompiles nothing), the state in
the shared layout.

``_trace(program, batch)`` hands out the traced program (its jaxpr) without
compiling it, counted like every other trace: ``bench explain`` (explain.py)
reads the scan and its carry there.
"""

from __future__ import annotations

import copy
import functools
import os
import time
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from shared import optimizers
from shared import reinforce as shared_reinforce
from shared.levels import LEVELS_UNSUPPORTED
from shared.params import ModelConfig, param_shapes
from shared.parsing import MODES, Parsed, split_pairs
from shared.runner import CompileStats, check_replicas
from shared.runner import Runner as RunnerBase

from . import reinforce, train
from .classifier import SNLIClassifier
from .convert import from_canonical, grads_to_canonical, name_map, resolve_dtype, to_canonical
from .levels import LevelClassifier, host_schedule, schedule_shape
from .model import DEFAULT_LAYOUT, LAYOUTS
from .platform import _CACHE_EVENTS, _enable_compilation_cache
from .replicas import _join_processes, replica_devices, replica_train_step
from .train import _merge, _partition
from .vmap import VmapClassifier

# One parse program per transitions mode: the mode is a Python constant of the trace.
PARSE_PROGRAMS = tuple(f"parse:{mode}" for mode in MODES)
# REINFORCE (docs/spec.md §7): the sampled parse, its loss and gradient, and its optimizer step.
REINFORCE_PROGRAMS = ("reinforce_loss_and_grads", "reinforce_step")
PROGRAMS = ("encode", "loss_and_grads", "train_step") + PARSE_PROGRAMS + REINFORCE_PROGRAMS
STEP_PROGRAMS = ("train_step", "reinforce_step")  # the programs an optimizer is part of
# The model behind the programs, by its family in bench/frameworks.py: masked arrays batched by hand
# (model.py), or per-sentence code batched by jax.vmap (vmap.py).
ALGORITHMS = {"masked": SNLIClassifier, "vmap": VmapClassifier, "levels": LevelClassifier}


# ---------------------------------------------------------------------------
# Devices (the persistent compilation cache is platform.py's)
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
# The runner
# ---------------------------------------------------------------------------


class Runner(RunnerBase):
    framework = "jax"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = 1.0, entropy_weight: float = 0.0, layout: str = DEFAULT_LAYOUT,
                 compilation_cache_dir: str | os.PathLike | None = None, unroll: int = 1,
                 algorithm: str = "masked", replicas: int = 1, train_skip_tail: bool = False, **options):
        if options:
            raise TypeError(f"unknown JAX runner options {sorted(options)}; "
                            "known: layout, compilation_cache_dir, unroll, algorithm, replicas, train_skip_tail")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown stack layout {layout!r}; choose from {LAYOUTS}")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {tuple(ALGORITHMS)}")
        if algorithm in ("vmap", "levels") and layout != "thin":
            raise ValueError(f"algorithm {algorithm!r} has its own stack; layout must be 'thin'")
        if algorithm == "levels" and replicas != 1:
            raise ValueError("algorithm 'levels' runs on one device (replicas=1)")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight)
        if compilation_cache_dir is not None:
            _enable_compilation_cache(compilation_cache_dir)
        self.dtype = resolve_dtype(dtype)
        self.replicas = check_replicas(replicas)
        processes = _join_processes() if self.replicas > 1 else 1  # before JAX touches a device
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
            self.mesh = replica_devices(device, self.replicas)
            self.device, self._batch_sharding = replica_train_step(self.mesh)
        self.layout = layout
        self.algorithm = algorithm
        if algorithm == "levels":
            self.unsupported = {**type(self).unsupported, **LEVELS_UNSUPPORTED}
        self.model = ALGORITHMS[algorithm](config, layout=layout, dropout_rate=dropout,
                                           param_dtype=jnp.dtype(self.dtype), unroll=unroll)
        # The same weights; its loop runs every step (impl_jax/model.py, SPINN.skip_tail): what jax.grad
        # differentiates. train_skip_tail keeps the cond that skips the padded tail there too (the registry's
        # jax-tail-cond, which measures what that choice costs).
        self.train_model = self.model.clone(skip_tail=train_skip_tail)
        self.params = from_canonical(params, config, self.dtype, self.device)["params"]
        self._frozen_paths: set = set()
        self.opt_state = None
        self._lr = None
        # program -> its Python function, its jax.jit (whose trace cache is
        # keyed on shapes), and what tracing and compiling it has cost.
        self._functions = {
            "encode": lambda params, arrays: self._forward(params, arrays),
            # train.py's pure functions, the model and the settings bound: each program is a function of arrays.
            "loss_and_grads": functools.partial(train.loss_and_grads, self.train_model,
                                                transition_weight=self.transition_weight),
            "reinforce_loss_and_grads": functools.partial(reinforce.loss_and_grads, self.train_model,
                                                          reinforce_weight=self.reinforce_weight,
                                                          entropy_weight=self.entropy_weight),
        }
        for mode in MODES:  # the mode is bound before jit: one program per mode
            self._functions[f"parse:{mode}"] = functools.partial(self._parse_forward, mode=mode)
        self._jitted: dict[str, Callable] = {}
        self._stats = {program: CompileStats() for program in PROGRAMS}
        self._compiled_shapes: list[tuple] = []  # (program, B, N, T) of every compilation, in order
        # (program, batch shape) -> compiled executable
        self._executables: dict[tuple, jax.stages.Compiled] = {}

    def _forward(self, params, arrays):
        return self.model.apply({"params": params}, *arrays, train=False)

    def _parse_forward(self, params, arrays, uniforms, *, mode):
        return train.parse(self.model, params, arrays, mode, uniforms)

    # -- tracing and compilation -----------------------------------------

    def _jit(self, program: str):
        """``jax.jit`` of the program; its Python function counts the traces
        (it runs only when JAX traces it, once per new input shape)."""
        if program not in self._jitted:
            function, stats = self._functions[program], self._stats[program]

            def traced(*args):
                stats.traces += 1
                return function(*args)

            # Donating the trainable weights and the optimizer state lets XLA update them in place.
            self._jitted[program] = jax.jit(traced, donate_argnums=(0, 2) if program in STEP_PROGRAMS else ())
        return self._jitted[program]

    def _executable(self, program: str, args: tuple, shape: tuple):
        """The compiled ``program`` for this batch shape, compiling it on first use."""
        key = (program, shape)
        compiled = self._executables.get(key)
        if compiled is None:
            hits0 = _CACHE_EVENTS["/jax/compilation_cache/cache_hits"]
            misses0 = _CACHE_EVENTS["/jax/compilation_cache/cache_misses"]
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
            s.cache_hits += _CACHE_EVENTS["/jax/compilation_cache/cache_hits"] - hits0
            s.cache_misses += _CACHE_EVENTS["/jax/compilation_cache/cache_misses"] - misses0
            s.shapes.append((program,) + shape)
            self._compiled_shapes.append((program,) + shape)
        return compiled

    def _program_args(self, program: str, batch) -> tuple:
        """The arguments ``program`` ("encode", "loss_and_grads", "train_step")
        takes for ``batch``, on the device: what its executable is called with."""
        if program == "train_step":
            self._need_optimizer()
        elif program not in PROGRAMS:
            raise ValueError(f"unknown program {program!r}; choose from {PROGRAMS}")
        local = program not in STEP_PROGRAMS
        arrays = self._arrays(batch, local)
        if program == "encode":
            return (self._weights(local), arrays)
        if program in ("parse:gold", "parse:predicted"):  # no uniforms (bench explain traces these)
            return (self._weights(local), arrays, None)
        if program == "parse:sampled":
            raise ValueError("parse:sampled takes uniform numbers: call parse(batch, 'sampled', uniforms)")
        if program == "loss_and_grads":
            return (self._weights(local), arrays, self._labels(batch, local))
        return self._train_args(arrays, self._labels(batch))

    def _run(self, program: str, batch) -> tuple:
        """Run ``program`` on ``batch`` (compiling it first for a new batch
        shape); its outputs, and the arguments it was called with."""
        args = self._program_args(program, batch)
        arrays = args[1] if program not in STEP_PROGRAMS else args[3]
        return self._executable(program, args, self._shape(batch, arrays))(*args), args

    def _shape(self, batch, arrays) -> tuple:
        """What a program compiles for: (B, N, T), and with the level schedule its (L, W, A)."""
        B, N = np.shape(batch.premise_tokens)
        shape = (B, N, np.shape(batch.premise_transitions)[1])
        if self.algorithm == "levels":
            shape += schedule_shape(arrays[4])
        return shape

    def _put_rows(self, array: np.ndarray, local: bool = False):
        """A per-pair array ([B, ...]) on the device; with replicas, split by
        rows across the mesh when B divides evenly (else copied to every device).
        ``local``: for a program that runs on this process's device alone (a job of several processes)."""
        if local and self._local_device is not None:
            return jax.device_put(array, self._local_device)
        sharding = self._batch_sharding if len(array) % self.replicas == 0 else self.device
        return jax.device_put(array, sharding)

    def _weights(self, local: bool = False):
        """The weights as a program takes them: on the mesh, or (``local``, in a job of several processes)
        this process's own copy of them, on its device."""
        if local and self._local_device is not None:
            return jax.tree.map(lambda a: a.addressable_data(0), self.params)
        return self.params

    def _arrays(self, batch, local: bool = False) -> tuple:
        """The four int32 batch arrays, on the device; with the level schedule
        a fifth, the dict of its index arrays (made here, on the host)."""
        names = ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions")
        arrays = tuple(self._put_rows(np.asarray(getattr(batch, n), dtype=np.int32), local) for n in names)
        if self.algorithm != "levels":
            return arrays
        start = time.perf_counter()
        levels, self.last_graph = host_schedule(batch, tracker=self.config.tracker_dim > 0)
        self.last_phases = {"schedule": time.perf_counter() - start}
        device = self._local_device if local and self._local_device is not None else self.device
        return arrays + (jax.tree.map(lambda a: jax.device_put(a, device), levels),)

    def _labels(self, batch, local: bool = False):
        """The labels (checked by the Runner: 0..2 on every row), on the device."""
        return self._put_rows(np.asarray(batch.labels, dtype=np.int32), local)

    # -- the interface ----------------------------------------------------

    def _encode(self, batch):
        (premise, hypothesis, logits), _ = self._run("encode", batch)
        return np.asarray(premise), np.asarray(hypothesis), np.asarray(logits)

    def _parse(self, batch, mode: str, uniforms) -> Parsed:
        """One compiled call per batch: in predicted and sampled mode every
        decision is taken on the device inside the scan (model.py), nothing
        comes back to Python between steps."""
        arrays = self._arrays(batch, local=True)
        u = None
        if mode == "sampled":
            u = tuple(self._put_rows(side_u.astype(self.dtype), local=True) for side_u in uniforms)
        args = (self._weights(local=True), arrays, u)
        parses, logits = self._executable(f"parse:{mode}", args, self._shape(batch, arrays))(*args)
        return split_pairs(parses, logits)

    def _loss_and_grads(self, batch):
        (loss, grads), _ = self._run("loss_and_grads", batch)
        return float(loss), grads_to_canonical(grads, self.config)

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        """optax's "sgd", "adam" or "rmsprop" with the shared hyperparameters
        (shared/optimizers.py); ``frozen`` canonical names are not trained."""
        self._optimizer_spec = (name, optimizers.resolve(name, hyper),
                                optimizers.check_frozen(frozen, name_map(self.config)))
        self.optimizer = train.make_optimizer(name, self.dtype, **hyper)
        self._frozen_paths = {name_map(self.config)[n] for n in self._optimizer_spec[2]}
        trainable, _ = _partition(self.params, self._frozen_paths)
        self.opt_state = jax.device_put(self.optimizer.init(trainable), self.device)
        self.set_learning_rate(lr)
        self._functions["train_step"] = functools.partial(train.train_step, self.train_model, self.optimizer,
                                                          seed=self.seed, transition_weight=self.transition_weight)
        self._functions["reinforce_step"] = functools.partial(
            reinforce.train_step, self.train_model, self.optimizer, seed=self.seed,
            reinforce_weight=self.reinforce_weight, entropy_weight=self.entropy_weight)
        # A new optimizer is a new program: forget the old training steps (their costs stay counted).
        for program in STEP_PROGRAMS:
            self._jitted.pop(program, None)
        self._executables = {k: v for k, v in self._executables.items() if k[0] not in STEP_PROGRAMS}

    def set_learning_rate(self, lr: float) -> None:
        """The rate is an argument of the compiled step: changing it recompiles nothing."""
        self._need_optimizer()
        self._lr = train.set_learning_rate(lr, self.dtype, self.device)

    def _train_step(self, batch) -> float:
        (trainable, self.opt_state, loss), args = self._run("train_step", batch)
        self.params = _merge(trainable, args[1])
        self.steps += 1
        return float(loss)

    def _reinforce_loss_and_grads(self, batch, uniforms, baseline):
        """Eval mode: (REINFORCE loss, canonical gradients, rewards <float>[B]);
        one compiled program per batch shape, the baseline an argument of it."""
        args, shape = self._reinforce_args(batch, uniforms, baseline)
        (loss, numbers), grads = self._executable("reinforce_loss_and_grads", args, shape)(*args)
        return float(loss), grads_to_canonical(grads, self.config), np.asarray(numbers["rewards"])

    def _reinforce_step(self, batch, uniforms, baseline) -> dict:
        """One compiled optimizer step on the REINFORCE loss (dropout as train_step);
        shared.reinforce.step_record of the numbers computed before the update."""
        (u, b), shape = self._reinforce_args(batch, uniforms, baseline, inputs_only=True)
        trainable, frozen, opt_state, arrays, labels, step, lr = self._train_args(self._arrays(batch),
                                                                                   self._labels(batch))
        args = (trainable, frozen, opt_state, arrays, labels, u, b, step, lr)
        trainable, self.opt_state, loss, numbers = self._executable("reinforce_step", args, shape)(*args)
        self.params = _merge(trainable, frozen)
        self.steps += 1
        return shared_reinforce.step_record(float(loss), **{k: np.asarray(v) for k, v in numbers.items()})

    def _reinforce_args(self, batch, uniforms, baseline, inputs_only: bool = False):
        """(params, arrays, labels, uniforms, baseline) on the device, or only the
        last two; and the batch shape (B, N, T). The Runner has checked them."""
        local = not inputs_only  # the gradients alone (no step): on this process's device in a job of several
        u = tuple(self._put_rows(side.astype(self.dtype), local) for side in uniforms)
        b = jax.device_put(np.asarray(baseline, dtype=self.dtype),
                           self._local_device if local and self._local_device is not None else self.device)
        B, N = np.shape(batch.premise_tokens)
        shape = (B, N, np.shape(batch.premise_transitions)[1])
        if inputs_only:
            return (u, b), shape
        return (self._weights(local), self._arrays(batch, local), self._labels(batch, local), u, b), shape

    def _train_args(self, arrays, labels) -> tuple:
        trainable, frozen = _partition(self.params, self._frozen_paths)
        step = jax.device_put(np.int32(self.steps), self.device)
        return (trainable, frozen, self.opt_state, arrays, labels, step, self._lr)

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer state in the shared layout (``step``, ``{slot}/{param}``)."""
        self._need_optimizer()
        name, hyper, frozen = self._optimizer_spec
        return train.optimizer_state(self.opt_state, name, hyper, self.config, self.steps, frozen)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        name, hyper, frozen = self._optimizer_spec
        optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(self.config), frozen))
        self.opt_state = train.load_optimizer_state(self.opt_state, state, name, hyper, self.config, frozen)
        self.steps = int(state[optimizers.STEP])

    def get_params(self) -> dict[str, np.ndarray]:
        return to_canonical({"params": self.params}, self.config)

    def compile_stats(self, program: str | None = None) -> CompileStats:
        """traces (Python traces: one per program and shape), compile_s =
        trace_s + lower_s + xla_compile_s, executables built, persistent-cache
        hits and misses, and the (program, B, N, T) compiled, in order."""
        if program is not None:
            return copy.deepcopy(self._stats[program])
        return CompileStats.total([self._stats[p] for p in PROGRAMS], shapes=self._compiled_shapes)

    # -- what jit builds (bench explain) ------------------------------------

    def _trace(self, program: str, batch) -> jax.stages.Traced:
        """``program`` ("encode", "loss_and_grads", "train_step") traced for
        ``batch``'s shape, not compiled: ``.jaxpr`` is what XLA will be given,
        ``.lower().compile()`` compiles it. A shape traced before is not
        traced again (jit's cache), exactly as when it is compiled."""
        return self._jit(program).trace(*self._program_args(program, batch))
