"""``python -m bench explain``: what each framework actually built for one small batch.

The teaching companion of ``docs/static-vs-dynamic.md``. For one batch it
reports, side by side:

* PyTorch (define-by-run): the autograd graph recorded for this batch's loss,
  walked from ``loss.grad_fn`` through ``next_functions`` (its node count, by
  type), how often the Python loop called Tracker and Reduce, and the node
  counts of the same words arranged as other trees, and of the same batch
  with more padding. A new batch is a new graph.
* TensorFlow (static graph): the ops of the traced ``tf.function`` (encode,
  and loss + gradients), the ops of each ``tf.while_loop`` body, the loop
  variables the body receives (shapes with ``?``), trace and first-call times.
* JAX (``jit`` + ``lax.scan``): the equations of the jaxpr (encode, and loss +
  gradients), of each scan body, the scan carry the body receives (shapes, no
  values), trace, lowering and XLA compile times.
* For all three: how many traces the batch, the same words as other trees,
  and the same batch padded wider needed (PyTorch: none, it records afresh).

``--out DIR`` writes the graphs: the PyTorch autograd graph as Graphviz text
(written here by walking ``grad_fn``), the jaxprs as text, and the TensorFlow
graphs as GraphDef text (``.pbtxt``, the while bodies in its function
library). ``--json`` prints the figures as JSON. ``--bad-input`` shows
what each framework does with an invalid transition sequence or token id.

The guide's code excerpts and figure blocks are kept in step with the code by
``--check-guide`` (exit 1 and a diff on drift) and ``--sync-guide`` (rewrite
them from the sources and fresh runs); the tests run the same check.

Counts (nodes, ops, equations, traces) are deterministic for a given library
version; times are single measurements and vary from run to run.
"""

from __future__ import annotations

import argparse
import ast
import collections
import difflib
import functools
import json
import os
import platform
import re
import shlex
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from shared.batching import PairBatch
from shared.transitions import PAD, REDUCE, SHIFT

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "static-vs-dynamic.md"
FRAMEWORK_ORDER = ("pytorch", "tensorflow", "jax")
SHAPES = ("sample", "random", "left", "right", "balanced")
OTHER_SHAPES = ("left", "right", "balanced", "random")  # the PyTorch "same words, other trees" table
EXTRA_PADDING = 4  # the padded variant: N + 4 token slots (and T = 2(N + 4) - 1 steps)
COMMAND = "python -m bench explain"


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bench.config import add_size_arguments

    p.add_argument("--framework", default="all", choices=("all",) + FRAMEWORK_ORDER,
                   help="which framework to explain [default: %(default)s]")
    p.add_argument("--batch-size", type=int, default=2,
                   help="pairs in the batch; each pair is two sentences [default: %(default)s]")
    p.add_argument("--shape", default="sample", choices=SHAPES,
                   help="sample: the first pairs of the embedded SNLI sample (their own parse trees); "
                        "random/left/right/balanced: random words in trees of that shape, --length words "
                        "each [default: %(default)s]")
    p.add_argument("--length", type=int, default=8, help="words per generated sentence [default: %(default)s]")
    p.add_argument("--data-seed", type=int, default=0, help="seed of generated words and trees [default: %(default)s]")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed [default: %(default)s]")
    add_size_arguments(p)
    p.set_defaults(size="small")
    p.add_argument("--no-timing", action="store_true",
                   help="counts only: trace, but do not compile or run the compiled programs")
    p.add_argument("--out", default=None, help="folder to write the graphs to (.dot, .jaxpr.txt, .pbtxt)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of text")
    p.add_argument("--bad-input", default=None, choices=("transitions", "token"),
                   help="debugging: break the first premise (transitions: a REDUCE with one item on the "
                        "stack; token: an id outside the vocabulary) and show what each framework does")
    p.add_argument("--check-guide", action="store_true",
                   help="compare the guide's excerpts and figures with the code and fresh runs; exit 1 on drift")
    p.add_argument("--sync-guide", action="store_true",
                   help="rewrite the guide's excerpts from the code and its figures from fresh runs")
    p.add_argument("--guide", default=None,
                   help="the guide for --check-guide/--sync-guide [default: docs/static-vs-dynamic.md]")


