"""The level-scheduled encoders: their paths that the runners do not take on a CPU, held to the float64
reference, and the registry's levels runners' own bookkeeping (what they refuse, how many programs, the schedule
in ``last_rows``).

Also here: pytorch-levels' hand-written node-table gradient, and what ``bench explain --levels`` shows of each
levels runner. The schedule alone (shared/levels.py) is tested in test_levels.py.

The runners' own paths are in the contract (tests/test_contract.py, pytorch-levels, jax-levels and
tensorflow-levels: values, gradients and head logits in gold mode, with and without the tracker). What is left is
checked here, in float64, values and gradients, against shared/reference/ (never against the framework's own
masked model): TensorFlow's level loop with the dense container, which the runner picks on a GPU and under XLA (on a
CPU graph it picks the TensorArray, which the contract runs).
"""

import importlib
import json

import numpy as np
import pytest

from bench import frameworks
from bench.cli import main
from bench.explain.views import format_text, parse_args
from impl_pytorch import train
from impl_pytorch.params import trainable
from impl_pytorch.runner import Runner
from shared import reference
from shared.batching import sentences_transitions
from shared.compare import GRAD_REL_TOL_F64, grad_rel_errs, max_abs_err
from shared.levels import LEVELS_UNSUPPORTED, schedule
from shared.params import ModelConfig, init_params
from shared.runner import CompileStats
from shared.transitions import PAD, REDUCE

from .helpers import (TINY, assert_encodes_like_reference, assert_grads_like_reference, head_config, head_params,
                      make_runner, small_config_for, uniforms)


@pytest.mark.parametrize("tracker_dim", [0, 3])
def test_tensorflow_levels_with_the_dense_container_match_reference(tracker_dim, device, vocab, small_batch):
    config = small_config_for(len(vocab), tracker_dim=tracker_dim)
    params = init_params(config, seed=9, dtype=np.float64)
    runner = make_runner("tensorflow-levels", params, config, dtype="float64", device=device, container="dense")
    assert runner.container == "dense"
    assert_encodes_like_reference(runner, params, config, small_batch, "float64")
    assert_grads_like_reference(runner, params, config, small_batch, "float64")


# --------------------------------------------------------------------------
# Through the runner: the registry's jax-levels and tensorflow-levels
# --------------------------------------------------------------------------


def test_registered_as_opt_in_levels_variants():
    from bench import frameworks

    assert frameworks.resolve("jax-levels") == ("jax", {"family": "levels"})
    assert frameworks.resolve("tensorflow-levels") == ("tensorflow", {"family": "levels"})
    assert {"jax-levels", "tensorflow-levels"} <= frameworks.OPT_IN
    assert frameworks.matrix()[frameworks.LEVELS, "jax"] == ["jax-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "tensorflow"] == ["tensorflow-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "dynet"].startswith("not built")


