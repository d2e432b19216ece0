"""What PyTorch built, for ``python -m bench explain`` (shared/platform.py, "explain").

Define-by-run: the autograd graph recorded for one batch's loss, walked from
``loss.grad_fn`` through ``next_functions`` (its node count, by type), how
often the Python loop called Tracker and Reduce, and the node counts of the
same words arranged as other trees, and of the same batch with more padding.
A new batch is a new graph, so there is nothing to retrace. ``--out`` writes
the graph as Graphviz text (written here by walking ``grad_fn``).

``--parse``: the device-to-host reads of decisions (``Runner.last_host_syncs``,
one per step where some sentence has a choice) and the loop's calls, gold
against predicted. ``--bad-input``: an exception from a line of the model.
``--levels``: pytorch-levels' schedule as its encoder runs it (each level
exactly as wide as its nodes: levels.py's PADDING) and the ops each level of its Python loop
dispatches, counted inside the ``spinn.level`` range levels.py marks (dispatches.py).
"""

from __future__ import annotations

import collections
import contextlib
from pathlib import Path
from typing import Iterator

import torch

from impl_pytorch import train
from impl_pytorch.dispatches import aten_ops
from impl_pytorch.params import canonical_parameters
from impl_pytorch.runner import Runner
from shared.batching import sentences_transitions
from shared.explaining import (best_of, compare_row, encode_outcome, listing, numbers, row, secs, steps_with_work,
                               timer)
from shared.levels import level_rows
from shared.params import ModelConfig

MODES = ("gold", "predicted")
LEVEL_RANGE = "spinn.level"  # the range levels.py marks each level of its loop with (torch.profiler.record_function)


def _autograd_nodes(root) -> list:
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


def _loss(runner: Runner, batch) -> torch.Tensor:
    """The eval-mode loss of ``batch`` as ``runner``'s model records it, with its
    autograd graph: ``loss.grad_fn`` is the root, ``loss.backward()`` walks and frees it."""
    return train.batch_loss(runner.model, batch.arrays())


@contextlib.contextmanager
def _count_calls(runner: Runner) -> Iterator[dict[str, int]]:
    """Counts, while inside, the Python loop's calls of ``runner``'s Tracker and
    Reduce and the rows Reduce composed in all: {"tracker", "reduce", "reduce_rows"}."""
    calls = {"tracker": 0, "reduce": 0, "reduce_rows": 0}

    def on_reduce(module, inputs, output):
        calls["reduce"] += 1
        calls["reduce_rows"] += len(inputs[0])

    def on_tracker(module, inputs, output):
        calls["tracker"] += 1

    spinn = runner.model.spinn
    hooks = [spinn.reduce.register_forward_hook(on_reduce)]
    if spinn.tracker is not None:
        hooks.append(spinn.tracker.register_forward_hook(on_tracker))
    try:
        yield calls
    finally:
        for hook in hooks:
            hook.remove()


def _autograd_dot(root, names: dict[int, str], title: str) -> str:
    """Graphviz text of the autograd graph under ``root``. Arrows run as the
    data ran forward (from a node's inputs to it); the backward pass walks
    them in reverse. Parameters (``AccumulateGrad``) are named from ``names``
    (id of the tensor -> canonical name)."""
    nodes = _autograd_nodes(root)
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


