"""``python -m bench explain``: what each framework built, on a tiny model.

What must hold, and is asserted here: PyTorch's autograd graph depends on
the batch's trees (same B, N, T, other trees: another node count) but not on
padding; TensorFlow's traced graph and JAX's jaxpr do not depend on the trees
(or, for TensorFlow, on any size: one trace); JAX traces once per shape. The
graph files are written and parse.
"""

from __future__ import annotations

import importlib
import json
import re

import numpy as np
import pytest

from bench import frameworks
from bench.cli import main
from bench.explain.views import parse_args
from bench.explain.views import ROOT, _own_code, explain_bad_input
from bench.explain.views import explain_parse
from bench.explain.views import explain, format_text
from bench.frameworks import FRAMEWORKS
from tests.helpers import TINY


def run(*flags: str, timing: bool = False, out=None) -> dict:
    argv = TINY + list(flags) + ([] if timing else ["--no-timing"]) + (["--out", str(out)] if out else [])
    return explain(parse_args(argv))


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """Every framework once, timed (JAX compiles, TensorFlow runs), graphs written."""
    out = tmp_path_factory.mktemp("graphs")
    return run("--shape", "random", "--length", "5", timing=True, out=out), out


@pytest.fixture(scope="module")
def by_shape():
    """Counts only, for the same words in three tree shapes (same B, N, T)."""
    return {shape: run("--shape", shape, "--length", "6") for shape in ("left", "right", "random")}


def expectations(framework: str):
    """What a framework's explain must report: ``check_explain(result, batch)`` and
    ``check_bad_input(transitions, token)`` in the framework's own test file (tests/test_<framework>.py).
    A framework registered without them fails here, instead of falling into another's expectations."""
    module = importlib.import_module(f"tests.test_{framework}")
    missing = [name for name in ("check_explain", "check_bad_input") if not hasattr(module, name)]
    assert not missing, f"tests/test_{framework}.py defines no {', '.join(missing)}"
    return module


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
def test_explain_reports_positive_counts_and_times(timed, framework):
    result, _ = timed
    r = result[framework]
    graph = r["graph"]  # every framework's summary of what it built (docs/figures/graph-size.svg)
    assert graph.get("recorded", 0) > 0 or graph.get("body", 0) > 0
    expectations(framework).check_explain(r, result["batch"])


def test_pytorch_graph_follows_the_trees_not_the_padding(by_shape):
    left, right, rand = (by_shape[s]["pytorch"] for s in ("left", "right", "random"))
    batch = by_shape["left"]["batch"]
    assert by_shape["random"]["batch"]["num_steps"] == batch["num_steps"]  # same B, N, T
    assert left["autograd_nodes"] != rand["autograd_nodes"]
    # every sentence left-branching: all move in lockstep, as right-branching ones do
    assert left["autograd_nodes"] == right["autograd_nodes"] == left["other_trees"]["right"]
    for r in (left, right, rand):
        assert r["padded_nodes"] == r["autograd_nodes"]  # PAD steps record nothing
        assert r["traces"] == 0


def test_pytorch_graph_in_lockstep_does_not_grow_with_the_batch():
    one = run("--framework", "pytorch", "--shape", "left", "--length", "6", "--batch-size", "1")["pytorch"]
    three = run("--framework", "pytorch", "--shape", "left", "--length", "6", "--batch-size", "3")["pytorch"]
    assert one["autograd_nodes"] == three["autograd_nodes"]
    assert one["reduce_rows"] * 3 == three["reduce_rows"]  # the rows grow, the calls do not
    assert one["reduce_calls"] == three["reduce_calls"]


def test_tensorflow_graph_is_one_trace_for_every_tree_and_size(by_shape):
    counts = [(r["tensorflow"]["encode"]["ops"], r["tensorflow"]["encode"]["while_body_ops"],
               r["tensorflow"]["loss_and_grads"]["ops"], r["tensorflow"]["loss_and_grads"]["while_body_ops"])
              for r in by_shape.values()]
    other = run("--framework", "tensorflow", "--shape", "balanced", "--length", "3", "--batch-size", "1")
    t = other["tensorflow"]
    counts.append((t["encode"]["ops"], t["encode"]["while_body_ops"], t["loss_and_grads"]["ops"],
                   t["loss_and_grads"]["while_body_ops"]))
    assert all(c == counts[0] for c in counts)
    assert all(r["tensorflow"]["traces_for_variants"] == 1 for r in by_shape.values())
    assert "?" in " ".join(t["loop_state"])  # sizes unknown while tracing


