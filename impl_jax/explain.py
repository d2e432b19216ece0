"""What JAX built, for ``python -m bench explain`` (shared/platform.py, "explain").

``jit`` + ``lax.scan``: the equations of the jaxprs the Runner traces (encode,
and loss + gradients), of each scan body, the scan carry the body receives
(shapes, no values), trace, lowering and XLA compile times, and how many
traces the batch, the same words as other trees and the same batch padded
wider needed (one per input shape). ``--out`` writes the jaxprs as text.

``jax-vmap`` beside ``jax``: the program ``jax.vmap`` generates from SPINN for
one sentence (impl_jax/vmap.py), against the one written batched by hand
(masked.py). Both are traced by the Runner for the same batch
(``Runner.trace``, counted like every trace) and measured the same way. The
two compute the same numbers; the difference in size is what batching by
transformation costs (or saves) in the program XLA is given.

``--parse``: the equations of the jaxpr and of the scan body, gold against
predicted, and the body's ``select_n`` equations. ``--bad-input``: no error
at all, numbers come back. ``--levels``: jax-levels' schedule as its Runner
feeds it (each level's padded Reduce width: levels.py's PADDING) and the
equations of the scan body over the levels.

Everything runs with x64 off: the same jaxprs whatever the process set (the
tests turn x64 on).
"""

from __future__ import annotations

import collections
from pathlib import Path

import flax
import jax

from impl_jax.jaxprs import jaxpr_stats, nested_eqns
from impl_jax.runner import Runner
from shared.batching import sentences_transitions
from shared.explaining import best_of, compare_row, encode_outcome, listing, numbers, row, secs, timer
from shared.levels import level_rows
from shared.params import ModelConfig

VERSION = f"{jax.__version__} (flax {flax.__version__})"
PROGRAMS = ("encode", "loss_and_grads")
MODES = ("gold", "predicted")
# The Runner options of the two implementations jax-vmap's view compares (their registry entries').
OPTIONS = {"jax-vmap": {"family": "vmap"}, "jax": {}}
COMPARED = {"vmap": "jax-vmap", "batched": "jax"}


def explain(implementation: str, batches, config: ModelConfig, params, out: Path | None, *, timing: bool) -> dict:
    explainer = {"jax": _explain_jax, "jax-vmap": _explain_vmap}[implementation]
    with jax.enable_x64(False):
        return explainer(batches, config, params, out, timing)


def format_explain(implementation: str, r: dict) -> list[str]:
    if implementation == "jax-vmap":
        return _format_vmap(r)
    e, g = r["encode"], r["loss_and_grads"]
    state = r["loop_state"]
    return [
        "",
        "jax: jit traces once per input shape, XLA compiles; lax.scan",
        row("encode: jaxpr equations", e["eqns"],
            f"(scan body {numbers(e['scan_body_eqns'])}; {e['eqns_total']} counting nested)"),
        row("loss + gradients: equations", g["eqns"],
            f"({g['scans']} scans, bodies {numbers(g['scan_body_eqns'])}; {g['eqns_total']} counting nested)"),
        row("scan carry of the body", len(state.get("carry", [])),
            f"(and per step xs: {' '.join(state.get('xs', []))})"),
        *listing(state.get("carry", [])),
        row("traces for the 3 batches", r["traces_for_variants"], "(one per input shape)"),
        row("encode: trace / lower / compile", f"{secs(e['trace_s'])} / {secs(e['lower_s'])} / "
                                              f"{secs(e['compile_s'])}"),
        row("loss + grads: trace / lower / compile", f"{secs(g['trace_s'])} / {secs(g['lower_s'])} / "
                                                    f"{secs(g['compile_s'])}"),
        row("compiled call: encode / loss + grads", f"{secs(e['call_s'])} / {secs(g['call_s'])}"),
    ]


