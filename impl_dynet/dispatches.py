"""What DyNet ran for a call: the nodes of the graph it built and the groups autobatching ran them in. The
runner's ``dispatches`` (docs/spec.md §6) and ``bench explain`` (explain.py) both count with it.

The nodes are read from DyNet's own Graphviz text of the current graph, by operation. The groups DyNet tells
only through its profiler, a setting of the whole process fixed when DyNet is initialised
(``dynet_config.set(profiling=2)`` makes every forward pass print ``BatchSize:K <operation>`` per group it ran):
so they are read from a child process (profiled.py) that starts DyNet with the profiler on, loads the runner's
weights, options, optimizer and step count, and runs the same program on the same batch. The profiler prints the
forward pass's groups alone: the backward pass, which runs over the same groups, and an optimizer's update are not
counted.
"""

from __future__ import annotations

import collections
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .library import dy

ROOT = Path(__file__).resolve().parents[1]
_GROUP_LINE = re.compile(r"^BatchSize:(\d+) (.*)$")


def graph_text() -> str:
    """DyNet's Graphviz text of the current graph (``print_text_graphviz``
    writes it to file descriptor 2 from C++, so that descriptor is captured)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            dy.print_text_graphviz()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode("utf-8", "replace")


def operation(label: str) -> str:
    """A node's operation from its Graphviz label ("v7 = v1 + v2 * v3" -> "a + a * a"),
    named as DyNet's profiler names it; parameters and constants by kind."""
    op = re.sub(r"\bv\d+\b", "a", label.split(" = ", 1)[-1])
    for kind in ("lookup_parameters", "const_parameters", "parameters", "constant", "zeros"):
        if op.startswith(kind):
            return kind
    return re.sub(r"\{a(,a){4,}\}", "{a,...}", op)  # a concat of many inputs: one name


def census(text: str) -> collections.Counter:
    """Nodes per operation in DyNet's Graphviz text."""
    labels = re.findall(r'^\s*N\d+ \[label="(.*)"\];$', text, re.MULTILINE)
    return collections.Counter(operation(label) for label in labels)


def autobatch_groups(runner, program: str, batch, args: tuple = ()) -> dict:
    """The groups DyNet's autobatching runs the forward pass of ``program`` (shared.runner.PROGRAMS) in, run by
    a runner like ``runner`` (its weights, options, optimizer and step count) on ``batch`` with ``args``, in a
    child process with DyNet's profiler on: {"groups": count, "nodes": nodes they covered, "by_operation":
    operation -> [groups, nodes]}, or {"error": why} if the child failed."""
    optimizer = runner.optimizer
    spec = {"config": runner.config.to_json(), "params": runner.get_params(), "batch": batch, "program": program,
            "args": args, "steps": runner.steps,
            "options": {"dropout": runner.dropout, "seed": runner.seed, "transition_weight": runner.transition_weight,
                        "reinforce_weight": runner.reinforce_weight, "entropy_weight": runner.entropy_weight,
                        "autobatch": runner.model.autobatch, "trainer": runner.trainer},
            "optimizer": None if optimizer is None else (optimizer.name, optimizer.lr, optimizer.frozen,
                                                         optimizer.hyper)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "call.pickle"
        path.write_bytes(pickle.dumps(spec))
        env = {**os.environ, "SPINN_DYNET_PROFILING": "2",  # read by impl_dynet.library, before DyNet starts
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-m", "impl_dynet.profiled", str(path)], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    by_operation: dict[str, list[int]] = {}
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        found = _GROUP_LINE.match(line.strip())
        if found:
            counts = by_operation.setdefault(operation("v0 = " + found.group(2)), [0, 0])
            counts[0] += 1
            counts[1] += int(found.group(1))
    ordered = dict(sorted(by_operation.items(), key=lambda item: -item[1][1]))
    return {"groups": sum(g for g, _ in ordered.values()), "nodes": sum(n for _, n in ordered.values()),
            "by_operation": ordered}
