"""What several test modules share: small models, tolerances, assertions.

Fixtures live in conftest.py; everything a test module imports lives here, so
no test module imports another. Runners are made with the registry's
``bench.frameworks.make_runner``, the one the commands use.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from typing import Iterator

import numpy as np
import pytest

from bench import frameworks
from shared import parsing, reference
from shared.compare import F64_TOL, LOGPROB_TOL_F32, grad_rel_errs, max_abs_err, tolerances  # noqa: F401
from shared.params import ModelConfig, init_params, param_shapes
from shared.snli import LABELS, NO_LABEL, UNLABELED
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, build_tree, plain_transitions, to_bracket

HEAD_KERNEL, HEAD_BIAS = "tracker.transition.kernel", "tracker.transition.bias"

# Runner options the tests use over the registry's, where the registry's
# would only cost time: Inductor needs tens of seconds per program and shape
# on a small CPU, and the contract tests meet dozens; the aot_eager backend
# captures the same graphs (TorchDynamo, AOTAutograd) without generating
# code. test_variants_pytorch.py builds the Inductor version once.
TEST_OPTIONS = {"pytorch-compiled": {"compile": "aot_eager"},
                "pytorch-cudagraphs": {"compile": "aot_eager", "compile_mode": None}}


# ``bench explain``'s flags for the tiny model its tests run (test_explain.py, test_levels_models.py).
TINY = ["--embed-dim", "4", "--hidden-dim", "4", "--tracker-dim", "2", "--mlp-dim", "4", "--mlp-layers", "1"]


def make_runner(name: str, params, config: ModelConfig, **kwargs):
    """The registry's runner of implementation ``name`` (bench.frameworks),
    its options overridden by TEST_OPTIONS, then ``kwargs``. What only the
    benchmark's timed step adds (``timed_options``: DyNet's own trainers) is
    not here: the contract holds the shared update rules, as ``bench train``
    runs them; tests/test_dynet_native.py holds the native trainer to them."""
    return frameworks.make_runner(name, params, config, **{**options_as_tested(name), **kwargs})


def options_as_tested(name: str) -> dict:
    """The options make_runner gives implementation ``name`` over the registry's (TEST_OPTIONS), which
    tests/test_contract.py compares to find two names built alike."""
    return dict(TEST_OPTIONS.get(name, {}))


def checked_dtype(name: str, dtype: str = "float64") -> str:
    """The dtype a contract test checks implementation ``name`` in: ``dtype``,
    unless the implementation lists it in ``unsupported`` (DyNet computes in
    float32 only, the reference in float64 only). Then its constructor must
    refuse ``dtype`` in one line, checked here so that the refusal is tested,
    never skipped, and the test runs in the other dtype instead, with that
    dtype's tolerances."""
    if frameworks.runner_class(frameworks.resolve(name)[0]).supports(dtype):
        return dtype
    config = small_config_for(8)
    with pytest.raises(NotImplementedError, match=f"no {dtype}: "):
        make_runner(name, init_params(config, seed=0), config, dtype=dtype)
    return "float64" if dtype == "float32" else "float32"


def small_config_for(vocab_size: int, tracker_dim: int = 3, mlp_layers: int = 2) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim,
                       mlp_dim=7, mlp_layers=mlp_layers)


def head_config(vocab_size: int, tracker_dim: int = 4) -> ModelConfig:
    """The small model with a transition head (docs/spec.md §7)."""
    return ModelConfig(vocab_size=vocab_size, embed_dim=6, hidden_dim=5, tracker_dim=tracker_dim,
                       mlp_dim=7, mlp_layers=1, transition_head=True)


def head_params(config: ModelConfig, seed: int, dtype=np.float64) -> dict[str, np.ndarray]:
    """Random weights whose head makes real choices: its kernel is scaled up so
    that both actions win at some steps (checked by test_contract.py's
    ``test_decisions_are_mixed``), with margins that clear float32 rounding."""
    params = init_params(config, seed=seed, dtype=dtype)
    params[HEAD_KERNEL] = (params[HEAD_KERNEL] * 8.0).astype(dtype)
    return params


