"""``python -m lessons.today --out DIR``: what the frameworks installed here offer for SPINN's problem, tried.

SPINN's trouble was that its graph depends on the data: each sentence's
tree decides which operations run. Each framework now has tools aimed at
that, and this script tries them on the lessons' tiny model and inputs
(lessons/setup.py), the way a learner would, and records what happened:

* PyTorch: torch.compile on the list model (lessons/pytorch_lists.py) over
  two batches of other trees, its graph breaks and recompiles, with the
  default and dynamic=True, under the "eager" and the "inductor" backends;
  torch.cond and torch.while_loop, eagerly and compiled, and their gradients;
* JAX: which of lax.cond, lax.switch, lax.while_loop, lax.fori_loop and
  lax.scan jax.grad differentiates (reverse mode), and jax.jacfwd (forward);
* TensorFlow: what AutoGraph makes of a one-sentence encoder's Python `for`
  and `if` on tensors, and what autograph=False says.

It writes DIR/today.json: counts, booleans, error names and seconds, with the
provenance of the files it ran (bench/provenance.py), which docs/today.md quotes
(bench render's ``today`` quote). The seconds are one run's on this machine.
The exercises' answers (lessons/answers/) are its probes, so the page and the
answers cannot disagree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

SHIFT = 1
X, N = 2.0, 4  # every gradient probe: d(x**4)/dx at x = 2
ANALYTIC = N * X ** (N - 1)  # 32


def _error(fn):
    """(True, value) where fn runs, (False, the exception's type name) where it raises."""
    try:
        return True, fn()
    except Exception as err:  # noqa: BLE001: what is recorded is which error
        return False, type(err).__name__


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


# ---------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------

def _recompile_kind(message: str) -> str:
    """Whether a recompile's first failed guard was on a tensor's size or on a Python value."""
    guard = next((line for line in message.splitlines() if line.strip().startswith("- ")), "")
    return "size" if "size" in guard else "python"


def _batches(seen) -> list[dict]:
    import numpy as np

    from lessons.setup import TOLERANCE
    rows = []
    for out, expected, breaks, recompiles, limits in seen:
        err = float(np.max(np.abs(out.astype(np.float64) - expected)))
        kinds = [_recompile_kind(m) for m in recompiles]
        rows.append({"graph_breaks": len(breaks), "recompiles": len(recompiles),
                     "recompiles_on_sizes": kinds.count("size"), "recompiles_on_python_values": kinds.count("python"),
                     "recompile_limits": len(limits), "max_abs_err": err, "agrees": err <= TOLERANCE})
    return rows


def _first_break(message: str) -> dict:
    """Where a logged graph break was (file:line, relative to the repository) and why, in Dynamo's words."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    path, line = lines[0].split(" at ")[-1].rsplit(":", 1)
    after = [k + 1 for k, text in enumerate(lines) if text.endswith("Graph break encountered:")]
    reason = lines[after[0]] if after and after[0] < len(lines) else lines[1]
    return {"where": f"{os.path.relpath(path, Path(__file__).resolve().parent.parent)}:{line}", "reason": reason,
            "whole_function_uncompiled": any("falling back to eager" in text for text in lines)}


def torch_compile() -> dict:
    import torch

    from lessons.answers.compile_lists import compile_two_batches, explain
    from lessons.pytorch_lists import encode
    from lessons.setup import lesson_batches

    found = explain()
    record = {"explain_graphs": found.graph_count, "explain_graph_breaks": found.graph_break_count}
    variants = (("eager", {}), ("dynamic", {"dynamic": True}), ("scalars", {}), ("inductor", {"backend": "inductor"}))
    for label, kwargs in variants:
        # scalars: Dynamo told to put Tensor.item() into the graph, as the first break's message suggests
        with torch._dynamo.config.patch(capture_scalar_outputs=label == "scalars"):
            seen, seconds = _timed(lambda: compile_two_batches(**kwargs))
        record[label] = {"batches": _batches(seen), "seconds": seconds,
                         "first_break": _first_break(seen[0][2][0]) if seen[0][2] else None}
    config, params, batches = lesson_batches()
    w = {name: torch.tensor(value) for name, value in params.items()}

    def plain():
        for tokens, transitions, _ in batches:
            encode(w, torch.as_tensor(tokens).long(), torch.as_tensor(transitions), config.hidden_dim,
                   config.tracker_dim)
    plain()
    record["uncompiled_seconds"] = min(_timed(plain)[1] for _ in range(3))
    return record


def torch_control_flow() -> dict:
    import torch

    op, n = torch.tensor(SHIFT), torch.tensor(N)

    def branch(x):  # a SHIFT takes x**4, any other op x (a copy: a branch may not return its input itself)
        return torch.cond(op == SHIFT, lambda x: x ** N, lambda x: x.clone(), (x,))

    def aliasing(x):  # the same, as one first writes it
        return torch.cond(op == SHIFT, lambda x: x ** N, lambda x: x, (x,))

    def loop(x, carry_grad=False):  # x**4 by a loop that stops when its counter reaches n; the body reads x
        y0 = torch.ones(()) + 0 * x if carry_grad else torch.ones(())
        return torch.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x),
                                (torch.zeros((), dtype=torch.int64), y0))[1]

    def value_and_grad(fn):
        x = torch.tensor(X, requires_grad=True)
        y = fn(x)
        return float(y.detach()), float(torch.autograd.grad(y, x)[0])

    record = {"cond_exists": hasattr(torch, "cond"), "while_loop_exists": hasattr(torch, "while_loop")}
    ok, got = _error(lambda: value_and_grad(aliasing))
    record["cond_returning_its_input"] = {"runs": ok, "error": None if ok else got}
    cases = (("cond", branch), ("while_loop", loop), ("while_loop_carry_grad", lambda x: loop(x, True)))
    for name, fn in cases:
        record[name] = {}
        for how, wrapped in (("eager", fn), ("compiled", torch.compile(fn, fullgraph=True, backend="eager")),
                             ("inductor", torch.compile(fn, fullgraph=True))):
            (ok, got), seconds = _timed(lambda: _error(lambda: value_and_grad(wrapped)))
            record[name][how] = {"runs": ok, "value": got[0] if ok else None, "grad": got[1] if ok else None,
                                 "grad_right": ok and abs(got[1] - ANALYTIC) < 1e-4, "error": None if ok else got,
                                 "seconds": seconds}
    ops, a, b = torch.tensor([SHIFT, 2, SHIFT, 2]), torch.zeros(4, 3), torch.ones(4, 3)
    per_op = torch.vmap(lambda op, a, b: torch.cond(op == SHIFT, lambda a, b: a + 1, lambda a, b: b * 2, (a, b)))
    ok, got = _error(lambda: bool(torch.equal(per_op(ops, a, b), torch.where((ops == SHIFT)[:, None], a + 1, b * 2))))
    record["vmap_cond"] = {"runs": ok, "equals_where": ok and got}
    return record


# ---------------------------------------------------------------------------
# JAX
# ---------------------------------------------------------------------------

def jax_control_flow() -> dict:
    import jax
    import jax.numpy as jnp
    from jax import lax

    from lessons.answers import grad_loop as g

    cases = {  # each x**4 (or x), k = 4 traced by jit: a branch index, a trip count
        "cond": lambda x, k: lax.cond(k == N, lambda: x ** N, lambda: x),
        "switch": lambda x, k: lax.switch(jnp.minimum(k - N + 1, 1), [lambda: x, lambda: x ** N]),
        "while_loop": g.power_while,
        "fori_loop_static": lambda x, k: g.power_fori_static(x),
        "fori_loop_traced": g.power_fori_traced,
        "scan": g.power_masked_scan,
    }
    record = {}
    for name, fn in cases.items():
        rev_ok, rev = _error(lambda: float(jax.jit(jax.grad(fn))(X, N)))
        fwd_ok, fwd = _error(lambda: float(jax.jit(jax.jacfwd(fn))(X, N)))
        message = None
        if not rev_ok:
            try:
                jax.jit(jax.grad(fn))(X, N)
            except Exception as err:  # noqa: BLE001
                message = str(err).split(". ")[0]
        record[name] = {"reverse": rev_ok, "reverse_grad": rev if rev_ok else None,
                        "reverse_right": rev_ok and rev == ANALYTIC, "reverse_error": None if rev_ok else rev,
                        "reverse_message": message, "forward": fwd_ok, "forward_grad": fwd if fwd_ok else None,
                        "forward_right": fwd_ok and fwd == ANALYTIC}
    return record


# ---------------------------------------------------------------------------
# TensorFlow
# ---------------------------------------------------------------------------

def tensorflow_autograph() -> dict:
    import numpy as np
    import tensorflow as tf

    from lessons import tensorflow_while
    from lessons.answers import autograph_if
    from lessons.setup import TOLERANCE, lesson_inputs

    _config, params, tokens, transitions, expected = lesson_inputs()
    encode = autograph_if.build_encoder(params)
    _, trace_s = _timed(encode.get_concrete_function)
    ops = autograph_if.graph_ops(encode)
    encodings = autograph_if.encode_all(encode, tokens, transitions)
    masked = tensorflow_while.build_encoder(params)
    _, mask_trace_s = _timed(masked.get_concrete_function)
    args = tf.constant(tokens, tf.int32), tf.constant(transitions, tf.int32)
    mask_encodings = masked(*args).numpy()
    err = float(np.max(np.abs(encodings.astype(np.float64) - expected)))
    refused_if = autograph_if.refusal()
    ok, refused_for = _error(lambda: autograph_if.build_encoder(params, autograph=False).get_concrete_function())
    return {
        "graph_ops": ops, "if_became_cond": any(op.endswith("If") for op in ops),
        "for_became_while_loop": any(op.endswith("While") for op in ops),
        "max_abs_err": err, "agrees": err <= TOLERANCE,
        "agrees_with_masks": float(np.max(np.abs(encodings - mask_encodings))) <= TOLERANCE,
        "autograph_off_if_error": type(refused_if).__name__ if refused_if else None,
        "autograph_off_if_message": str(refused_if).split(". ")[0] if refused_if else None,
        "autograph_off_encoder_error": None if ok else refused_for,
        "trace_s": trace_s, "mask_trace_s": mask_trace_s,
        "one_at_a_time_s": min(_timed(lambda: autograph_if.encode_all(encode, tokens, transitions))[1]
                               for _ in range(3)),
        "masked_batch_s": min(_timed(lambda: masked(*args).numpy())[1] for _ in range(3)),
    }


# ---------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lessons.today", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder to write today.json into")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from bench.provenance import machine, provenance
    from bench.records import write_json

    # A cold Inductor: its compiled kernels go to a fresh cache, removed at the end, so its seconds include them.
    cache = tempfile.mkdtemp(prefix="today-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    try:
        import jax
        import tensorflow as tf
        import torch
        record = {"kind": "today", "versions": {"torch": torch.__version__, "jax": jax.__version__,
                                                "tensorflow": tf.__version__},
                  "x": X, "n": N, "analytic_grad": ANALYTIC,
                  "torch": {"compile": torch_compile(), "control_flow": torch_control_flow()},
                  "jax": jax_control_flow(), "tensorflow": tensorflow_autograph()}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    record.update({"wall_s": time.perf_counter() - start, **provenance(), **machine(),
                   "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "today.json", record)
    print(f"wrote {out / 'today.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
