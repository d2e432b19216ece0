"""jax-vmap beside jax: the program ``jax.vmap`` generates from SPINN for one
sentence, against the one written batched by hand (impl_jax/vmap.py, model.py).

Both are traced by the JAX Runner for the same batch (``trace``, counted like
every trace), and measured the same way as ``jax_graph``: equations of the
jaxpr, of each scan body, and the scan's carry. The two compute the same
numbers; the difference in size is what batching by transformation costs (or
saves) in the program XLA is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.explain.batches import Batches
from bench.explain.jax_graph import program_figures
from bench.frameworks import resolve, runner_class
from shared.params import ModelConfig

PROGRAMS = ("encode", "loss_and_grads")
# The two implementations compared, by registry name (bench/frameworks.py).
COMPARED = {"vmap": "jax-vmap", "batched": "jax"}


def explain_jax_vmap(args: argparse.Namespace, batches: Batches, config: ModelConfig, params,
                     out: Path | None) -> dict:
    import flax
    import jax

    with jax.enable_x64(False):  # the same jaxprs whatever the process set (the tests turn x64 on)
        result: dict = {"framework_version": f"{jax.__version__} (flax {flax.__version__})"}
        for label, name in COMPARED.items():
            framework, options = resolve(name)
            runner = runner_class(framework)(params, config, dtype="float32", device="cpu", **options)
            result[label] = _programs(args, runner, batches, out, name.replace("-", "_"), jax)
    result["ratio"] = {program: {key: _ratio(result["vmap"][program][key], result["batched"][program][key])
                                 for key in ("eqns", "eqns_total", "scan_body_eqns")}
                       for program in PROGRAMS}
    return result


def _ratio(vmap, batched) -> float:
    """vmap's count over the hand-batched one (of the first scan body, for lists)."""
    if isinstance(vmap, list):
        vmap, batched = vmap[0], batched[0]
    return vmap / batched


def _programs(args, runner, batches: Batches, out: Path | None, prefix: str, jax) -> dict:
    result = {program: program_figures(runner, program, batches.main, jax, timing=not args.no_timing,
                                       jaxpr_file=out / f"{prefix}_{program}.jaxpr.txt" if out is not None else None)
              for program in PROGRAMS}
    result["loop_state"] = result["encode"].pop("loop_state", {})
    result["loss_and_grads"].pop("loop_state", None)
    return result


def _build_s(stats: dict) -> float | None:
    """Lowering and compilation together: what jit's first call pays before it runs."""
    return None if stats["compile_s"] is None else stats["lower_s"] + stats["compile_s"]


def format_jax_vmap(r: dict, row, secs) -> list[str]:
    """The text lines of the comparison (``row`` and ``secs`` format like the rest of the report)."""
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
