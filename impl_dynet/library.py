"""DyNet, imported once with this project's settings: every module of the
package takes ``dy`` from here, never from ``import dynet`` first.

DyNet reads its settings when it is first imported (``dynet_config``) and
preallocates its memory pools then, all of them. With automatic batching it
cannot grow them for a backward pass ("Dynet does not support both dynamic
increasing of memory pool size, and automatic batching"): a gradient through
a graph larger than the pools fails. So the pools are sized here, before the
import, from the environment variable ``SPINN_DYNET_MEM`` (DyNet's
``--dynet-mem`` format, in MB: one total, or forward,backward,parameters,
scratch). The platform's
``default_env`` gives the commands and the benchmark's workers pools for
batches of 128 long pairs; without it DyNet's own default stands. A process
that configured DyNet itself before keeps its settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from typing import Iterator

import dynet_config

MEMORY_VARIABLE = "SPINN_DYNET_MEM"
DYNET_DEFAULT_MEMORY = "512"  # dynet_config's own default: four pools of 128 MB
# DyNet's profiler level (explain's child process sets 2: every forward pass
# prints the groups autobatching ran); 0, off, unless asked for.
PROFILING_VARIABLE = "SPINN_DYNET_PROFILING"

# Which heuristic an autobatched graph is grouped by, for the whole process
# (DyNet's --dynet-autobatch: 0 leaves its default, which groups by agenda as
# 1 does, and 2 groups by depth; each graph still chooses whether to
# autobatch at all, dy.renew_cg).
AUTOBATCH_VARIABLE = "SPINN_DYNET_AUTOBATCH"
HEURISTICS = {"agenda": 0, "depth": 2}


def _heuristic() -> int:
    name = os.environ.get(AUTOBATCH_VARIABLE, "agenda")
    if name not in HEURISTICS:
        raise ValueError(f"{AUTOBATCH_VARIABLE} must be one of {', '.join(HEURISTICS)}, got {name!r}")
    return HEURISTICS[name]


if dynet_config.get() is None:
    dynet_config.set(mem=os.environ.get(MEMORY_VARIABLE, DYNET_DEFAULT_MEMORY),
                     profiling=int(os.environ.get(PROFILING_VARIABLE, "0")), autobatch=_heuristic())



@contextlib.contextmanager
def _floating_point_environment_kept() -> Iterator[None]:
    """Undo what loading DyNet's library does to the process's arithmetic.

    The wheel is built with fast-math, whose start-up code turns on
    flush-to-zero (subnormal numbers read and written as 0) for the thread
    that loads it: every NumPy, PyTorch or JAX computation of the process
    would then differ from IEEE arithmetic near zero. The C library's
    floating-point environment is saved before the import and restored after
    (glibc on Linux; elsewhere nothing is changed)."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    except OSError:
        yield
        return
    saved = ctypes.create_string_buffer(256)  # larger than any fenv_t
    if libm.fegetenv(saved) != 0:
        yield
        return
    try:
        yield
    finally:
        libm.fesetenv(saved)


with _floating_point_environment_kept():
    import dynet as dy  # noqa: E402  (after the settings, which it reads on import)


def memory_setting() -> str:
    """The pool sizes this process's DyNet was started with (MB)."""
    return str((dynet_config.get() or {}).get("mem", DYNET_DEFAULT_MEMORY))


@contextlib.contextmanager
def pools_checked() -> Iterator[None]:
    """Around a forward or backward pass: DyNet finding its pools too small
    becomes a one-line ValueError that says how to give it larger ones."""
    try:
        yield
    except (ValueError, RuntimeError) as err:
        text = str(err)
        if "pre-allocate enough memory" not in text and "out of memory" not in text.lower():
            raise
        raise ValueError(f"DyNet's memory pools ({memory_setting()} MB) are too small for this graph, and with "
                         f"autobatching DyNet cannot grow them: set {MEMORY_VARIABLE} (MB: a total, or "
                         f"forward,backward,parameters,scratch) before DyNet is imported") from err


__all__ = ["dy", "MEMORY_VARIABLE", "PROFILING_VARIABLE", "AUTOBATCH_VARIABLE", "memory_setting", "pools_checked"]
