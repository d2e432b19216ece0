"""torch.compile of the masked SPINN (masked.py), with its cost counted.

The list-based model (lists.py) cannot be compiled into one graph per batch
shape: its Python ``if`` reads each batch's trees, so every batch would be a
new graph. The masked model's Python code is the same for every batch of a
shape, so TorchDynamo can capture it without a graph break.

What is compiled is the step, masked.SPINN's ``step_function`` (its
``_step``), not the whole loop. Capturing the classifier's whole forward
unrolls all T steps into one graph, whose Inductor compile time grows with
T. The step is traced once per (mode, batch shape, train/eval, grad/no grad)
and the same compiled step runs at every iteration of the Python loop, as
lax.scan reuses its traced body (impl_jax): AOTAutograd
differentiates it and Inductor fuses its elementwise work into C++ (CPU) or
Triton (GPU) kernels. The loop, the in-place write of each step's row and the
embedding and classifier around it stay eager. ``dynamic=False``: every
shape gets its own specialised graph, as XLA does in impl_jax; the length
buckets of docs/spec.md §2 keep the shapes few.

What it cost goes into the shared ``CompileStats`` (docs/runner-interface.md),
per runner method ("encode", "loss_and_grads", "train_step", "parse:MODE"),
read off Dynamo's global counters around each call:

* ``traces``: graphs Dynamo captured (a recompile for a new shape is one
  more; with gradients a shape takes two, since the tracker state of step 0
  does not require grad yet and that of later steps does);
* ``first_calls_s`` and ``compile_s``: the wall time of the calls that
  captured a graph, their run included (Dynamo, AOTAutograd and Inductor
  compile lazily inside the call, as TensorFlow's first calls optimise);
* ``graph_breaks``: where Dynamo had to stop and fall back to Python (a host
  read such as ``.item()`` would be one); the masked model has none;
* ``cache_hits``, ``cache_misses``: Inductor's FX graph cache, which keeps
  compiled kernels on disk between processes;
* ``cudagraph_skips``: with ``mode="reduce-overhead"`` (CUDA graphs,
  ``pytorch-cudagraphs``), the graphs Inductor ran without a CUDA graph, and
  so launched kernel by kernel (on the CPU every one: CUDA graphs need a
  CUDA device);
* ``shapes``: (program, B, N, T) of each call that compiled.

``mode="reduce-overhead"`` records each compiled step's kernels once into a
CUDA graph and replays it, one launch instead of dozens: what the launch-bound
small steps of SPINN on a GPU need. Its inputs are copied into the graph's own
buffers at each replay, the thin stack included.
"""

from __future__ import annotations

import contextlib
import copy
import time
from typing import Iterator

import torch
from torch._dynamo.utils import counters

from torch import nn

from shared.parsing import MODES
from shared.runner import CompileStats

PROGRAMS = ("encode", "loss_and_grads", "train_step") + tuple(f"parse:{mode}" for mode in MODES)

# Dynamo keeps at most this many graphs per Python function before it gives
# up and runs it eagerly. Its default (8) is less than one benchmark's worth
# of programs x bucket shapes; a silent fall back to eager would be measured
# as "compiled", so the limit is raised for the process.
RECOMPILE_LIMIT = 256


def _snapshot() -> dict[str, int]:
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


class CompiledModel:
    """The compiled step of one classifier with the masked encoder, and what compiling it cost."""

    def __init__(self, model: nn.Module, backend: str = "inductor", mode: str | None = None):
        if not hasattr(model.spinn, "step_function"):  # masked.SPINN's, without importing the family here
            raise TypeError(f"torch.compile needs the masked encoder, got {type(model.spinn).__module__}.SPINN")
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        # fullgraph=False: a graph break is counted (and reported), not an error.
        if mode is not None and backend != "inductor":
            raise ValueError(f"a torch.compile mode ({mode!r}) needs the inductor backend, not {backend!r}")
        model.spinn.step_function = torch.compile(model.spinn.step_function, dynamic=False, backend=backend,
                                                  mode=mode)
        if mode == "reduce-overhead":  # a batch's T steps chain CUDA graphs; the next batch starts afresh
            model.spinn.step_begin = torch.compiler.cudagraph_mark_step_begin
        self._stats = {program: CompileStats() for program in PROGRAMS}
        self._shapes: list[tuple] = []

    @contextlib.contextmanager
    def count(self, program: str, shape: tuple[int, int, int]) -> Iterator[None]:
        """Add what compiling cost during the block to ``program``'s stats;
        ``shape`` is the batch's (B, N, T)."""
        before, start = _snapshot(), time.perf_counter()
        try:
            yield
        finally:
            elapsed, after = time.perf_counter() - start, _snapshot()
            stats = self._stats[program]
            graphs = after["graphs"] - before["graphs"]
            if graphs:
                stats.traces += graphs
                stats.first_calls_s += elapsed
                stats.compile_s += elapsed
                stats.shapes.append((program,) + tuple(shape))
                self._shapes.append((program,) + tuple(shape))
            stats.graph_breaks += after["graph_breaks"] - before["graph_breaks"]
            stats.cache_hits += after["cache_hits"] - before["cache_hits"]
            stats.cache_misses += after["cache_misses"] - before["cache_misses"]
            stats.cudagraph_skips += after["cudagraph_skips"] - before["cudagraph_skips"]

    def stats(self, program: str | None = None) -> CompileStats:
        """One program's stats, or the sum of all with the shapes in the order they compiled."""
        if program is not None:
            return copy.deepcopy(self._stats[program])
        return CompileStats.total(list(self._stats.values()), shapes=self._shapes)


def compile_model(model: nn.Module, backend: str = "inductor", mode: str | None = None) -> CompiledModel:
    """Put torch.compile of the masked step in place (masked.py calls it from
    then on) and return the record of its cost. ``mode``: torch.compile's
    (None, or "reduce-overhead" for CUDA graphs)."""
    return CompiledModel(model, backend, mode)
