"""The JAX adapter of docs/runner-interface.md, with explicit, counted compilation.

``jax.jit`` normally compiles behind the scenes on the first call with a new
input shape. Here each program is compiled explicitly,
``jax.jit(fn).lower(*args).compile()``, and the executable is kept in a dict
keyed by the batch shape (B, N, T). So a compilation happens exactly once per
bucket shape and program (encode, loss_and_grads, train_step, and parse once
per transitions mode, docs/spec.md §7), and the time it
takes (tracing + lowering, then XLA) is measured apart from running:
``compile_stats()``.

Options beyond the common interface:

* ``layout="thin" | "padded"``: the stack layout (model.py); ``thin`` is the default.
* ``compilation_cache_dir=PATH``: turn on JAX's persistent compilation cache
  (off by default). Executables are written to PATH and reused by later
  processes; ``compile_stats()`` then counts cache hits. Note that this cache is
  a process-wide JAX setting: it stays on for every later compilation.
* ``unroll=k``: unroll factor of the scan (speed only).

Beyond the interface, as in impl_pytorch: ``set_optimizer(name, lr, frozen=...,
**hyper)`` with the shared optimizer names and hyperparameters
(shared/optimizers.py), ``set_learning_rate`` (no recompilation: the rate is
an argument of the compiled step), ``optimizer_state`` and
``load_optimizer_state`` in the shared layout.

``step_memory`` reports XLA's memory plan of a compiled training step for any
batch shape without data: this is how the benchmark and tests show that the
backward pass does not store the whole stack at every step.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from shared import optimizers
from shared.params import ModelConfig, param_shapes
from shared.parsing import Parsed, check_mode, sentence_lengths

from .convert import from_canonical, name_map, resolve_dtype, to_canonical
from .model import DEFAULT_LAYOUT, LAYOUTS, SNLIClassifier
from .train import (make_loss_and_grads, make_optimizer, make_train_step, merge, parse_forward, partition,
                    state_from_shared, state_to_shared)

PROGRAMS = ("encode", "loss_and_grads", "train_step", "parse")
HEAD_KERNEL = "tracker.transition.kernel"

# ---------------------------------------------------------------------------
# Devices and the persistent compilation cache
# ---------------------------------------------------------------------------


def resolve_device(device: str) -> jax.Device:
    """"cpu" or "gpu" -> the first such JAX device."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    try:
        return jax.devices(device)[0]
    except RuntimeError as err:
        raise ValueError(f"no JAX {device} device here ({err}); install jax[cuda12] for a GPU") from err


_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}
_listening = False


def _count_cache_event(event: str, **kwargs) -> None:
    if event in _CACHE_EVENTS:
        _CACHE_EVENTS[event] += 1


def enable_compilation_cache(path: str | os.PathLike) -> None:
    """Turn on JAX's persistent compilation cache in ``path`` (process-wide).

    Every executable is written, however quick its compilation was (JAX's
    default skips those under a second). JAX decides once per process whether
    the cache is in use, so the decision is reset to take the new directory.
    """
    global _listening
    from jax.experimental.compilation_cache import compilation_cache

    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.fspath(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    if not _listening:
        jax.monitoring.register_event_listener(_count_cache_event)
        _listening = True


def disable_compilation_cache() -> None:
    """Turn the persistent compilation cache off again (process-wide)."""
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()


# ---------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------


def _memory_dict(compiled) -> dict:
    stats = compiled.memory_analysis()
    keys = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "generated_code_size_in_bytes")
    return {key: int(getattr(stats, key)) for key in keys if hasattr(stats, key)}


