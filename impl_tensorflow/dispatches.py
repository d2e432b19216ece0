"""What TensorFlow ran for a call: the runner's ``dispatches`` (docs/spec.md §6) counts with it, and explain.py reads
the graphs' while loops with :func:`loops`.

Three runtimes, three counts:

* a traced graph (``tf.function`` without XLA), :func:`graph_ops`: the ops of the graph as traced, each once, and
  the ops of each while loop's body once per iteration the loop ran (its condition's once more). The iterations
  are the loops' own counters (a ``tf.while_loop`` counts its iterations in its first output), read by running
  the part of the same graph that computes them on the same arguments. TensorFlow's executor does not say which
  ops it ran: its profiler stops recording an op once its cost model finds it cheap. So this counts the graph
  before Grappler rewrites it (constant folding, fused kernels, pruning, the loops lowered to Switch and Merge);
* eager code, :func:`eager_ops`: every op the eager runtime executed, from TensorFlow's profiler (one event per
  op; a call of a ``tf.function`` from eager code would be one);
* XLA (``jit_compile``), :func:`xla_ops`: every operation of the compiled program XLA's runtime executed (a
  fusion, a copy, a library call, a loop's or a branch's own control), each time it ran, from the profiler's
  events that name their HLO instruction.
"""

from __future__ import annotations

import collections
import glob
import os
import tempfile
from typing import Callable, Iterator

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

WHILE_OPS = ("While", "StatelessWhile")
EAGER = "EagerLocalExecute: "  # the profiler's event of one op the eager runtime executed: this prefix, its type
HLO_OP = "hlo_op"  # the statistic that names the HLO instruction an event of XLA's runtime ran


def loops(graph_def) -> list[dict]:
    """The while loops at the top of a graph (tf.GraphDef), in order: their node's name, and the ops of their body
    and condition (the functions of the graph's library)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    return [{"name": node.name, "body_ops": len(library[node.attr["body"].func.name].node_def),
             "cond_ops": len(library[node.attr["cond"].func.name].node_def)}
            for node in graph_def.node if node.op in WHILE_OPS]


def graph_ops(function, args) -> dict:
    """The ops one call of ``function`` (a tf.function) on ``args`` runs, counted on its traced graph (see the
    module docstring): {"ops": n, "graph_ops": the graph's ops, "loops": [{"name", "body_ops", "cond_ops",
    "trips"}]}."""
    concrete = function.get_concrete_function(*args)
    graph_def = concrete.graph.as_graph_def()
    found = loops(graph_def)
    for loop, trips in zip(found, loop_trips(concrete, args, [loop["name"] for loop in found])):
        loop["trips"] = trips
    return {"ops": len(graph_def.node) + sum(loop["body_ops"] * loop["trips"] + loop["cond_ops"] * (loop["trips"] + 1)
                                             for loop in found),
            "graph_ops": len(graph_def.node), "loops": found}


def loop_trips(concrete, args, names: list[str]) -> list[int]:
    """How many iterations the while loops ``names`` of ``concrete``'s graph run on ``args``: the graph imported
    into a function that returns their counters, pruned to what computes them (so nothing else runs: no update of
    a variable), and run once on the same arguments and captured variables."""
    if not names:
        return []
    graph = concrete.graph
    graph_def = graph.as_graph_def()
    placeholders = [t.name for t in graph.inputs]  # the arguments, flattened, then the captured values
    values = tf.nest.flatten(args, expand_composites=True) + list(concrete.captured_inputs)

    def counters(*inputs):
        return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(placeholders, inputs)),
                                              return_elements=[f"{name}:0" for name in names], name="counted")

    wrapped = tf.compat.v1.wrap_function(counters, [tf.TensorSpec(t.shape, t.dtype) for t in graph.inputs])
    pruned = wrapped.prune(wrapped.inputs, wrapped.outputs)
    return [int(t) for t in pruned(*values)]


def eager_ops(call: Callable[[], object]) -> dict:
    """Run ``call`` once and count the ops the eager runtime executed: {"ops": n, "by_op": type -> n}."""
    types = collections.Counter(name[len(EAGER):] for name, _ in _events(call) if name.startswith(EAGER))
    return {"ops": sum(types.values()), "by_op": dict(types.most_common())}


def xla_ops(call: Callable[[], object]) -> dict:
    """Run ``call`` once and count the operations of compiled programs XLA's runtime executed: {"ops": n,
    "by_op": HLO instruction -> n}."""
    ran = collections.Counter(name for name, stats in _events(call) if HLO_OP in stats)
    return {"ops": sum(ran.values()), "by_op": dict(ran.most_common())}


def _events(call: Callable[[], object]) -> Iterator[tuple[str, set[str]]]:
    """Run ``call`` under TensorFlow's profiler (host events only): each event's name and the names of its
    statistics."""
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                       device_tracer_level=0)
    with tempfile.TemporaryDirectory() as folder:
        tf.profiler.experimental.start(folder, options=options)
        try:
            call()
        finally:
            tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        for path in glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True):
            with open(path, "rb") as file:
                space.MergeFromString(file.read())
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stats = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                yield names[event.metadata_id], {stats[s.metadata_id] for s in event.stats}