def register(sub) -> None:
    p = sub.add_parser("explain", help="what each framework built for one small batch: graph sizes, traces, times",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_explain)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The explain flags alone (``argv`` without ``python -m bench explain``)."""
    p = argparse.ArgumentParser(prog=COMMAND)
    add_arguments(p)
    return p.parse_args(argv)


def cmd_explain(args: argparse.Namespace) -> int:
    from bench.config import quiet_frameworks as _quiet_frameworks

    _quiet_frameworks()
    if args.check_guide or args.sync_guide:
        guide = args.guide or GUIDE
        problems = sync_guide(guide, write=args.sync_guide)
        for problem in problems:
            print(problem, file=sys.stderr)
        if args.sync_guide:
            print(f"synced {guide}" + (f"; {len(problems)} problem(s) left to fix by hand" if problems else ""))
            return 1 if problems else 0
        print(f"{guide}: {'drifted' if problems else 'in step with the code'}")
        return 1 if problems else 0
    result = explain_bad_input(args) if args.bad_input else explain(args)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0


# --------------------------------------------------------------------------
# The batch and its variants
# --------------------------------------------------------------------------


@dataclass
class Batches:
    """The batch, and the variants the recompilation check feeds."""

    main: PairBatch
    reshaped: dict[str, PairBatch]  # shape -> the same words as other trees (same B, N, T)
    padded: PairBatch  # the same pairs with EXTRA_PADDING more token slots
    other_trees: str  # the shape of the variant that the recompilation check uses
    vocab_size: int
    source: str


def _reshape(sentence, shape: str, rng):
    from shared.synthetic import random_transitions
    from shared.transitions import Sentence, plain_transitions

    n = len(sentence)
    transitions = random_transitions(n, rng) if shape == "random" else plain_transitions(n, shape)
    return Sentence(sentence.tokens, tuple(transitions))


@functools.lru_cache(maxsize=1)
def _sample_pairs() -> tuple:
    from shared.snli import SAMPLE_PATH, read_snli

    return tuple(read_snli(SAMPLE_PATH)[0])


def make_batches(args: argparse.Namespace) -> Batches:
    from shared.batching import make_pair_batch
    from shared.snli import Pair
    from shared.synthetic import shaped_pairs
    from shared.vocab import Vocabulary

    if args.batch_size < 1 or args.length < 1:
        raise ValueError("--batch-size and --length must be >= 1")
    if args.shape == "sample":
        pairs = _sample_pairs()[:args.batch_size]  # labelled rows, in file order
        if len(pairs) < args.batch_size:
            raise ValueError(f"the sample has only {len(pairs)} labelled pairs")
        source = "the SNLI sample (its own parse trees)"
    else:
        pairs = shaped_pairs(args.batch_size, length=args.length, shape=args.shape, seed=args.data_seed)
        source = f"random words, {args.shape} trees of {args.length} words"
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    n = max(max(len(p.premise), len(p.hypothesis)) for p in pairs)
    reshaped = {}
    for shape in OTHER_SHAPES:
        rng = np.random.default_rng(args.data_seed + 1)
        other = [Pair(_reshape(p.premise, shape, rng), _reshape(p.hypothesis, shape, rng), p.label, p.pair_id)
                 for p in pairs]
        reshaped[shape] = make_pair_batch(other, vocab, num_tokens=n)
    other_trees = "random" if args.shape in ("left", "right", "balanced") else "left"
    return Batches(main=make_pair_batch(pairs, vocab, num_tokens=n), reshaped=reshaped,
                   padded=make_pair_batch(pairs, vocab, num_tokens=n + EXTRA_PADDING),
                   other_trees=other_trees, vocab_size=len(vocab), source=source)


def model_config(args: argparse.Namespace, vocab_size: int):
    from bench.config import model_config as config_from_args

    return config_from_args(args, vocab_size, lowercase=True)


def _arrays(batch) -> tuple[np.ndarray, ...]:
    names = ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions")
    return tuple(np.asarray(getattr(batch, name), dtype=np.int32) for name in names)


def _labels(batch) -> np.ndarray:
    return np.asarray(batch.labels, dtype=np.int32)


def _sentences_transitions(batch) -> np.ndarray:
    """<int32>[2B, T]: premises then hypotheses, as every implementation runs them."""
    return np.concatenate([batch.premise_transitions, batch.hypothesis_transitions])


def _timer() -> Callable[[], float]:
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


def _best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        elapsed = _timer()
        fn()
        best = min(best, elapsed())
    return best


# --------------------------------------------------------------------------
# PyTorch: walk the autograd graph
# --------------------------------------------------------------------------


def autograd_nodes(root) -> list:
    """Every node reachable from ``root`` (a ``grad_fn``) through ``next_functions``,
    in a fixed depth-first order."""
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        todo.extend(child for child, _ in reversed(node.next_functions))
    return list(seen.values())


def autograd_dot(root, names: dict[int, str], title: str) -> str:
    """Graphviz text of the autograd graph under ``root``. Arrows run as the
    data ran forward (from a node's inputs to it); the backward pass walks
    them in reverse. Parameters (``AccumulateGrad``) are named from ``names``
    (id of the tensor -> canonical name)."""
    nodes = autograd_nodes(root)
    number = {id(node): k for k, node in enumerate(nodes)}
    lines = ["digraph autograd {", f'  label="{title}";', "  labelloc=t;", "  node [shape=box, fontsize=10];"]
    for node in nodes:
        label = type(node).__name__
        variable = getattr(node, "variable", None)
        if variable is not None:
            label = names.get(id(variable), "parameter")
            lines.append(f'  n{number[id(node)]} [label="{label}", style=filled, fillcolor=lightblue];')
        elif node is root:
            lines.append(f'  n{number[id(node)]} [label="{label} (loss)", style=filled, fillcolor=orange];')
        else:
            lines.append(f'  n{number[id(node)]} [label="{label}"];')
    for node in nodes:
        for child, _ in node.next_functions:
            if child is not None:
                lines.append(f"  n{number[id(child)]} -> n{number[id(node)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def explain_pytorch(args, batches: Batches, config, params, out: Path | None) -> dict:
    import torch
    import torch.nn.functional as F

    from impl_pytorch import convert

    model = convert.from_canonical(params, config, dtype="float32", device="cpu")
    model.eval()  # no dropout; the graph is still recorded (no torch.no_grad)
    calls = {"tracker": 0, "reduce": 0, "reduce_rows": 0}

    def count(name):
        def hook(module, inputs, output):
            calls[name] += 1
            if name == "reduce":
                calls["reduce_rows"] += len(inputs[0])
        return hook

    hooks = [model.spinn.reduce.register_forward_hook(count("reduce"))]
    if model.spinn.tracker is not None:
        hooks.append(model.spinn.tracker.register_forward_hook(count("tracker")))

    def loss_of(batch):
        pt, ptr, ht, htr = _arrays(batch)
        tokens = lambda a: torch.as_tensor(a.astype(np.int64))  # noqa: E731
        _, _, logits = model(tokens(pt), ptr, tokens(ht), htr)
        return F.cross_entropy(logits, torch.as_tensor(_labels(batch).astype(np.int64)))

    loss = loss_of(batches.main)  # records this batch's graph
    for hook in hooks:
        hook.remove()
    nodes = autograd_nodes(loss.grad_fn)
    types = collections.Counter(type(node).__name__ for node in nodes)
    if out is not None:
        by_torch_name = dict(model.named_parameters())
        names = {id(by_torch_name[torch_name]): canonical
                 for canonical, (torch_name, _) in convert.name_map(config).items()}
        b = batches.main
        title = (f"PyTorch autograd graph of the loss: {b.size} pair(s) = {2 * b.size} sentences, "
                 f"N={b.num_tokens}, T={b.num_steps}, {len(nodes)} nodes")
        (out / "pytorch_autograd.dot").write_text(autograd_dot(loss.grad_fn, names, title))
    loss.backward()  # walks the graph once and frees it

    def node_count(batch) -> int:
        return len(autograd_nodes(loss_of(batch).grad_fn))

    transitions = _sentences_transitions(batches.main)
    result = {
        "framework_version": torch.__version__,
        "autograd_nodes": len(nodes),
        "node_types": dict(types.most_common()),
        "parameters_reached": types.get("AccumulateGrad", 0),
        "python_steps": int(transitions.shape[1]),
        "active_steps": int(np.count_nonzero((transitions != PAD).any(axis=0))),
        "tracker_calls": calls["tracker"],
        "reduce_calls": calls["reduce"],
        "reduce_rows": calls["reduce_rows"],
        "step0_ops": [int(op) for op in transitions[:, 0]],
        "other_trees": {shape: node_count(batch) for shape, batch in batches.reshaped.items()},
        "padded_nodes": node_count(batches.padded),
        "traces": 0,  # nothing is traced or compiled: every batch records a fresh graph
        "forward_s": None,
        "backward_s": None,
    }
    if not args.no_timing:
        def backward_s() -> float:
            loss = loss_of(batches.main)
            elapsed = _timer()
            loss.backward()
            return elapsed()

        result["forward_s"] = _best_of(lambda: loss_of(batches.main), repeats=5)
        result["backward_s"] = min(backward_s() for _ in range(5))
    return result


# --------------------------------------------------------------------------
# TensorFlow: the traced graph and its while loops
# --------------------------------------------------------------------------


def _tf_shape(dtype, shape) -> str:
    import tensorflow as tf

    dims = tf.TensorShape(shape)
    if dims.rank is None:
        return f"{tf.dtypes.as_dtype(dtype).name}[*]"
    return f"{tf.dtypes.as_dtype(dtype).name}[{','.join('?' if d is None else str(d) for d in dims.as_list())}]"


def tf_graph_stats(concrete) -> dict:
    """Ops of a concrete function's graph, and of the body of each while loop in it."""
    graph_def = concrete.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    whiles = [node for node in graph_def.node if node.op in ("While", "StatelessWhile")]
    stats = {
        "ops": len(graph_def.node),
        "op_types": dict(collections.Counter(node.op for node in graph_def.node).most_common(6)),
        "while_loops": len(whiles),
        "while_names": [node.name for node in whiles],
        "while_body_ops": [len(library[node.attr["body"].func.name].node_def) for node in whiles],
        "while_cond_ops": [len(library[node.attr["cond"].func.name].node_def) for node in whiles],
    }
    if whiles:
        first = whiles[0]
        stats["loop_state"] = [_tf_shape(t, s) for t, s in zip(first.attr["T"].list.type,
                                                                 first.attr["output_shapes"].list.shape)]
    return stats


def explain_tensorflow(args, batches: Batches, config, params, out: Path | None) -> dict:
    import tensorflow as tf
    from google.protobuf import text_format

    from impl_tensorflow import convert, train
    from impl_tensorflow.runner import INPUTS, LABELS

    with tf.device("/CPU:0"):
        # The CPU graph executor's memory (impl_tensorflow/runner.py picks the same).
        model = convert.from_canonical(params, config, dtype="float32", memory="tensor_array")
    traces = collections.Counter()

    # The functions the Runner traces, with its input signature: sizes None,
    # so one trace serves every B, N and T. A Python side effect counts traces.
    def encode(*inputs):
        traces["encode"] += 1
        return model(*inputs)

    def loss_and_grads(*inputs_and_labels):
        traces["loss_and_grads"] += 1
        *inputs, labels = inputs_and_labels
        return train.loss_and_grads(model, inputs, labels)

    functions = {
        "encode": tf.function(encode, input_signature=INPUTS, autograph=False),
        "loss_and_grads": tf.function(loss_and_grads, input_signature=INPUTS + [LABELS], autograph=False),
    }

    def tensors(batch, with_labels):
        arrays = train.model_inputs(batch, config) + ((_labels(batch),) if with_labels else ())
        return [tf.constant(a) for a in arrays]

    result: dict = {"framework_version": tf.__version__, "memory": "tensor_array"}
    for name, function in functions.items():
        elapsed = _timer()
        concrete = function.get_concrete_function()
        trace_s = elapsed()
        stats = tf_graph_stats(concrete)
        stats["trace_s"] = trace_s
        stats["first_call_s"] = stats["call_s"] = None
        if not args.no_timing:
            inputs = tensors(batches.main, name == "loss_and_grads")

            def call():
                for t in tf.nest.flatten(function(*inputs)):
                    t.numpy()
            elapsed = _timer()
            call()  # TensorFlow optimises the graph (Grappler) on the first call
            stats["first_call_s"] = elapsed()
            stats["call_s"] = _best_of(call)
        if out is not None:
            (out / f"tensorflow_{name}.pbtxt").write_text(text_format.MessageToString(concrete.graph.as_graph_def()))
        result[name] = stats
    result["loop_state"] = result["encode"].pop("loop_state", [])
    result["loop_variables"] = len(result["loop_state"])
    result["loss_and_grads"].pop("loop_state", None)
    # The recompilation check: the batch, the same words as other trees, the
    # same batch padded wider. get_concrete_function looks the inputs up in
    # the function's trace cache, as a call does.
    before = traces["encode"]
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        functions["encode"].get_concrete_function(*tensors(batch, False))
    result["traces_for_variants"] = traces["encode"] - before + 1  # the first trace happened above
    return result


# --------------------------------------------------------------------------
# JAX: the jaxprs and their scans
# --------------------------------------------------------------------------


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


def explain_jax(args, batches: Batches, config, params, out: Path | None) -> dict:
    import flax
    import jax

    with jax.enable_x64(False):  # the same jaxpr whatever the process set (the tests turn x64 on)
        return _explain_jax(args, batches, config, params, out, jax, flax)


def _explain_jax(args, batches, config, params, out, jax, flax) -> dict:
    from impl_jax.convert import from_canonical
    from impl_jax.model import DEFAULT_LAYOUT, SNLIClassifier
    from impl_jax.train import make_loss_and_grads

    device = jax.devices("cpu")[0]
    weights = from_canonical(params, config, "float32", device)["params"]
    model = SNLIClassifier(config, layout=DEFAULT_LAYOUT)
    traces = collections.Counter()

    # The functions the Runner compiles. A Python side effect counts traces:
    # jit runs the Python function only when it meets a new input shape.
    def encode(weights, arrays):
        traces["encode"] += 1
        return model.apply({"params": weights}, *arrays, train=False)

    grads = make_loss_and_grads(model)

    def loss_and_grads(weights, arrays, labels):
        traces["loss_and_grads"] += 1
        return grads(weights, arrays, labels)

    main_args = {
        "encode": (weights, _arrays(batches.main)),
        "loss_and_grads": (weights, _arrays(batches.main), _labels(batches.main)),
    }
    jitted = {"encode": jax.jit(encode), "loss_and_grads": jax.jit(loss_and_grads)}
    result: dict = {"framework_version": f"{jax.__version__} (flax {flax.__version__})", "layout": DEFAULT_LAYOUT}
    for name, function in jitted.items():
        elapsed = _timer()
        traced = function.trace(*main_args[name])
        trace_s = elapsed()
        stats = jaxpr_stats(traced.jaxpr)
        stats["trace_s"] = trace_s
        stats["lower_s"] = stats["compile_s"] = stats["call_s"] = None
        if not args.no_timing:
            elapsed = _timer()
            lowered = traced.lower()
            stats["lower_s"] = elapsed()
            elapsed = _timer()
            compiled = lowered.compile()
            stats["compile_s"] = elapsed()
            stats["call_s"] = _best_of(lambda: jax.block_until_ready(compiled(*main_args[name])))
        if out is not None:
            (out / f"jax_{name}.jaxpr.txt").write_text(str(traced.jaxpr) + "\n")
        result[name] = stats
    result["loop_state"] = result["encode"].pop("loop_state", {})
    result["loss_and_grads"].pop("loop_state", None)
    # The recompilation check: jit's cache is keyed on shapes and dtypes, so
    # the other trees reuse the trace and the padded batch (new N, T) does not.
    before = traces["encode"]
    for batch in (batches.main, batches.reshaped[batches.other_trees], batches.padded):
        jitted["encode"].trace(weights, _arrays(batch))
    result["traces_for_variants"] = traces["encode"] - before + 1  # the first trace happened above
    return result


# --------------------------------------------------------------------------
# The whole report
# --------------------------------------------------------------------------

EXPLAINERS = {"pytorch": explain_pytorch, "tensorflow": explain_tensorflow, "jax": explain_jax}


def _frameworks(args) -> tuple[str, ...]:
    return FRAMEWORK_ORDER if args.framework == "all" else (args.framework,)


def _batch_summary(batches: Batches) -> dict:
    b = batches.main
    transitions = _sentences_transitions(b)
    return {
        "source": batches.source,
        "pairs": b.size,
        "sentences": 2 * b.size,
        "num_tokens": b.num_tokens,
        "num_steps": b.num_steps,
        "shift": int(np.count_nonzero(transitions == SHIFT)),
        "reduce": int(np.count_nonzero(transitions == REDUCE)),
        "pad": int(np.count_nonzero(transitions == PAD)),
        "other_trees": batches.other_trees,
        "padded_num_tokens": batches.padded.num_tokens,
        "padded_num_steps": batches.padded.num_steps,
    }


def explain(args: argparse.Namespace) -> dict:
    """The figures of one ``explain`` run, as a JSON-ready dict."""
    from shared.params import init_params

    batches = make_batches(args)
    config = model_config(args, batches.vocab_size)
    params = init_params(config, seed=args.seed)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    result = {
        "command": command_line(args),
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, Python {platform.python_version()}",
        "batch": _batch_summary(batches),
        "model": {k: getattr(config, k) for k in ("vocab_size", "embed_dim", "hidden_dim", "tracker_dim",
                                                  "mlp_dim", "mlp_layers")},
        "timed": not args.no_timing,
    }
    for framework in _frameworks(args):
        result[framework] = EXPLAINERS[framework](args, batches, config, params, out)
    if out is not None:
        (out / "explain.json").write_text(json.dumps(result, indent=2) + "\n")
        result["files"] = sorted(p.name for p in out.iterdir() if p.is_file())
    return result


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args``' figures (flags that differ from the defaults)."""
    defaults = parse_args([])
    flags = []
    for flag in ("framework", "batch_size", "shape", "length", "data_seed", "seed", "size", "embed_dim",
                 "hidden_dim", "tracker_dim", "mlp_dim", "mlp_layers"):
        value = getattr(args, flag)
        if value != getattr(defaults, flag):
            flags.append(f"--{flag.replace('_', '-')} {value}")
    return " ".join([COMMAND] + flags)


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
    b, m = result["batch"], result["model"]
    lines = [
        f"batch: {b['pairs']} pair(s) = {b['sentences']} sentences, {b['source']}",
        f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps: "
        f"{b['shift']} SHIFT, {b['reduce']} REDUCE, {b['pad']} PAD",
        f"  variants: the same words as {b['other_trees']} trees (same B, N, T); "
        f"the batch padded to N={b['padded_num_tokens']}, T={b['padded_num_steps']}",
        f"model: E={m['embed_dim']} H={m['hidden_dim']} D={m['tracker_dim']} M={m['mlp_dim']} "
        f"L={m['mlp_layers']}, V={m['vocab_size']}, float32, CPU",
        "versions: " + ", ".join(f"{fw} {result[fw]['framework_version']}"
                                 for fw in FRAMEWORK_ORDER if fw in result),
        f"machine: {result['machine']}",
    ]
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
    if result.get("files"):
        lines += ["", "wrote: " + ", ".join(result["files"])]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Debugging: a bad input
# --------------------------------------------------------------------------

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
    """The innermost frame of the project's own code (explain.py aside) in the
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
    """A file of the project's packages (not a library, not this module)."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT) or path == Path(__file__).resolve():
        return False
    return path.relative_to(ROOT).parts[0] in ("shared", "bench") + tuple(f"impl_{f}" for f in FRAMEWORK_ORDER)


def _error(err: BaseException) -> str:
    """The first line of the message, and the graph node TensorFlow names, with
    the run-dependent function numbers left out."""
    lines = f"{type(err).__name__}: {err}".splitlines()
    text = lines[0] + "".join(" " + line.strip() for line in lines[1:] if "{{node" in line)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:[^\]]*\]", "", text)
    return text if len(text) <= 150 else text[:147] + "..."


