"""The whole ``explain`` report: every framework's figures for one batch, as a dict and as text."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import frameworks
from bench.explain.arguments import chosen, format_header, result_header
from bench.explain.bad_input import explain_bad_input, format_bad_input
from bench.explain.batches import setup, summary
from bench.explain.levels_view import explain_levels, format_levels
from bench.explain.parse_view import explain_parse, format_parse


def explain(args: argparse.Namespace) -> dict:
    """The figures of one ``explain`` run, as a JSON-ready dict."""
    batches, config, params = setup(args)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    result = {**result_header(args, summary(batches), config), "timed": not args.no_timing}
    for name in chosen(args):
        result[name] = frameworks.platform(name).explain(name, batches, config, params, out,
                                                         timing=not args.no_timing)
    if out is not None:
        (out / "explain.json").write_text(json.dumps(result, indent=2) + "\n")
        result["files"] = sorted(p.name for p in out.iterdir() if p.is_file())
    return result


def run(args: argparse.Namespace) -> dict:
    """``explain``; with ``--bad-input`` the debugging demonstration, with ``--levels`` the level schedule."""
    if args.bad_input:
        return explain_bad_input(args)
    if args.levels:
        return explain_levels(args)
    return explain_parse(args) if args.parse else explain(args)


# --------------------------------------------------------------------------
# Text output
# --------------------------------------------------------------------------


def format_text(result: dict) -> str:
    """The figures as the text that ``explain`` prints (and the guide quotes)."""
    if "bad_input" in result:
        return format_bad_input(result)
    if "schedules" in result:
        return format_levels(result)
    if "choice_steps_gold" in result["batch"]:
        return format_parse(result)
    b = result["batch"]
    lines = format_header(result, [
        f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps: "
        f"{b['shift']} SHIFT, {b['reduce']} REDUCE, {b['pad']} PAD",
        f"  variants: the same words as {b['other_trees']} trees (same B, N, T); "
        f"the batch padded to N={b['padded_num_tokens']}, T={b['padded_num_steps']}",
    ])
    for name in frameworks.explained():
        if name in result:
            lines += frameworks.platform(name).format_explain(name, result[name])
    if result.get("files"):
        lines += ["", "wrote: " + ", ".join(result["files"])]
    return "\n".join(lines)
