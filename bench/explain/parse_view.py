"""``explain --parse``: what a parse decided at run time costs each framework (docs/spec.md §7).

With a transition head the model may follow its own parse ("predicted"
mode): each step's op is known only once the head has scored the tracker
state. The same batch is run in gold mode (the data's transitions, the head
teacher-forced) and in predicted mode, and for each framework the view shows
what changes:

* PyTorch (define-by-run): the device-to-host reads of decisions
  (``Runner.last_host_syncs``, one per step where some sentence has a
  choice), and the Python loop's Tracker and Reduce calls;
* TensorFlow: the ops of the traced parse function and of its while body,
  gold against predicted, and how many of the body's ops are selects
  (``SelectV2``: a mask keeps one of two computed results);
* JAX: the equations of the jaxpr and of the scan body, gold against
  predicted, and the body's ``select_n`` equations.

Counts only: deterministic for a given library version.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses

import numpy as np

from bench.explain.arguments import FRAMEWORK_ORDER, format_header, frameworks, result_header
from bench.explain.batches import Batches, make_batches, model_config, sentences_transitions, summary
from bench.frameworks import runner_class
from shared.params import init_params
from shared.transitions import PAD, REDUCE, SHIFT

MODES = ("gold", "predicted")
TF_SELECTS = ("Select", "SelectV2")


def _pytorch(batches: Batches, config, params) -> dict:
    import torch

    runner = runner_class("pytorch")(params, config, dtype="float32", device="cpu")
    out: dict = {"framework_version": torch.__version__}
    for mode in MODES:
        with runner.count_calls() as calls:
            parsed = runner.parse(batches.main, mode)
        followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
        out[mode] = {"python_steps": int(np.count_nonzero((followed != PAD).any(axis=0))),
                     "host_syncs": runner.last_host_syncs, "tracker_calls": calls["tracker"],
                     "reduce_calls": calls["reduce"]}
    return out


def _tf_body_stats(concrete) -> dict:
    graph_def = concrete.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    whiles = [node for node in graph_def.node if node.op in ("While", "StatelessWhile")]
    body = library[whiles[0].attr["body"].func.name].node_def
    types = collections.Counter(node.op for node in body)
    return {"ops": len(graph_def.node), "while_loops": len(whiles), "body_ops": len(body),
            "body_selects": sum(types[t] for t in TF_SELECTS)}


def _tensorflow(batches: Batches, config, params) -> dict:
    import tensorflow as tf

    runner = runner_class("tensorflow")(params, config, dtype="float32", device="cpu")
    out: dict = {"framework_version": tf.__version__}
    for mode in MODES:
        runner.parse(batches.main, mode)  # the first call traces the mode's function
        out[mode] = _tf_body_stats(runner.traced_function(f"parse:{mode}").concrete_function())
    return out


def _jax_body_stats(closed) -> dict:
    jaxpr = closed.jaxpr
    scans = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]
    body = scans[0].params["jaxpr"].jaxpr
    types = collections.Counter(eqn.primitive.name for eqn in body.eqns)
    return {"eqns": len(jaxpr.eqns), "scans": len(scans), "body_eqns": len(body.eqns),
            "body_selects": types.get("select_n", 0)}


def _jax(batches: Batches, config, params) -> dict:
    import flax
    import jax

    with jax.enable_x64(False):  # the same jaxpr whatever the process set (the tests turn x64 on)
        runner = runner_class("jax")(params, config, dtype="float32", device="cpu")
        out: dict = {"framework_version": f"{jax.__version__} (flax {flax.__version__})"}
        for mode in MODES:
            out[mode] = _jax_body_stats(runner.trace(f"parse:{mode}", batches.main).jaxpr)
    return out


VIEWS = {"pytorch": _pytorch, "tensorflow": _tensorflow, "jax": _jax}


def explain_parse(args: argparse.Namespace) -> dict:
    """The figures of ``explain --parse``, as a JSON-ready dict."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size)
    if not config.tracker_dim:
        raise ValueError("--parse needs a tracker (the head reads its state): --tracker-dim must be > 0")
    config = dataclasses.replace(config, transition_head=True)
    params = init_params(config, seed=args.seed)
    result = {
        **result_header(args, summary(batches), config),
    }
    gold = sentences_transitions(batches.main)
    result["batch"]["choice_steps_gold"] = _choice_steps(gold)
    for framework in frameworks(args):
        result[framework] = VIEWS[framework](batches, config, params)
    return result


def _choice_steps(transitions: np.ndarray) -> int:
    """Steps of the gold parses (all sentences) where both SHIFT and REDUCE would be valid."""
    count = 0
    for row in transitions:
        n = int(np.count_nonzero(row == SHIFT))
        shifted = depth = 0
        for op in row:
            if op == PAD:
                continue
            count += shifted < n and depth >= 2
            shifted, depth = (shifted + 1, depth + 1) if op == SHIFT else (shifted, depth - 1)
            assert op in (SHIFT, REDUCE)
    return count


def _row(label: str, gold, predicted, note: str = "") -> str:
    return f"  {label:<34} {str(gold):>8} {str(predicted):>10}" + (f"   {note}" if note else "")


def format_parse(result: dict) -> str:
    """The text ``explain --parse`` prints (and the guide quotes)."""
    b = result["batch"]
    batch_lines = [
        f"batch: {b['pairs']} pair(s) = {b['sentences']} sentences, {b['source']}",
        f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps; the gold parses have "
        f"{b['choice_steps_gold']} steps where both SHIFT and REDUCE are valid",
    ]
    lines = format_header(result, batch_lines, FRAMEWORK_ORDER, ", with a transition head (fresh weights)") + [
        "",
        f"  {'':<34} {'gold':>8} {'predicted':>10}",
    ]
    if "pytorch" in result:
        g, p = result["pytorch"]["gold"], result["pytorch"]["predicted"]
        lines += [
            "pytorch: the Python loop decides",
            _row("steps with work", g["python_steps"], p["python_steps"]),
            _row("device-to-host reads of decisions", g["host_syncs"], p["host_syncs"],
                 "(one per step with a choice)"),
            _row("Tracker calls / Reduce calls", f"{g['tracker_calls']}/{g['reduce_calls']}",
                 f"{p['tracker_calls']}/{p['reduce_calls']}"),
        ]
    if "tensorflow" in result:
        g, p = result["tensorflow"]["gold"], result["tensorflow"]["predicted"]
        lines += [
            "tensorflow: the decision is a mask inside the while body",
            _row("ops in the traced parse", g["ops"], p["ops"]),
            _row("ops in the while body", g["body_ops"], p["body_ops"]),
            _row("of them selects (Select, SelectV2)", g["body_selects"], p["body_selects"]),
        ]
    if "jax" in result:
        g, p = result["jax"]["gold"], result["jax"]["predicted"]
        lines += [
            "jax: the decision is a mask inside the scan body",
            _row("jaxpr equations", g["eqns"], p["eqns"]),
            _row("scan body equations", g["body_eqns"], p["body_eqns"]),
            _row("of them select_n", g["body_selects"], p["body_selects"]),
        ]
    return "\n".join(lines)