def _finite(array) -> str:
    return f"ran; first premise encoding finite: {'yes' if np.isfinite(np.asarray(array)[0]).all() else 'no (NaN)'}"


def explain_bad_input(args: argparse.Namespace) -> dict:
    from shared.params import init_params

    batches = make_batches(args)
    config = model_config(args, batches.vocab_size)
    params = init_params(config, seed=args.seed)
    bad = bad_batch(batches.main, args.bad_input, config.vocab_size)
    result = {"bad_input": {"kind": args.bad_input, "what": BAD_INPUTS[args.bad_input],
                            "first_premise": [int(op) for op in bad.premise_transitions[0]]}}
    for framework in _frameworks(args):
        result[framework] = BAD_RUNNERS[framework](config, params, bad)
    return result


def _bad_pytorch(config, params, bad) -> dict:
    import torch

    from impl_pytorch import convert

    model = convert.from_canonical(params, config, dtype="float32", device="cpu").eval()
    pt, ptr, ht, htr = _arrays(bad)
    try:
        premise, _, _ = model(torch.as_tensor(pt.astype(np.int64)), ptr, torch.as_tensor(ht.astype(np.int64)), htr)
    except Exception as err:  # noqa: BLE001 - showing the error is the point
        return {"outcome": "raised", "error": _error(err), "where": _where(err)}
    return {"outcome": _finite(premise.detach())}


