"""What XLA ran for a call, read from JAX's profiler: the runner's ``dispatches`` (docs/spec.md §6) counts with it.

A compiled program is XLA's optimised HLO: fusions (the elementwise work of several operations in one kernel),
library calls (the dots), copies, and the control of loops, branches and calls. XLA's runtime executes them one by
one, each loop's body once per iteration and only the branch a conditional takes, and the profiler records each
execution as an event named after its HLO instruction (the statistic ``hlo_op``). The count is of those events:
the compiled program's operations, times the loop trips and branches as they ran. What the runtime does around
them (the host's call of the executable, the arguments' transfer) is not counted.
"""

from __future__ import annotations

import collections
import glob
import os
import tempfile
from typing import Callable

import jax
from jax.profiler import ProfileData

HLO_OP = "hlo_op"  # the statistic that names the HLO instruction an event of XLA's runtime ran


def xla_ops(call: Callable[[], object]) -> dict:
    """Run ``call`` once (it must wait for its results) under JAX's profiler and count the operations of compiled
    programs XLA's runtime executed: {"ops": n, "by_op": HLO instruction -> n}."""
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python's own calls are not XLA's work
    ran: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder, profiler_options=options)
        try:
            call()
        finally:
            jax.profiler.stop_trace()
        for path in glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True):
            for plane in ProfileData.from_file(path).planes:
                for line in plane.lines:
                    ran.update(event.name for event in line.events
                               if any(name == HLO_OP for name, _ in event.stats))
    return {"ops": sum(ran.values()), "by_op": dict(ran.most_common())}
