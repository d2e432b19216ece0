"""JAX (``jit`` + ``lax.scan``): the equations of the jaxprs the Runner traces, and of each scan body."""

from __future__ import annotations

import argparse
import collections
from pathlib import Path
from typing import Iterator

from bench.explain.batches import Batches, best_of, timer
from bench.frameworks import runner_class
from shared.params import ModelConfig


def _sub_jaxprs(eqn) -> Iterator:
    """The jaxprs inside one equation's parameters (scan bodies, nested jits, ...)."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr


def jaxpr_stats(closed) -> dict:
    """Equations of a (closed) jaxpr: at the top level, counting nested jaxprs,
    and of every scan body, in the order the scans appear."""
    scans = []

    def total(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += 1
            if eqn.primitive.name == "scan":
                scans.append(eqn)
            for sub in _sub_jaxprs(eqn):
                n += total(sub)
        return n

    jaxpr = closed.jaxpr
    stats = {
        "eqns": len(jaxpr.eqns),
        "eqns_total": total(jaxpr),
        "primitives": dict(collections.Counter(e.primitive.name for e in jaxpr.eqns).most_common(6)),
        "scans": len(scans),
        "scan_body_eqns": [len(eqn.params["jaxpr"].jaxpr.eqns) for eqn in scans],
        "scan_lengths": [int(eqn.params["length"]) for eqn in scans],
    }
    if scans:
        first = scans[0]
        body = first.params["jaxpr"].jaxpr
        n_consts, n_carry = first.params["num_consts"], first.params["num_carry"]
        stats["loop_state"] = {
            "carry": [v.aval.str_short() for v in body.invars[n_consts:n_consts + n_carry]],
            "xs": [v.aval.str_short() for v in body.invars[n_consts + n_carry:]],
            "consts": n_consts,
        }
    return stats


def program_figures(runner, name: str, batch, jax, *, timing: bool, jaxpr_file: Path | None = None) -> dict:
    """A JAX Runner's program ``name`` for ``batch``: the jaxpr's figures
    (``jaxpr_stats``), the seconds to trace it and, with ``timing``, to lower,
    compile and call it (best of a few calls). ``jaxpr_file``: where to write
    the jaxpr's text."""
    elapsed = timer()
    traced = runner.trace(name, batch)
    trace_s = elapsed()
    stats = jaxpr_stats(traced.jaxpr)
    stats["trace_s"] = trace_s
    stats["lower_s"] = stats["compile_s"] = stats["call_s"] = None
    if timing:
        elapsed = timer()
        lowered = traced.lower()
        stats["lower_s"] = elapsed()
        elapsed = timer()
        compiled = lowered.compile()
        stats["compile_s"] = elapsed()
        inputs = runner.program_args(name, batch)
        stats["call_s"] = best_of(lambda: jax.block_until_ready(compiled(*inputs)))
    if jaxpr_file is not None:
        jaxpr_file.write_text(str(traced.jaxpr) + "\n")
    return stats


def explain_jax(args: argparse.Namespace, batches: Batches, config: ModelConfig, params,
                out: Path | None) -> dict:
    import flax
    import jax

    with jax.enable_x64(False):  # the same jaxpr whatever the process set (the tests turn x64 on)
        return _explain_jax(args, batches, config, params, out, jax, flax)


def _explain_jax(args, batches, config, params, out, jax, flax) -> dict:
    # The Runner's own programs. Its jit traces a program once per input
    # shape; the Runner counts the traces.
    runner = runner_class("jax")(params, config, dtype="float32", device="cpu")
    result: dict = {"framework_version": f"{jax.__version__} (flax {flax.__version__})", "layout": runner.layout}
    for name in ("encode", "loss_and_grads"):
        result[name] = program_figures(runner, name, batches.main, jax, timing=not args.no_timing,
                                       jaxpr_file=out / f"jax_{name}.jaxpr.txt" if out is not None else None)
    result["loop_state"] = result["encode"].pop("loop_state", {})
    result["loss_and_grads"].pop("loop_state", None)
    # The recompilation check: jit's cache is keyed on shapes and dtypes, so
    # the other trees reuse the trace and the padded batch (new N, T) does not.
    before = runner.compile_stats("encode").traces
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        runner.trace("encode", batch)
    result["traces_for_variants"] = runner.compile_stats("encode").traces - before + 1  # the first trace was above
    return result
