"""The whole ``explain`` report: every framework's figures for one batch, as a dict and as text."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from bench.explain.arguments import FRAMEWORK_ORDER, VARIANTS, format_header, frameworks, result_header
from bench.explain.bad_input import explain_bad_input, format_bad_input
from bench.explain.batches import make_batches, model_config, summary
from bench.explain.jax_graph import explain_jax
from bench.explain.jax_vmap_graph import explain_jax_vmap, format_jax_vmap
from bench.explain.pytorch_graph import explain_pytorch
from bench.explain.tensorflow_graph import explain_tensorflow
from bench.explain.parse_view import explain_parse, format_parse
from shared.params import init_params

EXPLAINERS = {"pytorch": explain_pytorch, "tensorflow": explain_tensorflow, "jax": explain_jax,
              "jax-vmap": explain_jax_vmap}


def explain(args: argparse.Namespace) -> dict:
    """The figures of one ``explain`` run, as a JSON-ready dict."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size)
    params = init_params(config, seed=args.seed)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    result = {
        **result_header(args, summary(batches), config),
        "timed": not args.no_timing,
    }
    for framework in frameworks(args):
        result[framework] = EXPLAINERS[framework](args, batches, config, params, out)
    if out is not None:
        (out / "explain.json").write_text(json.dumps(result, indent=2) + "\n")
        result["files"] = sorted(p.name for p in out.iterdir() if p.is_file())
    return result


def run(args: argparse.Namespace) -> dict:
    """``explain`` or, with ``--bad-input``, the debugging demonstration."""
    if args.bad_input:
        return explain_bad_input(args)
    return explain_parse(args) if args.parse else explain(args)


# --------------------------------------------------------------------------
# Text output
# --------------------------------------------------------------------------


def _secs(value) -> str:
    return "(not timed)" if value is None else f"{value:.3f} s"


def _row(label: str, value, note: str = "") -> str:
    return f"  {label:<38} {value}" + (f"   {note}" if note else "")


def _listing(items: list[str], indent: int = 4, width: int = 100) -> list[str]:
    return textwrap.wrap(" ".join(items), width=width, initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_on_hyphens=False)


def _numbers(values: list) -> str:
    return ", ".join(map(str, values))


def format_text(result: dict) -> str:
    """The figures as the text that ``explain`` prints (and the guide quotes)."""
    if "bad_input" in result:
        return format_bad_input(result)
    if "choice_steps_gold" in result["batch"]:
        return format_parse(result)
    b = result["batch"]
    lines = format_header(result, [
        f"batch: {b['pairs']} pair(s) = {b['sentences']} sentences, {b['source']}",
        f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps: "
        f"{b['shift']} SHIFT, {b['reduce']} REDUCE, {b['pad']} PAD",
        f"  variants: the same words as {b['other_trees']} trees (same B, N, T); "
        f"the batch padded to N={b['padded_num_tokens']}, T={b['padded_num_steps']}",
    ], FRAMEWORK_ORDER + VARIANTS)
    if "pytorch" in result:
        r = result["pytorch"]
        lines += [
            "",
            "pytorch: define-by-run, the graph is recorded while Python runs",
            _row("Python loop: steps (with work)", f"{r['python_steps']} ({r['active_steps']})"),
            _row("Tracker calls / Reduce calls", f"{r['tracker_calls']} / {r['reduce_calls']}",
                 f"(Reduce on {r['reduce_rows']} rows in all)"),
            _row("step 0 sees", f"ops = {r['step0_ops']}", "(a Python list of real values)"),
            _row("autograd nodes of the loss", r["autograd_nodes"],
                 f"({r['parameters_reached']} of them parameters)"),
            *_listing([f"{name} {count}," for name, count in list(r["node_types"].items())[:6]] + ["..."]),
            _row("the same words as other trees", ", ".join(f"{shape} {n}" for shape, n in r["other_trees"].items())),
            _row("the batch padded wider", r["padded_nodes"], "(PAD steps record nothing)"),
            _row("traces / compilations", r["traces"], "(every batch records a fresh graph)"),
            _row("forward (records) / backward", f"{_secs(r['forward_s'])} / {_secs(r['backward_s'])}"),
        ]
    if "tensorflow" in result:
        r = result["tensorflow"]
        e, g = r["encode"], r["loss_and_grads"]
        lines += [
            "",
            "tensorflow: static graph, one tf.function trace, tf.while_loop",
            _row("encode: ops in the graph", e["ops"], f"(while body {_numbers(e['while_body_ops'])} ops)"),
            _row("loss + gradients: ops", g["ops"],
                 f"({g['while_loops']} while loops, bodies {_numbers(g['while_body_ops'])} ops)"),
            _row("loop variables of the while", r["loop_variables"]),
            *_listing(r["loop_state"]),
            _row("traces for the 3 batches", r["traces_for_variants"], "(one graph for every B, N, T)"),
            _row("encode: trace / first call / later", f"{_secs(e['trace_s'])} / {_secs(e['first_call_s'])} / "
                                                      f"{_secs(e['call_s'])}"),
            _row("loss + grads: trace / first / later", f"{_secs(g['trace_s'])} / {_secs(g['first_call_s'])} / "
                                                       f"{_secs(g['call_s'])}"),
        ]
    if "jax" in result:
        r = result["jax"]
        e, g = r["encode"], r["loss_and_grads"]
        state = r["loop_state"]
        lines += [
            "",
            "jax: jit traces once per input shape, XLA compiles; lax.scan",
            _row("encode: jaxpr equations", e["eqns"],
                 f"(scan body {_numbers(e['scan_body_eqns'])}; {e['eqns_total']} counting nested)"),
            _row("loss + gradients: equations", g["eqns"],
                 f"({g['scans']} scans, bodies {_numbers(g['scan_body_eqns'])}; {g['eqns_total']} counting nested)"),
            _row("scan carry of the body", len(state.get("carry", [])),
                 f"(and per step xs: {' '.join(state.get('xs', []))})"),
            *_listing(state.get("carry", [])),
            _row("traces for the 3 batches", r["traces_for_variants"], "(one per input shape)"),
            _row("encode: trace / lower / compile", f"{_secs(e['trace_s'])} / {_secs(e['lower_s'])} / "
                                                   f"{_secs(e['compile_s'])}"),
            _row("loss + grads: trace / lower / compile", f"{_secs(g['trace_s'])} / {_secs(g['lower_s'])} / "
                                                         f"{_secs(g['compile_s'])}"),
            _row("compiled call: encode / loss + grads", f"{_secs(e['call_s'])} / {_secs(g['call_s'])}"),
        ]
    if "jax-vmap" in result:
        lines += format_jax_vmap(result["jax-vmap"], _row, _secs)
    if result.get("files"):
        lines += ["", "wrote: " + ", ".join(result["files"])]
    return "\n".join(lines)
