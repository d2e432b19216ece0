"""``explain --levels``: the host-scheduled levels of the batch, and the loop each framework runs over them.

shared/levels.py schedules a batch's gold transitions on the host: without the tracker a level is a tree height (every
node of height h at level h - 1), with it a level is a transition step (the tracker on the sentences that step, Reduce
on those that reduce). The view shows that schedule for the batch, with and without the tracker, and for every framework
with a host-scheduled levels implementation in the registry (``bench/frameworks.py``) the schedule as its Runner feeds
it (TensorFlow: every level exactly as wide as its nodes; JAX: padded to the widths its programs compile for) and the
body of the loop it runs over the levels, read from that Runner (``explain_levels`` in ``impl_<framework>/explain.py``).

Counts only: deterministic for a given library version.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib

from bench import frameworks
from bench.explain.arguments import format_header, result_header
from bench.config import model_config
from bench.explain.batches import make_batches, summary
from shared.batching import sentences_transitions
from shared.levels import schedule
from shared.params import init_params

ALGORITHM = "levels"  # the Runner option of a host-scheduled levels implementation
VARIANTS = {"tracker": "with the tracker", "no_tracker": "without the tracker"}


def implementations() -> dict[str, dict]:
    """Framework -> the Runner options of its host-scheduled levels implementation, in the registry's order."""
    found = {impl.framework: dict(impl.options) for impl in frameworks.IMPLEMENTATIONS_BY_NAME.values()
             if impl.options.get("algorithm") == ALGORITHM}
    return {name: found[name] for name in frameworks.FRAMEWORKS if name in found}


def chosen_levels(args: argparse.Namespace) -> dict[str, dict]:
    """:func:`implementations`, narrowed to ``--framework`` when it names one."""
    found = implementations()
    if args.framework == "all":
        return found
    if args.framework not in found:
        raise ValueError(f"--levels shows the frameworks with host-scheduled levels; choose from all, "
                         f"{', '.join(found)}")
    return {args.framework: found[args.framework]}


def schedule_figures(transitions, num_tokens: int, tracker: bool) -> dict:
    """The batch's schedule (shared.levels, every level exactly as wide as its nodes)."""
    sched = schedule(transitions, num_tokens, tracker, widths=(1,))
    return {
        "levels": sched.n_levels,
        "steps": int(transitions.shape[1]),
        "nodes": [lv.used for lv in sched.levels],
        "active": [lv.active_used for lv in sched.levels] if tracker else [],
    }


def explain_levels(args: argparse.Namespace) -> dict:
    """The figures of ``explain --levels``, as a JSON-ready dict."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size, lowercase=True)
    result = result_header(args, summary(batches), config)
    configs = {"tracker": config} if config.tracker_dim else {}  # --tracker-dim 0: the view without it alone
    configs["no_tracker"] = dataclasses.replace(config, tracker_dim=0)
    transitions = sentences_transitions(batches.main)
    result["schedules"] = {key: schedule_figures(transitions, batches.main.num_tokens, key == "tracker")
                           for key in configs}
    variants = {key: (c, init_params(c, seed=args.seed)) for key, c in configs.items()}
    for name, options in chosen_levels(args).items():
        if not frameworks.installed(name):
            result[name] = {"framework_version": "not installed", "installed": False}
            continue
        module = importlib.import_module(frameworks.platform(name).explain_module)
        result[name] = module.explain_levels(batches.main, variants, options)
    return result


def format_levels(result: dict) -> str:
    """The text ``explain --levels`` prints."""
    lines = format_header(result)
    names = [name for name in frameworks.FRAMEWORKS if name in result]
    ran = [name for name in names if result[name].get("installed", True)]
    for key, label in VARIANTS.items():
        if key not in result["schedules"]:
            continue
        s = result["schedules"][key]
        level_is = "a transition step" if key == "tracker" else "a tree height"
        lines += ["", f"schedule {label}: {s['levels']} levels for T={s['steps']} steps (a level is {level_is}), "
                      f"{sum(s['nodes'])} Reduce nodes"]
        for name in ran:
            r = result[name][key]
            lines.append(f"  {name} runs {r['levels_run']} levels, {sum(r['reduce_widths'])} Reduce rows, "
                         f"{r['padded_pct']:.1f}% of them padding"
                         + (f", {sum(r['tracker_rows'])} tracker rows" if r["tracker_rows"] else ""))
        tracker = key == "tracker"
        reduce_cols = ["nodes"] + ran
        tracker_cols = (["active"] + ran) if tracker else []
        head = f"  {'level':>5} " + " ".join(f"{c:>10}" for c in reduce_cols)
        if tracker:
            head += "  |" + " ".join(f"{c:>10}" for c in tracker_cols)
        lines += ["  Reduce width per level" + ("  |  tracker rows per level" if tracker else ""), head]
        n_rows = max([s["levels"]] + [result[name][key]["levels_run"] for name in ran])
        for level in range(n_rows):
            cells = [_cell(s["nodes"], level)] + [_cell(result[name][key]["reduce_widths"], level) for name in ran]
            line = f"  {level:>5} " + " ".join(f"{c:>10}" for c in cells)
            if tracker:
                cells = [_cell(s["active"], level)] + [_cell(result[name][key]["tracker_rows"], level)
                                                       for name in ran]
                line += "  |" + " ".join(f"{c:>10}" for c in cells)
            lines.append(line)
    lines += ["", "the loop body each framework runs over the levels (encode)"]
    for name in names:
        if not result[name].get("installed", True):
            lines.append(f"{name}: not installed")
            continue
        module = importlib.import_module(frameworks.platform(name).explain_module)
        lines += module.format_explain_levels(result[name])
    return "\n".join(lines)


def _cell(values: list, level: int) -> str:
    """A level's figure, or "-" past the levels a schedule or a runner has."""
    return str(values[level]) if level < len(values) else "-"