def _program_figures(runner, name: str, batch, *, timing: bool, jaxpr_file: Path | None = None) -> dict:
    """A JAX Runner's program ``name`` for ``batch``: the jaxpr's figures
    (jaxprs.jaxpr_stats), the seconds to trace it and, with ``timing``, to lower,
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


def _explain_jax(batches, config: ModelConfig, params, out: Path | None, timing: bool) -> dict:
    # The Runner's own programs. Its jit traces a program once per input
    # shape; the Runner counts the traces.
    runner = Runner(params, config, dtype="float32", device="cpu")
    result: dict = {"framework_version": VERSION, "layout": runner.layout,
                    **_programs(runner, batches, out, "jax", timing)}
    # The recompilation check: jit's cache is keyed on shapes and dtypes, so
    # the other trees reuse the trace and the padded batch (new N, T) does not.
    before = runner.compile_stats("encode").traces
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        runner.trace("encode", batch)
    result["traces_for_variants"] = runner.compile_stats("encode").traces - before + 1  # the first trace was above
    # Traced, not recorded: docs/figures/graph-size.svg draws loss_and_grads (the whole program, each loop
    # body once) beside the graphs define-by-run records for the same loss.
    result["graph"] = {"loop": "scan", "body": result["encode"]["scan_body_eqns"][0]}
    return result


def _explain_vmap(batches, config: ModelConfig, params, out: Path | None, timing: bool) -> dict:
    """jax-vmap's programs beside jax's: the same figures for both, and their ratios."""
    result: dict = {"framework_version": VERSION}
    for label, name in COMPARED.items():
        runner = Runner(params, config, dtype="float32", device="cpu", **OPTIONS[name])
        result[label] = _programs(runner, batches, out, name.replace("-", "_"), timing)
    result["ratio"] = {program: {key: _ratio(result["vmap"][program][key], result["batched"][program][key])
                                 for key in ("eqns", "eqns_total", "scan_body_eqns")}
                       for program in PROGRAMS}
    return result


def _ratio(vmap, batched) -> float:
    """vmap's count over the hand-batched one (of the first scan body, for lists)."""
    if isinstance(vmap, list):
        vmap, batched = vmap[0], batched[0]
    return vmap / batched


def _programs(runner, batches, out: Path | None, prefix: str, timing: bool) -> dict:
    """The figures of the Runner's programs for ``batches.main`` (jaxprs written as ``PREFIX_PROGRAM.jaxpr.txt``)."""
    result = {program: _program_figures(runner, program, batches.main, timing=timing,
                                       jaxpr_file=out / f"{prefix}_{program}.jaxpr.txt" if out is not None else None)
              for program in PROGRAMS}
    result["loop_state"] = result["encode"].pop("loop_state", {})
    result["loss_and_grads"].pop("loop_state", None)
    return result


def _build_s(stats: dict) -> float | None:
    """Lowering and compilation together: what jit's first call pays before it runs."""
    return None if stats["compile_s"] is None else stats["lower_s"] + stats["compile_s"]


def _format_vmap(r: dict) -> list[str]:
    """The text lines of the comparison."""
    v, b, ratio = r["vmap"], r["batched"], r["ratio"]
    lines = ["", "jax-vmap: SPINN for one sentence, batched by jax.vmap; beside jax (batched by hand)"]
    for program, label in (("encode", "encode"), ("loss_and_grads", "loss + gradients")):
        lines.append(row(f"{label}: jaxpr equations", f"{v[program]['eqns']} vs {b[program]['eqns']}",
                         f"({v[program]['eqns_total']} vs {b[program]['eqns_total']} counting nested)"))
        lines.append(row(f"{label}: scan body equations",
                         f"{', '.join(map(str, v[program]['scan_body_eqns']))} vs "
                         f"{', '.join(map(str, b[program]['scan_body_eqns']))}",
                         f"(x{ratio[program]['scan_body_eqns']:.2f})"))
    lines.append(row("scan carry: vmap / by hand", f"{len(v['loop_state'].get('carry', []))} / "
                                                     f"{len(b['loop_state'].get('carry', []))}"))
    lines.append("    vmap:    " + " ".join(v["loop_state"].get("carry", [])))
    lines.append("    by hand: " + " ".join(b["loop_state"].get("carry", [])))
    lines.append(row("compile: vmap / by hand", f"{secs(_build_s(v['encode']))} / "
                                                 f"{secs(_build_s(b['encode']))}", "(encode)"))
    lines.append(row("compiled call: vmap / by hand", f"{secs(v['encode']['call_s'])} / "
                                                       f"{secs(b['encode']['call_s'])}", "(encode)"))
    return lines