def uniforms(batch, seed: int = 11):
    """The front end's uniform numbers for every pair of ``batch`` (sampled mode)."""
    return parsing.uniforms_for(batch, rows=list(range(batch.size)), seed=seed, epoch=0)


def shaped_sentence(words: list[str], shape: str) -> Sentence:
    return Sentence(tuple(words), tuple(plain_transitions(len(words), shape)))


def assert_parsed_close(parsed: parsing.Parsed, ref: parsing.Parsed, *, tol: float, logit_tol: float,
                        logprob_tol: float) -> None:
    """The same transitions as ``ref``, and its numbers within the tolerances."""
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(getattr(parsed, f"{side}_transitions"), getattr(ref, f"{side}_transitions"),
                                      err_msg=f"{side} transitions differ from the reference's")
        assert max_abs_err(getattr(parsed, side), getattr(ref, side)) <= tol, side
        assert max_abs_err(getattr(parsed, f"{side}_transition_logits"),
                           getattr(ref, f"{side}_transition_logits")) <= logit_tol, f"{side} transition logits"
        assert max_abs_err(getattr(parsed, f"{side}_logprob"), getattr(ref, f"{side}_logprob")) <= logprob_tol
        assert max_abs_err(getattr(parsed, f"{side}_entropy"), getattr(ref, f"{side}_entropy")) <= logprob_tol
    assert max_abs_err(parsed.logits, ref.logits) <= logit_tol


def assert_encodes_like_reference(runner, params, config, batch, dtype):
    enc_tol, logit_tol, _, _ = tolerances(dtype)
    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    assert premise.dtype == hypothesis.dtype == logits.dtype == np.dtype(dtype)
    assert premise.shape == hypothesis.shape == (batch.size, config.hidden_dim) and logits.shape == (batch.size, 3)
    assert max_abs_err(premise, ref.premise) <= enc_tol
    assert max_abs_err(hypothesis, ref.hypothesis) <= enc_tol
    assert max_abs_err(logits, ref.logits) <= logit_tol


def assert_grads_like_reference(runner, params, config, batch, dtype, transition_weight=0.0):
    tol = tolerances(dtype)[2]
    loss, grads = runner.loss_and_grads(batch)
    ref_loss, ref_grads = reference.loss_and_grads(params, config, batch, transition_weight=transition_weight)
    assert isinstance(loss, float)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    assert {name: g.shape for name, g in grads.items()} == param_shapes(config)
    assert all(g.dtype == np.dtype(dtype) for g in grads.values())
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    return grads


def assert_alone_equals_inside(single, together, i: int, tol: float = F64_TOL) -> None:
    """Pair ``i`` of the batch ``together`` took the decisions of ``single`` (the
    pair parsed alone, its only row), PAD after them, and got its numbers
    (within ``tol``: rounding only)."""
    T = single.premise_transitions.shape[1]
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(getattr(together, f"{side}_transitions")[i, :T],
                                      getattr(single, f"{side}_transitions")[0])
        assert not np.any(getattr(together, f"{side}_transitions")[i, T:])
        assert max_abs_err(getattr(together, side)[i], getattr(single, side)[0]) <= tol
        assert max_abs_err(getattr(together, f"{side}_logprob")[i],
                           getattr(single, f"{side}_logprob")[0]) <= tol
    assert max_abs_err(together.logits[i], single.logits[0]) <= tol