def _bad_tensorflow(config, params, bad) -> dict:
    import tensorflow as tf

    from impl_tensorflow import convert, train
    from impl_tensorflow.runner import INPUTS

    with tf.device("/CPU:0"):
        model = convert.from_canonical(params, config, dtype="float32", memory="tensor_array")
    out: dict = {}
    try:
        train.model_inputs(bad, config)  # the host-side check the Runner makes before every call
        out["outcome"] = "passed the host-side check"
    except ValueError as err:
        out.update(outcome="raised by the host-side check, before the graph ran", error=_error(err),
                   where=_where(err))
    # Without the check: the graph cannot stop mid-loop with a message of ours.
    encode = tf.function(lambda *inputs: model(*inputs), input_signature=INPUTS, autograph=False)
    try:
        premise, _, _ = encode(*[tf.constant(a) for a in _arrays(bad)])
        out["graph"] = {"outcome": _finite(premise.numpy())}
    except Exception as err:  # noqa: BLE001
        out["graph"] = {"outcome": "raised", "error": _error(err), "where": _where(err)}
    return out


def _bad_jax(config, params, bad) -> dict:
    import jax

    from impl_jax.convert import from_canonical
    from impl_jax.model import SNLIClassifier

    with jax.enable_x64(False):
        weights = from_canonical(params, config, "float32", jax.devices("cpu")[0])["params"]
        model = SNLIClassifier(config)
        encode = jax.jit(lambda w, arrays: model.apply({"params": w}, *arrays, train=False))
        try:
            premise, _, _ = encode(weights, _arrays(bad))
        except Exception as err:  # noqa: BLE001
            return {"outcome": "raised", "error": _error(err), "where": _where(err)}
        return {"outcome": _finite(premise)}


