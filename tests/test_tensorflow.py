"""TensorFlow-specific checks: one trace for every shape, the XLA variant,
the eager variant (tensorflow-eager: the lists family, nothing traced), the
canonical .npz round trip, dropout, float64, input checks, the modules a
runner loads (its own family only), and parses decided by the model inside
the graph (docs/spec.md §7).

Agreement with the float64 reference on shared cases lives in
test_contract.py; every number here is also measured against the
reference, never against TensorFlow itself.
"""

from __future__ import annotations

import collections
import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from bench import ROOT, frameworks
from impl_tensorflow import convert, masked
from impl_tensorflow.classifier import SNLIClassifier
from impl_tensorflow.runner import BATCH, Runner
from shared import optimizers, parse_metrics, parsing, reference
from shared.batching import make_pair_batch
from shared.compare import GRAD_REL_TOL_F32, GRAD_REL_TOL_F64, grad_rel_errs, max_abs_err
from shared.params import ParamError, init_params, load_params, param_shapes, save_params
from tests.helpers import assert_npz_files_identical, run, small_config_for


def shaped_batches(pairs, vocab):
    """Batches of different B, N and T (same pairs padded differently, and different pairs)."""
    return [
        make_pair_batch(pairs[:3], vocab, num_tokens=30),
        make_pair_batch(pairs[3:8], vocab, num_tokens=40, num_steps=90),
        make_pair_batch(pairs[8:9], vocab),  # B = 1, its own N, T = 2N - 1
        make_pair_batch(pairs[:12], vocab, num_tokens=64),
    ]


def loaded_model(params, config, dtype="float32"):
    """The masked family's classifier holding ``params`` (convert.from_canonical fills a model built first)."""
    model = SNLIClassifier(config, encoder=masked.SPINN, dtype=convert.resolve_dtype(dtype))
    return convert.from_canonical(params, model)


def assert_matches_reference(runner, params, config, batch, tol=1e-12):
    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    assert max_abs_err(premise, ref.premise) <= tol
    assert max_abs_err(hypothesis, ref.hypothesis) <= tol
    assert max_abs_err(logits, ref.logits) <= tol


# --------------------------------------------------------------------------
# One trace serves every shape
# --------------------------------------------------------------------------


def test_one_trace_for_every_batch_shape(device, small_config, sample_pairs, vocab):
    params = init_params(small_config, seed=11, dtype=np.float64)
    runner = Runner(params, small_config, dtype="float64", device=device)
    runner.set_optimizer("sgd", lr=0.0)  # lr 0: the weights stay those of the reference
    batches = shaped_batches(sample_pairs, vocab)
    assert len({(b.size, b.num_tokens, b.num_steps) for b in batches}) == len(batches)
    for batch in batches:
        assert_matches_reference(runner, params, small_config, batch)
        loss, _ = runner.loss_and_grads(batch)
        assert abs(runner.train_step(batch) - loss) <= 1e-12
    stats = runner.compile_stats()
    per_function = {name: runner.compile_stats(name).traces for name in ("encode", "loss_and_grads", "train_step")}
    assert per_function == {"encode": 1, "loss_and_grads": 1, "train_step": 1}, per_function
    assert stats.traces == 3
    assert len(runner.compile_stats("encode").shapes) == len(batches)
    assert stats.xla_compilations == 0 and not runner.xla
    assert stats.compile_s >= stats.trace_s > 0.0


def test_backward_loop_never_saves_the_thin_stack(small_config):
    """The thin stack's point: per step the gradient keeps the small [S, *]
    tensors a step read, never the thin stack (a TensorArray, a variant tensor).
    Inspected in the traced graph: no per-step accumulator holds a variant."""
    runner = Runner(init_params(small_config, seed=1), small_config)
    graph = runner.trace("loss_and_grads").concrete_function().graph
    accumulators = [op for op in graph.get_operations() if op.type == "EmptyTensorList"]
    assert accumulators, "expected the while loop's gradient to stack per-step values"
    kept = {op.get_attr("element_dtype") for op in accumulators}
    assert tf.variant not in kept, kept


