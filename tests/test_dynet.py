"""DyNet-specific checks (the agreement with the reference, the optimizers and
the one graph evaluation per step with a choice live in test_contract.py):
the model has no batch dimension (a sentence alone is the sentence inside a
batch), autobatching changes the speed and not the numbers, the weight
layout of the fused LSTM nodes, the refusals, the timings, dropout and the
rows of the embedding a step writes back."""

from __future__ import annotations

import time

import numpy as np
import pytest

from impl_dynet import convert, graph, train
from impl_dynet.autobatch import SPINN
from impl_dynet.library import dy
from impl_dynet.platform import Platform
from impl_dynet.runner import Runner
from shared import optimizers, parsing
from shared.batching import make_pair_batch
from shared.compare import max_abs_err
from shared.params import init_params
from shared.snli import Pair
from shared.transitions import PAD, REDUCE, SHIFT
from tests.helpers import (assert_alone_equals_inside, head_config, head_params, shaped_sentence, small_config_for,
                           steps_with_a_choice, uniforms)

ROUNDING = 1e-6  # float32 rounding: a batched product against one matrix-vector product at a time


@pytest.fixture(scope="module")
def config(vocab):
    return head_config(len(vocab))


@pytest.fixture(scope="module")
def params(config):
    return head_params(config, seed=6, dtype=np.float32)


# --------------------------------------------------------------------------
# One sentence at a time: no batch dimension, batching by DyNet
# --------------------------------------------------------------------------


@pytest.mark.parametrize("autobatch", [False, True], ids=["unbatched", "autobatched"])
@pytest.mark.parametrize("mode", ["gold", "predicted", "sampled"])
def test_a_sentence_alone_is_the_sentence_inside_a_batch(autobatch, mode, config, params, sample_pairs, vocab):
    """The model code has no batch dimension: a pair parsed alone takes the
    decisions and gets the numbers it gets among seven others with more token
    slots. One by one the graph is the same arithmetic, bit for bit;
    autobatched, DyNet multiplies the pair's rows inside larger matrices,
    which changes only the rounding."""
    runner = Runner(params, config, autobatch=autobatch)
    pairs = sample_pairs[20:28]
    big = make_pair_batch(pairs, vocab, num_tokens=48)
    rows = list(range(20, 28))
    u_big = parsing.uniforms_for(big, rows=rows, seed=2) if mode == "sampled" else None
    together = runner.parse(big, mode, uniforms=u_big)
    for i in (0, 3, 6):
        alone = make_pair_batch([pairs[i]], vocab)
        u = parsing.uniforms_for(alone, rows=[rows[i]], seed=2) if mode == "sampled" else None
        assert_alone_equals_inside(runner.parse(alone, mode, uniforms=u), together, i,
                                   tol=ROUNDING if autobatch else 0.0)


def test_autobatching_changes_the_speed_not_the_numbers(config, params, small_batch):
    """The same weights with autobatching on and off (two graphs in one
    process): the same parses, and every number within float32 rounding."""
    on, off = Runner(params, config, autobatch=True), Runner(params, config, autobatch=False)
    for got, want in zip(on.encode(small_batch), off.encode(small_batch)):
        assert max_abs_err(got, want) <= ROUNDING
    (loss_on, grads_on), (loss_off, grads_off) = on.loss_and_grads(small_batch), off.loss_and_grads(small_batch)
    assert abs(loss_on - loss_off) <= ROUNDING
    for key in grads_on:
        assert max_abs_err(grads_on[key], grads_off[key]) <= ROUNDING * max(1.0, np.abs(grads_off[key]).max()), key
    u = uniforms(small_batch, seed=3)
    parsed_on, parsed_off = on.parse(small_batch, "sampled", uniforms=u), off.parse(small_batch, "sampled", uniforms=u)
    np.testing.assert_array_equal(parsed_on.premise_transitions, parsed_off.premise_transitions)
    assert max_abs_err(parsed_on.premise_logprob, parsed_off.premise_logprob) <= ROUNDING
    assert on.last_host_syncs == off.last_host_syncs > 0


