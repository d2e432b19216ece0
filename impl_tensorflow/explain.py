"""What TensorFlow built, for ``python -m bench explain`` (shared/platform.py, "explain").

A static graph: the ops of the traced ``tf.function`` (encode, and loss +
gradients), the ops of each ``tf.while_loop`` body, the loop variables the
body receives (shapes with ``?``), trace and first-call times, and how many
traces the batch, the same words as other trees and the same batch padded
wider needed (one: the input signature leaves every size open). ``--out``
writes the graphs as GraphDef text (``.pbtxt``, the while bodies in its
function library).

``--parse``: the ops of the traced parse function and of its while body, gold
against predicted, and how many of the body's ops are selects (``SelectV2``:
a mask keeps one of two computed results). ``--bad-input``: the Runner checks
the batch on the host before its graph runs; the bare traced function, called
without the check, runs or fails inside the runtime. ``--levels``:
tensorflow-levels' schedule as its Runner feeds it (each level exactly as
wide as its nodes: levels.py's PADDING) and the ops of the while body over the levels.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import tensorflow as tf
from google.protobuf import text_format

from impl_tensorflow.dispatches import WHILE_OPS, loops
from impl_tensorflow.runner import Runner
from shared.batching import BatchArrays, sentences_transitions
from shared.explaining import best_of, compare_row, error_text, finite_outcome, listing, numbers, row, secs, timer
from shared.levels import level_rows
from shared.params import ModelConfig

MODES = ("gold", "predicted")
SELECTS = ("Select", "SelectV2")


def _shape(dtype, shape) -> str:
    dims = tf.TensorShape(shape)
    if dims.rank is None:
        return f"{tf.dtypes.as_dtype(dtype).name}[*]"
    return f"{tf.dtypes.as_dtype(dtype).name}[{','.join('?' if d is None else str(d) for d in dims.as_list())}]"


def _graph_stats(concrete) -> dict:
    """Ops of a concrete function's graph, and of the body of each while loop in it (dispatches.loops, which the
    runner's count of the ops a call runs reads too)."""
    graph_def = concrete.graph.as_graph_def()
    whiles = [node for node in graph_def.node if node.op in WHILE_OPS]
    found = loops(graph_def)
    stats = {
        "ops": len(graph_def.node),
        "op_types": dict(collections.Counter(node.op for node in graph_def.node).most_common(6)),
        "while_loops": len(found),
        "while_names": [loop["name"] for loop in found],
        "while_body_ops": [loop["body_ops"] for loop in found],
        "while_cond_ops": [loop["cond_ops"] for loop in found],
    }
    if whiles:
        first = whiles[0]
        stats["loop_state"] = [_shape(t, s) for t, s in zip(first.attr["T"].list.type,
                                                                 first.attr["output_shapes"].list.shape)]
    return stats


def explain(implementation: str, batches, config: ModelConfig, params, out: Path | None, *, timing: bool) -> dict:
    """The ops of the traced programs and of their while bodies (see the module docstring)."""
    # The Runner's own functions: an input signature with sizes None, so one
    # trace serves every B, N and T; the Runner counts the traces.
    runner = Runner(params, config, dtype="float32", device="cpu")
    result: dict = {"framework_version": tf.__version__, "container": runner.container}
    for name in ("encode", "loss_and_grads"):
        traced = runner.trace(name)
        concrete = traced.concrete_function()  # traced (and timed) by the Runner
        stats = _graph_stats(concrete)
        stats["trace_s"] = traced.trace_s
        stats["first_call_s"] = stats["call_s"] = None
        if timing:
            inputs = runner.program_args(name, batches.main)

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
    # same batch padded wider, each looked up in the function's trace cache
    # as a call would look it up.
    before = runner.compile_stats("encode").traces
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        runner.trace("encode", batch)
    result["traces_for_variants"] = runner.compile_stats("encode").traces - before + 1  # the first trace was above
    # Traced, not recorded: docs/figures/graph-size.svg draws loss_and_grads (the whole program, each loop
    # body once) beside the graphs define-by-run records for the same loss.
    result["graph"] = {"loop": "while", "body": result["encode"]["while_body_ops"][0]}
    return result


def format_explain(implementation: str, r: dict) -> list[str]:
    e, g = r["encode"], r["loss_and_grads"]
    return [
        "",
        "tensorflow: static graph, one tf.function trace, tf.while_loop",
        row("encode: ops in the graph", e["ops"], f"(while body {numbers(e['while_body_ops'])} ops)"),
        row("loss + gradients: ops", g["ops"],
            f"({g['while_loops']} while loops, bodies {numbers(g['while_body_ops'])} ops)"),
        row("loop variables of the while", r["loop_variables"]),
        *listing(r["loop_state"]),
        row("traces for the 3 batches", r["traces_for_variants"], "(one graph for every B, N, T)"),
        row("encode: trace / first call / later", f"{secs(e['trace_s'])} / {secs(e['first_call_s'])} / "
                                                 f"{secs(e['call_s'])}"),
        row("loss + grads: trace / first / later", f"{secs(g['trace_s'])} / {secs(g['first_call_s'])} / "
                                                  f"{secs(g['call_s'])}"),
    ]