def test_the_loop_reads_its_weights_once_before_it(small_config, small_batch):
    """The cells take their weights through layers.read: inside the while
    loops (forward, backward, with the head deciding) no op reads a variable,
    which would be a new tensor at every step that the backward pass keeps;
    the variables are read outside, once."""
    head_config = small_config.replace(transition_head=True)
    runner = Runner(init_params(head_config, seed=1), head_config, transition_weight=0.5)
    runner.set_optimizer("sgd", 0.1)
    runner.parse(small_batch, "predicted")  # traces parse:predicted
    for program in ("encode", "loss_and_grads", "train_step", "parse:predicted"):
        graph_def = runner.trace(program).concrete_function().graph.as_graph_def()
        library = {f.signature.name: f for f in graph_def.library.function}
        nodes = list(graph_def.node) + [node for f in library.values() for node in f.node_def]
        bodies = [library[node.attr["body"].func.name] for node in nodes if node.op in ("While", "StatelessWhile")]
        assert bodies, program
        for body in bodies:
            assert not [node.name for node in body.node_def if node.op == "ReadVariableOp"], program
        assert any(node.op == "ReadVariableOp" for node in graph_def.node), program


# --------------------------------------------------------------------------
# XLA: the same function with jit_compile=True
# --------------------------------------------------------------------------


