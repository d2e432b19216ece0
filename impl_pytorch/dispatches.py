"""What PyTorch dispatched while a call ran, read from its profiler: the runner's ``dispatches`` (docs/spec.md §6)
and ``bench explain --levels`` (explain.py) count with it.

Every call of an aten operation passes through PyTorch's dispatcher, which the profiler records as an ``aten::``
event, nested in the event of the operation that called it. The count is of the operations called from outside
any other: by Python (eager code: the model, autograd's backward functions, the optimizer) or by the code
``torch.compile`` generated (Inductor's calls of library kernels, such as ``aten::addmm``). What an operation calls
inside itself (a composite's parts, views) is counted apart, as ``nested``. Inductor's own fused kernels are C++
functions the compiled code calls directly, not through the dispatcher: the profiler does not see them, and they
are not counted; each call of a compiled region is (``compiled_calls``).

The profiler, unlike a ``TorchDispatchMode``, leaves ``torch.compile`` alone: under a dispatch mode Dynamo runs the
Python code eagerly instead of the compiled graph.
"""

from __future__ import annotations

import collections
from typing import Callable

from torch.profiler import ProfilerActivity, profile

ATEN = "aten::"
COMPILED = "Torch-Compiled Region"  # the profiler's name of a call of a torch.compile'd region


def aten_ops(call: Callable[[], object], region: str | None = None) -> dict:
    """Run ``call`` once under the profiler and count the aten operations dispatched from outside any other:
    {"ops": n, "nested": every aten event, "by_op": name (without ``aten::``) -> n, "compiled_calls": calls of
    compiled regions, "regions": in the order they ran, the ops inside each range named ``region`` (a
    ``torch.profiler.record_function``), and "region_ops": name -> n inside those ranges}."""
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        call()
    events = profiled.events()
    outer = [e for e in events if e.name.startswith(ATEN) and not _inside_aten(e)]
    ranges = [e for e in events if region is not None and e.name == region]
    inside = collections.Counter(id(_enclosing(e, region)) for e in outer) if ranges else collections.Counter()
    region_ops = collections.Counter(e.name[len(ATEN):] for e in outer if ranges and _enclosing(e, region))
    return {
        "ops": len(outer),
        "nested": sum(1 for e in events if e.name.startswith(ATEN)),
        "by_op": dict(collections.Counter(e.name[len(ATEN):] for e in outer).most_common()),
        "compiled_calls": sum(1 for e in events if e.name.startswith(COMPILED)),
        "regions": [inside[id(r)] for r in ranges],
        "region_ops": dict(region_ops.most_common()),
    }


def _inside_aten(event) -> bool:
    """Whether an aten operation encloses ``event``."""
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(ATEN):
        parent = parent.cpu_parent
    return parent is not None


def _enclosing(event, region: str | None):
    """The innermost ``region`` range around ``event``, or None."""
    parent = event.cpu_parent
    while parent is not None and parent.name != region:
        parent = parent.cpu_parent
    return parent
