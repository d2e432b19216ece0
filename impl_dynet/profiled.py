"""The child process of dispatches.autobatch_groups: ``python -m impl_dynet.profiled CALL.pickle``.

Started with ``SPINN_DYNET_PROFILING=2`` (read by library.py before DyNet is imported), so that DyNet prints the
groups autobatching runs (``BatchSize:K <operation>``) for every forward pass. It makes a runner like the parent's
(weights, options, optimizer, step count) and runs the parent's program once on the same batch; the parent reads
what DyNet printed.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from shared.params import ModelConfig
from shared.runner import run_program

from .runner import Runner


def profiled_call(path: str) -> None:
    """Run the call ``path`` describes (dispatches.autobatch_groups writes it) once."""
    spec = pickle.loads(Path(path).read_bytes())
    runner = Runner(spec["params"], ModelConfig.from_json(spec["config"]), dtype="float32", device="cpu",
                    **spec["options"])
    if spec["optimizer"] is not None:
        name, lr, frozen, hyper = spec["optimizer"]
        runner.set_optimizer(name, lr, frozen=frozen, **hyper)
    runner.steps = spec["steps"]
    run_program(runner, spec["program"], spec["batch"], *spec["args"])


if __name__ == "__main__":
    profiled_call(sys.argv[1])