def test_xla_variant_matches_reference(device, vocab, sample_pairs):
    config = small_config_for(len(vocab))
    params = init_params(config, seed=12, dtype=np.float64)
    runner = Runner(params, config, dtype="float64", device=device, xla=True)
    batches = shaped_batches(sample_pairs, vocab)[:2]
    for batch in batches + batches[:1]:  # the third call repeats a shape: no new compilation
        assert_matches_reference(runner, params, config, batch)
    batch = batches[0]
    loss, grads = runner.loss_and_grads(batch)
    ref_loss, ref_grads = reference.loss_and_grads(params, config, batch)
    assert abs(loss - ref_loss) <= 1e-12
    errors = grad_rel_errs(grads, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors
    stats = runner.compile_stats()
    assert runner.xla and stats.traces == 2  # encode and loss_and_grads, one trace each
    # XLA compiles one program per input shape: two for encode, one for the gradients.
    assert runner.compile_stats("encode").xla_compilations == 2
    assert stats.xla_compilations == 3


def test_containers_agree(device, small_config, small_batch):
    """The TensorArray container (graph executor) and the dense one (for XLA) are one model."""
    params = init_params(small_config, seed=14, dtype=np.float64)
    for container in ("tensor_array", "dense"):
        runner = Runner(params, small_config, dtype="float64", device=device, container=container)
        assert runner.container == container
        assert_matches_reference(runner, params, small_config, small_batch)
    with pytest.raises(ValueError, match="XLA cannot compile"):
        Runner(params, small_config, xla=True, container="tensor_array")
    with pytest.raises(TypeError, match="unknown"):
        Runner(params, small_config, unroll=2)


# --------------------------------------------------------------------------
# tensorflow-eager: the define-by-run algorithm (impl_tensorflow/lists.py), nothing traced
# --------------------------------------------------------------------------


def test_eager_is_registered_as_an_opt_in_variant_of_its_family(small_params, small_config):
    assert frameworks.resolve("tensorflow-eager") == ("tensorflow", {"family": "lists"})
    variants = {"tensorflow-eager"}
    assert variants <= frameworks.OPT_IN and variants <= set(frameworks.IMPLEMENTATIONS)
    with pytest.raises(ValueError, match="xla"):
        frameworks.make_runner("tensorflow-eager", small_params, small_config, xla=True)


def test_tensorflow_eager_traces_nothing(device, small_params, small_config, small_batch):
    runner = frameworks.make_runner("tensorflow-eager", small_params, small_config, dtype="float64", device=device)
    runner.encode(small_batch)
    runner.loss_and_grads(small_batch)
    stats = runner.compile_stats()
    assert stats.traces == 0 and stats.compile_s == 0.0 and stats.shapes == []
    for hook in (lambda: runner.trace("encode"), lambda: runner.program_args("encode", small_batch)):
        with pytest.raises(NotImplementedError, match="eagerly"):  # explain's hooks: no program to trace
            hook()


# --------------------------------------------------------------------------
# Imports: a runner loads its own family, and replicas.py only with replicas
# --------------------------------------------------------------------------

LOADED = """
import json, sys
from shared.params import ModelConfig, init_params

def optional():
    return sorted(m.split(".")[1] for m in sys.modules
                  if m in ("impl_tensorflow.masked", "impl_tensorflow.lists", "impl_tensorflow.levels",
                           "impl_tensorflow.replicas", "impl_tensorflow.explain"))

import impl_tensorflow.runner
loaded = {"import": optional()}
config = ModelConfig(vocab_size=20, embed_dim=4, hidden_dim=4, tracker_dim=2, mlp_dim=4, mlp_layers=1)
for case in sys.argv[1:]:  # a family, or "replicas"
    replicas = 2 if case == "replicas" else 1
    impl_tensorflow.runner.Runner(init_params(config, seed=0), config, replicas=replicas,
                                  family="masked" if replicas > 1 else case)
    loaded[case] = optional()
print(json.dumps(loaded))
"""


def test_a_runner_loads_only_the_family_it_runs():
    """A benchmark record names the source files its process loaded (a record goes stale when one of them
    changes): importing the runner loads no family module, and each runner built loads its own family and
    nothing else optional; replicas.py waits for replicas > 1 (in a process of its own: the K logical CPU
    devices must be made before TensorFlow's runtime starts)."""
    done = run([sys.executable, "-c", LOADED, "lists", "levels", "masked"], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {"import": [], "lists": ["lists"], "levels": ["levels", "lists"],
                      "masked": ["levels", "lists", "masked"]}
    done = run([sys.executable, "-c", LOADED, "replicas"], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"import": [], "replicas": ["masked", "replicas"]}


# --------------------------------------------------------------------------
# The canonical .npz
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_load_save_bit_identical(tmp_path, vocab, dtype):
    config = small_config_for(len(vocab))
    params = init_params(config, seed=15, dtype=dtype)
    source, copy = tmp_path / "in.npz", tmp_path / "out.npz"
    save_params(source, params, config, vocab.to_array())
    loaded = load_params(source)
    model = loaded_model(loaded.params, loaded.config, dtype=np.dtype(dtype).name)
    save_params(copy, convert.to_canonical(model), model.config, loaded.vocab)
    assert_npz_files_identical(source, copy)
    # The fused variables really hold the blocks the map says.
    H, D = config.hidden_dim, config.tracker_dim
    kernel = model.spinn.reduce.kernel.numpy()
    assert np.array_equal(kernel[H:2 * H], params["reduce.right.kernel"])
    assert np.array_equal(model.spinn.tracker.kernel.numpy()[3 * H:], params["tracker.kernel_hidden"])
    assert kernel.shape == (2 * H + D, 5 * H)


def test_wrong_entries_are_errors_that_name_them(tmp_path, vocab):
    config = small_config_for(len(vocab))
    params = init_params(config, seed=16)
    missing = {k: v for k, v in params.items() if k != "tracker.bias"}
    with pytest.raises(ParamError, match="tracker.bias"):
        loaded_model(missing, config)
    with pytest.raises(ParamError, match="mlp.9.kernel"):
        loaded_model({**params, "mlp.9.kernel": np.zeros((7, 7), np.float32)}, config)
    with pytest.raises(ParamError, match=r"reduce.left.kernel.*\(25, 5\).*\(5, 25\)"):
        loaded_model({**params, "reduce.left.kernel": params["reduce.left.kernel"].T}, config)
    no_tracker = config.replace(tracker_dim=0)  # tracker entries are extra without a tracker
    with pytest.raises(ParamError, match="tracker"):
        loaded_model(params, no_tracker)
    # A bad file: written by hand, since save_params refuses bad sets.
    bad = {**params, "projection.bias": np.zeros(3, np.float32)}
    path = tmp_path / "bad.npz"
    np.savez(path, **bad, **{"meta.config": np.array(config.to_json()), "meta.vocab": vocab.to_array()})
    with pytest.raises(ParamError, match="projection.bias"):
        load_params(path)
    with pytest.raises(ValueError, match="dtype"):
        loaded_model(params, config, dtype="float16")
    # The gradient map checks counts too.
    model = loaded_model(params, config)
    with pytest.raises(ValueError, match="gradients for"):
        convert.grads_to_canonical(model, [np.zeros(1)])


# --------------------------------------------------------------------------
# Dropout, float64, input checks, devices
# --------------------------------------------------------------------------


def test_dropout_only_in_training(device, small_config, small_batch):
    params = init_params(small_config, seed=17, dtype=np.float64)
    plain = Runner(params, small_config, dtype="float64", device=device)
    dropped = Runner(params, small_config, dtype="float64", device=device, dropout=0.5, seed=3)
    ref = reference.forward(params, small_config, small_batch)
    for got, want in zip(dropped.encode(small_batch), (ref.premise, ref.hypothesis, ref.logits)):
        assert max_abs_err(got, want) <= 1e-12  # eval mode: no dropout
    eval_loss = reference.loss(params, small_config, small_batch)
    assert abs(dropped.loss_and_grads(small_batch)[0] - eval_loss) <= 1e-12
    # Training: lr 0 keeps the weights, so only dropout moves the loss.
    for runner in (plain, dropped):
        runner.set_optimizer("sgd", lr=0.0)
    assert abs(plain.train_step(small_batch) - eval_loss) <= 1e-12
    losses = [dropped.train_step(small_batch) for _ in range(2)]
    assert all(abs(loss - eval_loss) > 1e-6 for loss in losses)
    assert abs(losses[0] - losses[1]) > 1e-9  # new masks at every step
    again = Runner(params, small_config, dtype="float64", device=device, dropout=0.5, seed=3)
    again.set_optimizer("sgd", lr=0.0)
    assert again.train_step(small_batch) == losses[0]  # repeatable from the seed
    assert again.compile_stats().traces == 1  # one traced train step, dropout included


def test_float64_keeps_adams_slots_in_float64(device, small_config, small_batch):
    """Keras' optimizer makes its slots in the variables' dtype (the float64 end-to-end check of every
    implementation is tests/test_contract.py's)."""
    params = init_params(small_config, seed=18, dtype=np.float64)
    runner = Runner(params, small_config, dtype="float64", device=device)
    assert all(v.dtype == tf.float64 for v in runner.model.trainable_variables)
    runner.set_optimizer("adam", lr=0.01)
    runner.train_step(small_batch)
    slots = [v for v in runner.optimizer.keras.variables if str(v.dtype) == "float64"]  # Adam's m and v
    assert len(slots) == 2 * len(runner.model.trainable_variables)


def test_device_argument(small_config):
    params = init_params(small_config, seed=20)
    with pytest.raises(ValueError, match="device"):
        Runner(params, small_config, device="tpu")
    if tf.config.list_physical_devices("GPU"):
        runner = Runner(params, small_config, device="gpu")
        assert "GPU" in runner.model.spinn.reduce.kernel.device
    else:
        with pytest.raises(ValueError, match="no GPU"):
            Runner(params, small_config, device="gpu")
    runner = Runner(params, small_config, device="cpu")
    assert "CPU" in runner.model.spinn.reduce.kernel.device


# --------------------------------------------------------------------------
# Optimizers: the shared definitions on Keras, determinism
# --------------------------------------------------------------------------


def test_frozen_block_of_a_fused_variable(device, small_config, small_batch):
    """reduce.right.kernel is rows of the fused reduce kernel: freezing it masks
    those rows of the gradient, while the rest of the variable trains."""
    params = init_params(small_config, seed=22)
    runner = Runner(params, small_config, device=device)
    runner.set_optimizer("adam", 0.05, frozen=("reduce.right.kernel", "embed.embedding"))
    for _ in range(2):
        runner.train_step(small_batch)
    after = runner.get_params()
    assert np.array_equal(after["reduce.right.kernel"], params["reduce.right.kernel"])
    assert np.array_equal(after["embed.embedding"], params["embed.embedding"])
    assert not np.array_equal(after["reduce.left.kernel"], params["reduce.left.kernel"])
    assert not np.array_equal(after["reduce.track.kernel"], params["reduce.track.kernel"])
    state = runner.optimizer_state()
    assert "m/reduce.right.kernel" not in state and "m/reduce.left.kernel" in state
    assert int(state["step"]) == 2
    with pytest.raises(ValueError, match="no such parameter"):
        runner.set_optimizer("sgd", 0.1, frozen=("reduce.kernel",))


def test_learning_rate_changes_without_retracing(device, small_config, small_batch):
    params = init_params(small_config, seed=23, dtype=np.float64)
    runner = Runner(params, small_config, dtype="float64", device=device)
    runner.set_optimizer("sgd", 0.5)
    expected, hyper = params, optimizers.resolve("sgd", {})
    state = optimizers.zero_state("sgd", hyper, param_shapes(small_config), (), dtype=np.float64)
    for lr in (0.5, 0.25, 0.125):
        runner.set_learning_rate(lr)
        _, grads = reference.loss_and_grads(expected, small_config, small_batch)
        expected = optimizers.apply("sgd", hyper, lr, expected, grads, state)
        runner.train_step(small_batch)
    for key, value in runner.get_params().items():
        assert max_abs_err(value, expected[key]) <= 1e-10, key
    assert runner.compile_stats("train_step").traces == 1


def test_results_are_bit_identical_from_the_first_call(small_config, small_batch):
    """TensorFlow's CPU AddN sums its inputs in an order that depends on which
    buffer it can reuse; the model avoids sums of three or more terms (see
    Reduce), so a fresh function gives the same bits at every call, and a
    resumed training run the same weights as an uninterrupted one."""
    params = init_params(small_config, seed=24)
    runner = Runner(params, small_config)
    first = runner.loss_and_grads(small_batch)[1]
    for _ in range(4):
        again = runner.loss_and_grads(small_batch)[1]
        assert all(np.array_equal(again[k], first[k]) for k in first)
    other = Runner(params, small_config).loss_and_grads(small_batch)[1]
    assert all(np.array_equal(other[k], first[k]) for k in first)


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7): inside the graph
# --------------------------------------------------------------------------

HEAD_KERNEL, HEAD_BIAS = "tracker.transition.kernel", "tracker.transition.bias"


def head_model(vocab, seed: int, dtype=np.float64):
    """A small model with a transition head that makes real choices (its
    kernel scaled up, so both actions win at some steps)."""
    config = small_config_for(len(vocab)).replace(transition_head=True)
    params = init_params(config, seed=seed, dtype=dtype)
    params[HEAD_KERNEL] = (params[HEAD_KERNEL] * 8.0).astype(dtype)
    return config, params


def parse_uniforms(batch, seed: int = 7):
    return parsing.uniforms_for(batch, rows=list(range(batch.size)), seed=seed)


def assert_parse_matches_reference(runner, params, config, batch, mode, tol=1e-12) -> parsing.Parsed:
    """Decisions identical to the float64 reference's, every number within ``tol``."""
    u = parse_uniforms(batch) if mode == "sampled" else None
    parsed = runner.parse(batch, mode, uniforms=u)
    ref = reference.parse(params, config, batch, mode, uniforms=u)
    for name, value in parsed.to_dict().items():
        if name.endswith("_transitions"):
            np.testing.assert_array_equal(value, getattr(ref, name), err_msg=f"{mode}: {name}")
        else:
            assert max_abs_err(value, getattr(ref, name)) <= tol, f"{mode}: {name}"
    return parsed


def graph_op_counts(concrete) -> collections.Counter:
    """Op types of a traced function, its while bodies and conditions included."""
    graph_def = concrete.graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph_def.node)
    for function in graph_def.library.function:
        counts.update(node.op for node in function.node_def)
    return counts


