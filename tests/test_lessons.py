"""The lessons (lessons/*.py) run as a learner runs them, and each agrees with the float64
reference, its encodings and its gradients: a lesson is short framework code without the suite's
contract machinery, so this is the only thing that keeps it right. Each also prints what it
teaches, measured in its own run (a graph per batch, one trace, a compile per shape, the
gradient's second loop or scan, DyNet's groups, the tracing lesson's counts), in lines that can
be projected, and none prints an exercise's answer."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

from lessons.notebooks import sources
from lessons.setup import TOLERANCE

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(name for name in sources() if not name.startswith("answers."))  # answers: test_exercises
FRAMEWORKS = {"pytorch_lists", "tensorflow_while", "jax_scan", "dynet_loop"}  # each checks its numbers
WIDTH = 100  # characters a line, source and output: readable when projected
# What only the answers say (lessons/answers/): a lesson that prints one of these gives an exercise away.
ANSWERS_SAY = ("exercise", "Reverse-mode", "graph break", "recompil", "autograph", "without jit",
               "PAD first", "one node at a time", "Non-hashable")
AGREES = r"largest difference from the float64 reference (\S+) \(agrees\)"


@pytest.fixture(scope="module")
def printed() -> dict[str, tuple[object, str]]:
    """Each lesson's main(), run once: (what it returned, what it printed)."""
    runs = {}
    for name in LESSONS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            returned = importlib.import_module(f"lessons.{name}").main()
        runs[name] = returned, out.getvalue()
    return runs


def test_every_paradigm_has_a_lesson_and_tracing_has_its_own():
    assert {name.split("_")[0] for name in LESSONS} == {"pytorch", "tensorflow", "jax", "dynet", "tracing"}
    assert FRAMEWORKS < set(LESSONS)


@pytest.mark.parametrize("name", LESSONS)
def test_the_lesson_runs_and_gives_no_answer_away_in_lines_that_can_be_projected(name, printed):
    returned, out = printed[name]
    if name in FRAMEWORKS:  # the encodings, then the gradients
        assert returned <= TOLERANCE and len(re.findall(AGREES, out)) >= 2, out
    assert "DISAGREES" not in out
    assert not [said for said in ANSWERS_SAY if said.lower() in out.lower()], out
    lines = out.splitlines()
    assert 4 <= len(lines) <= 16, out  # a few lines to learn from
    assert [line for line in lines if len(line) > WIDTH] == []


def statements_per_line(tree) -> dict[int, int]:
    """Simple statements by the line they start on (a compound statement's header is its own)."""
    found: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For,
                                                                 ast.While, ast.With, ast.Try)):
            found[node.lineno] = found.get(node.lineno, 0) + 1
    return found


