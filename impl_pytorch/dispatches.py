"""What PyTorch dispatched while a call ran, read from its profiler: the runner's ``dispatches`` (docs/spec.md §6)
and ``bench explain --levels`` (explain.py) count with it.

Every call of an aten operation passes through PyTorch's dispatcher, which the profiler records as an ``aten::``
event, nested in the event of the operation that called it. The count is of the operations called from outside
any other: by Python (eager code: the model, autograd's backward functions, the optimizer) or by the code
``torch.compile`` generated (Inductor's calls of library kernels, such as ``aten::addmm``). What an operation calls
inside itself (a composite's parts, views) is counted apart, as ``nested``. Inductor's own fused kernels are C++
functions the compiled code calls directly, not through the dispatcher: the profiler does not see them, and they
are not counted; each call of a compiled region (the forward step) is, apart (``compiled_calls``).

The profiler, unlike a ``TorchDispatchMode``, leaves ``torch.compile`` alone: under a dispatch mode Dynamo runs the
Python code eagerly instead of the compiled graph.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterator

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
    outer, nested, compiled = collections.Counter(), 0, 0
    regions: dict[int, int] = {}  # a region range's start -> the ops inside it (ranges of one thread do not overlap)
    region_ops: collections.Counter = collections.Counter()
    for event, enclosing in _nesting(profiled.profiler.kineto_results.events()):
        name = event.name()
        if name == region:
            regions.setdefault(event.start_ns(), 0)
        compiled += name.startswith(COMPILED)
        if not name.startswith(ATEN):
            continue
        nested += 1
        if any(e.name().startswith(ATEN) for e in enclosing):
            continue
        outer[name[len(ATEN):]] += 1
        inside = [e for e in enclosing if e.name() == region]
        if inside:
            regions[inside[-1].start_ns()] += 1
            region_ops[name[len(ATEN):]] += 1
    return {"ops": sum(outer.values()), "nested": nested, "by_op": dict(outer.most_common()),
            "compiled_calls": compiled, "regions": [regions[start] for start in sorted(regions)],
            "region_ops": dict(region_ops.most_common())}


def _nesting(events) -> Iterator[tuple[object, list]]:
    """Each of the profiler's events with those that enclose it on its thread (the innermost last), from their
    times, as the profiler's own ``events()`` nests them (which builds a Python object per event, far slower)."""
    by_thread: dict[int, list] = collections.defaultdict(list)
    for event in events:
        by_thread[event.start_thread_id()].append(event)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e.start_ns(), -e.end_ns()))
        open_events: list = []
        for event in thread:
            while open_events and open_events[-1].end_ns() <= event.start_ns():
                open_events.pop()
            yield event, open_events
            open_events.append(event)
