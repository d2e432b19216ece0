"""The exercises of lessons/README.md, and those of the docs, do what they say.

An exercise that changes a lesson gives the change as a ``diff`` block (``--- lessons/<file>``, then
the lines it removes, ``-``, and those it writes, ``+``). Each change is made exactly as written on a
copy of lessons/, the lesson is run as a learner runs it (``python -m lessons.<name>``), and what
the exercise says will happen is checked: the error it names, the numbers that stay, the count that
changes. Every diff block of the README and of docs/*.md must have its check here.

The worked answers (lessons/answers/) run as a learner runs them, and each finds what its exercise
says: the mask agrees with the reference, a Python `if` in a scan's step is refused with jit and
without, jax.grad refuses a while_loop and the fixes give the analytic gradient from one compiled
program, torch.compile breaks the list model's graph and compiles nothing after its first pass,
AutoGraph turns the `if` into a tf.cond, DyNet's numbers stay with autobatching off."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from lessons.setup import TOLERANCE, lesson_batches, lesson_inputs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "lessons" / "README.md"
ANSWERS = sorted(p.stem for p in (ROOT / "lessons" / "answers").glob("*.py") if not p.stem.startswith("_"))
AGREES = r"largest difference from the float64 reference (\S+) \(agrees\)"


@dataclass(frozen=True)
class Change:
    path: str  # relative to the repository's root
    old: str
    new: str


def diff_blocks(text: str) -> list[Change]:
    """The ``diff`` blocks of a Markdown text, in order (indented ones, in a list item, too)."""
    changes = []
    for indent, body in re.findall(r"^( *)```diff\n(.*?)^\1```", text, re.M | re.S):
        lines = [line[len(indent):] for line in body.splitlines()]
        assert lines[0].startswith("--- "), lines[0]
        old = [line[1:] for line in lines[1:] if line.startswith("-")]
        new = [line[1:] for line in lines[1:] if line.startswith("+")]
        assert len(old) + len(new) == len(lines) - 1, body  # nothing but - and + lines
        changes.append(Change(lines[0][4:].strip(), "\n".join(old) + "\n", "\n".join(new) + "\n"))
    return changes


def exercises(text: str) -> dict[int, str]:
    """The numbered items of the README's Exercises section, by number."""
    section = text[text.index("## Exercises"):]
    section = section[:section.index("\n## ", 1)]
    items = re.split(r"^(\d+)\. ", section, flags=re.M)
    return {int(number): body for number, body in zip(items[1::2], items[2::2])}


def readme_changes() -> dict[int, list[Change]]:
    found = {number: diff_blocks(body) for number, body in exercises(README.read_text()).items()}
    return {number: changes for number, changes in found.items() if changes}


