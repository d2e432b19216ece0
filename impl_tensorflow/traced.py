"""The runner's entry points as it calls them: :class:`Traced`, one ``tf.function``
with a fixed input signature that counts its traces and times them apart
from the first call (where Grappler optimises the graph or XLA compiles it);
:class:`Untraced`, the same call run eagerly (``family="lists"``).
"""

from __future__ import annotations

import functools
import time
from typing import Callable, Sequence

import tensorflow as tf

from shared.runner import CompileStats


class Traced:
    """One tf.function with a fixed input signature, and what building it cost.
    Its first argument is the batch, a shared.batching.BatchArrays of tensors."""

    def __init__(self, name: str, fn: Callable, input_signature: Sequence, jit_compile: bool,
                 shape_log: list | None = None, xla_inside: bool = False, observers: list | None = None):
        self.name = name
        # Whether XLA compiles the function once per input shape: the whole of
        # it (jit_compile), or a part (xla_inside: the replicas' shard gradients
        # of a data-parallel step, whose all-reduce runs outside XLA).
        self.jit_compile = jit_compile or xla_inside
        self.traces = 0
        self.trace_s = 0.0  # Python -> graph (get_concrete_function)
        self.compile_calls_s = 0.0  # calls that optimised/compiled first (their run time included)
        self.shapes: list[tuple] = []  # (B, N, T) of the batches seen, in order; with XLA, one compilation each
        self._shape_log = shape_log if shape_log is not None else []  # (name, B, N, T): the runner's, in order
        # Called with (this function, its arguments) before each call, while the runner's list holds any: what
        # counts the ops a call runs (Runner.dispatches) sees the arguments the call is given.
        self._observers = observers if observers is not None else []

        @functools.wraps(fn)
        def traced(*args):
            self.traces += 1  # a Python side effect: runs when TensorFlow traces, never in the graph
            return fn(*args)

        # autograph=False: the loop is an explicit tf.while_loop; nothing is rewritten behind our back.
        self.function = tf.function(traced, input_signature=input_signature,
                                    jit_compile=jit_compile and not xla_inside, autograph=False)
        self._concrete = None

    def concrete_function(self):
        """The traced graph (``.graph``), tracing it (timed) on first use."""
        if self._concrete is None:
            start = time.perf_counter()
            self._concrete = self.function.get_concrete_function()
            self.trace_s += time.perf_counter() - start
        return self._concrete

    def __call__(self, *args):
        self.concrete_function()  # the trace, timed on its own
        batch = args[0]  # a BatchArrays: the pair's arrays share N and T
        shape = (*batch.premise_tokens.shape, batch.premise_transitions.shape[1])  # (B, N, T)
        compiles = not self.shapes or (self.jit_compile and shape not in self.shapes)
        if shape not in self.shapes:
            self.shapes.append(shape)
            self._shape_log.append((self.name, *shape))
        for observe in self._observers:
            observe(self, args)
        start = time.perf_counter()
        out = self.function(*args)  # (not the concrete function: a retrace would show in self.traces)
        if compiles:
            for t in tf.nest.flatten(out):
                t.numpy()  # wait for the result
            self.compile_calls_s += time.perf_counter() - start
        return out

    @property
    def compilations(self) -> int:
        """XLA programs built (one per distinct input shape); 0 without XLA."""
        return len(self.shapes) if self.jit_compile else 0

    def stats(self) -> CompileStats:
        return CompileStats(traces=self.traces, compile_s=self.trace_s + self.compile_calls_s, trace_s=self.trace_s,
                            first_calls_s=self.compile_calls_s, xla_compilations=self.compilations,
                            shapes=[(self.name, *shape) for shape in self.shapes])


class Untraced:
    """An entry point run eagerly (``family="lists"``): called like Traced,
    it runs the Python function as it is, every call; nothing is traced or compiled."""

    def __init__(self, name: str, fn: Callable, *_, **__):
        self.name = name
        self.function = fn

    def __call__(self, *args):
        return self.function(*args)

    def stats(self) -> CompileStats:
        return CompileStats()
