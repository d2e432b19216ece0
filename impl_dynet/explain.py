"""What DyNet built, for ``python -m bench explain`` (shared/platform.py, "explain").

Define-by-run, batched at run time: the graph one batch's loss builds (its
node count and operations, read from DyNet's own Graphviz text), and, with
autobatching, the groups DyNet ran those nodes in. DyNet tells the groups
only through its profiler, a setting of the whole process fixed when DyNet
is initialised, so they are read from a child process that runs the same
loss on the same weights and batch (dispatches.py, which the runner's
``dispatches`` counts with too). The times compare the forward pass with
and without autobatching (the implementations ``dynet`` and
``dynet-unbatched``), on the same graph.
``--out`` writes the graph as Graphviz text (DyNet's own).

``--parse``: the graph evaluations a decided parse forces to read its
decisions (``Runner.last_host_syncs``) against gold mode's none.
``--bad-input``: an exception from a line of the model, or DyNet's own for a
token outside the embedding.
"""

from __future__ import annotations

from pathlib import Path

from impl_dynet.dispatches import autobatch_groups, census, graph_text
from shared.batching import PairBatch, sentences_transitions
from shared.explaining import compare_row, encode_outcome, listing, row, secs, steps_with_work, timer
from shared.params import ModelConfig

MODES = ("gold", "predicted")


def _runner(config: ModelConfig, params, autobatch: bool = True):
    from impl_dynet.runner import Runner

    return Runner(params, config, dtype="float32", device="cpu", autobatch=autobatch)


def _loss_graph(runner, batch: PairBatch):
    """Build (not evaluate) the eval-mode loss of ``batch`` in a fresh graph: its loss node."""
    from impl_dynet import train

    return train.batch_loss(runner.model, batch.arrays())


def _node_count(runner, batch: PairBatch) -> int:
    _loss_graph(runner, batch)
    return sum(census(graph_text()).values())


# -- bench explain ------------------------------------------------------------------------


def explain(implementation: str, batches, config: ModelConfig, params, out: Path | None, *, timing: bool) -> dict:
    """The graph one batch builds and how autobatching grouped it (see the module docstring)."""
    from impl_dynet.platform import Platform

    runner = _runner(config, params)
    _loss_graph(runner, batches.main)
    text = graph_text()
    types = census(text)
    if out is not None:
        (out / "dynet_graph.dot").write_text(text)
    transitions = sentences_transitions(batches.main)
    result = {
        "framework_version": Platform().version(),
        "nodes": sum(types.values()),
        "graph": {"recorded": sum(types.values())},  # what docs/figures/graph-size.svg draws
        "node_types": dict(types.most_common()),
        "python_steps": int(transitions.shape[1]),
        "active_steps": steps_with_work(transitions),
        "autobatch": autobatch_groups(runner, "loss_and_grads", batches.main),  # its forward pass's groups
        "other_trees": {shape: _node_count(runner, batch) for shape, batch in batches.reshaped.items()},
        "padded_nodes": _node_count(runner, batches.padded),
        "traces": runner.compile_stats().traces,  # 0: nothing is traced, every batch builds a fresh graph
        "forward_s": None, "forward_unbatched_s": None, "backward_s": None,
    }
    if timing:
        result.update(_times(config, params, batches.main))
    return result


def _times(config: ModelConfig, params, batch: PairBatch) -> dict:
    """The forward pass of the same loss graph with and without autobatching, and the backward pass."""
    out = {}
    for autobatch, key in ((True, "forward_s"), (False, "forward_unbatched_s")):
        runner = _runner(config, params, autobatch)

        def forward() -> float:
            loss = _loss_graph(runner, batch)
            elapsed = timer()
            loss.value()
            return elapsed()

        out[key] = min(forward() for _ in range(3))

    def backward() -> float:
        loss = _loss_graph(runner, batch)
        loss.value()
        elapsed = timer()
        loss.backward()
        return elapsed()

    runner = _runner(config, params)
    out["backward_s"] = min(backward() for _ in range(3))
    return out


def format_explain(implementation: str, r: dict) -> list[str]:
    groups = r["autobatch"]
    if "error" in groups:
        grouped = [row("autobatching groups", "(not read)", groups["error"])]
    else:
        grouped = [row("autobatching: groups run", groups["groups"], f"(for {groups['nodes']} nodes)"),
                   *listing([f"{op} {g}x ({n} nodes)," for op, (g, n) in list(groups["by_operation"].items())[:6]]
                            + ["..."])]
    return [
        "",
        "dynet: define-by-run per sentence; the graph is batched when it is evaluated",
        row("Python loop: steps (with work)", f"{r['python_steps']} ({r['active_steps']})",
            "(one sentence at a time, no batch dimension)"),
        row("nodes of the loss graph", r["nodes"]),
        *listing([f"{name} {count}," for name, count in list(r["node_types"].items())[:6]] + ["..."]),
        *grouped,
        row("the same words as other trees", ", ".join(f"{shape} {n}" for shape, n in r["other_trees"].items())),
        row("the batch padded wider", r["padded_nodes"], "(PAD steps add no node)"),
        row("traces / compilations", r["traces"], "(every batch builds a fresh graph)"),
        # Times only: on explain's tiny model their ratio is noise (the benchmark measures it).
        row("forward: autobatched / one by one", f"{secs(r['forward_s'])} / {secs(r['forward_unbatched_s'])}"),
        row("backward (autobatched)", secs(r["backward_s"])),
    ]


def explain_parse(batches, config: ModelConfig, params) -> dict:
    """Deciding the parse: the graph evaluations that read decisions, per mode."""
    from impl_dynet.platform import Platform

    runner = _runner(config, params)
    out: dict = {"framework_version": Platform().version()}
    for mode in MODES:
        parsed = runner.parse(batches.main, mode)
        nodes = sum(census(graph_text()).values())  # the parse's graph is still the current one
        out[mode] = {"python_steps": steps_with_work(sentences_transitions(parsed)),
                     "host_syncs": runner.last_host_syncs, "nodes": nodes}
    return out


def format_explain_parse(result: dict) -> list[str]:
    g, p = result["gold"], result["predicted"]
    return [
        "dynet: the Python loop decides; each decision evaluates the graph so far",
        compare_row("steps with work", g["python_steps"], p["python_steps"]),
        compare_row("graph evaluations reading decisions", g["host_syncs"], p["host_syncs"],
                    "(one per step with a choice, all sentences at once)"),
        compare_row("nodes of the graph", g["nodes"], p["nodes"]),
    ]


def explain_bad_input(config: ModelConfig, params, bad, where) -> dict:
    """The model raises from a line of its own (or DyNet from the lookup).
    Called past the Runner's host check (shared/contract.py), which refuses a
    bad batch the same way in every framework."""
    return encode_outcome(_runner(config, params).encode_unchecked, bad, where)


# No host-scheduled levels implementation here (the registry's matrix says why); the names are the surface's.
NO_LEVELS = "dynet has no host-scheduled levels implementation: autobatching by depth (dynet-depth) finds the levels at run time, from the graph"


def explain_levels(batch, variants: dict, options: dict) -> dict:
    """Refused: dynet has no levels implementation (``bench explain --levels`` asks only those that have one)."""
    raise NotImplementedError(NO_LEVELS)


def format_explain_levels(result: dict) -> list[str]:
    raise NotImplementedError(NO_LEVELS)