def test_one_parse_trace_per_mode_serves_every_shape(device, sample_pairs, vocab):
    config, params = head_model(vocab, seed=30)
    runner = Runner(params, config, dtype="float64", device=device)
    batches = shaped_batches(sample_pairs, vocab)
    for batch in batches:
        for mode in parsing.MODES:
            parsed = assert_parse_matches_reference(runner, params, config, batch, mode)
    # The model really decides: its parses of the last batch are not the data's.
    assert parse_metrics.parse_agreement(parsed.premise_transitions, batches[-1].premise_transitions) < 0.9
    for mode in parsing.MODES:
        stats = runner.compile_stats(f"parse_{mode}")
        assert stats.traces == 1, mode
        assert len(stats.shapes) == len(batches), mode
    assert runner.compile_stats().traces == len(parsing.MODES)


def test_decisions_stay_in_the_graph_and_encode_ignores_the_head(small_config):
    """A predicted parse is one while loop with no call back into Python;
    encode (the gold path) traces exactly the graph of the same model
    without a head, so it costs what it always did."""
    head_config = small_config.replace(transition_head=True)
    with_head = Runner(init_params(head_config, seed=1), head_config)
    without = Runner(init_params(small_config, seed=1), small_config)
    assert graph_op_counts(with_head.trace("encode").function.get_concrete_function()) == \
        graph_op_counts(without.trace("encode").function.get_concrete_function())
    # The predicted parse, traced from the runner's input signature alone.
    concrete = tf.function(lambda batch: with_head.model.parse(*batch[:4], mode="predicted"),
                           input_signature=[BATCH], autograph=False).get_concrete_function()
    outer = [op.type for op in concrete.graph.get_operations()]
    assert sum(op in ("While", "StatelessWhile") for op in outer) == 1
    counts = graph_op_counts(concrete)
    assert not [op for op in counts if "PyFunc" in op], counts
    assert counts["Greater"] >= 1 and counts["TensorListSetItem"] >= 2  # the decision t_R > t_S; two records


