"""What the harness needs from a framework besides the model: the platform interface.

Framework-free. Each ``impl_<framework>/platform.py`` defines ``Platform``, a
subclass of :class:`Platform`, and the registry (``bench/frameworks.py``)
finds it by the framework's name. The benchmark, the commands and
``explain`` call these methods and never ask which framework they hold.

Two kinds of method:

* process settings (:meth:`Platform.default_env`, :meth:`Platform.forced_env`,
  :attr:`Platform.loggers`, :attr:`Platform.native_noise`): read *before*
  the framework's library is imported, so a platform module must not import
  its library at module level, only inside methods;
* everything else imports the library on first use.

The defaults describe a CPU-only library with nothing to configure, so a
minimal framework (a NumPy one, say) overrides only :meth:`version`.
"""

from __future__ import annotations

import os
import platform as _platform
import signal
from typing import Callable, ClassVar

import numpy as np


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


def how_it_ended(code: int) -> str:
    """A child process's end in words, from its exit status (negative: the signal that killed it, as subprocess and
    PyTorch's launcher report it): "was killed by SIGKILL", "ended with exit status 3"."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:  # a signal number without a name
            pass
    return f"ended with exit status {code}"


def first_cause(ends):
    """Of the ``(rank, exit status)`` of a job's processes found failed together (earliest first, where the launcher
    knows), the one that ended the job: one a signal killed (from outside, or a fault of its own), else one that
    aborted (SIGABRT: what a C++ library such as Gloo does when a peer's connection is lost), else one that exited
    with an error; the earliest of equals. A peer's SIGKILL and the survivor's abort are often found at one poll."""
    return min(ends, key=lambda end: 2 if end[1] >= 0 else int(end[1] == -signal.SIGABRT))


class Platform:
    """One framework's devices, settings and introspection (see the module docstring)."""

    name: ClassVar[str] = ""  # the framework's registry name
    library: ClassVar[str] = "numpy"  # the module whose version is recorded
    # Python loggers the framework writes notices to: set to ERROR by the entry points.
    loggers: ClassVar[tuple[str, ...]] = ()
    # Lines the framework's native code writes that are notices, never errors, and that no switch of
    # the framework silences: dropped from what it writes to file descriptor 2 while its library is
    # imported (bench.config.quiet_frameworks) and from the stdout of a job's processes (bench train
    # --processes). Prefer a switch (default_env, loggers) wherever one exists.
    native_noise: ClassVar[tuple[bytes, ...]] = ()
    # Whether enable_compilation_cache does anything.
    has_compilation_cache: ClassVar[bool] = False

    # -- process settings, before the library is imported -------------------

    def default_env(self) -> dict[str, str]:
        """Environment defaults the user's environment may override."""
        return {}

    def forced_env(self, dtype: str = "float32") -> dict[str, str]:
        """Environment a measured process must have, whatever the user's says
        (for ``dtype``: float64 may need a switch before import)."""
        return {}

    # -- data parallelism (bench train --replicas K) -------------------------
    #
    # How this framework's own engine runs K replicas of a training step over
    # one global batch: "devices" (one process drives K devices; the Runner
    # takes the option replicas=K and splits each batch across them),
    # "processes" (K processes started by :meth:`launch`, one device each; each
    # Runner takes replicas=K, finds its rank from the launcher and trains on its
    # share of each batch), or "" (no engine: :attr:`data_parallel_missing`
    # says why, in one line).
    data_parallel: ClassVar[str] = ""
    data_parallel_missing: ClassVar[str] = "the suite runs this framework in one process on one device"

    def replica_env(self, replicas: int) -> dict[str, str]:
        """Environment a process needs, before the library is imported, to
        drive ``replicas`` devices (e.g. K host devices on a CPU)."""
        return {}

    def replica_rank(self) -> int | None:
        """This process's rank among replicas its launcher started (0 writes the
        files), or None where no launcher started it."""
        return None

    def launch(self, replicas: int, argv: list[str]) -> int:
        """Run ``python -m bench *argv`` as ``replicas`` processes ("processes"
        engines); returns the job's exit status once every process has ended,
        or as soon as one fails (the others are then stopped)."""
        raise NotImplementedError(f"{self.name}: no process launcher for data parallelism")

    # A "devices" engine whose K devices may belong to several processes, on
    # one host or many (``bench train --replicas K --processes P``): each
    # process drives K / P devices and learns its place in the job from the
    # environment, set as the framework's ecosystem sets it (by hand on each
    # host, or by bench's own launcher over the loopback address).
    multi_process: ClassVar[bool] = False

    def process_env(self, rank: int, addresses: list[str]) -> dict[str, str]:
        """The environment that makes a process number ``rank`` of a job of
        ``len(addresses)`` processes, each listening at its address (HOST:PORT;
        an engine with one coordinator uses the first)."""
        raise NotImplementedError(f"{self.name}: no job of several processes")

    def job_processes(self) -> int:
        """How many processes the job this process belongs to has, from its environment (1: none)."""
        return 1

    # -- versions and devices ------------------------------------------------

    def version(self) -> str:
        """The library's version as recorded with every measurement."""
        return __import__(self.library).__version__

    def gpu_available(self) -> bool:
        return False

    def gpu_missing_reason(self) -> str:
        """Why :meth:`gpu_available` said no, in the framework's own terms (one line)."""
        return "this implementation runs on the CPU only"

    def check_device(self, device: str) -> str:
        """``device`` ("cpu", "gpu" or "auto") as the one this process will use;
        a ValueError in one line where a GPU is asked for and there is none."""
        if device == "auto":
            return "gpu" if self.gpu_available() else "cpu"
        if device == "gpu" and not self.gpu_available():
            raise ValueError(f"{self.name} sees no GPU here ({self.gpu_missing_reason()})")
        if device not in ("cpu", "gpu"):
            raise ValueError(f"unknown device {device!r}; choose from cpu, gpu, auto")
        return device

    def device_name(self, device: str) -> str:
        return cpu_name() if device == "cpu" else device

    def precision_modes(self) -> dict:
        """Reduced-precision matmul switches in force (all off unless asked for)."""
        return {"NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE")}

    def set_full_precision(self) -> None:
        """Turn TF32 and similar modes off, so float32 means float32."""

    def thread_counts(self) -> dict:
        return {"cpu_count": os.cpu_count()}

    # -- device memory (GPU; on the CPU the harness samples resident memory) --

    def reset_device_peak(self) -> None:
        """Start a new peak of device memory (a no-op where the framework keeps none)."""

    def device_peak_bytes(self) -> int | None:
        """The device memory peak since :meth:`reset_device_peak`, or None."""
        return None

    # -- timing ---------------------------------------------------------------

    def synchronize(self, device: str) -> None:
        """Wait for the device's queued work, before a clock is read."""

    def matmul(self, a: np.ndarray, b: np.ndarray, device: str) -> Callable[[], object]:
        """A zero-argument function that multiplies ``a @ b`` on ``device`` and
        waits for the result (the dense matmul peak is timed with it)."""
        return lambda: a @ b

    def matmuls(self, pairs: list[tuple[np.ndarray, np.ndarray]], device: str) -> Callable[[], object] | None:
        """A zero-argument function that multiplies every ``a @ b`` of ``pairs`` in order, with the
        framework's eager routine on ``device``, the operands placed there first, and waits for the last (a
        batch's limit is timed with it: bench/run/limit.py); None where the framework has no eager routine
        worth timing for it (its per-shape compilation would cost more than the products). This default: none
        of its own (the limit's process times NumPy's)."""
        return None

    def matmul_kernel(self, device: str) -> str:
        """What runs :meth:`matmuls` on ``device``, in a few words (a framework with its own routine says)."""
        return self.name

    # -- compilation cache ----------------------------------------------------

    def enable_compilation_cache(self, path: str) -> None:
        """Turn on the framework's persistent compilation cache in ``path``."""
        raise NotImplementedError(f"{self.name} has no persistent compilation cache")

    def clear_caches(self) -> None:
        """Forget in-memory compilations, so the next ones come from the persistent cache."""

    def use_private_caches(self, path: str) -> None:
        """Point the compilation caches the framework keeps on disk without being asked at ``path`` (a fresh
        folder), so that a benchmark's warm-up compiles as a first run on the machine does. Default: nothing
        to point (the framework keeps none)."""

    # -- explain: what the framework built for one small batch -----------------
    #
    # ``python -m bench explain`` owns the batch, the model and the text around a framework's block; the module
    # named here (``impl_<framework>/explain.py``, with the helpers of ``shared/explaining.py``) reads what the
    # framework built, in the functions docs/surface.md lists (``explain``, ``explain_parse``,
    # ``explain_bad_input``, ``explain_levels`` and their ``format_*``). bench/explain/views.py imports it when asked,
    # so the platform module itself never imports the framework's library.

    explain_module: ClassVar[str] = ""  # e.g. "impl_jax.explain"; "": nothing to explain