def crowded(source: str) -> list[str]:
    """The lines of a lesson that are not one idea: two statements on a line, or three names
    assigned at once from three expressions (``a, b, c = x, y, z``); unpacking a call's result
    is one idea."""
    tree = ast.parse(source)
    found = [f"{line}: {k} statements" for line, k in statements_per_line(tree).items() if k > 1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(node.value.elts) > 2:
            names = [t.id for target in node.targets for t in getattr(target, "elts", [target])
                     if isinstance(t, ast.Name)]
            codes = all(name.isupper() for name in names) and all(
                isinstance(value, ast.Constant) for value in node.value.elts)  # PAD, SHIFT, REDUCE = 0, 1, 2
            if not codes:
                found.append(f"{node.lineno}: {len(node.value.elts)} values assigned at once")
    return found


def lesson_files() -> list[Path]:
    return sorted(sources().values()) + [ROOT / "lessons" / "setup.py"]


@pytest.mark.parametrize("path", lesson_files(), ids=lambda p: p.stem)
def test_every_lesson_and_answer_is_readable_when_projected(path):
    source = path.read_text()
    wide = [k for k, line in enumerate(source.splitlines(), 1) if len(line) > WIDTH]
    assert wide == [], f"{path.name}: lines over {WIDTH} characters: {wide}"
    assert crowded(source) == [], path.name
    # One meaning for B, the glossary's (pairs); the sentences a call encodes are S.
    assert "B" not in {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def test_the_crowding_check_finds_both_kinds():
    assert crowded("a = 1; b = 2\nx, y, z = 1, 2, 3\nh, c = f(x)\nh_t, c_t = 1, 2\nA, B, C = 0, 1, 2\n") == [
        "1: 2 statements", "2: 3 values assigned at once"]


def test_pytorch_records_a_graph_per_batch_and_backward_runs_it(printed):
    out = printed["pytorch_lists"][1]
    reads = [int(n) for n in re.findall(r"Python read (\d+) values", out)]
    nodes = [int(n) for n in re.findall(r"autograd recorded a graph of (\d+) nodes", out)]
    assert len(nodes) == 2 and nodes[0] != nodes[1]  # the same shapes, other trees: another graph
    assert reads == [8 * 67 + 8] * 2  # each sentence's op at each of T = 67 steps, and its word count
    assert "(S x T = 536) and a word count per sentence (8)" in out  # where the 544 come from, printed
    assert re.search(r"share \d+ nodes \(AccumulateGrad\): the weights', no operation", out), out
    ran = re.search(r"backward\(\) ran (\d+) of the graph's (\d+) nodes", out)
    assert ran and ran.group(1) == ran.group(2) == str(nodes[0])  # the premises' graph, all of it
    assert "StackBackward0 <- " in out  # the grad_fn chain from the encodings


def test_pytorch_counts_what_python_reads_and_what_autograd_recorded():
    import torch

    from lessons.pytorch_lists import HostReads, recorded

    t, x = torch.tensor([1, 2, 0]), torch.ones(3, requires_grad=True)
    with HostReads() as mode:
        int(t[0]), t.sum().item(), t + 1
    assert mode.reads == 2
    assert sorted(type(node).__name__ for node in recorded((x * 2).sum())) == [
        "AccumulateGrad", "MulBackward0", "SumBackward0"]


def test_tensorflow_traces_once_for_two_shapes_and_its_gradient_is_a_second_loop(printed):
    out = printed["tensorflow_while"][1]
    found = re.search(r"3 batches of transitions (.*):\n\s+tf\.function traced encode 1 time;", out)
    assert found and len(set(found.group(1).split("], "))) == 2, out
    loops = re.findall(r"one in (\w+), its body (\d+) ops", out)
    assert [where.split("_")[0] for where, _ in loops] == ["forward", "backward"], out
    body = int(re.search(r"and (\d+) more in the loop's body", out).group(1))
    assert int(loops[0][1]) > body  # the forward loop of the gradient's graph also keeps its steps' values


def test_jax_compiles_once_per_new_shape_and_its_gradient_is_a_reversed_scan(printed):
    out = printed["jax_scan"][1]
    counts = re.findall(r"(\[\d+, \d+\]): traced (\d+), compiled (\d+)", out)
    assert [(traced, compiled) for _, traced, compiled in counts] == [("1", "1"), ("0", "0"), ("1", "1")], out
    assert counts[0][0] == counts[1][0] != counts[2][0]
    assert "the gradient's jaxpr holds 2 scans: 1 forward, 1 reversed" in out


def test_dynet_ran_its_nodes_in_fewer_groups(printed):
    out = printed["dynet_loop"][1]
    nodes = int(re.search(r"their loss: (\d+) nodes", out).group(1))
    groups, largest = map(int, re.search(r"ran in (\d+) groups \(the largest (\d+) nodes\)", out).groups())
    assert nodes > groups > 0 and largest > 1


def test_dynet_s_two_instruments_count_the_same_nodes():
    """The profiled child's groups hold every node dy.print_text_graphviz lists, each once."""
    from lessons import dynet_loop

    groups, nodes = dynet_loop.profile()
    assert sum(groups) == len(nodes) and nodes[0].startswith("v0 = ")
    assert re.fullmatch(r"v\d+ = [^@]+", nodes[-1])  # DyNet's own notation, no memory address


def test_tracing_counts_a_trace_per_shape_then_one_then_widened_ones(printed):
    counts, out = printed["tracing"]
    shapes = re.search(r"the calls: (.*)", out).group(1).split("], ")
    distinct = len(set(shapes))
    assert len(shapes) == 5 and distinct == 4
    assert counts["plain"] == distinct and counts["signature"] == 1
    assert 1 < counts["reduce"] < distinct and "(None, None)" in out  # widened, not one per shape
    assert counts["prints"] == (distinct, len(shapes))  # print at each trace, jax.debug.print each call
    assert re.search(r"the first print said:\n\s+Python's print: tokens is \w*Tracer", out), out
    assert counts["ifs"] == {"if_on_a_shape": "runs", "if_on_a_value": "TracerBoolConversionError"}
    assert counts["static"] == 2  # the flag True, False, True


def test_the_lessons_check_their_gradients_against_the_reference_s_hand_written_ones():
    """The loss the lessons differentiate, the sum of the encodings: the reference's gradient
    matches a finite difference of the reference's own encodings (so the lessons' check is a check)."""
    import numpy as np

    from lessons.setup import lesson_inputs, reference_gradients
    from shared.reference.encoder import encode

    config, params, tokens, transitions, _ = lesson_inputs()
    tokens, transitions = tokens[:2], transitions[:2]
    grads = reference_gradients(params, config, tokens, transitions)
    weights = {name: np.asarray(value, np.float64) for name, value in params.items()}
    for name, index in (("reduce.left.kernel", (3, 7)), ("tracker.bias", (5,)), ("projection.kernel", (2, 20))):
        step = 1e-6
        up, down = dict(weights), dict(weights)
        up[name], down[name] = weights[name].copy(), weights[name].copy()
        up[name][index] += step
        down[name][index] -= step
        numeric = (encode(up, config, tokens, transitions).sum()
                   - encode(down, config, tokens, transitions).sum()) / (2 * step)
        assert abs(numeric - grads[name][index]) < 1e-6 * max(1.0, abs(numeric)), name