@pytest.mark.parametrize("name", ["jax-levels", "tensorflow-levels"])
def test_levels_runner_bounds_its_programs_and_records_the_schedule(name, device, sample_pairs, vocab):
    """Decided parses are refused by the runner (the framework's own runner
    keeps them); batches of one (B, N, T) meet one program (JAX, with the
    tracker; TensorFlow: one trace for all); the last batch's level count
    and padding are in ``last_rows``."""
    from bench import frameworks
    from shared.batching import make_batches
    from shared.levels import LEVELS_UNSUPPORTED  # the reasons both frameworks give, in one wording
    from shared.params import init_params

    from .helpers import head_config

    config = head_config(len(vocab))
    params = init_params(config, seed=3, dtype=np.float32)
    runner = frameworks.make_runner(name, params, config, dtype="float32", device=device)
    family = frameworks.make_runner(name.split("-")[0], params, config, dtype="float32", device=device)
    assert family.supports("predicted parse") and not runner.supports("predicted parse")
    assert {key: runner.unsupported[key] for key in LEVELS_UNSUPPORTED} == LEVELS_UNSUPPORTED
    assert type(runner).supports("sampled parse")  # the class answers for the framework, the runner for its variant
    batches = [b for b in make_batches(sample_pairs, vocab, batch_size=4) if b.num_tokens == 16 and b.size == 4]
    assert len(batches) >= 3
    with pytest.raises(NotImplementedError, match="no predicted parse: .*gold"):
        runner.parse(batches[0], "predicted")
    with pytest.raises(NotImplementedError, match="no reinforce: "):
        runner.reinforce_loss_and_grads(batches[0], None, 0.0)
    for batch in batches:
        runner.encode(batch)
        assert runner.last_rows["levels"] > 0 and 0 <= runner.last_rows["level_padding_pct"] < 100
        assert runner.last_phases["schedule"] > 0
    stats = runner.compile_stats()
    if name == "tensorflow-levels":
        assert stats.traces == 1
    else:
        # a program per (B, N, T) and level count (shared.levels.static_shape: the levels rounded up to a class,
        # S = 2B = 8 tracker rows a level, a window of 8 Reduce rows), as the runner's program_shape says
        assert stats.traces == len(set(stats.shapes)) < len(batches)
        assert {shape[1:] for shape in stats.shapes} == {runner.program_shape(b) for b in batches}
        assert all(shape[1:4] == (4, 16, 31) and shape[5:] == (8, 8) for shape in stats.shapes)


def test_the_benchmarks_warm_up_compiles_every_program_of_the_jax_tree_lstm_levels(sample_pairs, vocab):
    """A JAX levels program compiles per level count too (rounded up to a class: impl_jax/levels.py), which
    (B, N, T) does not tell: the runner's ``program_shape`` does, so the warm-up meets every program and the
    timed calls compile nothing (here without the tracker, the Tree-LSTM workload)."""
    from bench import frameworks
    from bench.run.worker import warm_up
    from shared.batching import make_batches

    config = ModelConfig(vocab_size=len(vocab), embed_dim=6, hidden_dim=5, tracker_dim=0, mlp_dim=7, mlp_layers=1)
    runner = frameworks.make_runner("jax-levels", init_params(config, seed=3, dtype=np.float32), config,
                                    dtype="float32", device="cpu")
    batches = [b for b in make_batches(sample_pairs, vocab, batch_size=4) if b.num_tokens == 16 and b.size == 4]
    warm = warm_up(runner, batches, runner.encode)
    assert warm["warmup_shapes"] == warm["traces"] > len({(b.size, b.num_tokens, b.num_steps) for b in batches})
    before = runner.compile_stats().traces
    for batch in batches:
        runner.encode(batch)
    assert runner.compile_stats().traces == before


# --------------------------------------------------------------------------
# pytorch-levels: the level schedule made on the host (impl_pytorch/levels.py)
# --------------------------------------------------------------------------


