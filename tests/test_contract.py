"""The runner contract (docs/runner-interface.md), written once, for every implementation.

Parametrized over every registered implementation (``bench.frameworks.IMPLEMENTATIONS``,
read at collection time, ids their names), the float64 reference runner, and the throwaway NumPy framework
of tests/toy_framework, registered for its own tests only: a new framework
is tested by registering it. An implementation the tests would build exactly as another (ALIKE: what sets
them apart needs a GPU or a process of its own) is not run twice; a test says why. Every comparison is with the float64 NumPy
reference (shared/reference/), never a framework with itself, with the
tolerances of shared/compare.py. A capability an implementation lists in
``unsupported`` is checked to be refused, never skipped; an implementation
without float64 (DyNet) is checked to refuse it and then runs the float64
checks in float32, with float32's tolerances (``checked_dtype``).

Small models, runners shared within the module where a test only reads
(compiled implementations build each program once per shape), fresh ones
where a test trains. One full-size agreement check per framework, marked slow.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from bench import frameworks
from shared import optimizers, parse_metrics, parsing, reference
from shared.batching import PairBatch, make_pair_batch
from shared.compare import ENCODING_TOL_F32, GRAD_REL_TOL_F32, LOGITS_TOL_F32, grad_rel_errs, max_abs_err
from shared.params import init_params, param_shapes
from shared.snli import Pair
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, check_transitions
from tests import toy_framework
from tests.helpers import (F64_TOL, HEAD_BIAS, HEAD_KERNEL, LOGPROB_TOL_F32, assert_alone_equals_inside,
                           assert_encodes_like_reference, assert_grads_like_reference,
                           assert_one_host_read_per_choice_step, assert_parsed_close, checked_dtype, head_config,
                           head_params, make_runner, small_config_for, options_as_tested, tolerances, uniforms)

TOY = toy_framework.NAME
# The float64 reference runner too: the oracle keeps the contract it checks the others against.
REGISTERED = list(dict.fromkeys([*frameworks.IMPLEMENTATIONS, frameworks.REFERENCE.name]))


def built_as_tested(name: str) -> tuple:
    """What a contract test builds for a registered name: its framework and its runner's options, the tests'
    own over the registry's (tests/helpers.py). An implementation's process environment
    (``Implementation.env``) is not in it: the test process imported its framework once, without it."""
    framework, options = frameworks.resolve(name)
    built = {**options, **options_as_tested(name)}  # None: the runner's default (checked below for ALIKE)
    return framework, tuple(sorted((key, repr(value)) for key, value in built.items() if value is not None))


# A name whose tested build is an earlier name's runs the same runner with the same options: its contract
# tests would run the other's again under another name. The first of each build is tested; the others are
# named in ALIKE, and test_alike_implementations_differ_only_where_a_test_cannot_reach checks why.
def alike(names: list[str]) -> dict[str, str]:
    """Each name whose tested build an earlier name has, mapped to that first name."""
    first: dict[tuple, str] = {}
    return {name: same for name in names if (same := first.setdefault(built_as_tested(name), name)) != name}


ALIKE = alike(REGISTERED)
NAMES = [name for name in REGISTERED if name not in ALIKE] + [TOY]


def work_unit(name: str):
    """One pytest-xdist work unit per framework (conftest.py): an implementation's runners are built once, and
    its framework's other implementations run in the same worker, after it. A program two of them build alike
    then comes from that worker's compilation cache the second time (jax-tail-cond differs from jax in its
    training step only, so every inference program of its tests is jax's: 39 s of CPU time alone, 19 s after jax's)."""
    family = frameworks.resolve(name)[0] if name in REGISTERED else name
    return pytest.mark.xdist_group(f"contract-{family}")


implementation = pytest.mark.parametrize("name", [pytest.param(name, id=name, marks=work_unit(name)) for name in NAMES])
FRAMEWORKS = list(frameworks.FRAMEWORKS)

TRANSITION_WEIGHT = 0.5  # the supervised transition loss's weight in the head model's runners
WEIGHTS = {"reinforce_weight": 0.8, "entropy_weight": 0.05}  # REINFORCE's, not the defaults
BASELINE = -1.2
# Hyperparameters the frameworks' optimizers share (shared/optimizers.py). RMSprop's
# eps is tiny because some libraries add it outside the square root, which the
# shared definition documents as a difference wherever sqrt(v) is near sqrt(eps).
OPTIMIZERS = {"sgd": {"momentum": 0.5, "weight_decay": 0.01}, "adam": {"beta1": 0.8},
              "rmsprop": {"rho": 0.8, "eps": 1e-30}}
# Every optimizer with each framework's first implementation (and the toy's);
# Adam only with the other implementations, which train with their family's
# optimizers (docs/runner-interface.md).
FAMILY_FIRST = {fw.implementations[0].name for fw in frameworks.FRAMEWORKS_BY_NAME.values()} | {TOY}
TRAINING = [pytest.param(name, optimizer, id=f"{optimizer}-{name}", marks=work_unit(name))
            for name in NAMES for optimizer in OPTIMIZERS if optimizer == "adam" or name in FAMILY_FIRST]


def family_float32(*cases):
    """(name, *case) parameters: every case in float64 with every implementation, and the float32 cases with each
    framework's first implementation only. Float64 checks a variant's arithmetic to rounding; what float32
    adds is the framework's casting of weights and inputs (its convert and runner modules, which the variants
    share), while a compiled variant would build each of its programs again in float32. The variants' float32
    still meets the reference in the REINFORCE loss-and-gradient test, the float32 end-to-end tests and the
    full-size agreement check."""
    return [pytest.param(name, *case, id="-".join([*case, name]), marks=work_unit(name))
            for name in NAMES for case in cases if case[0] == "float64" or name in FAMILY_FIRST]


# The REINFORCE step in float64 everywhere, and in float32 too with each
# framework's first implementation: the variants' float32 REINFORCE arithmetic
# is checked by the loss-and-gradient test, and a step builds (for a compiled
# variant: compiles) programs of its own.
REINFORCE_STEPS = family_float32(("float64",), ("float32",))


def test_alike_implementations_differ_only_where_a_test_cannot_reach():
    """The names the contract leaves to another (ALIKE) differ from it only in what a test process cannot
    apply: pytorch-cudagraphs in Inductor's CUDA-graph mode, which needs a GPU and Inductor (the tests
    compile with aot_eager, tests/helpers.py; test_variants_pytorch.py builds it with Inductor), and
    dynet-depth in DyNet's process-wide heuristic, read when DyNet is imported (test_dynet_native.py runs it
    in a process of its own)."""
    assert ALIKE == {"pytorch-cudagraphs": "pytorch-compiled", "dynet-depth": "dynet"}
    for name, same in ALIKE.items():
        assert built_as_tested(name) == built_as_tested(same)
        framework, _ = frameworks.resolve(name)
        defaults = inspect.signature(frameworks.runner_class(framework)).parameters
        for options in ({**frameworks.resolve(n)[1], **options_as_tested(n)} for n in (name, same)):
            assert all(defaults[key].default is None for key, value in options.items() if value is None)
        mine, theirs = frameworks.implementation(name), frameworks.implementation(same)
        differ = {k for k in {**mine.options, **theirs.options} if mine.options.get(k) != theirs.options.get(k)}
        assert differ | set(mine.env) | set(theirs.env) in ({"compile_mode"}, {"SPINN_DYNET_AUTOBATCH"}), name
    assert frameworks.implementation("pytorch-cudagraphs").options["compile_mode"] == "reduce-overhead"
    assert frameworks.implementation("dynet-depth").env == {"SPINN_DYNET_AUTOBATCH": "depth"}


@pytest.fixture(autouse=True)
def registered(request):
    """The implementation under test is in the registry while its test runs
    (the toy framework is registered for its own tests only, so no other test
    module sees it)."""
    name = request.node.callspec.params.get("name") if hasattr(request.node, "callspec") else None
    if name != TOY or TOY in frameworks.IMPLEMENTATIONS:
        yield
        return
    toy_framework.register()
    yield
    frameworks.unregister(TOY)


@pytest.fixture(scope="module")
def runners(device):
    """Runners shared by the tests that only read them: (name, key) -> Runner."""
    cache = {}

    def get(name, key, params, config, dtype="float64", **options):
        if (name, key) not in cache:
            cache[name, key] = make_runner(name, params, config, dtype=dtype, device=device, **options)
        return cache[name, key]

    return get


@pytest.fixture(scope="module")
def plain(small_config):
    """Float64 and float32 weights of the small model (no head)."""
    return {"float64": init_params(small_config, seed=3, dtype=np.float64),
            "float32": init_params(small_config, seed=3, dtype=np.float32)}


@pytest.fixture(scope="module")
def config(vocab):
    """The small model with a transition head."""
    return head_config(len(vocab))


@pytest.fixture(scope="module")
def headed(config):
    """Head weights whose decisions are mixed (test_decisions_are_mixed), and clear float32 rounding."""
    return {"float64": head_params(config, seed=5), "float32": head_params(config, seed=6, dtype=np.float32)}


def plain_runner(runners, name, plain, small_config, dtype):
    return runners(name, f"plain-{dtype}", plain[dtype], small_config, dtype=dtype)


def head_runner(runners, name, headed, config, dtype):
    return runners(name, f"head-{dtype}", headed[dtype], config, dtype=dtype,
                   transition_weight=TRANSITION_WEIGHT, **WEIGHTS)


# An optimizer step in float32 against the shared float64 rule: the rounding of the weights and the update.
STEP_TOL_F32 = 1e-6


def refused(runner, capability: str, call) -> bool:
    """Whether the runner lists ``capability`` as unsupported; if so, ``call``
    must raise the one-line NotImplementedError that names it."""
    if runner.supports(capability):
        return False
    with pytest.raises(NotImplementedError, match=f"no {capability}: "):
        call()
    return True


def with_pads(batch: PairBatch, every: int) -> PairBatch:
    """The batch with a PAD step inserted after every ``every``-th step of
    every row, at other places in premise and hypothesis (docs/spec.md §1 allows PAD anywhere)."""

    def spread(transitions, offset):
        B, T = transitions.shape
        out = np.full((B, T + T // every + 1), PAD, np.int32)
        for b in range(B):
            steps = []
            for t, op in enumerate(transitions[b]):
                if (t + offset + b) % every == 0:
                    steps.append(PAD)
                steps.append(op)
            out[b, :len(steps)] = steps
        return out

    return PairBatch(batch.premise_tokens, spread(batch.premise_transitions, 0), batch.hypothesis_tokens,
                     spread(batch.hypothesis_transitions, 1), batch.labels, batch.pair_ids)


# --------------------------------------------------------------------------
# Gold transitions: encode, gradients, padding, weights
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name,dtype", family_float32(("float64",), ("float32",)))
def test_encode_and_gradients_match_reference(name, dtype, runners, plain, small_config, small_batch):
    dtype = checked_dtype(name, dtype)
    runner = plain_runner(runners, name, plain, small_config, dtype)
    assert_encodes_like_reference(runner, plain[dtype], small_config, small_batch, dtype)
    assert_grads_like_reference(runner, plain[dtype], small_config, small_batch, dtype)


@implementation
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_params_round_trip_bit_identical_and_untouched(name, dtype, runners, plain, small_config, small_batch):
    """get_params gives back the weights it was given, bit for bit, in their
    dtype; encode and loss_and_grads change nothing (twice, the same numbers)."""
    dtype = checked_dtype(name, dtype)
    runner = plain_runner(runners, name, plain, small_config, dtype)
    first = runner.loss_and_grads(small_batch)
    second = runner.loss_and_grads(small_batch)
    assert first[0] == second[0]
    for key in first[1]:
        np.testing.assert_array_equal(first[1][key], second[1][key], err_msg=key)
    out = runner.get_params()
    assert set(out) == set(plain[dtype])
    for key, value in plain[dtype].items():
        assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
        np.testing.assert_array_equal(out[key], value, err_msg=key)
    out["reduce.left.kernel"] += 1.0  # a copy: the runner's weights stay
    np.testing.assert_array_equal(runner.get_params()["reduce.left.kernel"], plain[dtype]["reduce.left.kernel"])


@implementation
def test_without_tracker_or_mlp_matches_reference(name, device, vocab, sample_pairs, edge_pairs):
    """D = 0 (no tracker: Reduce has no third input) and L = 0 (the features
    go straight to the output layer), on one-word and 60-word sentences
    beside real ones, with PAD steps beyond 2N - 1."""
    batch = make_pair_batch(sample_pairs[:4] + edge_pairs, vocab, num_steps=130)
    config = small_config_for(len(vocab), tracker_dim=0, mlp_layers=0)
    dtype = checked_dtype(name)
    params = init_params(config, seed=4, dtype=dtype)
    runner = make_runner(name, params, config, dtype=dtype, device=device)
    assert_encodes_like_reference(runner, params, config, batch, dtype)
    assert_grads_like_reference(runner, params, config, batch, dtype)


@implementation
def test_batch_mates_and_padding_change_nothing(name, runners, plain, small_config, sample_pairs, edge_pairs, vocab):
    """A pair's numbers are the same alone, with more token slots and PAD
    steps (at the end and inside), among other pairs and in another order
    (docs/spec.md §3)."""
    dtype = checked_dtype(name)
    tol = tolerances(dtype)[0]
    runner = plain_runner(runners, name, plain, small_config, dtype)
    pairs = sample_pairs[10:16] + edge_pairs
    together = runner.encode(make_pair_batch(pairs, vocab))
    for k in (0, 7):  # a real sentence; 60 words
        pair = pairs[k]
        width = max(len(pair.premise), len(pair.hypothesis))
        for num_tokens, num_steps in ((width, 2 * width - 1), (width + 7, 2 * width + 20)):
            alone = runner.encode(make_pair_batch([pair], vocab, num_tokens=num_tokens, num_steps=num_steps))
            for got, want in zip(alone, together):
                assert max_abs_err(got[0], want[k]) <= tol, (pair.pair_id, num_tokens, num_steps)
    reversed_batch = runner.encode(make_pair_batch(pairs[::-1], vocab, num_tokens=70, num_steps=150))
    for got, want in zip(reversed_batch, together):
        assert max_abs_err(got[::-1], want) <= tol
    padded = with_pads(make_pair_batch(pairs[:6], vocab), every=4)
    assert np.sum(padded.premise_transitions[:, :20] == PAD) > 0  # PADs inside, not only at the end
    for got, want in zip(runner.encode(padded), together):
        assert max_abs_err(got, want[:6]) <= tol


# --------------------------------------------------------------------------
# Training: optimizers, their state, the supervised transition loss
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name,optimizer", TRAINING)
def test_training_steps_and_optimizer_state_match_reference(name, optimizer, device, config, headed, small_batch):
    """Two steps of the framework's own optimizer on the supervised loss move
    every trainable weight, the head's included, as the shared NumPy
    optimizer does, to the same state in the shared layout; the frozen
    embedding stays. Adam's state, loaded into a fresh runner, continues
    exactly as the first runner does; the others' zeros, loaded, are the
    state the next step starts from; that step at a new learning rate. A
    missing entry is named. (The rates are exact in float32: some optimizers
    keep them in float32. The rate changes only where the state restarts:
    Keras keeps SGD's momentum as -lr x b, exact while lr is constant,
    impl_tensorflow/train.py.)"""
    dtype = checked_dtype(name)
    # In float32 a step is held against the shared rule applied to the runner's own gradient (which
    # test_supervised_loss_gradients holds against the reference's): a float32 rounding can flip the
    # sign of a near-zero gradient, and Adam and RMSprop turn that into a whole step.
    step_tol = 1e-10 if dtype == "float64" else STEP_TOL_F32
    params, frozen = headed[dtype], ("embed.embedding",)
    hyper = optimizers.resolve(optimizer, dict(OPTIMIZERS[optimizer]))
    state = optimizers.zero_state(optimizer, hyper, param_shapes(config), frozen, dtype=np.float64)

    def fresh(weights):
        runner = make_runner(name, weights, config, dtype=dtype, device=device,
                             transition_weight=TRANSITION_WEIGHT)
        runner.set_optimizer(optimizer, lr=0.125, frozen=frozen, **OPTIMIZERS[optimizer])
        return runner

    runner, expected = fresh(params), dict(params)
    for step in range(2):
        ref_loss, ref_grads = reference.loss_and_grads(expected, config, small_batch,
                                                       transition_weight=TRANSITION_WEIGHT)
        loss_tol = 1e-10 if dtype == "float64" else GRAD_REL_TOL_F32 * max(1.0, abs(ref_loss))
        if dtype != "float64":
            ref_grads = runner.loss_and_grads(small_batch)[1]
        loss = runner.train_step(small_batch)
        assert isinstance(loss, float) and abs(loss - ref_loss) <= loss_tol
        expected = optimizers.apply(optimizer, hyper, 0.125, expected, ref_grads, state, frozen)
        trained = runner.get_params()
        for key in params:
            assert max_abs_err(trained[key], expected[key]) <= step_tol, (step, key)
    np.testing.assert_array_equal(trained["embed.embedding"], params["embed.embedding"])
    assert max_abs_err(trained[HEAD_KERNEL], params[HEAD_KERNEL]) > 1e-6  # the head trained too
    assert runner.steps == 2
    saved = runner.optimizer_state()
    assert set(saved) == set(state) and int(saved[optimizers.STEP]) == 2
    for key in state:
        assert max_abs_err(saved[key], state[key]) <= step_tol, key

    if optimizer == "adam":  # into a fresh runner (a second build: once per implementation)
        restored = fresh(trained)
        restored.load_optimizer_state(saved)
        assert restored.steps == 2
        assert restored.train_step(small_batch) == runner.train_step(small_batch)
        for key, value in runner.get_params().items():
            np.testing.assert_array_equal(restored.get_params()[key], value, err_msg=key)
    else:  # zeros into the same runner: the next step starts from them
        restored = runner
        zeros = optimizers.zero_state(optimizer, hyper, param_shapes(config), frozen, dtype=np.float64)
        runner.load_optimizer_state(zeros)
        runner.set_learning_rate(0.0625)
        assert runner.steps == 0 and all(not np.any(value) for value in runner.optimizer_state().values())
        _, ref_grads = reference.loss_and_grads(trained, config, small_batch, transition_weight=TRANSITION_WEIGHT)
        if dtype != "float64":
            ref_grads = runner.loss_and_grads(small_batch)[1]
        runner.train_step(small_batch)
        expected = optimizers.apply(optimizer, hyper, 0.0625, trained, ref_grads, zeros, frozen)
        for key, value in runner.get_params().items():
            assert max_abs_err(value, expected[key]) <= step_tol, key
    slot = next(key for key in saved if key != optimizers.STEP)
    with pytest.raises(ValueError, match=re.escape(slot)):  # a missing entry is named
        restored.load_optimizer_state({key: value for key, value in saved.items() if key != slot})


@implementation
def test_float64_end_to_end_from_a_float32_file(name, device, small_config, small_batch):
    """A float32 parameter file run in float64: every output is float64, three SGD steps are the reference's
    three steps, and the trained weights come back in float64 (an implementation without float64 refuses it
    and runs the same in float32, with float32's tolerances)."""
    dtype = checked_dtype(name)
    # float32 (DyNet): three steps of lr 0.3 from the float32 runner's own rounding, held loosely.
    loss_tol, weight_tol = (1e-12, 1e-12) if dtype == "float64" else (1e-5, 1e-4)
    params = init_params(small_config, seed=6, dtype=np.float32)
    runner = make_runner(name, params, small_config, dtype=dtype, device=device)
    assert all(out.dtype == np.dtype(dtype) for out in runner.encode(small_batch))
    loss, grads = runner.loss_and_grads(small_batch)
    assert isinstance(loss, float) and all(g.dtype == np.dtype(dtype) for g in grads.values())
    expected, lr, hyper = {k: v.astype(np.float64) for k, v in params.items()}, 0.3, optimizers.resolve("sgd", {})
    state = optimizers.zero_state("sgd", hyper, param_shapes(small_config), (), dtype=np.float64)
    runner.set_optimizer("sgd", lr=lr)
    for _ in range(3):
        ref_loss, ref_grads = reference.loss_and_grads(expected, small_config, small_batch)
        assert abs(runner.train_step(small_batch) - ref_loss) <= loss_tol * max(1.0, abs(ref_loss))
        expected = optimizers.apply("sgd", hyper, lr, expected, ref_grads, state)
    trained = runner.get_params()
    for key, value in expected.items():
        assert trained[key].dtype == np.dtype(dtype), key
        assert max_abs_err(trained[key], value) <= weight_tol, key


@implementation
def test_float32_training_reduces_the_loss(name, device, small_config, small_batch):
    """Adam in float32, from a float32 parameter file: the first loss is the
    reference's, and five steps lower it (the reference's go to 0.85 of it).
    (The reference itself refuses float32, and takes the steps in float64.)"""
    dtype = checked_dtype(name, "float32")
    params = init_params(small_config, seed=6, dtype=np.dtype(dtype))
    runner = make_runner(name, params, small_config, dtype=dtype, device=device)
    runner.set_optimizer("adam", lr=0.05)
    losses = [runner.train_step(small_batch) for _ in range(5)]
    assert abs(losses[0] - reference.loss(params, small_config, small_batch)) <= 1e-5
    assert losses[-1] < 0.9 * losses[0], losses
    assert all(value.dtype == np.dtype(dtype) for value in runner.get_params().values())


# --------------------------------------------------------------------------
# What the benchmark times: pytorch-compiled's Inductor code
# --------------------------------------------------------------------------


# A work unit of its own (conftest.py), not the contract-pytorch group: it shares no runner or program with the
# group's tests (Inductor's cache is on disk, for every worker), so xdist can start it early on any worker.
def test_pytorch_compiled_on_inductor_as_the_benchmark_builds_it(device, vocab, sample_pairs):
    """The tests above run pytorch-compiled on aot_eager (TEST_OPTIONS, tests/helpers.py); the benchmark times the
    code Inductor generates. Here the registry's own build (no test options: Inductor, its default mode, one graph
    per shape), in float32 as the benchmark times it, on one tiny shape: both programs the benchmark times, encode
    and the training step, against the float64 reference, and what compiling them cost. A second batch of the shape
    compiles nothing, and Dynamo never falls back to Python. (The steps are SGD's, not the benchmark's Adam: the
    optimizer runs eagerly, outside the compiled step, and Adam would make a whole step of a float32 rounding that
    flips the sign of a near-zero gradient.)"""
    name = "pytorch-compiled"
    assert frameworks.resolve(name) == ("pytorch", {"family": "masked", "compile": True})
    built = frameworks.implementation(name)
    assert not built.timed_options and not built.env  # nothing else the benchmark's worker adds
    config = small_config_for(len(vocab), tracker_dim=3, mlp_layers=1)
    params = init_params(config, seed=12, dtype=np.float32)
    runner = frameworks.make_runner(name, params, config, dtype="float32", device=device)
    assert runner.compile_stats().traces == 0
    short = [p for p in sample_pairs if max(len(p.premise), len(p.hypothesis)) <= 8 and p.label >= 0]
    first, second = (make_pair_batch(short[k:k + 2], vocab, num_tokens=8) for k in (0, 2))
    shape = (2, 8, 15)  # (B, N, T) of both batches
    for batch in (first, second):
        assert_encodes_like_reference(runner, params, config, batch, "float32")
        if batch is first:
            after_first = runner.compile_stats("encode")
    after_second = runner.compile_stats("encode")
    assert after_first.traces >= 1 and after_first.compile_s > 0 and after_first.graph_breaks == 0
    assert after_first.shapes == [("encode", *shape)]
    assert after_second.since(after_first).traces == 0  # the same shape: nothing compiled again

    lr, hyper = 0.5, optimizers.resolve("sgd", {})
    state = optimizers.zero_state("sgd", hyper, param_shapes(config), (), dtype=np.float64)
    runner.set_optimizer("sgd", lr=lr)
    expected, tol = {key: value.astype(np.float64) for key, value in params.items()}, dict.fromkeys(params, 0.0)
    for batch in (first, second, first):  # each loss at the weights the steps before it left
        ref_loss, ref_grads = reference.loss_and_grads(expected, config, batch)
        assert abs(runner.train_step(batch) - ref_loss) <= LOGITS_TOL_F32 * max(1.0, abs(ref_loss))
        expected = optimizers.apply("sgd", hyper, lr, expected, ref_grads, state)
        trained = runner.get_params()
        for key, value in expected.items():  # the gradient's float32 error, times the rate, step after step
            tol[key] += STEP_TOL_F32 + lr * GRAD_REL_TOL_F32 * float(np.max(np.abs(ref_grads[key])))
            assert max_abs_err(trained[key], value) <= tol[key], key
    stats = runner.compile_stats()
    assert stats.compile_s > after_second.compile_s and stats.graph_breaks == 0
    assert stats.shapes == [("encode", *shape), ("train_step", *shape)]


@pytest.mark.parametrize("name,dtype", family_float32(("float64",), ("float32",)))
def test_supervised_loss_gradients(name, dtype, runners, config, headed, small_batch):
    dtype = checked_dtype(name, dtype)
    runner = head_runner(runners, name, headed, config, dtype)
    grads = assert_grads_like_reference(runner, headed[dtype], config, small_batch, dtype,
                                        transition_weight=TRANSITION_WEIGHT)
    assert np.any(grads[HEAD_KERNEL] != 0)


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def test_decisions_are_mixed(config, headed, small_batch):
    """The head weights used here make the reference choose both actions and
    leave the gold parse: otherwise the parse tests would prove little."""
    ref = reference.parse(headed["float64"], config, small_batch, "predicted")
    followed = np.concatenate([ref.premise_transitions, ref.hypothesis_transitions])
    gold = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
    assert parse_metrics.parse_agreement(followed, gold) < 0.9
    first_reduce = [list(row).index(REDUCE) for row in followed if REDUCE in row]
    assert len(set(first_reduce)) > 2  # sentences reduce first at different steps


@pytest.mark.parametrize("name,dtype,mode", family_float32(("float64", "gold"), ("float64", "predicted"),
                                                             ("float64", "sampled"), ("float32", "predicted"),
                                                             ("float32", "sampled")))
def test_parse_matches_reference(name, dtype, mode, runners, config, headed, small_batch):
    """The reference's decisions (the same uniforms in sampled mode), valid
    trees, and its numbers within the dtype's tolerances."""
    dtype = checked_dtype(name, dtype)
    runner = head_runner(runners, name, headed, config, dtype)
    u = uniforms(small_batch, seed=3) if mode == "sampled" else None
    if refused(runner, f"{mode} parse", lambda: runner.parse(small_batch, mode, uniforms=u)):
        return
    parsed = runner.parse(small_batch, mode, uniforms=u)
    ref = reference.parse(headed[dtype], config, small_batch, mode, uniforms=u)
    enc_tol, logit_tol, _, logprob_tol = tolerances(dtype)
    assert parsed.premise.dtype == np.dtype(dtype)
    assert_parsed_close(parsed, ref, tol=enc_tol, logit_tol=logit_tol, logprob_tol=logprob_tol)
    gold = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
    followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
    for row, n in zip(followed, parsing.sentence_lengths(gold)):
        steps = [int(op) for op in row if op != PAD]
        assert len(steps) == 2 * n - 1 and all(op == PAD for op in row[2 * n - 1:])
        check_transitions(steps, int(n))
    if mode != "gold":  # the model's decisions, not the data's
        assert parse_metrics.parse_agreement(followed, gold) < 0.9
    if mode == "sampled":
        assert np.all(parsed.premise_logprob < 0) and np.all(parsed.premise_entropy > 0)


@implementation
@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_parse_alone_equals_inside_a_batch(name, mode, runners, config, headed, sample_pairs, vocab):
    """A pair's decisions and uniform numbers follow its row, not its batch:
    alone, or among other pairs with extra token slots and PAD steps, it
    takes the same decisions and gets the same numbers."""
    dtype = checked_dtype(name)
    runner = head_runner(runners, name, headed, config, dtype)
    pairs = sample_pairs[20:28]
    big = make_pair_batch(pairs, vocab, num_tokens=48)
    u_big = parsing.uniforms_for(big, rows=list(range(20, 28)), seed=2) if mode == "sampled" else None
    if refused(runner, f"{mode} parse", lambda: runner.parse(big, mode, uniforms=u_big)):
        return
    together = runner.parse(big, mode, uniforms=u_big)
    for i in (0, 5):
        alone = make_pair_batch([pairs[i]], vocab)
        u = parsing.uniforms_for(alone, rows=[20 + i], seed=2) if mode == "sampled" else None
        assert_alone_equals_inside(runner.parse(alone, mode, uniforms=u), together, i, tol=tolerances(dtype)[0])


@implementation
def test_parse_edge_cases_and_ties(name, device, vocab, edge_pairs):
    """One-word, two-word and 60-word sentences; then a head whose logits tie
    at every step (kernel and bias zero): a tie SHIFTs, so every sentence
    shifts all its words, then reduces (a right-branching tree)."""
    config = head_config(len(vocab))
    two = Pair(Sentence(("a", "b"), (SHIFT, SHIFT, REDUCE)), edge_pairs[0].hypothesis, 0, "two-one")
    batch = make_pair_batch(list(edge_pairs) + [two], vocab)
    dtype = checked_dtype(name)
    enc_tol, logit_tol, _, logprob_tol = tolerances(dtype)
    params = head_params(config, seed=8, dtype=dtype)
    runner = make_runner(name, params, config, dtype=dtype, device=device)
    for mode in ("predicted", "sampled"):
        u = uniforms(batch, seed=4) if mode == "sampled" else None
        if refused(runner, f"{mode} parse", lambda: runner.parse(batch, mode, uniforms=u)):
            continue
        assert_parsed_close(runner.parse(batch, mode, uniforms=u),
                            reference.parse(params, config, batch, mode, uniforms=u),
                            tol=enc_tol, logit_tol=logit_tol, logprob_tol=logprob_tol)
    if not runner.supports("predicted parse"):
        return
    tied = dict(params)
    tied[HEAD_KERNEL] = np.zeros_like(params[HEAD_KERNEL])
    tied[HEAD_BIAS] = np.zeros_like(params[HEAD_BIAS])
    parsed = make_runner(name, tied, config, dtype=dtype, device=device).parse(batch, "predicted")
    for side in ("premise", "hypothesis"):
        lengths = parsing.sentence_lengths(getattr(batch, f"{side}_transitions"))
        for row, n in zip(getattr(parsed, f"{side}_transitions"), lengths):
            assert list(row[:2 * n - 1]) == [SHIFT] * n + [REDUCE] * (n - 1)


@implementation
@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_host_reads_of_decisions(name, mode, runners, config, headed, small_batch):
    """Define-by-run code (``reads_decisions_on_host``) reads one decision
    back per step where some sentence chooses, and counts it in
    ``last_host_syncs``; code that keeps the decision on the device reads none."""
    runner = head_runner(runners, name, headed, config, checked_dtype(name))
    u = uniforms(small_batch) if mode == "sampled" else None
    if refused(runner, f"{mode} parse", lambda: runner.parse(small_batch, mode, uniforms=u)):
        return
    if runner.reads_decisions_on_host:
        followed, expected = assert_one_host_read_per_choice_step(runner, small_batch, mode, u)
        assert expected < int((followed != PAD).sum(axis=1).max()) - 2  # not simply one per step
    else:
        runner.parse(small_batch, mode, uniforms=u)
        assert runner.last_host_syncs == 0


# --------------------------------------------------------------------------
# REINFORCE (docs/spec.md §7)
# --------------------------------------------------------------------------


@implementation
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_reinforce_loss_and_gradients_match_reference(name, dtype, runners, config, headed, small_batch):
    dtype = checked_dtype(name, dtype)
    runner = head_runner(runners, name, headed, config, dtype)
    u = uniforms(small_batch, seed=3)
    if refused(runner, "reinforce", lambda: runner.reinforce_loss_and_grads(small_batch, u, BASELINE)):
        return
    tol = tolerances(dtype)[2]
    loss, grads, rewards = runner.reinforce_loss_and_grads(small_batch, u, BASELINE)
    ref_loss, ref_grads, ref_rewards = reference.reinforce_loss_and_grads(headed[dtype], config, small_batch, u,
                                                                          BASELINE, **WEIGHTS)
    assert abs(loss - ref_loss) <= tol * max(1.0, abs(ref_loss))
    assert max_abs_err(rewards, ref_rewards) <= tol * max(1.0, float(np.max(np.abs(ref_rewards))))
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, f"{worst}: relative error {errors[worst]:.2e}"
    assert np.any(grads[HEAD_KERNEL] != 0)  # the score term reaches the head


@pytest.mark.parametrize("name,dtype", REINFORCE_STEPS)
def test_reinforce_step_matches_reference(name, dtype, device, config, headed, small_batch):
    """One SGD step on the REINFORCE loss: the record's trajectories are the
    reference's from the same uniforms, its logprob and entropy within
    rounding, and the update the reference's gradient step."""
    requested, dtype = dtype, checked_dtype(name, dtype)
    params = headed[dtype]
    runner = make_runner(name, params, config, dtype=dtype, device=device, **WEIGHTS)
    runner.set_optimizer("sgd", lr=0.1)
    u = uniforms(small_batch, seed=7)
    if refused(runner, "reinforce", lambda: runner.reinforce_step(small_batch, u, BASELINE)):
        return
    record = runner.reinforce_step(small_batch, u, BASELINE)
    ref_loss, ref_grads, ref_rewards = reference.reinforce_loss_and_grads(params, config, small_batch, u, BASELINE,
                                                                          **WEIGHTS)
    ref = reference.parse(params, config, small_batch, "sampled", uniforms=u)
    _, _, grad_tol, logprob_tol = tolerances(dtype)
    for side in ("premise", "hypothesis"):
        np.testing.assert_array_equal(record[f"{side}_transitions"], getattr(ref, f"{side}_transitions"),
                                      err_msg=f"{side}: a different trajectory from the same uniforms")
    assert max_abs_err(record["logprobs"], ref.premise_logprob + ref.hypothesis_logprob) <= logprob_tol
    assert max_abs_err(record["entropies"], ref.premise_entropy + ref.hypothesis_entropy) <= logprob_tol
    assert 0.0 < record["choice_reduce_share"] < 1.0
    assert runner.steps == 1
    if dtype == "float64":
        assert abs(record["loss"] - ref_loss) <= F64_TOL
        assert abs(record["reward"] - ref_rewards.mean()) <= F64_TOL
        updated = runner.get_params()
        for key, value in params.items():
            assert max_abs_err(updated[key], value - 0.1 * ref_grads[key]) <= 1e-10, key
    elif requested == "float64":  # checked in float32 instead: the same checks, float32's tolerances
        assert abs(record["loss"] - ref_loss) <= grad_tol * max(1.0, abs(ref_loss))
        assert abs(record["reward"] - ref_rewards.mean()) <= grad_tol * max(1.0, abs(ref_rewards.mean()))
        updated = runner.get_params()
        for key, value in params.items():
            tol = STEP_TOL_F32 + 0.1 * grad_tol * float(np.max(np.abs(ref_grads[key])))
            assert max_abs_err(updated[key], value - 0.1 * ref_grads[key]) <= tol, key


@implementation
def test_reinforce_forced_steps_contribute_nothing(name, device, vocab, config):
    """Sentences of one and two words have no choice step: logprob and
    entropy are zero, the head gets no gradient, and the REINFORCE loss and
    gradient are the plain cross-entropy's, whatever the baseline and weights
    (and, with each framework's first implementation, a step records no
    logprob or entropy)."""
    words = vocab.words[2:6]
    one = Sentence((words[0],), (SHIFT,))
    two = Sentence((words[1], words[2]), (SHIFT, SHIFT, REDUCE))
    batch = make_pair_batch([Pair(one, two, 0, "a"), Pair(two, two, 2, "b"), Pair(two, one, 1, "c")], vocab)
    dtype = checked_dtype(name)
    grad_tol = tolerances(dtype)[2]
    params = head_params(config, seed=12, dtype=dtype)
    u = uniforms(batch, seed=5)
    runner = make_runner(name, params, config, dtype=dtype, device=device, **WEIGHTS)
    if refused(runner, "reinforce", lambda: runner.reinforce_loss_and_grads(batch, u, baseline=3.0)):
        return
    loss, grads, _ = runner.reinforce_loss_and_grads(batch, u, baseline=3.0)
    plain_loss, plain_grads = reference.loss_and_grads(params, config, batch)
    assert abs(loss - plain_loss) <= (F64_TOL if dtype == "float64" else grad_tol * max(1.0, abs(plain_loss)))
    for key in (HEAD_KERNEL, HEAD_BIAS):
        np.testing.assert_array_equal(grads[key], 0.0, err_msg=key)
    assert max(grad_rel_errs(grads, plain_grads).values()) <= grad_tol
    if name not in FAMILY_FIRST:
        return  # a variant's step: its family's optimizer on this loss (test_reinforce_step_matches_reference)
    runner.set_optimizer("sgd", lr=0.0)
    record = runner.reinforce_step(batch, u, baseline=-3.0)
    np.testing.assert_array_equal(record["logprobs"], 0.0)
    np.testing.assert_array_equal(record["entropies"], 0.0)


@implementation
def test_reinforce_baseline_changes_only_the_score_term(name, runners, config, headed, small_batch):
    """A new b leaves the samples, the rewards and the classifier's gradients
    as they were, moves the loss by reinforce_weight x Δb x mean logprob, and
    moves the head's gradients as the reference's do."""
    dtype = checked_dtype(name)
    enc_tol, _, grad_tol, _ = tolerances(dtype)
    params = headed[dtype]
    runner = head_runner(runners, name, headed, config, dtype)
    u = uniforms(small_batch, seed=2)
    if refused(runner, "reinforce", lambda: runner.reinforce_loss_and_grads(small_batch, u, 0.0)):
        return
    loss_a, grads_a, rewards_a = runner.reinforce_loss_and_grads(small_batch, u, 0.0)
    loss_b, grads_b, rewards_b = runner.reinforce_loss_and_grads(small_batch, u, -2.5)
    ref = reference.parse(params, config, small_batch, "sampled", uniforms=u)
    mean_logprob = float(np.mean(ref.premise_logprob + ref.hypothesis_logprob))
    assert max_abs_err(rewards_a, rewards_b) == 0.0
    assert abs((loss_b - loss_a) - WEIGHTS["reinforce_weight"] * (-2.5) * mean_logprob) <= (
        1e-10 if dtype == "float64" else grad_tol * max(1.0, abs(loss_a)))
    for key in grads_a:
        if key.startswith(("mlp.", "output.")):  # the classifier does not touch the parse
            assert max_abs_err(grads_a[key], grads_b[key]) <= enc_tol, key
    _, ref_a, _ = reference.reinforce_loss_and_grads(params, config, small_batch, u, 0.0, **WEIGHTS)
    _, ref_b, _ = reference.reinforce_loss_and_grads(params, config, small_batch, u, -2.5, **WEIGHTS)
    head = (HEAD_KERNEL, HEAD_BIAS)
    moved = {key: grads_b[key] - grads_a[key] for key in head}
    assert np.any(moved[HEAD_KERNEL] != 0)
    errors = grad_rel_errs(moved, {key: ref_b[key] - ref_a[key] for key in head})
    assert max(errors.values()) <= grad_tol


# --------------------------------------------------------------------------
# Bad input: one clear error, the same in every implementation
# --------------------------------------------------------------------------


def corrupted(batch: PairBatch, **arrays) -> PairBatch:
    return PairBatch(**{**batch.to_dict(), **arrays}, pair_ids=batch.pair_ids)


@implementation
def test_bad_input_is_refused(name, runners, plain, small_config, config, headed, small_batch):
    """Each bad argument or batch is a ValueError that says what is wrong
    (the messages' wording is the implementations' own, their key words are shared)."""
    dtype = checked_dtype(name)
    runner = head_runner(runners, name, headed, config, dtype)
    u = uniforms(small_batch)
    with pytest.raises(ValueError, match="mode"):
        runner.parse(small_batch, "guessed")
    with pytest.raises(ValueError, match="uniform"):
        runner.parse(small_batch, "sampled")
    with pytest.raises(ValueError, match="premise uniforms: expected shape"):
        runner.parse(small_batch, "sampled", uniforms=(u[0][:, :-1], u[1]))
    for mode in ("gold", "predicted"):
        with pytest.raises(ValueError, match="sampled mode only"):
            runner.parse(small_batch, mode, uniforms=u)
    empty = small_batch.hypothesis_transitions.copy()
    empty[3] = PAD  # a row without any SHIFT: no sentence to parse
    with pytest.raises(ValueError, match="hypothesis.*no SHIFT"):
        runner.parse(corrupted(small_batch, hypothesis_transitions=empty), "predicted")

    transitions = small_batch.premise_transitions.copy()
    transitions[0, :3] = (SHIFT, REDUCE, SHIFT)
    with pytest.raises(ValueError, match="REDUCE with fewer than two items"):
        runner.encode(corrupted(small_batch, premise_transitions=transitions))
    transitions = small_batch.premise_transitions.copy()
    transitions[2] = PAD
    transitions[2, :2] = SHIFT  # two items left on the stack
    with pytest.raises(ValueError, match="2 SHIFTs"):
        runner.encode(corrupted(small_batch, premise_transitions=transitions))
    transitions = small_batch.premise_transitions.copy()
    transitions[1, 0] = 7
    with pytest.raises(ValueError, match="unknown transition code 7"):
        runner.loss_and_grads(corrupted(small_batch, premise_transitions=transitions))
    tokens = small_batch.hypothesis_tokens.copy()
    tokens[0, 0] = config.vocab_size
    with pytest.raises(ValueError, match="outside the vocabulary"):
        runner.encode(corrupted(small_batch, hypothesis_tokens=tokens))
    labels = small_batch.labels.copy()
    labels[0] = -1
    with pytest.raises(ValueError, match="labels"):
        runner.loss_and_grads(corrupted(small_batch, labels=labels))

    if runner.supports("reinforce"):
        with pytest.raises(ValueError, match="uniforms"):
            runner.reinforce_loss_and_grads(small_batch, None, 0.0)
        with pytest.raises(ValueError, match="baseline"):
            runner.reinforce_loss_and_grads(small_batch, u, float("nan"))

    no_head = plain_runner(runners, name, plain, small_config, dtype)
    with pytest.raises(ValueError, match=HEAD_KERNEL):
        no_head.parse(small_batch, "predicted")
    if no_head.supports("reinforce"):
        with pytest.raises(ValueError, match=HEAD_KERNEL):
            no_head.reinforce_loss_and_grads(small_batch, u, 0.0)
    for weights in ({"transition_weight": 1.0}, {"entropy_weight": 0.1}):
        with pytest.raises(ValueError, match=HEAD_KERNEL):
            make_runner(name, plain[dtype], small_config, dtype=dtype, **weights)
    for weights in ({"transition_weight": -1.0}, {"reinforce_weight": -1.0}, {"entropy_weight": float("nan")}):
        with pytest.raises(ValueError, match="weight"):
            make_runner(name, headed[dtype], config, dtype=dtype, **weights)
    with pytest.raises(ValueError, match="dropout"):
        make_runner(name, plain[dtype], small_config, dtype=dtype, dropout=1.0)


@implementation
def test_training_needs_an_optimizer(name, runners, config, headed, small_batch):
    """Every training method before set_optimizer: one RuntimeError, nothing changed."""
    runner = head_runner(runners, name, headed, config, checked_dtype(name))
    for call in (lambda: runner.train_step(small_batch), lambda: runner.set_learning_rate(0.1),
                 runner.optimizer_state, lambda: runner.load_optimizer_state({})):
        with pytest.raises(RuntimeError, match="call set_optimizer first"):
            call()
    if runner.supports("reinforce"):
        with pytest.raises(RuntimeError, match="call set_optimizer first"):
            runner.reinforce_step(small_batch, uniforms(small_batch), 0.0)
    with pytest.raises(ValueError, match="adagrad"):
        runner.set_optimizer("adagrad", lr=0.1)
    assert runner.steps == 0


# --------------------------------------------------------------------------
# Full size: one agreement check per framework (slow)
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
def test_full_size_float32_agreement(framework, device, full_params, full_config, full_size_batches,
                                     full_reference):
    """The full-size model (H=300, D=64, M=1024) on a batch of every token width, in float32."""
    runner = frameworks.make_runner(framework, full_params, full_config, dtype="float32", device=device)
    enc_err = logit_err = 0.0
    for batch, ref in zip(full_size_batches, full_reference):
        premise, hypothesis, logits = runner.encode(batch)
        assert premise.dtype == np.float32 and logits.shape == (batch.size, 3)
        enc_err = max(enc_err, max_abs_err(premise, ref.premise), max_abs_err(hypothesis, ref.hypothesis))
        logit_err = max(logit_err, max_abs_err(logits, ref.logits))
    print(f"{framework}: max abs err encodings {enc_err:.2e}, logits {logit_err:.2e}")
    assert enc_err <= ENCODING_TOL_F32
    assert logit_err <= LOGITS_TOL_F32
