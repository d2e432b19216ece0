"""What DyNet built, for ``python -m bench explain`` (shared/platform.py, "explain").

Define-by-run, batched at run time: the graph one batch's loss builds (its
node count and operations, read from DyNet's own Graphviz text), and, with
autobatching, the groups DyNet ran those nodes in. DyNet tells the groups
only through its profiler, a setting of the whole process fixed when DyNet
is initialised (``dynet_config.set(profiling=2)`` makes every forward pass
print ``BatchSize:K <operation>`` per group), so they are read from a child
process that loads the same weights and batch and evaluates the same graph.
The times compare the forward pass with and without autobatching (the
implementations ``dynet`` and ``dynet-unbatched``), on the same graph.
``--out`` writes the graph as Graphviz text (DyNet's own).

``--parse``: the graph evaluations a decided parse forces to read its
decisions (``Runner.last_host_syncs``) against gold mode's none.
``--bad-input``: an exception from a line of the model, or DyNet's own for a
token outside the embedding.

Nothing here imports DyNet at module level, so that the same module can be
the child, whose DyNet starts with the profiler on.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from shared.batching import PairBatch, sentences_transitions
from shared.explaining import compare_row, encode_outcome, listing, row, secs, steps_with_work, timer
from shared.params import ModelConfig

MODES = ("gold", "predicted")
ROOT = Path(__file__).resolve().parents[1]
_GROUP_LINE = re.compile(r"^BatchSize:(\d+) (.*)$")


def _graph_text() -> str:
    """DyNet's Graphviz text of the current graph (``print_text_graphviz``
    writes it to file descriptor 2 from C++, so that descriptor is captured)."""
    from impl_dynet.library import dy

    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            dy.print_text_graphviz()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode("utf-8", "replace")


def _operation(label: str) -> str:
    """A node's operation from its Graphviz label ("v7 = v1 + v2 * v3" -> "a + a * a"),
    named as DyNet's profiler names it; parameters and constants by kind."""
    op = re.sub(r"\bv\d+\b", "a", label.split(" = ", 1)[-1])
    for kind in ("lookup_parameters", "const_parameters", "parameters", "constant", "zeros"):
        if op.startswith(kind):
            return kind
    return re.sub(r"\{a(,a){4,}\}", "{a,...}", op)  # a concat of many inputs: one name


def _census(text: str) -> collections.Counter:
    """Nodes per operation in DyNet's Graphviz text."""
    labels = re.findall(r'^\s*N\d+ \[label="(.*)"\];$', text, re.MULTILINE)
    return collections.Counter(_operation(label) for label in labels)


def _runner(config: ModelConfig, params, autobatch: bool = True):
    from impl_dynet.runner import Runner

    return Runner(params, config, dtype="float32", device="cpu", autobatch=autobatch)


def _loss_graph(runner, batch: PairBatch):
    """Build (not evaluate) the eval-mode loss of ``batch`` in a fresh graph: its loss node."""
    from impl_dynet import train

    return train.batch_loss(runner.model, batch.arrays())


def _node_count(runner, batch: PairBatch) -> int:
    _loss_graph(runner, batch)
    return sum(_census(_graph_text()).values())


# -- the autobatching groups, from a child process with DyNet's profiler on ----------


def _autobatch_groups(config: ModelConfig, params, batch: PairBatch) -> dict:
    """The groups DyNet's autobatching ran the eval-mode loss's forward pass
    in: {"groups": count, "nodes": nodes they covered, "by_operation":
    operation -> [groups, nodes]}, or {"error": why} if the child failed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graph.npz"
        np.savez(path, config=np.array(config.to_json()), **{f"param:{k}": v for k, v in params.items()},
                 **{f"batch:{k}": v for k, v in batch.to_dict().items()})
        env = {**os.environ, "SPINN_DYNET_PROFILING": "2",  # read by impl_dynet.library, before DyNet starts
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-m", "impl_dynet.explain", str(path)], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    by_operation: dict[str, list[int]] = {}
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        found = _GROUP_LINE.match(line.strip())
        if found:
            counts = by_operation.setdefault(_operation("v0 = " + found.group(2)), [0, 0])
            counts[0] += 1
            counts[1] += int(found.group(1))
    ordered = dict(sorted(by_operation.items(), key=lambda item: -item[1][1]))
    return {"groups": sum(g for g, _ in ordered.values()), "nodes": sum(n for _, n in ordered.values()),
            "by_operation": ordered}


def _profiled_forward(path: str) -> None:
    """The child's side (DyNet started with the profiler at level 2, see
    _autobatch_groups): the same weights and batch, one autobatched forward
    pass of the loss."""
    with np.load(path, allow_pickle=False) as arrays:
        config = ModelConfig.from_json(str(arrays["config"]))
        params = {k.split(":", 1)[1]: arrays[k] for k in arrays.files if k.startswith("param:")}
        batch = PairBatch(**{k.split(":", 1)[1]: arrays[k] for k in arrays.files if k.startswith("batch:")},
                          pair_ids=[str(i) for i in range(len(arrays["batch:labels"]))])
    loss = _loss_graph(_runner(config, params, autobatch=True), batch)
    loss.value()


# -- bench explain ------------------------------------------------------------------------


def explain(implementation: str, batches, config: ModelConfig, params, out: Path | None, *, timing: bool) -> dict:
    """The graph one batch builds and how autobatching grouped it (see the module docstring)."""
    from impl_dynet.platform import Platform

    runner = _runner(config, params)
    _loss_graph(runner, batches.main)
    text = _graph_text()
    types = _census(text)
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
        "autobatch": _autobatch_groups(config, params, batches.main),
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
        nodes = sum(_census(_graph_text()).values())  # the parse's graph is still the current one
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


if __name__ == "__main__":
    _profiled_forward(sys.argv[1])


# No host-scheduled levels implementation here (the registry's matrix says why); the names are the surface's.
NO_LEVELS = "dynet has no host-scheduled levels implementation: autobatching by depth (dynet-depth) finds the levels at run time, from the graph"


def explain_levels(batch, variants: dict, options: dict) -> dict:
    """Refused: dynet has no levels implementation (``bench explain --levels`` asks only those that have one)."""
    raise NotImplementedError(NO_LEVELS)


def format_explain_levels(result: dict) -> list[str]:
    raise NotImplementedError(NO_LEVELS)