BAD_RUNNERS = {"pytorch": _bad_pytorch, "tensorflow": _bad_tensorflow, "jax": _bad_jax}


def format_bad_input(result: dict) -> str:
    from shared.transitions import TRANSITION_NAMES

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


# --------------------------------------------------------------------------
# The guide: code excerpts and figure blocks, checked and synced
# --------------------------------------------------------------------------

# <!-- excerpt: impl_pytorch/model.py "first line anchor" .. "last line anchor" -->
# <!-- excerpt: impl_jax/model.py Reduce.__call__ -->
# followed by a fenced code block.
EXCERPT_RE = re.compile(r'<!-- excerpt: (?P<path>\S+) (?P<spec>.+?) -->\n(?P<fence>```[^\n]*)\n(?P<body>.*?)^```$',
                        re.S | re.M)
# <!-- figure: fig-id --> followed by a fenced block whose first line is "$ python -m bench explain ...".
FIGURE_RE = re.compile(r"<!-- figure: (?P<id>[\w-]+) -->\n(?P<fence>```[^\n]*)\n\$ (?P<command>[^\n]+)\n"
                       r"(?P<body>.*?)^```$", re.S | re.M)
# A number quoted in the prose: [683](#fig-main "pytorch.autograd_nodes")
NUMBER_RE = re.compile(r'\[(?P<number>[\d.,]+)\]\(#(?P<id>[\w-]+) "(?P<key>[\w.]+)"\)')
ANCHORS_RE = re.compile(r'^"(?P<start>.+)" \.\. "(?P<end>.+)"$')