def test_the_parse_returns_the_graph_nodes_the_losses_read(config, params, small_batch):
    """SNLIClassifier.parse returns shared.parsing.SentenceParses whose fields are the graph's own nodes: a root
    per sentence, the followed transitions as NumPy, the head's logits at each non-PAD step, and in sampled mode
    each sentence's log p and entropy as expressions (None for a sentence without a choice), which the
    REINFORCE loss differentiates. Read back (graph.read_parses, with the float64 sums of the host), they are
    the runner's numbers."""
    model = convert.from_canonical(params, train.Model(config, encoder=SPINN))
    batch, u, B = small_batch.arrays(), uniforms(small_batch, seed=3), small_batch.size
    classifier = graph.new_graph(model, batch)
    parses, logits = graph.parse_batch(classifier, batch, "sampled", u)
    assert isinstance(parses, parsing.SentenceParses) and len(parses.encodings) == 2 * B == 2 * len(logits)
    assert all(isinstance(node, dy.Expression) for node in parses.encodings + logits)
    assert parses.transitions.dtype == np.int32 and parses.transitions.shape == (2 * B, small_batch.num_steps)
    assert [len(heads) for heads in parses.transition_logits] == (parses.transitions != PAD).sum(axis=1).tolist()
    chose = np.array([bool(steps) for steps in classifier.spinn.last_choices])
    assert chose.any() and not chose.all()  # some sentences (of one or two words) have no choice
    for sums in (parses.logprob, parses.entropy):
        assert [isinstance(node, dy.Expression) for node in sums] == chose.tolist()
        assert all(node is None for node, chosen in zip(sums, chose) if not chosen)
    read, class_logits = graph.read_parses(classifier, parses, logits)
    in_graph = np.array([node.value() for node, chosen in zip(parses.logprob, chose) if chosen])
    np.testing.assert_allclose(in_graph, read.logprob[chose], rtol=1e-5)  # float32 in DyNet, float64 on the host
    parsed = Runner(params, config).parse(small_batch, "sampled", uniforms=u)
    np.testing.assert_array_equal(read.transitions, np.concatenate([parsed.premise_transitions,
                                                                    parsed.hypothesis_transitions]))
    np.testing.assert_array_equal(read.logprob, np.concatenate([parsed.premise_logprob, parsed.hypothesis_logprob]))
    np.testing.assert_array_equal(class_logits, parsed.logits)


def test_fused_lstm_gates_with_a_list_of_inputs_is_wrong_when_autobatched():
    """Why cells.py concatenates its inputs in a node of its own: DyNet 2.1's
    ``vanilla_lstm_gates_concat`` (inputs as a list) batches only its first
    two arguments, so autobatched it misreads the others; ``vanilla_lstm_gates``
    on one concatenated input does not. (If this starts failing, DyNet has
    fixed it and cells.py may drop its concatenate nodes.)"""
    rng = np.random.default_rng(0)
    collection = dy.ParameterCollection()
    Wx, Wh, b = (collection.parameters_from_numpy(rng.normal(size=shape).astype(np.float32))
                 for shape in ((8, 9), (8, 2), (8,)))
    inputs = [[rng.normal(size=size).astype(np.float32) for size in (3, 3, 3, 2)] for _ in range(4)]

    def gates(autobatch: bool, listed: bool) -> np.ndarray:
        dy.renew_cg(autobatching=autobatch)
        out = []
        for arrays in inputs:  # the tracker's case: three inputs and a state, per example
            x1, x2, x3, h = (dy.inputTensor(a) for a in arrays)
            out.append(dy.vanilla_lstm_gates_concat([x1, x2, x3], h, Wx, Wh, b) if listed
                       else dy.vanilla_lstm_gates(dy.concatenate([x1, x2, x3]), h, Wx, Wh, b))
        return dy.concatenate_cols(out).npvalue()

    assert max_abs_err(gates(True, listed=False), gates(False, listed=False)) <= ROUNDING
    assert max_abs_err(gates(True, listed=True), gates(False, listed=True)) > 0.01


# --------------------------------------------------------------------------
# The weights: canonical <-> DyNet's fused layout
# --------------------------------------------------------------------------