class Runner:
    framework = "jax"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 layout: str = DEFAULT_LAYOUT,
                 compilation_cache_dir: str | os.PathLike | None = None, unroll: int = 1, **options):
        if options:
            raise TypeError(f"unknown JAX runner options {sorted(options)}; "
                            "known: layout, compilation_cache_dir, unroll")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown stack layout {layout!r}; choose from {LAYOUTS}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if transition_weight < 0:
            raise ValueError(f"transition_weight must be >= 0, got {transition_weight}")
        if transition_weight > 0 and not config.transition_head:
            raise ValueError(f"transition_weight {transition_weight} needs the transition head {HEAD_KERNEL!r}, "
                             "which this model lacks (its config has transition_head false; docs/spec.md §7)")
        if compilation_cache_dir is not None:
            enable_compilation_cache(compilation_cache_dir)
        self.config = config
        self.dtype = resolve_dtype(dtype)
        self.device = resolve_device(device)
        self.layout = layout
        self.seed = seed
        self.transition_weight = float(transition_weight)  # the supervised loss of docs/spec.md §7
        self.model = SNLIClassifier(config, layout=layout, dropout_rate=dropout,
                                    param_dtype=jnp.dtype(self.dtype), unroll=unroll)
        self.params = from_canonical(params, config, self.dtype, self.device)["params"]
        self.optimizer = None  # an optax transformation (before the learning rate)
        self._optimizer_spec: tuple | None = None  # (name, hyperparameters, frozen names)
        self._frozen_paths: set = set()
        self.opt_state = None
        self._lr = None
        self.steps = 0  # training steps taken: numbers the dropout draws (restored with the optimizer state)
        # (program, mode, batch shape) -> compiled executable; the functions they come from:
        self._executables: dict[tuple, jax.stages.Compiled] = {}
        self._functions = {
            "encode": lambda params, arrays: self._forward(params, arrays),
            "loss_and_grads": make_loss_and_grads(self.model, self.transition_weight),
            # mode is bound (a Python constant) before jit: one program per mode
            "parse": lambda params, arrays, uniforms, *, mode: parse_forward(self.model, params, arrays, mode,
                                                                             uniforms),
        }
        self._stats = {"traces": 0, "compile_s": 0.0, "lower_s": 0.0, "xla_compile_s": 0.0,
                       "cache_hits": 0, "cache_misses": 0, "shapes": [], "compiles": []}

    def _forward(self, params, arrays):
        return self.model.apply({"params": params}, *arrays, train=False)

    # -- compilation ------------------------------------------------------

    def _executable(self, program: str, args: tuple, shape: tuple, donate_argnums=(), mode: str | None = None):
        """The compiled ``program`` for this batch shape (and transitions ``mode``,
        parse only), compiling it on first use."""
        key = (program, mode, shape)
        compiled = self._executables.get(key)
        if compiled is None:
            hits0 = _CACHE_EVENTS["/jax/compilation_cache/cache_hits"]
            misses0 = _CACHE_EVENTS["/jax/compilation_cache/cache_misses"]
            function = self._functions[program]
            if mode is not None:
                function = functools.partial(function, mode=mode)
            start = time.perf_counter()
            lowered = jax.jit(function, donate_argnums=donate_argnums).lower(*args)
            lowered_at = time.perf_counter()
            compiled = lowered.compile()
            done = time.perf_counter()
            self._executables[key] = compiled
            s = self._stats
            s["traces"] += 1
            s["lower_s"] += lowered_at - start
            s["xla_compile_s"] += done - lowered_at
            s["compile_s"] += done - start
            s["cache_hits"] += _CACHE_EVENTS["/jax/compilation_cache/cache_hits"] - hits0
            s["cache_misses"] += _CACHE_EVENTS["/jax/compilation_cache/cache_misses"] - misses0
            label = program if mode is None else f"{program}:{mode}"  # e.g. "parse:predicted"
            s["shapes"].append((label,) + shape)
            s["compiles"].append({"program": program, "mode": mode, "shape": shape,
                                  "lower_s": lowered_at - start, "xla_compile_s": done - lowered_at})
        return compiled

    def _arrays(self, batch) -> tuple[tuple, tuple]:
        """The four int32 batch arrays on the device, and the shape key (B, N, T)."""
        names = ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions")
        arrays = tuple(jax.device_put(np.asarray(getattr(batch, n), dtype=np.int32), self.device) for n in names)
        B, N = arrays[0].shape
        return arrays, (B, N, arrays[1].shape[1])

    def _labels(self, batch):
        labels = np.asarray(batch.labels, dtype=np.int32)
        if np.any((labels < 0) | (labels > 2)):
            raise ValueError("the loss needs labels 0..2 on every row (filter out unlabeled rows)")
        return jax.device_put(labels, self.device)

    # -- the interface ----------------------------------------------------

    def encode(self, batch):
        arrays, shape = self._arrays(batch)
        args = (self.params, arrays)
        premise, hypothesis, logits = self._executable("encode", args, shape)(*args)
        return np.asarray(premise), np.asarray(hypothesis), np.asarray(logits)

    def parse(self, batch, mode: str = "predicted", uniforms=None) -> Parsed:
        """Encode with the transitions of ``mode`` (docs/spec.md §7), eval mode.

        One compiled call per batch: in predicted and sampled mode every
        decision is taken on the device inside the scan (model.py), nothing
        comes back to Python between steps. ``uniforms``: sampled mode's
        (premise_u, hypothesis_u) <float>[B, T] of shared.parsing.batch_uniforms
        (ignored in the other modes, as by the reference).
        """
        check_mode(mode)
        if not self.config.transition_head:
            raise ValueError(f"parse needs the transition head {HEAD_KERNEL!r}, which this model lacks "
                             "(its config has transition_head false; docs/spec.md §7)")
        arrays, shape = self._arrays(batch)
        B, _, T = shape
        if mode != "gold":
            for side, transitions in (("premise", arrays[1]), ("hypothesis", arrays[3])):
                lengths = sentence_lengths(np.asarray(transitions))
                if np.any(lengths < 1):
                    raise ValueError(f"{mode} mode: {side} row {int(np.argmin(lengths))} has no SHIFT, "
                                     "so the sentence has no tokens")
                if np.any(2 * lengths - 1 > T):
                    raise ValueError(f"{mode} mode: a {side} of {int(lengths.max())} tokens needs "
                                     f"{2 * int(lengths.max()) - 1} steps, the batch has T={T}")
        u = None
        if mode == "sampled":
            if uniforms is None:
                raise ValueError("sampled mode needs uniforms (premise_u, hypothesis_u): "
                                 "see shared.parsing.batch_uniforms")
            if len(uniforms) != 2 or any(np.shape(side_u) != (B, T) for side_u in uniforms):
                raise ValueError(f"uniforms: expected (premise_u, hypothesis_u) of shape {(B, T)} each, got "
                                 f"{[np.shape(side_u) for side_u in uniforms]}")
            u = tuple(jax.device_put(np.asarray(side_u, dtype=self.dtype), self.device) for side_u in uniforms)
        args = (self.params, arrays, u)
        out = self._executable("parse", args, shape, mode=mode)(*args)
        return Parsed(**{name: np.asarray(value) for name, value in out.items()})

    def loss_and_grads(self, batch):
        arrays, shape = self._arrays(batch)
        args = (self.params, arrays, self._labels(batch))
        loss, grads = self._executable("loss_and_grads", args, shape)(*args)
        return float(loss), to_canonical({"params": grads}, self.config)

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        """optax's "sgd", "adam" or "rmsprop" with the shared hyperparameters
        (shared/optimizers.py); ``frozen`` canonical names are not trained."""
        self._optimizer_spec = (name, optimizers.resolve(name, hyper),
                                optimizers.check_frozen(frozen, name_map(self.config)))
        self.optimizer = make_optimizer(name, self.dtype, **hyper)
        self._frozen_paths = {name_map(self.config)[n] for n in self._optimizer_spec[2]}
        trainable, _ = partition(self.params, self._frozen_paths)
        self.opt_state = jax.device_put(self.optimizer.init(trainable), self.device)
        self.set_learning_rate(lr)
        self._functions["train_step"] = make_train_step(self.model, self.optimizer, self.seed, self.transition_weight)
        # A new optimizer is a new program: forget the old training steps.
        self._executables = {k: v for k, v in self._executables.items() if k[0] != "train_step"}

    def set_learning_rate(self, lr: float) -> None:
        """The rate is an argument of the compiled step: changing it recompiles nothing."""
        self._need_optimizer()
        self._lr = jax.device_put(np.asarray(lr, dtype=self.dtype), self.device)

    def train_step(self, batch) -> float:
        self._need_optimizer()
        arrays, shape = self._arrays(batch)
        args = self._train_args(arrays, self._labels(batch))
        # Donating the trainable weights and the optimizer state lets XLA update them in place.
        compiled = self._executable("train_step", args, shape, donate_argnums=(0, 2))
        trainable, self.opt_state, loss = compiled(*args)
        self.params = merge(trainable, args[1])
        self.steps += 1
        return float(loss)

    def _train_args(self, arrays, labels) -> tuple:
        trainable, frozen = partition(self.params, self._frozen_paths)
        step = jax.device_put(np.int32(self.steps), self.device)
        return (trainable, frozen, self.opt_state, arrays, labels, step, self._lr)

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer state in the shared layout (``step``, ``{slot}/{param}``)."""
        self._need_optimizer()
        name, hyper, frozen = self._optimizer_spec
        return state_to_shared(self.opt_state, name, hyper, self.config, self.steps, frozen)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        name, hyper, frozen = self._optimizer_spec
        optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(self.config), frozen))
        self.opt_state = state_from_shared(self.opt_state, state, name, hyper, self.config, frozen)
        self.steps = int(state[optimizers.STEP])

    def _need_optimizer(self) -> None:
        if self.optimizer is None:
            raise RuntimeError("call set_optimizer first")

    def get_params(self) -> dict[str, np.ndarray]:
        return to_canonical({"params": self.params}, self.config)

    def compile_stats(self) -> dict:
        """traces (compilations), compile_s = lower_s (trace + lower) + xla_compile_s,
        persistent-cache hits and misses, the (program, B, N, T) compiled, and
        per compilation its times (``compiles``)."""
        stats = dict(self._stats)
        stats["shapes"] = list(stats["shapes"])
        stats["compiles"] = [dict(c) for c in stats["compiles"]]
        return stats

    # -- memory -----------------------------------------------------------

    def memory_analysis(self, batch, program: str = "train_step") -> dict:
        """XLA's memory plan (bytes) of ``program`` compiled for this batch's shape."""
        arrays, shape = self._arrays(batch)
        if program == "train_step":
            self._need_optimizer()
            args, donate = self._train_args(arrays, self._labels(batch)), (0, 2)
        else:
            args = (self.params, arrays) if program == "encode" else (self.params, arrays, self._labels(batch))
            donate = ()
        return _memory_dict(self._executable(program, args, shape, donate_argnums=donate))

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes in use on the device so far (GPU); None where JAX does not track it (CPU)."""
        stats = self.device.memory_stats()
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def step_memory(config: ModelConfig, batch_size: int, num_tokens: int, *, layout: str = DEFAULT_LAYOUT,
                num_steps: int | None = None, dtype: str = "float32", optimizer: str = "sgd",
                device: str = "cpu") -> dict:
    """XLA's memory plan of one training step for a batch shape, without data or weights.

    Compiles the train step for abstract inputs (``jax.ShapeDtypeStruct``) of
    ``batch_size`` pairs, N = ``num_tokens``, T = ``num_steps`` (default 2N-1)
    and returns ``compiled.memory_analysis()`` as a dict: ``temp_size_in_bytes``
    is the scratch memory the step needs beyond its arguments and outputs,
    which is where residuals saved for the backward pass live.
    """
    dtype = resolve_dtype(dtype)
    dev = resolve_device(device)
    T = 2 * num_tokens - 1 if num_steps is None else num_steps
    model = SNLIClassifier(config, layout=layout, param_dtype=jnp.dtype(dtype))
    opt = make_optimizer(optimizer, dtype)
    sharding = jax.sharding.SingleDeviceSharding(dev)

    def spec(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding)

    tokens, transitions = spec((batch_size, num_tokens), jnp.int32), spec((batch_size, T), jnp.int32)
    zeros = jnp.zeros((1, 1), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), zeros, zeros, zeros, zeros)["params"]
    params = jax.tree_util.tree_map(lambda p: spec(p.shape, p.dtype), params)
    opt_state = jax.tree_util.tree_map(lambda p: spec(p.shape, p.dtype), jax.eval_shape(opt.init, params))
    args = (params, {}, opt_state, (tokens, transitions, tokens, transitions), spec((batch_size,), jnp.int32),
            spec((), jnp.int32), spec((), dtype))
    compiled = jax.jit(make_train_step(model, opt), donate_argnums=(0, 2)).lower(*args).compile()
    return _memory_dict(compiled)
