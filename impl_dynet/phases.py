"""Where one call's seconds went, by phase: the runner's ``last_phases``
(docs/runner-interface.md). Each call builds a fresh graph with a
:class:`Clock` of its own (graph.new_graph), and every part of the call that
evaluates the graph or moves numbers in or out of DyNet times itself in one
of its sections: the SPINN's host reads of decisions (autobatch.py), the
forward and backward passes, the gradient copy and the update (graph.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


class Clock:
    """Where one call's seconds went, by phase, as the runner's ``last_phases``
    (docs/runner-interface.md): ``evaluate`` inside DyNet's forward and
    backward passes (and other named sections: ``grads``, copying gradients
    out; ``update``, the optimizer), ``build`` the rest, which is Python
    building the graph."""

    def __init__(self):
        self.start = time.perf_counter()
        self.sections: dict[str, float] = {}

    @contextlib.contextmanager
    def section(self, name: str = "evaluate") -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.sections[name] = self.sections.get(name, 0.0) + time.perf_counter() - began

    def timings(self) -> dict[str, float]:
        total = time.perf_counter() - self.start
        return {"build": total - sum(self.sections.values()), "evaluate": 0.0, **self.sections}