class GuideError(ValueError):
    pass


def extract(path: str, spec: str) -> str:
    """The source lines an excerpt marker names, dedented.

    ``spec`` is ``"start" .. "end"``: from the one line containing ``start``
    to the first line after it containing ``end``; or a qualified name
    (``SPINN.forward``): that function or class, decorators included.
    """
    source = (ROOT / path).read_text()
    lines = source.splitlines()
    anchors = ANCHORS_RE.match(spec.strip())
    if anchors:
        starts = [k for k, line in enumerate(lines) if anchors["start"] in line]
        if len(starts) != 1:
            raise GuideError(f"{path}: start anchor {anchors['start']!r} is on {len(starts)} lines, expected 1")
        ends = [k for k in range(starts[0], len(lines)) if anchors["end"] in lines[k]]
        if not ends:
            raise GuideError(f"{path}: end anchor {anchors['end']!r} not found after line {starts[0] + 1}")
        chosen = lines[starts[0]:ends[0] + 1]
    else:
        node = _find_definition(ast.parse(source), spec.strip().split("."))
        if node is None:
            raise GuideError(f"{path}: no function or class {spec.strip()!r}")
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        chosen = lines[first - 1:node.end_lineno]
    return textwrap.dedent("\n".join(chosen)) + "\n"


