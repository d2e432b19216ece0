"""``Runner.dispatches``: the operations each framework dispatches for one call (docs/spec.md §6, "the count that
explains the overhead"), on a tiny model.

What must hold: every counting runner counts something, more for longer sentences, and at least as much for a
training step as for inference; the count follows each loop as it runs (a graph's while loop and XLA's once per
step with work, a scan and PyTorch's masked loop over every padded step too, the lists' Python loop over the steps
with work); a compiled PyTorch step is called once per step; DyNet's count is what ``bench explain`` reports for the
same batch; a runner that does not count says None.
"""

from __future__ import annotations

import pytest

from bench.explain.views import explain, parse_args, setup
from shared.batching import make_pair_batch, sentences_transitions
from shared.explaining import steps_with_work
from shared.params import init_params
from tests.helpers import head_config, make_runner
from tests.toy_framework.runner import Runner as ToyRunner

# The implementations counted here: each framework's runtimes (eager, a traced graph, XLA, autobatching).
COUNTED = ("pytorch", "pytorch-masked", "pytorch-compiled", "tensorflow", "tensorflow-xla", "tensorflow-eager",
           "jax", "dynet", "dynet-unbatched")
# How each loop runs on a batch padded with more steps than it has work for: "stops" after the batch's last step
# with work (the same count), or "runs" every padded step (more).
PADDED = {"pytorch": "stops", "pytorch-masked": "runs", "tensorflow": "stops", "tensorflow-xla": "stops",
          "jax": "runs"}
EXTRA_TOKENS = 4  # the padded batch: as many more token slots (2 x 4 more steps)


@pytest.fixture(scope="module")
def model(vocab):
    config = head_config(len(vocab))
    return config, init_params(config, seed=0)


@pytest.fixture(scope="module")
def batches(sample_pairs, vocab):
    """Four pairs of the shortest sentences, four of the longest, and the short ones padded wider."""
    by_length = sorted(sample_pairs, key=lambda p: len(p.premise) + len(p.hypothesis))
    short = make_pair_batch(by_length[:4], vocab)
    return {"short": short, "long": make_pair_batch(by_length[-4:], vocab),
            "padded": make_pair_batch(by_length[:4], vocab, num_tokens=short.num_tokens + EXTRA_TOKENS)}


def _runner(name, model):
    config, params = model
    runner = make_runner(name, params, config, dtype="float32")
    runner.set_optimizer("adam", 1e-3)
    return runner


@pytest.mark.parametrize("name", COUNTED)
def test_every_runner_counts_more_for_longer_sentences_and_for_training(name, model, batches):
    runner = _runner(name, model)
    short, long = (runner.dispatches("encode", batches[size]) for size in ("short", "long"))
    train = runner.dispatches("train_step", batches["short"])
    for counted in (short, long, train):
        assert isinstance(counted["count"], int) and counted["count"] > 0
        assert counted["counts"]
    assert long["count"] > short["count"]
    assert train["count"] >= short["count"]
    assert runner.steps == 1  # the training program took its step


@pytest.mark.parametrize("name", sorted(PADDED))
def test_the_count_follows_the_loop_as_it_runs(name, model, batches):
    runner = _runner(name, model)
    counted, padded = (runner.dispatches("encode", batches[size]) for size in ("short", "padded"))
    steps = steps_with_work(sentences_transitions(batches["short"]))
    assert steps < batches["padded"].num_steps
    if PADDED[name] == "stops":
        assert padded["count"] == counted["count"]
    else:
        assert padded["count"] > counted["count"]
    if name == "tensorflow":  # the traced graph's ops, the while body's once per step with work
        [graph] = counted["graphs"]
        [loop] = graph["loops"]
        assert loop["trips"] == steps
        assert counted["count"] == graph["graph_ops"] + loop["body_ops"] * steps + loop["cond_ops"] * (steps + 1)
    elif name == "tensorflow-xla":  # the loop's condition runs once more than its body
        assert max(counted["by_op"].values()) == steps + 1
    elif name == "jax":  # the scan runs all T steps (a cond skips the work of those without)
        assert max(padded["by_op"].values()) == batches["padded"].num_steps


def test_a_compiled_pytorch_step_is_called_once_per_step(model, batches):
    runner = _runner("pytorch-compiled", model)
    batch = batches["short"]
    runner.encode(batch)  # compiled before it is counted
    counted = runner.dispatches("encode", batch)
    assert counted["compiled_calls"] == batch.num_steps
    assert counted["nested"] >= counted["count"]


def test_dynet_counts_what_bench_explain_reports_for_the_same_batch():
    args = parse_args(["--embed-dim", "4", "--hidden-dim", "4", "--tracker-dim", "2", "--mlp-dim", "4",
                       "--mlp-layers", "1", "--framework", "dynet", "--no-timing"])
    reported = explain(args)["dynet"]
    batches, config = setup(args)
    runner = make_runner("dynet", init_params(config, seed=args.seed), config)
    counted = runner.dispatches("loss_and_grads", batches.main)  # explain's graph: the eval-mode loss
    assert counted["nodes"] == reported["nodes"]
    assert counted["node_types"] == reported["node_types"]
    assert counted["count"] == counted["groups"] == reported["autobatch"]["groups"]
    assert {op: list(n) for op, n in counted["by_operation"].items()} == reported["autobatch"]["by_operation"]
    assert counted["grouped_nodes"] == counted["nodes"]  # every node the profiler saw ran in one of the groups


def test_a_runner_that_does_not_count_says_none(model, batches):
    config, params = model
    runner = ToyRunner(params, config)
    assert runner.dispatches("encode", batches["short"]) is None
    with pytest.raises(ValueError, match="unknown program 'decode'"):
        runner.dispatches("decode", batches["short"])
