"""TensorFlow (static graph): the ops of the traced ``tf.function`` and of its ``tf.while_loop`` bodies."""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from bench.explain.batches import Batches, best_of, timer
from bench.frameworks import runner_class
from shared.params import ModelConfig


def _tf_shape(dtype, shape) -> str:
    import tensorflow as tf

    dims = tf.TensorShape(shape)
    if dims.rank is None:
        return f"{tf.dtypes.as_dtype(dtype).name}[*]"
    return f"{tf.dtypes.as_dtype(dtype).name}[{','.join('?' if d is None else str(d) for d in dims.as_list())}]"


def tf_graph_stats(concrete) -> dict:
    """Ops of a concrete function's graph, and of the body of each while loop in it."""
    graph_def = concrete.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    whiles = [node for node in graph_def.node if node.op in ("While", "StatelessWhile")]
    stats = {
        "ops": len(graph_def.node),
        "op_types": dict(collections.Counter(node.op for node in graph_def.node).most_common(6)),
        "while_loops": len(whiles),
        "while_names": [node.name for node in whiles],
        "while_body_ops": [len(library[node.attr["body"].func.name].node_def) for node in whiles],
        "while_cond_ops": [len(library[node.attr["cond"].func.name].node_def) for node in whiles],
    }
    if whiles:
        first = whiles[0]
        stats["loop_state"] = [_tf_shape(t, s) for t, s in zip(first.attr["T"].list.type,
                                                                 first.attr["output_shapes"].list.shape)]
    return stats


def explain_tensorflow(args: argparse.Namespace, batches: Batches, config: ModelConfig, params,
                       out: Path | None) -> dict:
    import tensorflow as tf
    from google.protobuf import text_format

    # The Runner's own functions: an input signature with sizes None, so one
    # trace serves every B, N and T; the Runner counts the traces.
    runner = runner_class("tensorflow")(params, config, dtype="float32", device="cpu")
    result: dict = {"framework_version": tf.__version__, "memory": runner.memory}
    for name in ("encode", "loss_and_grads"):
        traced = runner.traced_function(name)
        concrete = traced.concrete_function()  # the trace, timed by the Runner
        stats = tf_graph_stats(concrete)
        stats["trace_s"] = traced.trace_s
        stats["first_call_s"] = stats["call_s"] = None
        if not args.no_timing:
            inputs = runner.program_inputs(batches.main, name)

            def call():
                for t in tf.nest.flatten(traced.function(*inputs)):
                    t.numpy()
            elapsed = timer()
            call()  # TensorFlow optimises the graph (Grappler) on the first call
            stats["first_call_s"] = elapsed()
            stats["call_s"] = best_of(call)
        if out is not None:
            (out / f"tensorflow_{name}.pbtxt").write_text(text_format.MessageToString(concrete.graph.as_graph_def()))
        result[name] = stats
    result["loop_state"] = result["encode"].pop("loop_state", [])
    result["loop_variables"] = len(result["loop_state"])
    result["loss_and_grads"].pop("loop_state", None)
    # The recompilation check: the batch, the same words as other trees, the
    # same batch padded wider. get_concrete_function looks the inputs up in
    # the function's trace cache, as a call does.
    before = runner.compile_stats("encode").traces
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        runner.traced_function("encode").function.get_concrete_function(*runner.program_inputs(batch))
    result["traces_for_variants"] = runner.compile_stats("encode").traces - before + 1  # the first trace was above
    return result
