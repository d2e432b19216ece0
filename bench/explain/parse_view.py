"""``explain --parse``: what a parse decided at run time costs each framework (docs/spec.md §7).

With a transition head the model may follow its own parse ("predicted" mode): each step's op is known only once the head
has scored the tracker state. The same batch is run in gold mode (the data's transitions, the head teacher-forced) and
in predicted mode, and for each framework the view shows what changes: where the decision is taken (a define-by-run loop
reads it back to the host; a compiled loop keeps it in its body as a mask) and what that adds. Each framework's view is
its Platform's ``explain_parse`` (``impl_<framework>/explain.py``).

Counts only: deterministic for a given library version.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from bench import frameworks
from bench.explain.arguments import chosen_frameworks, format_header, result_header
from bench.config import model_config
from bench.explain.batches import make_batches, summary
from shared.batching import sentences_transitions
from shared.params import init_params
from shared.transitions import PAD, REDUCE, SHIFT


def explain_parse(args: argparse.Namespace) -> dict:
    """The figures of ``explain --parse``, as a JSON-ready dict."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size, lowercase=True)
    if not config.tracker_dim:
        raise ValueError("--parse needs a tracker (the head reads its state): --tracker-dim must be > 0")
    config = dataclasses.replace(config, transition_head=True)
    params = init_params(config, seed=args.seed)
    result = result_header(args, summary(batches), config)
    result["batch"]["choice_steps_gold"] = _choice_steps(sentences_transitions(batches.main))
    for name in chosen_frameworks(args, "--parse"):
        result[name] = frameworks.platform(name).explain_parse(batches, config, params)
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


def format_parse(result: dict) -> str:
    """The text ``explain --parse`` prints (and the guide quotes)."""
    b = result["batch"]
    lines = format_header(result, [f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps; the gold parses "
                                   f"have {b['choice_steps_gold']} steps where both SHIFT and REDUCE are valid"],
                          ", with a transition head (fresh weights)")
    lines += ["", f"  {'':<34} {'gold':>8} {'predicted':>10}"]
    for name in frameworks.FRAMEWORKS:
        if name in result:
            lines += frameworks.platform(name).format_explain_parse(result[name])
    return "\n".join(lines)
