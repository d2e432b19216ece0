"""Debugging: what each framework does with an invalid transition sequence or token id.

Every framework is driven through its Runner, as a user would (its Platform's ``explain_bad_input``, in
``impl_<framework>/explain.py``): one raises from a line of its model, one checks the batch on the host before its graph
runs (and its bare traced function, called without the check, runs or fails inside the runtime), one returns numbers.
This module breaks the batch, says where in the project's own code an error came from, and prints it all.
"""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path

from bench import ROOT, frameworks
from bench.explain.arguments import chosen_frameworks
from bench.explain.batches import setup
from shared.batching import PairBatch
from shared.transitions import PAD, REDUCE, TRANSITION_NAMES


BAD_INPUTS = {
    "transitions": "the first premise's first REDUCE moved to step 1 (a REDUCE with one item on the stack)",
    "token": "the first premise's first token id set to V (outside the vocabulary)",
}


def bad_batch(batch: PairBatch, kind: str, vocab_size: int) -> PairBatch:
    """The batch with one invalid entry in its first premise (see BAD_INPUTS).
    For "transitions" the counts of SHIFT and REDUCE stay right; only the order breaks."""
    arrays = {name: array.copy() for name, array in batch.to_dict().items()}
    if kind == "transitions":
        row = list(arrays["premise_transitions"][0])
        if REDUCE not in row:
            raise ValueError("the first premise has one word; pick a longer sentence for --bad-input transitions")
        row.insert(1, row.pop(row.index(REDUCE)))
        arrays["premise_transitions"][0] = row
    elif kind == "token":
        arrays["premise_tokens"][0, 0] = vocab_size
    else:
        raise ValueError(f"unknown bad input {kind!r}; choose from {', '.join(sorted(BAD_INPUTS))}")
    return PairBatch(**arrays, pair_ids=batch.pair_ids)


def _where(err: BaseException) -> str | None:
    """The innermost frame of the project's own code (this tool aside) in the traceback of ``err``, or of the error it
    was raised from; None if the traceback holds no frame of it."""
    while err.__cause__ is not None or (err.__context__ is not None and err.__suppress_context__):
        err = err.__cause__ or err.__context__
    frames = [f for f in traceback.extract_tb(err.__traceback__) if _own_code(f.filename)]
    if not frames:
        return None
    f = frames[-1]
    return f"{Path(f.filename).resolve().relative_to(ROOT)}, in {f.name}: {f.line}"


def _own_code(filename: str) -> bool:
    """A file of the project's packages (``shared``, ``bench`` and every
    registered framework's), not a library and not explain's own code."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT):
        return False
    framework_packages = tuple(frameworks.framework(name).package for name in frameworks.FRAMEWORKS)
    explain = (ROOT / "bench" / "explain", ROOT / "shared" / "explaining.py") + tuple(
        ROOT / package / "explain.py" for package in framework_packages)
    return (path.relative_to(ROOT).parts[0] in ("shared", "bench") + framework_packages
            and not any(path.is_relative_to(e) for e in explain))


def explain_bad_input(args: argparse.Namespace) -> dict:
    batches, config, params = setup(args)
    bad = bad_batch(batches.main, args.bad_input, config.vocab_size)
    result = {"bad_input": {"kind": args.bad_input, "what": BAD_INPUTS[args.bad_input],
                            "first_premise": [int(op) for op in bad.premise_transitions[0]]}}
    for name in chosen_frameworks(args, "--bad-input"):
        result[name] = frameworks.platform(name).explain_bad_input(config, params, bad, _where)
    return result


def format_bad_input(result: dict) -> str:
    bad = result["bad_input"]
    lines = [f"bad input: {bad['what']}"]
    if bad["kind"] == "transitions":
        ops = " ".join(TRANSITION_NAMES[op][0] if op != PAD else "." for op in bad["first_premise"])
        lines.append(f"  first premise: {ops}   (S SHIFT, R REDUCE, . PAD)")

    def outcome(r: dict, indent: str) -> list[str]:
        out = []
        if "error" in r:
            out.append(f"{indent}{r['error']}")
            out.append(f"{indent}at {r['where']}" if r["where"] else
                       f"{indent}(no frame of your code in the traceback: the error comes from the runtime)")
        return out

    for name in frameworks.FRAMEWORKS:
        if name not in result:
            continue
        r = result[name]
        lines += ["", f"{name}: {r['outcome']}"] + outcome(r, "  ")
        if "graph" in r:
            lines += [f"  the traced graph called without the check: {r['graph']['outcome']}"]
            lines += outcome(r["graph"], "    ")
    return "\n".join(lines)