def _find_definition(tree, names: list[str]):
    body = tree.body
    node = None
    for name in names:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node


@dataclass
class Figure:
    id: str
    command: str
    body: str


def guide_excerpts(text: str) -> list[tuple[str, str, str]]:
    """(path, spec, body in the guide) for every excerpt marker."""
    return [(m["path"], m["spec"], m["body"]) for m in EXCERPT_RE.finditer(text)]


def guide_figures(text: str) -> list[Figure]:
    return [Figure(m["id"], m["command"], m["body"]) for m in FIGURE_RE.finditer(text)]


def guide_numbers(text: str) -> list[tuple[str, str, str]]:
    """(number as written, figure id, key) for every number the prose quotes from a figure."""
    return [(m["number"], m["id"], m["key"]) for m in NUMBER_RE.finditer(text)]


def figure_argv(command: str) -> list[str]:
    words = shlex.split(command)
    prefix = shlex.split(COMMAND)
    if words[:len(prefix)] != prefix:
        raise GuideError(f"a figure's command must start with {COMMAND!r}: {command!r}")
    return words[len(prefix):]


def run_figure(command: str, *, timing: bool = True) -> dict:
    """The result of a figure's command, run in this process."""
    args = parse_args(figure_argv(command))
    args.no_timing = args.no_timing or not timing
    return explain_bad_input(args) if args.bad_input else explain(args)