def _body_stats(concrete) -> dict:
    graph_def = concrete.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    whiles = [node for node in graph_def.node if node.op in WHILE_OPS]
    body = library[whiles[0].attr["body"].func.name].node_def
    types = collections.Counter(node.op for node in body)
    return {"ops": len(graph_def.node), "while_loops": len(whiles), "body_ops": len(body),
            "body_selects": sum(types[t] for t in SELECTS)}


def explain_parse(batches, config: ModelConfig, params) -> dict:
    """The decision is a mask inside the while body: the traced parse, per mode."""
    runner = Runner(params, config, dtype="float32", device="cpu")
    out: dict = {"framework_version": tf.__version__}
    for mode in MODES:
        runner.parse(batches.main, mode)  # the first call traces the mode's function
        out[mode] = _body_stats(runner.trace(f"parse:{mode}").concrete_function())
    return out


def format_explain_parse(result: dict) -> list[str]:
    g, p = result["gold"], result["predicted"]
    return [
        "tensorflow: the decision is a mask inside the while body",
        compare_row("ops in the traced parse", g["ops"], p["ops"]),
        compare_row("ops in the while body", g["body_ops"], p["body_ops"]),
        compare_row("of them selects (Select, SelectV2)", g["body_selects"], p["body_selects"]),
    ]


# The trace-time stack TensorFlow puts before a runtime error when it has one.
_STACK = ("Graph execution error", "Detected at node", "  File ")


def _error(err: BaseException) -> str:
    """The first line of the message, and the graph node TensorFlow names, with
    the run-dependent function numbers (and TensorFlow's trace-time stack) left out."""
    lines = [line for line in str(err).splitlines() if line.strip() and not line.startswith(_STACK)] or [""]
    message = lines[0] + "".join(" " + line.strip() for line in lines[1:] if "{{node" in line)
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
    return error_text(err, re.sub(r"\s*\[Op:[^\]]*\]", "", message))


def explain_bad_input(config: ModelConfig, params, bad, where) -> dict:
    """The Runner's host-side check, then the traced graph called without it."""
    runner = Runner(params, config, dtype="float32", device="cpu")
    out: dict = {}
    try:
        runner.program_args("encode", bad)  # the host-side check the Runner makes before every call
        out["outcome"] = "passed the host-side check"
    except ValueError as err:
        out.update(outcome="raised by the host-side check, before the graph ran", error=_error(err),
                   where=where(err))
    # Without the check: the graph cannot stop mid-loop with a message of ours.
    encode = runner.trace("encode").function
    try:
        premise, _, _ = encode(BatchArrays(*(tf.constant(a) for a in bad.arrays()[:5])))
        out["graph"] = {"outcome": finite_outcome(premise.numpy())}
    except Exception as err:  # noqa: BLE001 - showing the error is the point
        out["graph"] = {"outcome": "raised", "error": _error(err), "where": where(err)}
    return out


# -- explain --levels: the host-scheduled levels (impl_tensorflow/levels.py) ------------


def explain_levels(batch, variants: dict, options: dict) -> dict:
    """tensorflow-levels on ``batch``, once per model of ``variants`` (key ->
    (config, params)), with its registry ``options``: the schedule as the
    Runner feeds it (shared.levels.level_rows with levels.py's PADDING: each
    level's Reduce and tracker exactly as wide as its rows) and the while loop
    of the encode graph over the levels."""
    from impl_tensorflow.levels import PADDING  # the family's module, as the runner imports it: only here

    out: dict = {"framework_version": tf.__version__}
    transitions = sentences_transitions(batch)
    for key, (config, params) in variants.items():
        runner = Runner(params, config, dtype="float32", device="cpu", **options)
        stats = _graph_stats(runner.trace("encode", batch).concrete_function())
        tracker = config.tracker_dim > 0
        rows = level_rows(transitions, batch.num_tokens, tracker, PADDING)
        out[key] = {
            "levels_run": len(rows), "levels_scheduled": int(runner.last_rows["levels"]),
            "reduce_widths": [r for _, r in rows], "tracker_rows": [t for t, _ in rows] if tracker else [],
            "padded_pct": float(runner.last_rows["level_padding_pct"]),
            "ops": stats["ops"], "while_loops": stats["while_loops"], "while_body_ops": stats["while_body_ops"],
        }
    return out


def format_explain_levels(result: dict) -> list[str]:
    lines = ["tensorflow: one tf.function, a tf.while_loop over the levels (shapes change per level)"]
    for key, label in (("tracker", "with the tracker"), ("no_tracker", "without the tracker")):
        if key in result:
            r = result[key]
            lines.append(row(f"{label}: while loops", r["while_loops"],
                             f"(body {numbers(r['while_body_ops'])} ops; graph {r['ops']})"))
    return lines