def test_levels_runner_refuses_decided_parses_and_records_the_schedule(vocab, small_batch):
    """Decided parses and REINFORCE are refused (shared.levels' reasons, as the
    JAX and TensorFlow levels runners give them), gold mode runs; after each
    call ``last_rows`` holds the schedule's levels and the rows each cell
    computed (exact widths: nothing padded) and ``last_phases`` the host's
    seconds making it. Eager: nothing compiles."""
    config = head_config(len(vocab))
    params = head_params(config, seed=3)
    runner = make_runner("pytorch-levels", params, config, dtype="float64")
    assert {key: runner.unsupported[key] for key in LEVELS_UNSUPPORTED} == LEVELS_UNSUPPORTED
    assert type(runner).supports("sampled parse") and not runner.supports("sampled parse")
    with pytest.raises(NotImplementedError, match="no predicted parse: .*gold"):
        runner.parse(small_batch, "predicted")
    with pytest.raises(NotImplementedError, match="no reinforce: "):
        runner.reinforce_loss_and_grads(small_batch, uniforms(small_batch), 0.0)
    transitions = sentences_transitions(small_batch)
    steps = int(np.max(np.nonzero(transitions != PAD)[1])) + 1
    expected = {"levels": steps, "level_padding_pct": 0.0, "reduce_rows": int((transitions == REDUCE).sum()),
                "tracker_rows": int((transitions != PAD).sum())}
    runner.encode(small_batch)
    assert runner.last_rows == expected and runner.last_phases["schedule"] > 0
    runner.last_rows, runner.last_phases = {}, {}
    parsed = runner.parse(small_batch, "gold")
    assert runner.last_rows == expected and runner.last_phases["schedule"] > 0 and runner.last_host_syncs == 0
    ref = reference.parse(params, config, small_batch, mode="gold")
    assert np.array_equal(parsed.premise_transitions, small_batch.premise_transitions)
    assert max_abs_err(parsed.hypothesis_transition_logits, ref.hypothesis_transition_logits) <= 1e-12
    no_tracker = small_config_for(len(vocab), tracker_dim=0)
    bare = make_runner("pytorch-levels", init_params(no_tracker, seed=3), no_tracker)
    bare.loss_and_grads(small_batch)
    heights = schedule(transitions, small_batch.num_tokens, tracker=False)
    assert bare.last_rows == {"levels": heights.n_levels, "level_padding_pct": 0.0,
                               "reduce_rows": expected["reduce_rows"], "tracker_rows": 0}
    assert heights.n_levels < steps and runner.compile_stats() == bare.compile_stats() == CompileStats()


@pytest.mark.parametrize("frozen", [(), ("embed.embedding", "projection.kernel", "projection.bias")],
                         ids=["all", "leaves-frozen"])
def test_levels_table_gradient_is_the_references(frozen, small_config, small_batch):
    """The node table's hand-written gradient (node_table.py's NodeTable)
    gives the float64 reference's gradients, with the leaves trained or not
    (their write then needs no gradient), and a second backward pass through
    the retained graph adds the same gradient again."""
    from impl_pytorch import convert
    from impl_pytorch.levels import host_schedule

    params = init_params(small_config, seed=21, dtype=np.float64)
    model = Runner(params, small_config, dtype="float64", family="levels").model
    arrays = small_batch.arrays()._replace(levels=host_schedule(small_batch, small_config.tracker_dim > 0)[0])
    with trainable(model, frozen):
        loss = train.batch_loss(model, arrays)
        loss.backward(retain_graph=True)
        once = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
        loss.backward()
    assert len(once) == len(list(model.parameters())) - len(frozen)
    for name, param in model.named_parameters():
        if name in once:
            assert float((param.grad - 2 * once[name]).abs().max()) <= 1e-12, name
    got = convert.grads_to_canonical(model, {name: once.get(name) for name, _ in model.named_parameters()})
    _, want = reference.loss_and_grads(params, small_config, small_batch)
    errors = grad_rel_errs({k: v for k, v in got.items() if k not in frozen},
                           {k: v for k, v in want.items() if k not in frozen})
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors


def test_explain_levels_shows_the_schedule_the_encoder_runs(vocab, small_batch):
    """explain --levels: each level exactly as wide as the schedule's nodes
    (and, with the tracker, its sentences that step), one loop iteration per
    level, and the ops each iteration dispatches."""
    from impl_pytorch import explain

    with_tracker = small_config_for(len(vocab), tracker_dim=3)
    without = small_config_for(len(vocab), tracker_dim=0)
    variants = {"tracker": (with_tracker, init_params(with_tracker, seed=4)),
                "no_tracker": (without, init_params(without, seed=4))}
    result = explain.explain_levels(small_batch, variants, {"family": "levels"})
    transitions = sentences_transitions(small_batch)
    for key, (config, _) in variants.items():
        r = result[key]
        sched = schedule(transitions, small_batch.num_tokens, config.tracker_dim > 0)
        assert r["reduce_widths"] == [lv.used for lv in sched.levels] and r["padded_pct"] == 0.0
        assert r["tracker_rows"] == ([lv.active_used for lv in sched.levels] if key == "tracker" else [])
        assert r["levels_scheduled"] == r["levels_run"] == len(r["level_ops"]) == sched.n_levels
        assert all(n > 0 for n in r["level_ops"]) and r["ops"] > sum(r["level_ops"])
        assert r["level_op_types"]["index_select"] >= r["levels_run"]
    text = "\n".join(explain.format_explain_levels(result))
    assert "with the tracker: loop iterations" in text and "without the tracker: loop iterations" in text