def test_fused_layout_reorders_gates_and_shifts_the_forget_bias(config, params):
    """DyNet's fused gates are i, f, o, g with a built-in +1 on f: the
    tracker's canonical i, f, g, o blocks land reordered, the f block of the
    bias minus 1; Reduce's f2 sits in a node of its own."""
    D, H = config.tracker_dim, config.hidden_dim
    weights = convert.from_canonical(params, train.Model(config, encoder=SPINN)).weights
    arrays = {name: parameter.as_array() for name, parameter in weights.params.items()}
    i, f, g, o = np.split(params["tracker.bias"], 4)
    np.testing.assert_array_equal(arrays["tracker.bias"], np.concatenate([i, f - np.float32(1.0), o, g]))
    kernel = params["tracker.kernel_hidden"]
    np.testing.assert_array_equal(arrays["tracker.kernel_hidden"][3 * D:], kernel[:, 2 * D:3 * D].T)  # g last
    a, i, f1, f2, o = np.split(params["reduce.left.kernel"], 5, axis=1)
    np.testing.assert_array_equal(arrays["reduce.kernel_input"][:, :H], np.concatenate([i, f1, o, a], axis=1).T)
    np.testing.assert_array_equal(arrays["reduce.f2.left.kernel"], f2.T)
    assert [piece.dynet for piece in convert.name_map(config)["reduce.left.kernel"]][-1] == "reduce.f2.left.kernel"
    np.testing.assert_array_equal(weights.embedding.as_array(), params["embed.embedding"])


def test_runner_rebuilt_from_its_weights_continues_bit_for_bit(config, params, small_batch):
    """After Adam steps with dropout, on a trainable embedding (rows written
    back one by one, only those a step moved): DyNet's copy is the canonical
    weights, and a runner built from get_params and optimizer_state takes the
    same next step, dropout masks included (a function of seed and step)."""
    runner = Runner(params, config, dropout=0.3, seed=4)
    runner.set_optimizer("adam", lr=0.01)
    for _ in range(2):
        runner.train_step(small_batch)
    trained, copy = runner.get_params(), convert.to_canonical(runner.model)
    for key, value in trained.items():  # biases: the forget blocks' ±1 may round in the last bit
        np.testing.assert_allclose(copy[key], value, rtol=0, atol=1e-6 if key.endswith("bias") else 0, err_msg=key)
    resumed = Runner(trained, config, dropout=0.3, seed=4)
    resumed.set_optimizer("adam", lr=0.01)
    resumed.load_optimizer_state(runner.optimizer_state())
    for got, want in zip(resumed.encode(small_batch), runner.encode(small_batch)):
        np.testing.assert_array_equal(got, want)
    assert resumed.train_step(small_batch) == runner.train_step(small_batch)
    for key, value in runner.get_params().items():
        np.testing.assert_array_equal(resumed.get_params()[key], value, err_msg=key)
    undropped = Runner(params, config)
    undropped.set_optimizer("adam", lr=0.01)
    dropped = Runner(params, config, dropout=0.3, seed=4)
    dropped.set_optimizer("adam", lr=0.01)
    assert dropped.train_step(small_batch) != undropped.train_step(small_batch)  # the masks act


def test_sgd_moves_only_the_embedding_rows_of_the_batch(vocab, small_batch):
    """The embedding is read and written row by row (DyNet copies element by
    element): plain SGD moves exactly the batch's rows, and DyNet's copy is
    the canonical weights afterwards."""
    config = small_config_for(len(vocab))
    params = init_params(config, seed=2)
    runner = Runner(params, config)
    runner.set_optimizer("sgd", lr=0.5)
    runner.train_step(small_batch)
    moved = np.flatnonzero(np.any(runner.get_params()["embed.embedding"] != params["embed.embedding"], axis=1))
    used = np.unique(np.concatenate([small_batch.premise_tokens, small_batch.hypothesis_tokens]))
    assert set(moved) <= set(used) and len(moved) > 10
    rebuilt = Runner(runner.get_params(), config)
    for got, want in zip(rebuilt.encode(small_batch), runner.encode(small_batch)):
        np.testing.assert_array_equal(got, want)
    assert int(runner.optimizer_state()[optimizers.STEP]) == 1


# --------------------------------------------------------------------------
# Refusals, host reads, timings, platform
# --------------------------------------------------------------------------


