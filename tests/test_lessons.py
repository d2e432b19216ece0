"""The lessons (lessons/*.py) run as a learner runs them, and each agrees with
the float64 reference: a lesson is short framework code without the suite's
contract machinery, so this is the only thing that keeps it right. Each also
prints what it teaches, measured in its own run (a graph per batch, one trace,
a compile per shape, DyNet's groups), and none prints an exercise's answer."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

from lessons.notebooks import sources
from lessons.setup import TOLERANCE

LESSONS = sorted(name for name in sources() if not name.startswith("answers."))  # answers: tests/test_exercises.py
MAX_LINES = 100  # under 100: one SPINN step and its loop, read whole in a few minutes
# What only the answers say (lessons/answers/): a lesson that prints one of these gives an exercise away.
ANSWERS_SAY = ("exercise", "TracerBoolConversionError", "ConcretizationTypeError", "Reverse-mode", "graph break",
               "recompil", "autograph", "autobatching off", "unbatched")


@pytest.fixture(scope="module")
def printed() -> dict[str, tuple[float, str]]:
    """Each lesson's main(), run once: (its largest difference from the reference, what it printed)."""
    runs = {}
    for name in LESSONS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            err = importlib.import_module(f"lessons.{name}").main()
        runs[name] = err, out.getvalue()
    return runs


def test_every_paradigm_has_a_lesson():
    assert {name.split("_")[0] for name in LESSONS} == {"pytorch", "tensorflow", "jax", "dynet"}


@pytest.mark.parametrize("name", LESSONS)
def test_the_lesson_runs_agrees_with_the_reference_and_gives_no_answer_away(name, printed):
    err, out = printed[name]
    assert err <= TOLERANCE and "(agrees)" in out, out
    assert not [said for said in ANSWERS_SAY if said in out.lower()], out
    assert 2 <= len(out.splitlines()) <= 6, out  # a few lines to learn from
    source = Path(importlib.import_module(f"lessons.{name}").__file__).read_text().splitlines()
    assert len(source) < MAX_LINES, f"{name}: {len(source)} lines"


def test_pytorch_records_a_graph_per_batch_that_shares_only_the_weights(printed):
    out = printed["pytorch_lists"][1]
    reads = [int(n) for n in re.findall(r"Python read (\d+) values", out)]
    nodes = [int(n) for n in re.findall(r"autograd recorded a graph of (\d+) nodes", out)]
    assert len(nodes) == 2 and nodes[0] != nodes[1]  # the same shapes, other trees: another graph
    assert reads == [8 * 67 + 8] * 2  # each sentence's op at each of T = 67 steps, and each sentence's word count
    assert re.search(r"share \d+ nodes \(AccumulateGrad\): the weights', no operation", out), out


def test_pytorch_counts_what_python_reads_and_what_autograd_recorded():
    import torch

    from lessons.pytorch_lists import HostReads, recorded

    t, x = torch.tensor([1, 2, 0]), torch.ones(3, requires_grad=True)
    with HostReads() as mode:
        int(t[0]), t.sum().item(), t + 1
    assert mode.reads == 2
    assert sorted(type(node).__name__ for node in recorded((x * 2).sum())) == [
        "AccumulateGrad", "MulBackward0", "SumBackward0"]


def test_tensorflow_traces_once_for_batches_of_two_shapes(printed):
    out = printed["tensorflow_while"][1]
    found = re.search(r"3 batches of transitions (.*): tf\.function traced encode 1 time", out)
    assert found and len(set(found.group(1).split("], "))) == 2, out


def test_jax_compiles_once_per_new_shape_and_not_for_a_shape_it_has_seen(printed):
    out = printed["jax_scan"][1]
    counts = re.findall(r"(\[\d+, \d+\]): traced (\d+), compiled (\d+)", out)
    assert [(traced, compiled) for _, traced, compiled in counts] == [("1", "1"), ("0", "0"), ("1", "1")], out
    assert counts[0][0] == counts[1][0] != counts[2][0]


def test_dynet_ran_its_nodes_in_fewer_groups(printed):
    found = re.search(r"(\d+) nodes, which autobatching ran in (\d+) groups \(the largest (\d+) nodes\)",
                      printed["dynet_loop"][1])
    nodes, groups, largest = map(int, found.groups())
    assert nodes > groups > 0 and largest > 1
