"""Settings every command shares: the model-size presets (defined here only)
and the process settings the frameworks need before they are imported."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import threading
from typing import Sequence

from shared.params import ModelConfig

SIZE_FIELDS = ("embed_dim", "hidden_dim", "tracker_dim", "mlp_dim", "mlp_layers")

SIZES = {
    # name: (embed_dim, hidden_dim, tracker_dim, mlp_dim, mlp_layers)
    "full": (300, 300, 64, 1024, 2),  # the 2016 paper's SPINN-PI model
    "small": (32, 32, 8, 64, 1),  # quick experiments and smoke tests
    "quick": (16, 16, 4, 32, 1),  # bench run --quick: the harness end to end in seconds
}


def preset(name: str) -> dict[str, int]:
    """The sizes of a preset as ModelConfig fields."""
    return dict(zip(SIZE_FIELDS, SIZES[name]))


def add_size_arguments(parser: argparse.ArgumentParser, presets: Sequence[str] = ("full", "small")) -> None:
    group = parser.add_argument_group("model size")
    group.add_argument("--size", choices=sorted(presets), default="full",
                       help="preset sizes (full: E=H=300, D=64, M=1024, L=2) [default: %(default)s]")
    for flag in SIZE_FIELDS:
        group.add_argument(f"--{flag.replace('_', '-')}", type=int, default=None, help="override the preset")
    group.add_argument("--transition-head", action="store_true",
                       help="give the tracker a transition head, so the model can predict its own parse "
                            "(docs/spec.md §7; needs a tracker)")


def model_config(args: argparse.Namespace, vocab_size: int, lowercase: bool) -> ModelConfig:
    """The ModelConfig that ``--size`` and the size overrides describe."""
    sizes = preset(args.size)
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    head = bool(getattr(args, "transition_head", False))
    if head and not sizes["tracker_dim"]:
        raise ValueError("--transition-head needs a tracker: --tracker-dim must be > 0")
    return ModelConfig(vocab_size=vocab_size, lowercase=lowercase, transition_head=head, **sizes)


# --------------------------------------------------------------------------
# Framework process settings (entry points and benchmark workers)
# --------------------------------------------------------------------------

# Set for every benchmark worker, whatever the caller's environment says.
WORKER_ENV = {
    "PYTHONUNBUFFERED": "1",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # JAX: take GPU memory as needed
    "NVIDIA_TF32_OVERRIDE": "0",  # real float32 matmuls on NVIDIA GPUs
    "JAX_DEFAULT_MATMUL_PRECISION": "highest",
}

# Defaults a user may override. TF_CPP_MIN_LOG_LEVEL=2 keeps TensorFlow's C++
# INFO and WARNING lines (the CPU-feature notice, the oneDNN notice, absl's
# "before InitializeLog" line) off the terminal; errors still show. It only
# hides the messages: TF_ENABLE_ONEDNN_OPTS, which changes numerics, is left
# as the environment has it.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}

# OMP_WAIT_POLICY is left as the environment has it, and recorded. PyTorch's
# OpenMP threads spin at barriers by default: on a quiet 2-core machine that
# is its fastest setting (full-size inference at B=128: 689-734 pairs/s
# spinning, 530-538 with OMP_WAIT_POLICY=PASSIVE), but on a busy one a
# spinning thread waits out a descheduled partner's time slice at every small
# op (quick model, B=8, load average 4.3: 38.9 ms median step spinning, 10.9
# ms passive). On a shared machine, run with OMP_WAIT_POLICY=PASSIVE.


def quiet_frameworks() -> None:
    """Process-wide settings for the frameworks, before any of them is imported
    (called by every command that runs one)."""
    for key, value in {**QUIET_ENV, **WORKER_ENV}.items():
        if key != "PYTHONUNBUFFERED":
            os.environ.setdefault(key, value)
    # TensorFlow's and JAX's Python-side warnings go through the logging
    # module (absl's handler among them): only errors reach the terminal.
    for name in ("tensorflow", "absl", "jax._src.xla_bridge"):
        logging.getLogger(name).setLevel(logging.ERROR)


# Lines TensorFlow's C++ side writes straight to file descriptor 2 at start-up,
# before its logging honours TF_CPP_MIN_LOG_LEVEL (seen with 2.21): notices,
# never errors.
NATIVE_NOISE = (
    b"All log messages before absl::InitializeLog() is called",
    b"oneDNN custom operations are on",
    b"oneDNN supports DT_INT32 only on platforms with AVX-512",
)
_noise_filter: threading.Thread | None = None


def filter_native_noise() -> None:
    """Route file descriptor 2 through a thread that drops :data:`NATIVE_NOISE`
    lines and passes everything else on (tracebacks, errors, progress).

    For the entry points (``python -m bench`` and the benchmark workers), not
    for library use: it rewires the process's stderr. At exit the thread is
    drained, so the last lines (a traceback) are never lost.
    """
    global _noise_filter
    if _noise_filter is not None or os.name != "posix":
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    real = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as source, os.fdopen(real, "wb", buffering=0) as target:
            for line in source:
                if not any(noise in line for noise in NATIVE_NOISE):
                    target.write(line)

    def drain() -> None:
        sys.stderr.flush()
        os.dup2(real_copy, 2)  # closes the pipe's last write end: the pump sees its end
        _noise_filter.join(timeout=5)

    real_copy = os.dup(real)
    _noise_filter = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    _noise_filter.start()
    atexit.register(drain)


def worker_env(dtype: str = "float32") -> dict[str, str]:
    """The environment of a benchmark worker process."""
    env = {**QUIET_ENV, **os.environ, **WORKER_ENV}
    if dtype == "float64":
        env["JAX_ENABLE_X64"] = "1"
    return env