def test_float64_gpu_and_unknown_options_are_refused_in_one_line(config, params):
    """DyNet computes in float32 only and its wheel has no CUDA: both are
    listed in ``unsupported`` and refused by the constructor in one line."""
    for kwargs, capability in (({"dtype": "float64"}, "float64"), ({"device": "gpu"}, "gpu")):
        with pytest.raises(NotImplementedError, match=f"^dynet: no {capability}: [^\n]+$"):
            Runner(params, config, **kwargs)
    with pytest.raises(ValueError, match="float32"):
        Runner(params, config, dtype="float16")
    with pytest.raises(TypeError, match="autobatch"):
        Runner(params, config, xla=True)
    with pytest.raises(ValueError, match="unknown family 'masked'"):
        Runner(params, config, family="masked")
    assert not Runner.supports("float64") and not Runner.supports("gpu") and Runner.supports("reinforce")


def test_one_graph_evaluation_per_step_with_a_choice(config, params, vocab, small_batch):
    """Decisions are read once per step where some sentence has a choice, for
    all sentences together; forced steps (one- and two-word sentences) read none."""
    runner = Runner(params, config)
    for mode, u in (("predicted", None), ("sampled", uniforms(small_batch, seed=3))):
        parsed = runner.parse(small_batch, mode, uniforms=u)
        followed = np.concatenate([parsed.premise_transitions, parsed.hypothesis_transitions])
        assert runner.last_host_syncs == steps_with_a_choice(followed) > 0
    words = vocab.words[2:6]
    short = make_pair_batch([Pair(shaped_sentence(words[:1], "left"), shaped_sentence(words[1:3], "right"), 0, "a"),
                             Pair(shaped_sentence(words[2:4], "left"), shaped_sentence(words[:1], "left"), 1, "b")],
                            vocab)
    parsed = runner.parse(short, "predicted")
    assert runner.last_host_syncs == 0
    assert list(parsed.premise_transitions[1]) == [SHIFT, SHIFT, REDUCE]


def test_last_phases_split_each_call(config, params, small_batch):
    """Every call records where its seconds went: building the graph in
    Python, DyNet's evaluation, and for training the gradient copy and the update."""
    runner = Runner(params, config)
    runner.set_optimizer("sgd", lr=0.1)
    calls = {"encode": lambda: runner.encode(small_batch), "loss": lambda: runner.loss_and_grads(small_batch),
             "parse": lambda: runner.parse(small_batch, "predicted"), "train": lambda: runner.train_step(small_batch)}
    for name, call in calls.items():
        began = time.perf_counter()
        call()
        took = time.perf_counter() - began
        phases = runner.last_phases
        assert {"build", "evaluate"} <= set(phases), name
        assert all(value >= 0.0 for value in phases.values()), (name, phases)
        assert phases["evaluate"] > 0.0 and sum(phases.values()) <= took, (name, phases, took)
    assert {"grads", "update"} <= set(runner.last_phases)


def test_platform_names_dynet_and_its_version_without_importing_it():
    """The process settings are read before DyNet is imported (DyNet is
    configured once, on import), so the platform module must not import it."""
    import subprocess
    import sys

    check = "import sys, impl_dynet.platform as p; p.Platform().version(); print('dynet' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    platform = Platform()
    assert platform.name == "dynet" and platform.version().startswith(dy.__version__)
    assert "CPU" in platform.gpu_missing_reason() and not platform.gpu_available()
    with pytest.raises(ValueError, match="no GPU"):
        platform.check_device("gpu")


def test_the_runner_loads_its_family_module_when_it_is_made():
    """Importing the runner loads no family module; making one loads autobatch.py, the only one."""
    import subprocess
    import sys

    check = ("import sys, impl_dynet.runner as r; from shared.params import init_params; "
             "from tests.helpers import small_config_for; before = 'impl_dynet.autobatch' in sys.modules; "
             "c = small_config_for(9); r.Runner(init_params(c, seed=0), c); "
             "print(before, 'impl_dynet.autobatch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"], done.stdout


def test_importing_dynet_keeps_ieee_arithmetic_near_zero():
    """DyNet's fast-math library turns flush-to-zero on when it loads; the
    package restores the process's floating-point environment, so NumPy (and
    every other framework in the process) still computes subnormal numbers."""
    import subprocess
    import sys

    check = ("import numpy as np; tiny = lambda: float(np.float64(1e-308) * np.float64(1e-5)); before = tiny(); "
             "import impl_dynet.library; print(before > 0, tiny() == before)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"], done.stdout