def _body_stats(closed) -> dict:
    """The program's top-level equations and scans, and its first scan body's
    equations, nested ones counted (the step sits inside a cond)."""
    jaxpr = closed.jaxpr
    scans = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]
    body = list(nested_eqns(scans[0].params["jaxpr"].jaxpr))
    types = collections.Counter(eqn.primitive.name for eqn in body)
    return {"eqns": len(jaxpr.eqns), "scans": len(scans), "body_eqns": len(body),
            "body_selects": types.get("select_n", 0)}


def explain_parse(batches, config: ModelConfig, params) -> dict:
    """The decision is a mask inside the scan body: the traced parse, per mode."""
    with jax.enable_x64(False):
        runner = Runner(params, config, dtype="float32", device="cpu")
        out: dict = {"framework_version": VERSION}
        for mode in MODES:
            out[mode] = _body_stats(runner.trace(f"parse:{mode}", batches.main).jaxpr)
    return out


def format_explain_parse(result: dict) -> list[str]:
    g, p = result["gold"], result["predicted"]
    return [
        "jax: the decision is a mask inside the scan body",
        compare_row("jaxpr equations", g["eqns"], p["eqns"]),
        compare_row("scan body equations", g["body_eqns"], p["body_eqns"]),
        compare_row("of them select_n", g["body_selects"], p["body_selects"]),
    ]


def explain_bad_input(config: ModelConfig, params, bad, where) -> dict:
    """The compiled program returns numbers: no error at all. Called past the
    Runner's host check (shared/contract.py), which refuses a bad batch the
    same way in every framework: what is shown is what XLA does by itself."""
    with jax.enable_x64(False):
        return encode_outcome(Runner(params, config, dtype="float32", device="cpu").encode_unchecked, bad, where)


# -- explain --levels: the host-scheduled levels (impl_jax/levels.py) ------------------


def explain_levels(batch, variants: dict, options: dict) -> dict:
    """jax-levels on ``batch``, once per model of ``variants`` (key -> (config,
    params)), with its registry ``options``: the schedule as the Runner feeds
    it (shared.levels.level_rows with levels.py's PADDING: the Reduce width
    each level runs, padded to its class, and the tracker's rows, padded) and
    the scans of the encode program over the levels."""
    from impl_jax.levels import PADDING  # the family's module, as the runner imports it: only here

    out: dict = {"framework_version": VERSION}
    transitions = sentences_transitions(batch)
    with jax.enable_x64(False):
        for key, (config, params) in variants.items():
            runner = Runner(params, config, dtype="float32", device="cpu", **options)
            stats = jaxpr_stats(runner.trace("encode", batch).jaxpr)
            tracker = config.tracker_dim > 0
            rows = level_rows(transitions, batch.num_tokens, tracker, PADDING)
            out[key] = {
                "levels_run": len(rows), "levels_scheduled": int(runner.last_rows["levels"]),
                "reduce_widths": [r for _, r in rows], "tracker_rows": [t for t, _ in rows] if tracker else [],
                "padded_pct": float(runner.last_rows["level_padding_pct"]),
                "eqns": stats["eqns"], "scans": stats["scans"], "scan_lengths": stats["scan_lengths"],
                "scan_body_eqns": stats["scan_body_eqns"],
            }
    return out


def format_explain_levels(result: dict) -> list[str]:
    lines = ["jax: jit, one lax.scan over the levels (a wide one as sub-levels of its window; their count rounded up, "
             "a cond skipping the padding ones), a switch per level picking Reduce's width class where the window "
             "has more than one"]
    for key, label in (("tracker", "with the tracker"), ("no_tracker", "without the tracker")):
        if key in result:
            r = result[key]
            lines.append(row(f"{label}: scans", r["scans"], f"(of {numbers(r['scan_lengths'])} levels; "
                             f"bodies {numbers(r['scan_body_eqns'])} equations, nested counted; jaxpr {r['eqns']})"))
    return lines