def curve_rel_err(curve, reference) -> float:
    """max over steps of |curve - reference| / |reference|: two training curves of equal length, held to
    shared/compare.py's TRAIN_LOSS_REL_TOL_*."""
    curve = np.asarray(curve, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if curve.shape != reference.shape:
        raise ValueError(f"curves of different lengths: {curve.shape} vs {reference.shape}")
    return float(np.max(np.abs(curve - reference) / np.abs(reference))) if curve.size else 0.0


def write_jsonl(pairs, path) -> None:
    """Pairs written in SNLI's jsonl format (the plain sentences, their binary parses, ``gold_label`` and
    ``pairID``; NO_LABEL as ``-``), for a test to give generated pairs to the commands that read SNLI files.
    Reading the file back gives the same pairs, rows numbered in file order."""
    with open(path, "w", encoding="utf-8") as out:
        for pair in pairs:
            row = {"gold_label": UNLABELED if pair.label == NO_LABEL else LABELS[pair.label], "pairID": pair.pair_id}
            for key, sentence in (("sentence1", pair.premise), ("sentence2", pair.hypothesis)):
                row[key] = " ".join(sentence.tokens)
                row[f"{key}_binary_parse"] = to_bracket(build_tree(sentence.tokens, sentence.transitions))
            out.write(json.dumps(row) + "\n")


def assert_npz_files_identical(first, second) -> None:
    """Two .npz files hold the same entries with the same dtype, shape and bytes."""
    with np.load(first, allow_pickle=False) as a, np.load(second, allow_pickle=False) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            assert a[name].dtype == b[name].dtype, name
            assert a[name].shape == b[name].shape, name
            assert a[name].tobytes() == b[name].tobytes(), name


def steps_with_a_choice(transitions: np.ndarray) -> int:
    """Steps t at which at least one of these sentences <int>[S, T] could
    both SHIFT and REDUCE, replayed from the transitions alone."""
    n = (transitions == SHIFT).sum(axis=1)
    buffered, stacked = n.copy(), np.zeros_like(n)
    steps = 0
    for column in transitions.T:
        acting = column != PAD
        steps += bool(np.any(acting & (buffered > 0) & (stacked >= 2)))
        shift, reduce = column == SHIFT, column == REDUCE
        buffered -= shift
        stacked += shift.astype(stacked.dtype) - reduce
    return steps


def assert_one_host_read_per_choice_step(runner, batch, mode: str, uniforms=None):
    """Define-by-run pays one device-to-host copy per step where some sentence
    chooses (``runner.last_host_syncs``); gold mode and encode pay none.
    Returns the transitions followed <int>[2B, T] and the count, for the
    caller's own checks."""
    parsed = runner.parse(batch, mode, uniforms=uniforms)
    followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
    expected = steps_with_a_choice(followed)
    assert expected > 0
    assert runner.last_host_syncs == expected
    runner.parse(batch, "gold")
    assert runner.last_host_syncs == 0
    runner.parse(batch, mode, uniforms=uniforms)
    runner.encode(batch)
    assert runner.last_host_syncs == 0
    return followed, expected


def guide_prose(text: str) -> str:
    """What a reader reads of a guide page: fenced code, HTML comments (the render blocks' markers, <!-- not
    measured -->) and link targets (a quoted number's folder and query) left out; a link reads as its text."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"<!--.*?-->", "", re.sub(r"\]\([^)]*\)", "]", text), flags=re.S)


def dead_holder(command: str) -> str:
    """A lock file's text naming ``command`` in a process that died holding it (pid 2**22 + 1: above the
    kernel's default pid_max, so no process has it)."""
    return json.dumps({"pid": 2 ** 22 + 1, "command": command, "started": 1700000000}) + "\n"


# ---------------------------------------------------------------------------
# Processes a test starts
# ---------------------------------------------------------------------------

# Not a time budget: every wait of a test is for an event (a file written, a process gone), and this only ends a
# test that would otherwise hang for ever. A loaded machine may take minutes; that is no failure.
HANG = 600


# Starts a test's child: SIGINT's default disposition, then the child's own program in its place (exec keeps the
# disposition). A test process started from a background job (``cmd &``, nohup, some CI runners) ignores SIGINT,
# and its children would inherit that, so a test's Ctrl-C would never reach them. (Not preexec_fn: the test
# process has threads, and Python code between fork and exec may deadlock there.)
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


@contextlib.contextmanager
def started(argv: list[str], **popen) -> Iterator[subprocess.Popen]:
    """A child process for the block: SIGINT as a terminal would deliver it, whatever this process inherited,
    and a process group of its own (its pid), which is killed, with everything the child started, when the
    block ends, however it ends (a failed assertion, a timeout)."""
    process = subprocess.Popen([sys.executable, "-c", _SIGINT_DEFAULT, *argv], start_new_session=True, **popen)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        process.wait()  # reaped


def run(argv: list[str], timeout: float = HANG, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run`` with output captured as text, through :func:`started`: on a timeout, the child and
    everything it started are ended before TimeoutExpired reaches the test."""
    with started(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as process:
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)