# --------------------------------------------------------------------------
# bench explain: the graph, the groups, the parse view, bad input
# --------------------------------------------------------------------------

TINY = ["--framework", "dynet", "--embed-dim", "4", "--hidden-dim", "4", "--tracker-dim", "2", "--mlp-dim", "4",
        "--mlp-layers", "1", "--shape", "random", "--length", "5"]


def test_explain_counts_the_graph_and_the_groups_autobatching_ran(tmp_path):
    """The loss graph's nodes come from DyNet's own Graphviz text; the groups
    from its profiler in a child process: every node is in one group, and
    there are fewer groups than nodes. PAD steps add no node."""
    from bench.explain.views import parse_args
    from bench.explain.views import explain

    r = explain(parse_args(TINY + ["--out", str(tmp_path)]))["dynet"]
    groups = r["autobatch"]
    assert r["nodes"] == sum(r["node_types"].values()) > 0
    assert groups["nodes"] == r["nodes"] and 0 < groups["groups"] < r["nodes"]
    assert groups["by_operation"]["vanilla_lstm_gates(a, a, a, a, a)"][1] == r["node_types"][
        "vanilla_lstm_gates(a, a, a, a, a)"]
    assert r["padded_nodes"] == r["nodes"] and r["traces"] == 0
    assert r["forward_s"] > 0 and r["forward_unbatched_s"] > 0 and r["backward_s"] > 0
    assert (tmp_path / "dynet_graph.dot").read_text().startswith("digraph G {")


def test_explain_parse_and_bad_input():
    """A decided parse evaluates the graph once per step with a choice; an
    invalid sequence raises from the model's own line, a token outside the
    embedding from DyNet when the graph is evaluated."""
    from bench.explain.views import parse_args
    from bench.explain.views import explain_bad_input
    from bench.explain.views import explain_parse

    parsed = explain_parse(parse_args(TINY + ["--parse"]))["dynet"]
    assert parsed["gold"]["host_syncs"] == 0 < parsed["predicted"]["host_syncs"]
    transitions = explain_bad_input(parse_args(TINY + ["--bad-input", "transitions"]))["dynet"]
    assert transitions["outcome"] == "raised" and transitions["where"].startswith("impl_dynet/autobatch.py, in apply")
    token = explain_bad_input(parse_args(TINY + ["--bad-input", "token"]))["dynet"]
    assert token["outcome"] == "raised" and "Out-of-bounds" in token["error"]  # DyNet's, when the graph runs


def test_pools_too_small_for_a_graph_are_one_clear_error(tmp_path):
    """With autobatching DyNet cannot grow its memory pools for a backward
    pass (they are sized when it starts, impl_dynet/library.py): a training
    step that does not fit is one line naming the setting, not a traceback."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "bench", "train", "--framework", "dynet", "--data", "sample", "--size", "small",
               "--steps", "1", "--batch-size", "64", "--out", str(tmp_path / "run"), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "SPINN_DYNET_MEM": "1"})
    assert done.returncode != 0 and "set SPINN_DYNET_MEM" in done.stderr and "Traceback" not in done.stderr


# What `bench explain` must report of DyNet (tests/test_explain.py calls these).

def check_explain(r: dict, batch: dict) -> None:
    assert r["nodes"] > 0 and r["python_steps"] == batch["num_steps"] and r["traces"] == 0
    # Autobatching ran the nodes in fewer groups than there are nodes.
    assert 0 < r["autobatch"]["groups"] < r["autobatch"]["nodes"] == r["nodes"]
    assert r["forward_s"] > 0 and r["forward_unbatched_s"] > 0 and r["backward_s"] > 0


def check_bad_input(t: dict, k: dict) -> None:
    """An exception from a line of your own code; the token only when evaluated."""
    assert t["outcome"] == "raised" and t["where"].startswith("impl_dynet/autobatch.py, in apply")
    assert "REDUCE with fewer than two items" in t["error"]
    assert k["outcome"] == "raised" and "Out-of-bounds" in k["error"]
