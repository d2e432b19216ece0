"""PyTorch (define-by-run): the autograd graph one batch records, walked from ``loss.grad_fn``."""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

import numpy as np

from bench.explain.batches import Batches, best_of, sentences_transitions, timer
from bench.frameworks import runner_class
from shared.params import ModelConfig
from shared.transitions import PAD


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


def explain_pytorch(args: argparse.Namespace, batches: Batches, config: ModelConfig, params,
                    out: Path | None) -> dict:
    import torch

    runner = runner_class("pytorch")(params, config, dtype="float32", device="cpu")
    with runner.count_calls() as calls:
        loss = runner.record_loss(batches.main)  # eval mode: no dropout, and the graph is recorded
    nodes = autograd_nodes(loss.grad_fn)
    types = collections.Counter(type(node).__name__ for node in nodes)
    if out is not None:
        b = batches.main
        title = (f"PyTorch autograd graph of the loss: {b.size} pair(s) = {2 * b.size} sentences, "
                 f"N={b.num_tokens}, T={b.num_steps}, {len(nodes)} nodes")
        (out / "pytorch_autograd.dot").write_text(autograd_dot(loss.grad_fn, runner.parameter_names(), title))
    loss.backward()  # walks the graph once and frees it

    def node_count(batch) -> int:
        return len(autograd_nodes(runner.record_loss(batch).grad_fn))

    transitions = sentences_transitions(batches.main)
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
        "traces": runner.compile_stats().traces,  # 0: nothing is traced, every batch records a fresh graph
        "forward_s": None,
        "backward_s": None,
    }
    if not args.no_timing:
        def backward_s() -> float:
            loss = runner.record_loss(batches.main)
            elapsed = timer()
            loss.backward()
            return elapsed()

        result["forward_s"] = best_of(lambda: runner.record_loss(batches.main), repeats=5)
        result["backward_s"] = min(backward_s() for _ in range(5))
    return result