def explain(implementation: str, batches, config: ModelConfig, params, out: Path | None, *, timing: bool) -> dict:
    """The autograd graph one batch records (see the module docstring)."""
    runner = Runner(params, config, dtype="float32", device="cpu")
    with _count_calls(runner) as calls:
        loss = _loss(runner, batches.main)  # eval mode: no dropout, and the graph is recorded
    nodes = _autograd_nodes(loss.grad_fn)
    types = collections.Counter(type(node).__name__ for node in nodes)
    if out is not None:
        b = batches.main
        title = (f"PyTorch autograd graph of the loss: {b.size} pair(s) = {2 * b.size} sentences, "
                 f"N={b.num_tokens}, T={b.num_steps}, {len(nodes)} nodes")
        names = {id(param): name for name, param in canonical_parameters(runner.model).items()}
        (out / "pytorch_autograd.dot").write_text(_autograd_dot(loss.grad_fn, names, title))
    loss.backward()  # walks the graph once and frees it

    def node_count(batch) -> int:
        return len(_autograd_nodes(_loss(runner, batch).grad_fn))

    transitions = sentences_transitions(batches.main)
    result = {
        "framework_version": torch.__version__,
        "autograd_nodes": len(nodes),
        "graph": {"recorded": len(nodes)},  # what docs/figures/graph-size.svg draws, in every framework's words
        "node_types": dict(types.most_common()),
        "parameters_reached": types.get("AccumulateGrad", 0),
        "python_steps": int(transitions.shape[1]),
        "active_steps": steps_with_work(transitions),
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
    if timing:
        def backward_s() -> float:
            loss = _loss(runner, batches.main)
            elapsed = timer()
            loss.backward()
            return elapsed()

        result["forward_s"] = best_of(lambda: _loss(runner, batches.main), repeats=5)
        result["backward_s"] = min(backward_s() for _ in range(5))
    return result


def format_explain(implementation: str, r: dict) -> list[str]:
    return [
        "",
        "pytorch: define-by-run, the graph is recorded while Python runs",
        row("Python loop: steps (with work)", f"{r['python_steps']} ({r['active_steps']})"),
        row("Tracker calls / Reduce calls", f"{r['tracker_calls']} / {r['reduce_calls']}",
            f"(Reduce on {r['reduce_rows']} rows in all)"),
        row("step 0 sees", f"ops = {r['step0_ops']}", "(a Python list of real values)"),
        row("autograd nodes of the loss", r["autograd_nodes"], f"({r['parameters_reached']} of them parameters)"),
        *listing([f"{name} {count}," for name, count in list(r["node_types"].items())[:6]] + ["..."]),
        row("the same words as other trees", ", ".join(f"{shape} {n}" for shape, n in r["other_trees"].items())),
        row("the batch padded wider", r["padded_nodes"], "(PAD steps record nothing)"),
        row("traces / compilations", r["traces"], "(every batch records a fresh graph)"),
        row("forward (records) / backward", f"{secs(r['forward_s'])} / {secs(r['backward_s'])}"),
    ]


def explain_parse(batches, config: ModelConfig, params) -> dict:
    """The Python loop decides: its host reads of decisions and its calls, per mode."""
    runner = Runner(params, config, dtype="float32", device="cpu")
    out: dict = {"framework_version": torch.__version__}
    for mode in MODES:
        with _count_calls(runner) as calls:
            parsed = runner.parse(batches.main, mode)
        out[mode] = {"python_steps": steps_with_work(sentences_transitions(parsed)),
                     "host_syncs": runner.last_host_syncs, "tracker_calls": calls["tracker"],
                     "reduce_calls": calls["reduce"]}
    return out


def format_explain_parse(result: dict) -> list[str]:
    g, p = result["gold"], result["predicted"]
    return [
        "pytorch: the Python loop decides",
        compare_row("steps with work", g["python_steps"], p["python_steps"]),
        compare_row("device-to-host reads of decisions", g["host_syncs"], p["host_syncs"],
                    "(one per step with a choice)"),
        compare_row("Tracker calls / Reduce calls", f"{g['tracker_calls']}/{g['reduce_calls']}",
                    f"{p['tracker_calls']}/{p['reduce_calls']}"),
    ]


def explain_bad_input(config: ModelConfig, params, bad, where) -> dict:
    """The model raises from a line of its own. Called past the Runner's
    host check (shared/contract.py), which refuses a bad batch the same way in
    every framework: what is shown is what define-by-run code does by itself."""
    return encode_outcome(Runner(params, config, dtype="float32", device="cpu").encode_unchecked, bad, where)


# -- explain --levels: the host-scheduled levels (impl_pytorch/levels.py) ------------------


def explain_levels(batch, variants: dict, options: dict) -> dict:
    """pytorch-levels on ``batch``, once per model of ``variants`` (key ->
    (config, params)), with its registry ``options``: the schedule as the
    encoder runs it (shared.levels.level_rows with levels.py's PADDING: each
    level's Reduce and tracker exactly as wide as its rows) and the ops each
    level of the Python loop dispatches in encode."""
    from impl_pytorch.levels import PADDING  # the family's module, as the runner imports it: only here

    out: dict = {"framework_version": torch.__version__}
    transitions = sentences_transitions(batch)
    for key, (config, params) in variants.items():
        runner = Runner(params, config, dtype="float32", device="cpu", **options)
        dispatched = aten_ops(lambda: runner.encode(batch), region=LEVEL_RANGE)
        tracker = config.tracker_dim > 0
        rows = level_rows(transitions, batch.num_tokens, tracker, PADDING)
        level_ops = dispatched["regions"]
        out[key] = {
            "levels_run": len(level_ops), "levels_scheduled": int(runner.last_rows["levels"]),
            "reduce_widths": [r for _, r in rows], "tracker_rows": [t for t, _ in rows] if tracker else [],
            "padded_pct": float(runner.last_rows["level_padding_pct"]),
            "ops": dispatched["ops"], "level_ops": level_ops,
            "level_op_types": dict(list(dispatched["region_ops"].items())[:8]),
            "schedule_s": float(runner.last_phases["schedule"]),
        }
    return out


def format_explain_levels(result: dict) -> list[str]:
    lines = ["pytorch: eager, a Python for over the levels (each its exact width): a gather, the cells, a write"]
    for key, label in (("tracker", "with the tracker"), ("no_tracker", "without the tracker")):
        if key in result:
            r = result[key]
            sizes = sorted(set(r["level_ops"]))
            lines.append(row(f"{label}: loop iterations", r["levels_run"],
                             f"(each dispatches {numbers(sizes)} ops; encode {r['ops']})"))
            lines += listing([f"{name} {count}," for name, count in r["level_op_types"].items()] + ["..."])
    return lines