# Lines and values that legitimately change from run to run or machine to machine.
_TIME_RE = re.compile(r"\d+\.\d+ s\b|\(not timed\)|(?<=\[)\d+\.\d+(?=\]\(#)")  # in figures; quoted in prose
_MASKED_LINES = ("versions:", "machine:")


def mask(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith(_MASKED_LINES):
            line = line.split(":")[0] + ": ..."
        lines.append(_TIME_RE.sub("<time>", line).rstrip())
    return "\n".join(lines).strip() + "\n"


def lookup(result: dict, key: str):
    value = result
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def number_matches(written: str, value, key: str) -> bool:
    """A quoted count must equal the figure's; a time (a key ending in _s) is
    an example, so any measured or unmeasured time will do."""
    if key.endswith("_s"):
        return value is None or isinstance(value, float)
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return written.replace(",", "") == str(value)


def sync_guide(path: str | os.PathLike = GUIDE, *, write: bool = False, timing: bool = True,
               results: dict | None = None) -> list[str]:
    """Check (or, with ``write``, rewrite) the guide's excerpts and figures.

    Returns the problems found: an excerpt that differs from its source, a
    figure whose counts differ from a fresh run of its command (times and
    versions masked), a quoted number that differs from its figure. With
    ``write``, excerpts, figures and quoted numbers are regenerated (fresh
    times included), and only what cannot be fixed (a quote of a figure or
    key that does not exist) is returned.
    ``results`` caches figure results by command across calls.
    """
    path = Path(path)
    text = path.read_text()
    results = {} if results is None else results
    problems: list[str] = []

    def excerpt(m):
        fresh = extract(m["path"], m["spec"])
        if fresh != m["body"] and not write:
            problems.append(f"excerpt {m['path']} {m['spec']} differs from the source:\n" + _diff(m["body"], fresh))
        return f"<!-- excerpt: {m['path']} {m['spec']} -->\n{m['fence']}\n{fresh}```" if write else m.group(0)

    def figure(m):
        command = m["command"]
        if command not in results:
            results[command] = run_figure(command, timing=write and timing)
        fresh = format_text(results[command]) + "\n"
        if mask(fresh) != mask(m["body"]) and not write:
            problems.append(f"figure {m['id']} ({command}) differs from a fresh run:\n"
                            + _diff(mask(m["body"]), mask(fresh)))
        return f"<!-- figure: {m['id']} -->\n{m['fence']}\n$ {command}\n{fresh}```" if write else m.group(0)

    text = EXCERPT_RE.sub(excerpt, text)
    text = FIGURE_RE.sub(figure, text)
    by_id = {f.id: f.command for f in guide_figures(text)}

    def number(m):
        written, fig, key = m["number"], m["id"], m["key"]
        if fig not in by_id:
            problems.append(f"number {written} quotes figure {fig!r}, which the guide does not have")
            return m.group(0)
        try:
            value = lookup(results[by_id[fig]], key)
        except (KeyError, IndexError, ValueError, TypeError):
            problems.append(f"number {written}: figure {fig} has no {key!r}")
            return m.group(0)
        if not number_matches(written, value, key):
            if write and isinstance(value, int) and not isinstance(value, bool):
                return m.group(0).replace(f"[{written}]", f"[{value}]", 1)
            problems.append(f"number {written} quoted from {fig} {key} is {value!r} in a fresh run")
        if write and isinstance(value, float):  # a time: quote the figure's fresh example
            return m.group(0).replace(f"[{written}]", f"[{value:.3f}]", 1)
        return m.group(0)

    text = NUMBER_RE.sub(number, text)
    if write:
        path.write_text(text)
    return problems


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "guide", "fresh"))


if __name__ == "__main__":  # python -m bench.explain ... is python -m bench explain ...
    from bench.cli import main

    sys.exit(main(["explain"] + sys.argv[1:]))