def test_xla_parses_as_the_reference_does(device, sample_pairs, vocab):
    """The XLA variant (dense container, jit_compile) takes the reference's
    decisions like the graph variant, one trace per mode and one compilation
    per shape; its supervised gradients match too."""
    config, params = head_model(vocab, seed=31)
    runner = Runner(params, config, dtype="float64", device=device, xla=True, transition_weight=0.5)
    batches = shaped_batches(sample_pairs, vocab)[:2]
    for batch in batches + batches[:1]:  # the third call repeats a shape: no new compilation
        for mode in ("predicted", "sampled"):
            assert_parse_matches_reference(runner, params, config, batch, mode)
    loss, grads = runner.loss_and_grads(batches[0])
    ref_loss, ref_grads = reference.loss_and_grads(params, config, batches[0], transition_weight=0.5)
    assert abs(loss - ref_loss) <= 1e-12
    errors = grad_rel_errs(grads, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors
    for mode in ("predicted", "sampled"):
        assert runner.compile_stats(f"parse_{mode}").traces == 1
        assert runner.compile_stats(f"parse_{mode}").xla_compilations == 2


def test_supervised_gradients_are_bit_identical_from_call_to_call(vocab, small_batch):
    """The head adds gradient sums (its logits, the tracker state it reads);
    they stay two-term sums, so the gradients are the same bits at every call
    and in a fresh runner (see Reduce in impl_tensorflow/cells.py)."""
    config, params = head_model(vocab, seed=32, dtype=np.float32)
    runner = Runner(params, config, transition_weight=0.5)
    first = runner.loss_and_grads(small_batch)[1]
    _, ref_grads = reference.loss_and_grads(params, config, small_batch, transition_weight=0.5)
    errors = grad_rel_errs(first, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F32, errors
    for _ in range(3):
        again = runner.loss_and_grads(small_batch)[1]
        assert all(np.array_equal(again[k], first[k]) for k in first)
    other = Runner(params, config, transition_weight=0.5).loss_and_grads(small_batch)[1]
    assert all(np.array_equal(other[k], first[k]) for k in first)


def test_head_trains_freezes_and_round_trips(tmp_path, device, vocab, small_batch):
    config, params = head_model(vocab, seed=33)
    # Weight 0 (the default): the loss does not reach the head, whose gradient is exactly zero.
    _, grads = Runner(params, config, dtype="float64", device=device).loss_and_grads(small_batch)
    assert not np.any(grads[HEAD_KERNEL]) and not np.any(grads[HEAD_BIAS])
    runner = Runner(params, config, dtype="float64", device=device, transition_weight=0.5)
    runner.set_optimizer("adam", 0.05, frozen=(HEAD_BIAS,))
    for _ in range(2):
        runner.train_step(small_batch)
    after = runner.get_params()
    assert np.array_equal(after[HEAD_BIAS], params[HEAD_BIAS])
    assert max_abs_err(after[HEAD_KERNEL], params[HEAD_KERNEL]) > 1e-3
    state = runner.optimizer_state()
    assert f"m/{HEAD_KERNEL}" in state and f"m/{HEAD_BIAS}" not in state
    resumed = Runner(after, config, dtype="float64", device=device, transition_weight=0.5)
    resumed.set_optimizer("adam", 0.05, frozen=(HEAD_BIAS,))
    resumed.load_optimizer_state(state)
    assert np.array_equal(resumed.optimizer_state()[f"v/{HEAD_KERNEL}"], state[f"v/{HEAD_KERNEL}"])
    # The canonical .npz round trip, head included, is bit-identical.
    source, copy = tmp_path / "in.npz", tmp_path / "out.npz"
    save_params(source, after, config, vocab.to_array())
    loaded = load_params(source)
    model = loaded_model(loaded.params, loaded.config, dtype="float64")
    assert np.array_equal(model.spinn.tracker.transition.kernel.numpy(), after[HEAD_KERNEL])
    save_params(copy, convert.to_canonical(model), loaded.config, loaded.vocab)
    assert_npz_files_identical(source, copy)


def test_parse_arguments_are_refused_before_tracing(vocab, small_batch):
    """Bad parse arguments (test_contract.py lists them) are refused on the
    host: nothing is traced for them."""
    config, params = head_model(vocab, seed=34)
    runner = Runner(params, config)
    u = parse_uniforms(small_batch)
    with pytest.raises(ValueError, match="sampled mode only"):
        runner.parse(small_batch, "predicted", uniforms=u)
    with pytest.raises(ValueError, match=r"premise uniforms: expected shape"):
        runner.parse(small_batch, "sampled", uniforms=(u[0][:, :-1], u[1]))
    assert runner.compile_stats().traces == 0  # refused on the host, before anything was traced


# What `bench explain` must report of TensorFlow (tests/test_explain.py calls these).

def check_explain(r: dict, batch: dict) -> None:
    for fn in ("encode", "loss_and_grads"):
        assert r[fn]["ops"] > 0 and all(n > 0 for n in r[fn]["while_body_ops"])
        assert r[fn]["trace_s"] > 0 and r[fn]["first_call_s"] > 0 and r[fn]["call_s"] > 0
    assert r["encode"]["while_loops"] == 1 and r["loss_and_grads"]["while_loops"] == 2  # forward, backward
    assert r["loop_variables"] == len(r["loop_state"]) > 0


def check_bad_input(t: dict, k: dict) -> None:
    """Checked on the host; the graph alone cannot say why."""
    assert t["outcome"].startswith("raised by the host-side check") and t["where"] is not None  # our check
    assert t["graph"]["outcome"].startswith("ran")
    assert k["graph"]["outcome"] == "raised" and "{{node" in k["graph"]["error"]
    assert k["graph"]["where"] is None  # no frame of your code: it comes from the runtime