# --------------------------------------------------------------------------
# bench explain --levels: the schedule each levels runner feeds, and its loop body
# --------------------------------------------------------------------------


def test_levels_view_shows_the_schedule_each_runner_feeds_and_its_loop_body(capsys):
    """--levels: the batch's schedule (shared.levels, recomputed here), the
    widths each levels Runner runs per level, and positive loop-body counts."""
    from bench.explain.views import make_batches
    from bench.explain.views import run as run_view
    from shared.batching import sentences_transitions
    from shared.levels import level_rows, schedule_by_height, schedule_by_step

    args = parse_args(["--levels", "--batch-size", "3", "--shape", "random", "--length", "6"] + TINY)
    result = run_view(args)
    transitions = sentences_transitions(make_batches(args).main)
    S, T = transitions.shape
    N = result["batch"]["num_tokens"]
    by_step, by_height = schedule_by_step(transitions, N), schedule_by_height(transitions, N)
    nodes = {"tracker": [lv.used for lv in by_step.levels], "no_tracker": [lv.used for lv in by_height.levels]}
    assert result["schedules"]["tracker"]["levels"] == by_step.n_levels == T  # 6 words each: every step a level
    assert result["schedules"]["no_tracker"]["levels"] == by_height.n_levels < T
    for key in nodes:
        assert result["schedules"][key]["nodes"] == nodes[key] and sum(nodes[key]) == result["batch"]["reduce"]
    # What each runs: TensorFlow every level exactly its own width; JAX each Reduce width rounded up to its class
    # and S tracker rows a level (shared.levels' "static" padding), the same levels.
    checked = []
    for name in ("tensorflow", "jax"):
        if not frameworks.installed(name):
            assert result[name]["installed"] is False
            continue
        checked.append(name)
        for key in nodes:
            r = result[name][key]
            padding = importlib.import_module(f"impl_{name}.levels").PADDING
            assert padding == ("exact" if name == "tensorflow" else "static")
            rows = level_rows(transitions, N, key == "tracker", padding)
            assert r["reduce_widths"] == [w for _, w in rows] and r["levels_run"] == r["levels_scheduled"] == len(rows)
            assert r["tracker_rows"] == ([t for t, _ in rows] if key == "tracker" else [])
            if name == "tensorflow":
                assert r["reduce_widths"] == nodes[key] and r["padded_pct"] == 0.0
                assert r["tracker_rows"] == ([lv.active_used for lv in by_step.levels] if key == "tracker" else [])
                bodies = r["while_body_ops"]
            else:
                padded = 1 - sum(nodes[key]) / sum(r["reduce_widths"])
                assert r["padded_pct"] == pytest.approx(100 * padded) and padded >= 0
                bodies = r["scan_body_eqns"]
                # one scan over the levels, their count rounded up (T at most), the padding ones skipped
                assert r["scans"] == 1 and len(rows) <= r["scan_lengths"][0] <= T
            assert bodies and all(isinstance(n, int) and n > 0 for n in bodies)
    assert checked, "neither levels framework is installed"
    text = format_text(result)
    assert f"schedule with the tracker: {T} levels for T={T} steps" in text
    assert f"schedule without the tracker: {by_height.n_levels} levels" in text
    assert main(["explain", "--levels", "--json", "--framework", checked[0]] + TINY) == 0
    assert set(json.loads(capsys.readouterr().out)) >= {"schedules", checked[0]}
