"""Debugging: what each framework does with an invalid transition sequence or token id.

Every framework is driven through its Runner, as a user would: PyTorch
raises from a line of its model, TensorFlow's Runner checks the batch on the
host before its graph runs (and the bare traced function, called without the
check, runs or fails inside the runtime), JAX returns numbers.
"""

from __future__ import annotations

import argparse
import re
import traceback
from pathlib import Path

import numpy as np

from bench.explain.arguments import FRAMEWORK_ORDER, frameworks
from bench.explain.batches import batch_arrays, make_batches, model_config
from bench.frameworks import runner_class
from shared.batching import PairBatch
from shared.params import init_params
from shared.transitions import PAD, REDUCE, TRANSITION_NAMES

ROOT = Path(__file__).resolve().parents[2]
EXPLAIN = Path(__file__).resolve().parent

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
        raise ValueError(f"unknown bad input {kind!r}; choose from {sorted(BAD_INPUTS)}")
    return PairBatch(**arrays, pair_ids=batch.pair_ids)


def _where(err: BaseException) -> str | None:
    """The innermost frame of the project's own code (this tool aside) in the
    traceback of ``err``, or of the error it was raised from; None if the
    traceback holds no frame of it."""
    while err.__cause__ is not None or (err.__context__ is not None and err.__suppress_context__):
        err = err.__cause__ or err.__context__
    frames = [f for f in traceback.extract_tb(err.__traceback__) if _own_code(f.filename)]
    if not frames:
        return None
    f = frames[-1]
    return f"{Path(f.filename).resolve().relative_to(ROOT)}, in {f.name}: {f.line}"


def _own_code(filename: str) -> bool:
    """A file of the project's packages (not a library, not bench/explain/)."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT) or path.is_relative_to(EXPLAIN):
        return False
    return path.relative_to(ROOT).parts[0] in ("shared", "bench") + tuple(f"impl_{f}" for f in FRAMEWORK_ORDER)


# The trace-time stack TensorFlow puts before a runtime error when it has one.
_TF_STACK = ("Graph execution error", "Detected at node", "  File ")


def _error(err: BaseException) -> str:
    """The first line of the message, and the graph node TensorFlow names, with
    the run-dependent function numbers (and TensorFlow's trace-time stack) left out."""
    lines = [line for line in str(err).splitlines() if line.strip() and not line.startswith(_TF_STACK)] or [""]
    text = f"{type(err).__name__}: {lines[0]}" + "".join(" " + line.strip() for line in lines[1:] if "{{node" in line)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:[^\]]*\]", "", text)
    return text if len(text) <= 150 else text[:147] + "..."


def _finite(array) -> str:
    return f"ran; first premise encoding finite: {'yes' if np.isfinite(np.asarray(array)[0]).all() else 'no (NaN)'}"


def _encode(runner, bad: PairBatch) -> dict:
    """The Runner's encode on the bad batch: what happened, and where an error came from."""
    try:
        premise, _, _ = runner.encode(bad)
    except Exception as err:  # noqa: BLE001 - showing the error is the point
        return {"outcome": "raised", "error": _error(err), "where": _where(err)}
    return {"outcome": _finite(premise)}


def _bad_pytorch(config, params, bad) -> dict:
    return _encode(runner_class("pytorch")(params, config, dtype="float32", device="cpu"), bad)


def _bad_tensorflow(config, params, bad) -> dict:
    import tensorflow as tf

    runner = runner_class("tensorflow")(params, config, dtype="float32", device="cpu")
    out: dict = {}
    try:
        runner.program_inputs(bad)  # the host-side check the Runner makes before every call
        out["outcome"] = "passed the host-side check"
    except ValueError as err:
        out.update(outcome="raised by the host-side check, before the graph ran", error=_error(err),
                   where=_where(err))
    # Without the check: the graph cannot stop mid-loop with a message of ours.
    encode = runner.traced_function("encode").function
    try:
        premise, _, _ = encode(*[tf.constant(a) for a in batch_arrays(bad)])
        out["graph"] = {"outcome": _finite(premise.numpy())}
    except Exception as err:  # noqa: BLE001
        out["graph"] = {"outcome": "raised", "error": _error(err), "where": _where(err)}
    return out


def _bad_jax(config, params, bad) -> dict:
    import jax

    with jax.enable_x64(False):
        return _encode(runner_class("jax")(params, config, dtype="float32", device="cpu"), bad)


BAD_RUNNERS = {"pytorch": _bad_pytorch, "tensorflow": _bad_tensorflow, "jax": _bad_jax}


def explain_bad_input(args: argparse.Namespace) -> dict:
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size)
    params = init_params(config, seed=args.seed)
    bad = bad_batch(batches.main, args.bad_input, config.vocab_size)
    result = {"bad_input": {"kind": args.bad_input, "what": BAD_INPUTS[args.bad_input],
                            "first_premise": [int(op) for op in bad.premise_transitions[0]]}}
    for framework in frameworks(args):
        result[framework] = BAD_RUNNERS[framework](config, params, bad)
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

    for framework in FRAMEWORK_ORDER:
        if framework not in result:
            continue
        r = result[framework]
        lines += ["", f"{framework}: {r['outcome']}"] + outcome(r, "  ")
        if "graph" in r:
            lines += [f"  the traced graph called without the check: {r['graph']['outcome']}"]
            lines += outcome(r["graph"], "    ")
    return "\n".join(lines)