def run_changed(tmp_path: Path, changes: list[Change]) -> list[subprocess.CompletedProcess]:
    """A copy of lessons/; each change made in turn, and after each the changed lesson run as a
    learner runs it, from the copy's root (the suite's packages from this repository)."""
    shutil.copytree(ROOT / "lessons", tmp_path / "lessons", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    runs = []
    for change in changes:
        path = tmp_path / change.path
        text = path.read_text()
        assert text.count(change.old) == 1, f"{change.path}: the lines to change, found {text.count(change.old)} times"
        path.write_text(text.replace(change.old, change.new))
        module = ".".join(Path(change.path).with_suffix("").parts)
        runs.append(subprocess.run([sys.executable, "-m", module], cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=600))
    return runs


def lesson_output(module: str) -> str:
    """What the lesson as written prints (for an exercise that says what stays the same)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    return done.stdout


def check_2(runs):
    """A Python `if` in the scan's step: refused under jit, and refused without it, by the scan's trace."""
    for run in runs:
        assert run.returncode != 0 and "TracerBoolConversionError" in run.stderr, run.stderr[-2000:]
        assert "for scan" in run.stderr  # "The error occurred while tracing the function step ... for scan"


def check_6(runs):
    """The tracker on PAD steps: the encodings still agree, the graph grows."""
    (run,) = runs
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(re.findall(AGREES, run.stdout)) == 3, run.stdout  # premises, hypotheses, gradients
    nodes = [int(n) for n in re.findall(r"autograd recorded a graph of (\d+) nodes", run.stdout)]
    before = [int(n) for n in re.findall(r"autograd recorded a graph of (\d+) nodes",
                                         lesson_output("lessons.pytorch_lists"))]
    assert all(after > was for after, was in zip(nodes, before)) and len(nodes) == len(before) == 2


def check_7(runs):
    """Autobatching off: the same nodes and the same encodings, no groups, gradients that still agree."""
    (run,) = runs
    assert run.returncode == 0, run.stderr[-2000:]
    written = lesson_output("lessons.dynet_loop")
    assert "which DyNet ran one node at a time: its profiler reports no groups" in run.stdout, run.stdout
    assert "autobatching ran in" in written
    nodes = [re.search(r"their loss: (\d+) nodes", out).group(1) for out in (run.stdout, written)]
    assert nodes[0] == nodes[1]
    errs = [re.findall(AGREES, out) for out in (run.stdout, written)]
    assert len(errs[0]) == len(errs[1]) == 2 and errs[0][0] == errs[1][0]  # the encodings: the same


def check_8(runs):
    """An array made static: refused, it has no hash."""
    (run,) = runs
    assert run.returncode != 0 and "Non-hashable static arguments are not supported" in run.stderr
    assert "jax.jit, if_on_a_value" in run.stdout  # the lesson ran up to the static arguments


def check_9(runs):
    """No input_signature: a trace per shape, the same numbers, the gradient's graph unchanged."""
    (run,) = runs
    assert run.returncode == 0, run.stderr[-2000:]
    assert "tf.function traced encode 2 times" in run.stdout, run.stdout
    assert len(re.findall(AGREES, run.stdout)) == 2 and "runs 2 while loops" in run.stdout


CHECKS = {2: check_2, 6: check_6, 7: check_7, 8: check_8, 9: check_9}


def test_every_code_change_exercise_has_its_check_and_applies_exactly_once():
    changes = readme_changes()
    assert sorted(changes) == sorted(CHECKS)
    for number, found in changes.items():
        for change in found:  # on the lessons as they are, in the order written
            assert (ROOT / change.path).is_file(), change.path
    docs = {path.name: diff_blocks(path.read_text()) for path in sorted((ROOT / "docs").glob("*.md"))}
    assert {name: found for name, found in docs.items() if found} == {}  # a docs exercise's change: a check


def test_the_diff_reader_reads_an_indented_block():
    text = "1. *x*\n\n   ```diff\n   --- lessons/a.py\n   -    old = 1\n   +    new = 2\n   ```\n"
    assert diff_blocks(text) == [Change("lessons/a.py", "    old = 1\n", "    new = 2\n")]


@pytest.mark.parametrize("number", sorted(CHECKS))
def test_the_exercise_s_change_does_what_the_exercise_says(number, tmp_path):
    CHECKS[number](run_changed(tmp_path, readme_changes()[number]))


def test_the_graph_exercise_of_static_vs_dynamic_counts_the_arrows_without_graphviz(tmp_path):
    """docs/static-vs-dynamic.md's exercise 5: its command writes the graphs, its Python counts the
    arrows that leave reduce.left.kernel: one per Reduce call, explain's own count. Only PyTorch's
    graph is read, so only PyTorch's is written here."""
    text = (ROOT / "docs" / "static-vs-dynamic.md").read_text()
    exercise = text[text.index("**5. Read the graphs.**"):text.index("<details>", text.index("**5. Read the graphs.**"))]
    command = re.search(r"```bash\n(python -m bench explain [^\n]+)\n```", exercise).group(1)
    snippet = re.search(r"```python\n(.*?)```", exercise, re.S).group(1)
    assert "dot " not in command and command.endswith("--out graphs")
    argv = command.split()[1:]
    argv[argv.index("explain") + 1:argv.index("explain") + 1] = ["--framework", "pytorch"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=600)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    import json
    calls = json.loads((tmp_path / "graphs" / "explain.json").read_text())["pytorch"]["reduce_calls"]
    assert re.fullmatch(rf"n\d+ has {calls} arrows leaving it\n", done.stdout), done.stdout


# ---------------------------------------------------------------------------
# The answers
# ---------------------------------------------------------------------------

def test_every_answer_is_listed_under_its_exercise():
    items = exercises(README.read_text())
    listed = [m for body in items.values() for m in re.findall(
        r"answer: `(?:\.venv/bin/)?python -m lessons\.answers\.(\w+)`", body)]
    assert sorted(set(listed)) == ANSWERS
    assert len(items) >= 9 and all("answer: " in body for body in items.values())
    below = [n for n, body in items.items() if "answer: below" in body]
    assert all("<details><summary>Answer</summary>" in items[n] for n in below)


def test_exercise_1_the_masks_agree_with_the_reference(capsys):
    from lessons.answers import mask

    _config, params, batches = lesson_batches()
    for tokens, transitions, expected in batches:  # the premises' trees and the hypotheses'
        assert np.max(np.abs(mask.encode(params, tokens, transitions) - expected)) <= TOLERANCE
    is_shift, is_reduce, active = mask.masks(np.array([0, 1, 2]))
    assert is_shift.tolist() == [False, True, False] and is_reduce.tolist() == [False, False, True]
    assert active.tolist() == [False, True, True]
    assert mask.main() <= TOLERANCE and "agrees" in capsys.readouterr().out


def test_exercise_6_the_tracker_on_pad_steps_changes_nothing_only_while_pad_comes_last(capsys):
    from lessons.answers import mask

    _config, params, tokens, transitions, _expected = lesson_inputs()
    plain = mask.encode(params, tokens, transitions)
    assert np.array_equal(mask.encode(params, tokens, transitions, track_pad=True), plain)
    moved = mask.left_padded(transitions)
    assert np.array_equal(mask.encode(params, tokens, moved), plain)  # PAD first, but PAD does nothing
    found = mask.pad_changes(params, tokens, transitions)
    padded = [s for s in range(len(transitions)) if (transitions[s] == 0).any()]
    assert found == {"PAD last": [], "PAD first": padded} and 0 < len(padded) < len(transitions)
    assert f"with PAD first, the encodings that change are those of sentences {padded}" in capsys.readouterr().out


def test_exercise_2_a_python_if_in_a_scan_step_is_refused_with_jit_and_without():
    import jax

    from lessons.answers import tracer_if

    errors, where, conds, expected = tracer_if.main()
    assert list(errors) == ["under jit", "in a lax.scan step, without jit", "in a lax.scan step, under jit"]
    assert all(isinstance(err, jax.errors.TracerBoolConversionError) for err in errors.values())
    assert where.tolist() == conds.tolist() == expected.tolist() and len(set(expected.tolist())) == 2
    assert tracer_if.python_if(np.int32(1)) == 1  # outside a scan and without jit the same `if` runs


def test_exercise_3_grad_refuses_while_loop_and_one_compiled_gradient_serves_every_n():
    from lessons.answers import grad_loop

    found, forward, static, masked, (traces, compiles) = grad_loop.main()
    for err in found.values():
        assert isinstance(err, ValueError) and "Reverse-mode differentiation does not work" in str(err)
    assert forward == static == 4 * 2.0 ** 3
    assert masked == {k: k * 2.0 ** (k - 1) for k in range(1, grad_loop.MAX_STEPS + 1)}
    assert traces == compiles == 1  # one program for n = 1..8


def test_exercise_4_torch_compile_breaks_the_list_model_recompiles_for_other_trees_and_agrees(capfd):
    from lessons.answers import compile_lists

    found = compile_lists.explain()
    assert found.graph_break_count >= 1 and found.graph_count >= 2
    (first, expected_1, breaks, recompiles, _), (second, expected_2, _, again, _) = compile_lists.compile_two_batches()
    assert np.max(np.abs(first - expected_1)) <= TOLERANCE and np.max(np.abs(second - expected_2)) <= TOLERANCE
    assert breaks and any("Tensor.item()" in message for message in breaks)  # int(tensor): Python reads a value
    assert recompiles and again  # the second batch's trees, at the same shapes, recompile again
    # Why explain's count is not the log's (the answer's lines): explain calls every graph after the first a
    # break, the log names each place where a trace broke.
    assert found.graph_break_count == found.graph_count - 1 > len(breaks)
    captured = capfd.readouterr()
    assert "Graph break" not in captured.err + captured.out and "Recompiling" not in captured.err + captured.out


def test_exercise_4_the_passes_after_the_first_compile_nothing():
    """What the answer times after the first pass is run time alone: Dynamo compiles no graph then."""
    from lessons.answers import compile_lists

    timed = compile_lists.passes("eager", rounds=1)
    assert timed["graphs_first"] > 1 and timed["graphs_later"] == 0
    assert timed["first"] > 0 and timed["later"] > 0 and timed["plain"] > 0


def test_exercise_4_worth_waiting_for_is_the_backend_whose_compiling_pays_back_soonest():
    from lessons.answers import compile_lists

    def t(first, later, plain=1.0):  # seconds for the two batches
        return {"first": first, "later": later, "plain": plain}
    times = {"eager": t(3.0, 0.95), "inductor": t(11.0, 0.5), "slow": t(2.0, 1.5)}
    assert compile_lists.worth_waiting(times) == ("inductor", 10.0 / 0.5)  # 20 passes repay 10 s
    assert compile_lists.worth_waiting({"eager": t(3.0, 0.95)}) == (None, None)  # 5 % faster: not worth it


def test_exercise_5_autograph_turns_the_if_into_a_cond_and_autograph_off_refuses_it():
    import tensorflow as tf

    from lessons import tensorflow_while
    from lessons.answers import autograph_if

    encodings, expected, refused = autograph_if.main()
    assert np.max(np.abs(encodings - expected)) <= TOLERANCE
    _config, params, tokens, transitions, _ = lesson_inputs()
    masked = tensorflow_while.build_encoder(params)(tf.constant(tokens), tf.constant(transitions)).numpy()
    assert np.max(np.abs(encodings - masked)) <= TOLERANCE  # the mask version's numbers
    assert isinstance(refused, tf.errors.OperatorNotAllowedInGraphError)
    assert "StatelessIf" in autograph_if.graph_ops(autograph_if.build_encoder(params))
    choose = tf.function(autograph_if.choose)
    for op in (1, 2):
        assert float(choose(tf.constant(op), 10.0, 20.0)) == float(tf.where(op == 1, 10.0, 20.0))


def test_exercise_7_with_autobatching_off_the_numbers_stay_and_no_group_is_run(capsys):
    from lessons import dynet_loop
    from lessons.answers import autobatching

    runs, ran = autobatching.main()
    (on, on_grads, _), (off, off_grads, _) = runs[True], runs[False]
    (on_groups, on_nodes), (off_groups, off_nodes) = ran[True], ran[False]
    assert np.array_equal(on, off) and on_nodes == off_nodes
    assert autobatching.largest_change(on_grads, off_grads) <= TOLERANCE  # the order of a sum, no more
    assert len(on_groups) > 0 and sum(on_groups) == len(on_nodes) and off_groups == []
    assert dynet_loop.AUTOBATCHING is True  # the lesson as written, after the answer
    assert "the encodings of the two runs differ by at most 0.0e+00" in capsys.readouterr().out