def test_jax_jaxpr_does_not_depend_on_the_trees_but_traces_per_shape(by_shape):
    counts = [(r["jax"]["encode"]["eqns"], r["jax"]["encode"]["scan_body_eqns"],
               r["jax"]["loss_and_grads"]["eqns"], r["jax"]["loss_and_grads"]["scan_body_eqns"])
              for r in by_shape.values()]
    assert all(c == counts[0] for c in counts)
    longer = run("--framework", "jax", "--shape", "left", "--length", "9")["jax"]
    assert longer["encode"]["scan_body_eqns"] == counts[0][1]  # the body does not grow with T
    assert longer["encode"]["scan_lengths"] == [17]  # T is a parameter of the scan
    assert all(r["jax"]["traces_for_variants"] == 2 for r in by_shape.values())  # the padded batch is a new shape
    assert by_shape["left"]["jax"]["loop_state"]["carry"][2] == "int32[4]"  # a stack pointer per sentence, no value


def test_tracker_off_shrinks_every_graph(by_shape):
    off = run("--shape", "left", "--length", "6", "--tracker-dim", "0")
    on = by_shape["left"]
    assert off["pytorch"]["autograd_nodes"] < on["pytorch"]["autograd_nodes"]
    assert off["pytorch"]["tracker_calls"] == 0
    assert off["tensorflow"]["encode"]["while_body_ops"][0] < on["tensorflow"]["encode"]["while_body_ops"][0]
    assert off["jax"]["encode"]["scan_body_eqns"][0] < on["jax"]["encode"]["scan_body_eqns"][0]


def test_graph_files_exist_and_parse(timed):
    result, out = timed
    assert set(result["files"]) == {"explain.json", "pytorch_autograd.dot", "jax_encode.jaxpr.txt",
                                    "jax_loss_and_grads.jaxpr.txt", "tensorflow_encode.pbtxt",
                                    "tensorflow_loss_and_grads.pbtxt", "dynet_graph.dot"}
    dot = (out / "pytorch_autograd.dot").read_text()
    assert dot.startswith("digraph autograd {") and dot.rstrip().endswith("}")
    nodes = set(re.findall(r"^  (n\d+) \[label=", dot, re.M))
    edges = re.findall(r"^  (n\d+) -> (n\d+);$", dot, re.M)
    assert len(nodes) == result["pytorch"]["autograd_nodes"]
    assert edges and all(a in nodes and b in nodes for a, b in edges)
    assert '"reduce.left.kernel"' in dot  # parameters carry their canonical names

    assert "scan[" in (out / "jax_encode.jaxpr.txt").read_text()
    assert (out / "jax_loss_and_grads.jaxpr.txt").read_text().count("scan[") == 2

    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    for name, loops in (("encode", 1), ("loss_and_grads", 2)):
        graph = text_format.Parse((out / f"tensorflow_{name}.pbtxt").read_text(), graph_pb2.GraphDef())
        whiles = [node for node in graph.node if "While" in node.op]
        assert len(whiles) == loops
        bodies = {f.signature.name for f in graph.library.function}
        assert all(node.attr["body"].func.name in bodies for node in whiles)
    assert json.loads((out / "explain.json").read_text())["pytorch"]["autograd_nodes"] > 0


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
def test_bad_input_shows_where_each_framework_reports_it(framework):
    transitions = explain_bad_input(parse_args(["--framework", framework, "--bad-input", "transitions"] + TINY))
    token = explain_bad_input(parse_args(["--framework", framework, "--bad-input", "token"] + TINY))
    expectations(framework).check_bad_input(transitions[framework], token[framework])
    assert format_text(transitions).startswith("bad input:")


def test_cli_prints_json_and_text(capsys):
    assert main(["explain", "--framework", "pytorch", "--shape", "left", "--length", "3", "--json", "--no-timing"]
                + TINY) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pytorch"]["autograd_nodes"] > 0 and "jax" not in result
    assert main(["explain", "--framework", "pytorch", "--shape", "left", "--length", "3", "--no-timing"] + TINY) == 0
    text = capsys.readouterr().out
    assert "autograd nodes of the loss" in text and f"{result['pytorch']['autograd_nodes']}" in text


def test_the_frameworks_and_variants_come_from_the_registry():
    assert parse_args(["--framework", "jax-vmap"]).framework == "jax-vmap"  # registered as explained
    with pytest.raises(SystemExit):
        parse_args(["--framework", "jax-padded"])  # an opt-in variant the registry does not mark explained
    with pytest.raises(ValueError, match="--parse shows frameworks, not variants"):
        explain_parse(parse_args(["--framework", "jax-vmap", "--parse"] + TINY))


def test_own_code_is_the_registered_packages_less_explain_itself():
    for name in frameworks.FRAMEWORKS:
        package = ROOT / frameworks.framework(name).package
        assert _own_code(str(package / "runner.py")) and not _own_code(str(package / "explain.py"))
    assert _own_code(str(ROOT / "shared" / "contract.py")) and not _own_code(str(ROOT / "shared" / "explaining.py"))
    assert not _own_code(str(ROOT / "bench" / "explain" / "report.py"))
    assert not _own_code(np.__file__)  # a library, even one installed under the project's folder
