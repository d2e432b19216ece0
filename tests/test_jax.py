"""JAX-specific checks (the contract, the agreement of every implementation
with the reference, lives in test_contract.py): compilation counted per
bucket shape (and per transitions mode), the modules a runner loads (its own
family only), encode never reading the head, memory of the backward pass
(both stack layouts), the persistent compilation cache, the .npz round trip
and the parameter tree of every family, dropout, float64 and float32 end to
end, optax's state and frozen weights."""

from __future__ import annotations

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import ROOT
from impl_jax import convert, train
from impl_jax.classifier import SNLIClassifier
from impl_jax.compilation_cache import disable_compilation_cache
from impl_jax.jaxprs import jaxpr_stats
from impl_jax.masked import SPINN
from impl_jax.params import abstract
from impl_jax.runner import Runner
from impl_jax.shift_reduce import DEFAULT_LAYOUT, LAYOUTS, last_step
from shared import parsing, reference
from shared.batching import BatchArrays, make_batches, make_pair_batch
from shared.compare import max_abs_err
from shared.params import ModelConfig, ParamError, init_params, load_params, save_params
from tests.helpers import assert_npz_files_identical, head_params, run, small_config_for

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
HEAD = ("tracker.transition.kernel", "tracker.transition.bias")


def head_config(vocab_size: int) -> ModelConfig:
    return small_config_for(vocab_size).replace(transition_head=True)


def rows_uniforms(batch, seed: int = 1):
    return parsing.uniforms_for(batch, rows=list(range(batch.size)), seed=seed)


class CompileCounter:
    """Counts XLA compilations JAX itself reports, independently of the Runner."""

    def __init__(self):
        self.count = 0

    def __call__(self, event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE:
            self.count += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)


# --------------------------------------------------------------------------
# Compilation: once per bucket shape
# --------------------------------------------------------------------------


def test_same_bucket_shape_does_not_recompile(small_config, sample_pairs, vocab):
    batches = make_batches(sample_pairs, vocab, batch_size=8)
    first, second = [b for b in batches if (b.size, b.num_tokens) == (8, 16)][:2]
    other = next(b for b in batches if b.num_tokens != 16)
    assert first.pair_ids != second.pair_ids
    runner = Runner(init_params(small_config, seed=1), small_config)
    runner.set_optimizer("sgd", lr=0.1)

    runner.encode(first)
    assert runner.compile_stats().traces == 1
    with CompileCounter() as xla:
        runner.encode(second)  # same (B, N, T): the executable is reused
        runner.set_learning_rate(0.05)  # an argument of the step, not a constant in it
    assert runner.compile_stats().traces == 1 and xla.count == 0

    runner.encode(other)  # a new shape: exactly one more
    assert runner.compile_stats().traces == 2

    runner.train_step(first)
    with CompileCounter() as xla:
        runner.train_step(second)
    stats = runner.compile_stats()
    assert stats.traces == 3 and xla.count == 0
    assert stats.shapes == [("encode", 8, 16, 31), ("encode", other.size, other.num_tokens, other.num_steps),
                               ("train_step", 8, 16, 31)]
    assert stats.compile_s == pytest.approx(stats.trace_s + stats.lower_s + stats.xla_compile_s)
    assert stats.trace_s > 0 and stats.lower_s > 0 and stats.xla_compile_s > 0
    assert stats.xla_compilations == 3 and runner.compile_stats("encode").xla_compilations == 2


def test_parse_compiles_once_per_mode_and_shape(vocab, sample_pairs):
    """The mode is a Python argument of the traced function: each (mode, shape)
    is one program, compiled once; a second batch of that shape reuses it."""
    config = head_config(len(vocab))
    batches = make_batches(sample_pairs, vocab, batch_size=8)
    first, second = [b for b in batches if (b.size, b.num_tokens) == (8, 16)][:2]
    other = next(b for b in batches if b.num_tokens != 16)
    runner = Runner(head_params(config, seed=1, dtype=np.float32), config)

    runner.parse(first, "predicted")
    assert runner.compile_stats().traces == 1
    with CompileCounter() as xla:
        runner.parse(second, "predicted")  # same shape, other sentences: no new program
    assert runner.compile_stats().traces == 1 and xla.count == 0

    runner.parse(first, "gold")
    runner.parse(first, "sampled", uniforms=rows_uniforms(first))
    assert runner.compile_stats().traces == 3  # one per mode
    with CompileCounter() as xla:
        for mode in ("gold", "predicted", "sampled"):
            runner.parse(second, mode, uniforms=rows_uniforms(second, seed=2) if mode == "sampled" else None)
    assert runner.compile_stats().traces == 3 and xla.count == 0

    runner.parse(other, "predicted")  # a new shape: one more
    runner.encode(first)  # encode is its own program (gold mode, no head)
    stats = runner.compile_stats()
    shape, other_shape = (8, 16, 31), (other.size, other.num_tokens, other.num_steps)
    assert stats.traces == 5
    assert stats.shapes == [("parse:predicted",) + shape, ("parse:gold",) + shape, ("parse:sampled",) + shape,
                            ("parse:predicted",) + other_shape, ("encode",) + shape]
    assert runner.compile_stats("parse:predicted").xla_compilations == 2


def test_the_decision_stays_inside_the_one_loop(vocab, small_batch):
    """A parse is one program with one scan: the decision is a select inside
    the loop body, with no callback to Python and no second loop."""
    config = head_config(len(vocab))
    runner = Runner(head_params(config, seed=1, dtype=np.float32), config)
    arrays = runner._arrays(small_batch, labels=False)
    u = tuple(jnp.asarray(x, jnp.float32) for x in rows_uniforms(small_batch))
    for mode, uniforms in (("predicted", None), ("sampled", u)):
        jaxpr = jax.make_jaxpr(runner._functions[f"parse:{mode}"])(runner.model, arrays, uniforms)
        stats = jaxpr_stats(jaxpr)
        assert stats["scans"] == 1, stats
        text = str(jaxpr)
        assert "callback" not in text and "f64[" not in text  # nothing leaves the device; float32 throughout


def test_steps_past_the_last_real_one_are_skipped(small_config, sample_pairs, vocab):
    """The scan runs T iterations, but its body is a cond on t < the batch's
    last real step (impl_jax/masked.py, SPINN._step_until): the padded tail
    takes the branch that computes nothing, and the numbers do not change."""
    runner = Runner(init_params(small_config, seed=3, dtype=np.float32), small_config)
    pairs = sample_pairs[:3]
    tight = make_pair_batch(pairs, vocab)
    loose = make_pair_batch(pairs, vocab, num_tokens=tight.num_tokens + 20)
    for a, b in zip(runner.encode(tight), runner.encode(loose)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    jaxpr = jax.make_jaxpr(runner._functions["encode"])(runner.model, runner._arrays(loose, labels=False))
    scans = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scans) == 1 and int(scans[0].params["length"]) == loose.num_steps
    body = scans[0].params["jaxpr"].jaxpr
    assert [e.primitive.name for e in body.eqns].count("cond") == 1, [e.primitive.name for e in body.eqns]
    idle, step = (len(branch.jaxpr.eqns) for branch in next(e for e in body.eqns if e.primitive.name == "cond")
                  .params["branches"])
    assert idle < 5 < step  # branch 0 (false) passes the carry through; branch 1 is the step
    assert int(last_step(jnp.asarray(loose.premise_transitions))) == int(
        np.flatnonzero((loose.premise_transitions != 0).any(axis=0)).max()) + 1


def test_persistent_compilation_cache_writes_files(tmp_path, small_config, small_batch):
    cache = tmp_path / "jax-cache"
    params = init_params(small_config, seed=2)
    try:
        first = Runner(params, small_config, compilation_cache_dir=cache)
        expected = first.encode(small_batch)
        assert first.compile_stats().cache_misses == 1
        files = [p for p in cache.rglob("*") if p.is_file()]
        assert files, "no executable written to the cache directory"
        # A new runner (as a new process would) finds the executable on disk.
        second = Runner(params, small_config, compilation_cache_dir=cache)
        got = second.encode(small_batch)
        stats = second.compile_stats()
        assert stats.traces == 1 and stats.cache_hits == 1 and stats.cache_misses == 0
        for a, b in zip(got, expected):
            assert np.array_equal(a, b)
    finally:
        disable_compilation_cache()
    assert jax.config.jax_compilation_cache_dir is None


# --------------------------------------------------------------------------
# Imports: a runner loads its own family, and replicas.py only with replicas
# --------------------------------------------------------------------------

LOADED = """
import json, sys
from shared.params import ModelConfig, init_params

def optional():
    return sorted(m.split(".")[1] for m in sys.modules
                  if m in ("impl_jax.masked", "impl_jax.vmap", "impl_jax.levels", "impl_jax.replicas",
                           "impl_jax.distributed", "impl_jax.explain"))

import impl_jax.runner
loaded = {"import": optional()}
config = ModelConfig(vocab_size=20, embed_dim=4, hidden_dim=4, tracker_dim=2, mlp_dim=4, mlp_layers=1)
for family in ("vmap", "levels", "masked"):
    impl_jax.runner.Runner(init_params(config, seed=0), config, family=family)
    loaded[family] = optional()
print(json.dumps(loaded))
"""


def test_a_runner_loads_only_the_family_it_runs():
    """A benchmark record names the source files its process loaded (a record goes stale when one of them
    changes): importing the runner loads no family module, and each runner built loads its own family and
    nothing else optional (replicas.py and distributed.py wait for replicas > 1)."""
    done = run([sys.executable, "-c", LOADED], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {"import": [], "vmap": ["vmap"], "levels": ["levels", "vmap"],
                      "masked": ["levels", "masked", "vmap"]}


# --------------------------------------------------------------------------
# The head: encode never reads it (both layouts agree with the reference in test_contract.py)
# --------------------------------------------------------------------------


def test_encode_never_reads_the_head(vocab, small_batch):
    """encode stays the gold-mode program: a model with a head encodes bit for
    bit as the same weights without one, with a loop body of as many
    equations; with transition_weight 0 the head's gradients are exact zeros."""
    config = head_config(len(vocab))
    params = head_params(config, seed=4, dtype=np.float32)
    headless = config.replace(transition_head=False)
    plain = {name: value for name, value in params.items() if name not in HEAD}
    with_head, without = Runner(params, config), Runner(plain, headless)
    for a, b in zip(with_head.encode(small_batch), without.encode(small_batch)):
        assert np.array_equal(a, b)
    arrays = with_head._arrays(small_batch, labels=False)
    stats = [jaxpr_stats(jax.make_jaxpr(runner._functions["encode"])(runner.model, arrays))
             for runner in (with_head, without)]
    assert stats[0]["scan_body_eqns"] == stats[1]["scan_body_eqns"] and stats[0]["eqns_total"] == stats[1]["eqns_total"]
    loss, grads = with_head.loss_and_grads(small_batch)
    plain_loss, plain_grads = without.loss_and_grads(small_batch)
    assert loss == plain_loss
    for name in HEAD:
        assert not np.any(grads[name]), name
    for name, value in plain_grads.items():
        assert np.array_equal(grads[name], value), name


# --------------------------------------------------------------------------
# Memory of the backward pass
# --------------------------------------------------------------------------


def step_temp_bytes(config: ModelConfig, batch_size: int, num_tokens: int, layout: str) -> int:
    """XLA's scratch memory for one SGD training step at B = ``batch_size``,
    N = ``num_tokens``, T = 2N - 1, compiled for abstract inputs (no data):
    where the residuals saved for the backward pass live."""
    module = SNLIClassifier(config, encoder=SPINN, layout=layout)
    model = convert.from_canonical(init_params(config, seed=0, dtype=np.float32), train.Model(module))
    optimizer = train.make_optimizer("sgd", model, 0.1)

    def spec(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    tokens = spec((batch_size, num_tokens), jnp.int32)
    transitions = spec((batch_size, 2 * num_tokens - 1), jnp.int32)
    batch = BatchArrays(tokens, transitions, tokens, transitions, spec((batch_size,), jnp.int32))
    step = functools.partial(train.train_step, seed=0, transition_weight=0.0)  # as the runner binds it
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(model, optimizer, batch,
                                                          step=spec((), jnp.int32)).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_training_step_memory_grows_linearly_in_steps(layout):
    """XLA's plan for the training step needs scratch memory growing linearly
    in T (the per-step residuals are [B, H]-sized), not like S x T."""
    config = ModelConfig(vocab_size=50, embed_dim=8, hidden_dim=8, tracker_dim=4, mlp_dim=8, mlp_layers=1)
    sizes = (8, 16, 32)
    temp = [step_temp_bytes(config, 4, n, layout) for n in sizes]
    steps = [2 * n - 1 for n in sizes]
    slope_small = (temp[1] - temp[0]) / (steps[1] - steps[0])
    slope_large = (temp[2] - temp[1]) / (steps[2] - steps[1])
    # S x T growth would double the slope from one doubling of N to the next.
    assert slope_large <= 1.25 * slope_small, (temp, slope_small, slope_large)


def test_where_over_the_whole_stack_stores_it_every_step():
    """Why the model writes with a unique-index scatter: on the same toy loop,
    a jnp.where over the carried stack makes the backward pass keep an S-sized
    mask per step (S x T), the scatter only [B]-sized indices."""

    def temp(write: str, S: int, B: int = 4, H: int = 8) -> int:
        def loss(w, stack):
            rows = jnp.arange(B)

            def step(stack, t):
                new = jnp.tanh(stack[rows, (t - 1) % S] @ w)
                if write == "where":
                    mask = (jnp.arange(S) == t % S)[None, :, None]
                    stack = jnp.where(mask, new[:, None], stack)
                else:
                    stack = stack.at[rows, jnp.full((B,), t % S)].set(new, unique_indices=True)
                return stack, None

            return jax.lax.scan(step, stack, jnp.arange(2 * S))[0].sum()

        args = (jax.ShapeDtypeStruct((H, H), jnp.float32), jax.ShapeDtypeStruct((B, S, H), jnp.float32))
        return jax.jit(jax.grad(loss)).lower(*args).compile().memory_analysis().temp_size_in_bytes

    def slope_ratio(temps):  # growth per unit of S, from S=32 to 64 against S=16 to 32
        return ((temps[2] - temps[1]) / 32) / ((temps[1] - temps[0]) / 16)

    where = [temp("where", s) for s in (16, 32, 64)]
    scatter = [temp("scatter", s) for s in (16, 32, 64)]
    assert slope_ratio(where) >= 1.6, where  # S x T: the slope doubles with S
    assert slope_ratio(scatter) <= 1.25, scatter  # linear: the slope stays


# --------------------------------------------------------------------------
# Canonical .npz
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("tracker_dim,mlp_layers,head", [(3, 2, False), (0, 0, False), (3, 1, True)],
                         ids=["tracker", "bare", "head"])
def test_load_save_npz_bit_identical(tmp_path, vocab, dtype, tracker_dim, mlp_layers, head):
    config = small_config_for(len(vocab), tracker_dim=tracker_dim, mlp_layers=mlp_layers).replace(
        transition_head=head)
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    save_params(first, init_params(config, seed=1, dtype=np.dtype(dtype)), config, vocab.words)
    loaded = load_params(first)
    assert loaded.config == config
    module = SNLIClassifier(loaded.config, encoder=SPINN, dtype=jnp.dtype(dtype))
    model = convert.from_canonical(loaded.params, train.Model(module))
    assert all(leaf.dtype == np.dtype(dtype) for leaf in jax.tree_util.tree_leaves(model.params))
    save_params(second, convert.to_canonical(model), config, loaded.vocab)
    assert_npz_files_identical(first, second)


def blank_model(config: ModelConfig, **fields) -> train.Model:
    """A masked-family model without parameters yet (convert.from_canonical fills it)."""
    return train.Model(SNLIClassifier(config, encoder=SPINN, **fields))


def test_flax_tree_is_the_canonical_dict_renamed(small_config, small_batch):
    params = init_params(small_config, seed=2)
    model = convert.from_canonical(params, blank_model(small_config))
    for name, path in convert.name_map(small_config).items():
        node = model.params
        for key in path:
            node = node[key]
        assert np.array_equal(np.asarray(node), params[name]), name  # no transposes
    # nn.Dense computes x @ kernel + bias: the canonical layout as is
    x = np.random.default_rng(0).standard_normal((4, small_config.hidden_dim)).astype(np.float32)
    dense = model.params["spinn"]["reduce"]["left"]
    got = jax.numpy.asarray(x) @ dense["kernel"] + dense["bias"]
    assert max_abs_err(got, x @ params["reduce.left.kernel"] + params["reduce.left.bias"]) <= 1e-6


@pytest.mark.parametrize("tracker_dim,head", [(0, False), (3, False), (3, True)], ids=["bare", "tracker", "head"])
def test_every_family_makes_the_tree_convert_fills(vocab, small_batch, tracker_dim, head):
    """params.abstract (the tree from_canonical checks against and fills) is the tree each family's
    classifier makes when ``init`` runs it on a batch: the same names, shapes and dtypes."""
    from impl_jax import levels, vmap

    config = small_config_for(len(vocab), tracker_dim=tracker_dim).replace(transition_head=head)
    arrays = tuple(jnp.asarray(getattr(small_batch, n)) for n in
                   ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions"))
    schedule = levels.host_schedule(small_batch, tracker=tracker_dim > 0)[0]
    key = jax.random.key(0)

    def shapes(tree):
        return jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), tree)

    families = [(SNLIClassifier(config, encoder=SPINN, dtype=jnp.float64), {}),
                (SNLIClassifier(config, encoder=vmap.SPINN), {})]
    families.append((levels.LevelClassifier(config), {"levels": schedule}))
    for module, extra in families:
        made = jax.eval_shape(functools.partial(module.init, **extra), key, *arrays)["params"]
        if config.transition_head:  # __call__ never reads the head: parse makes it
            made = jax.eval_shape(functools.partial(module.init, method="parse", mode="gold", **extra), key,
                                  *arrays)["params"]
        assert shapes(made) == shapes(abstract(module))


def test_wrong_entries_are_named(tmp_path, small_config, vocab):
    params = init_params(small_config, seed=2)
    blank = blank_model(small_config)
    missing = {k: v for k, v in params.items() if k != "reduce.right.kernel"}
    with pytest.raises(ParamError, match="missing parameter 'reduce.right.kernel'"):
        convert.from_canonical(missing, blank)
    with pytest.raises(ParamError, match="unexpected parameter 'mlp.9.kernel'"):
        convert.from_canonical({**params, "mlp.9.kernel": np.zeros((2, 2), np.float32)}, blank)
    wrong = {**params, "tracker.kernel_input": params["tracker.kernel_input"].T}
    with pytest.raises(ParamError, match=r"'tracker.kernel_input' has shape \(12, 15\), expected \(15, 12\)"):
        convert.from_canonical(wrong, blank)
    # From a file: the file and the entry are named.
    good = tmp_path / "good.npz"
    save_params(good, params, small_config, vocab.words)
    arrays = dict(np.load(good, allow_pickle=False))
    arrays["embed.embedding"] = arrays["embed.embedding"][:, :-1]
    np.savez(tmp_path / "wrong.npz", **arrays)
    with pytest.raises(ParamError, match=r"wrong.npz: parameter 'embed.embedding' has shape \(\d+, 5\)"):
        load_params(tmp_path / "wrong.npz")
    # A Flax tree missing a leaf cannot be saved.
    model = convert.from_canonical(params, blank)
    del model.params["spinn"]["reduce"]["track"]
    with pytest.raises(ParamError, match="spinn/reduce/track/kernel"):
        convert.to_canonical(model)


def test_runner_arguments_are_checked(small_config):
    params = init_params(small_config, seed=2)
    with pytest.raises(TypeError, match="unknown JAX runner options"):
        Runner(params, small_config, xla=True)
    with pytest.raises(ValueError, match="unknown stack layout"):
        Runner(params, small_config, layout="linked")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        Runner(params, small_config, device="tpu")
    with pytest.raises(RuntimeError, match="set_optimizer"):
        Runner(params, small_config).train_step(None)
    # float64 without JAX's 64-bit mode would silently compute in float32: refused.
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="JAX_ENABLE_X64"):
            Runner(params, small_config, dtype="float64")
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_runner_does_not_share_memory_with_the_given_arrays(small_config, small_batch):
    params = init_params(small_config, seed=2)
    before = {name: value.copy() for name, value in params.items()}
    runner = Runner(params, small_config)
    snapshot = runner.get_params()
    runner.set_optimizer("sgd", lr=1.0)
    runner.train_step(small_batch)  # donates the weights: XLA may overwrite their buffers
    for name in params:
        assert np.array_equal(params[name], before[name]), name
        assert np.array_equal(snapshot[name], before[name]), name
    assert not np.array_equal(runner.get_params()["reduce.left.kernel"], before["reduce.left.kernel"])


# --------------------------------------------------------------------------
# Dropout: training only
# --------------------------------------------------------------------------


def test_dropout_acts_in_training_only(small_config, small_batch):
    params = init_params(small_config, seed=4, dtype=np.float64)
    noisy = Runner(params, small_config, dtype="float64", dropout=0.5)
    ref = reference.forward(params, small_config, small_batch)
    # Eval mode (encode, loss_and_grads): no dropout at all.
    for got, want in zip(noisy.encode(small_batch), (ref.premise, ref.hypothesis, ref.logits)):
        assert max_abs_err(got, want) <= 1e-12
    ref_loss = reference.loss(params, small_config, small_batch)
    assert abs(noisy.loss_and_grads(small_batch)[0] - ref_loss) <= 1e-12

    # Training mode: masks drawn from (seed, step); lr 0 keeps the weights.
    noisy.set_optimizer("sgd", lr=0.0)
    losses = [noisy.train_step(small_batch) for _ in range(2)]
    assert abs(losses[0] - ref_loss) > 1e-3 and losses[0] != losses[1]
    again = Runner(params, small_config, dtype="float64", dropout=0.5)
    again.set_optimizer("sgd", lr=0.0)
    assert again.train_step(small_batch) == losses[0]  # same seed, same step: same masks

    # The model: training=True with rate 0 is eval mode exactly; with a rate, dropout acts.
    arrays = tuple(jnp.asarray(getattr(small_batch, n)) for n in
                   ("premise_tokens", "premise_transitions", "hypothesis_tokens", "hypothesis_transitions"))
    plain = SNLIClassifier(small_config, encoder=SPINN, dtype=jnp.float64)
    dropped = SNLIClassifier(small_config, encoder=SPINN, dropout_rate=0.5, dtype=jnp.float64)

    @jax.jit  # one compilation for the three forward passes
    def logits(p, key):
        def forward(module, **how):
            return module.apply({"params": p}, *arrays, **how)[2]

        return (forward(plain.clone(training=True), rngs={"dropout": key}), forward(plain),
                forward(dropped.clone(training=True), rngs={"dropout": key}))

    plain_train, plain_eval, dropped_train = logits(convert.from_canonical(params, train.Model(plain)).params,
                                                    jax.random.key(0))
    assert np.array_equal(plain_train, plain_eval)
    assert max_abs_err(dropped_train, ref.logits) > 1e-3


# --------------------------------------------------------------------------
# Dtypes end to end
# --------------------------------------------------------------------------


@pytest.mark.parametrize("transition_weight", [0.0, 0.5], ids=["plain", "supervised"])
@pytest.mark.parametrize("dtype,other", [("float32", "f64"), ("float64", "f32")])
def test_training_step_computes_in_one_dtype(dtype, other, transition_weight, small_config, small_batch):
    """With x64 on (conftest), nothing in the float32 step is promoted to
    float64 (no Python float or default-dtype array sneaks in), and the
    float64 step holds no float32; the supervised transition loss included."""
    config = small_config.replace(transition_head=transition_weight > 0)
    runner = Runner(init_params(config, seed=5), config, dtype=dtype, transition_weight=transition_weight)
    runner.set_optimizer("adam", lr=0.01, weight_decay=0.01)
    jaxpr = str(runner.trace("train_step", small_batch).jaxpr)
    assert f"{dtype[0]}{dtype[-2:]}[" in jaxpr.replace("float", "f")  # sanity: the dtype appears
    assert f"{other}[" not in jaxpr


# --------------------------------------------------------------------------
# Optimizers: optax, the shared definitions, frozen weights, state
# --------------------------------------------------------------------------


def test_head_trains_freezes_and_keeps_optimizer_state(vocab, small_batch):
    """The head's two weights are ordinary canonical parameters: the
    supervised loss moves them, ``frozen`` keeps them, and the optimizer state
    holds their slots (in the shared layout) exactly when they train."""
    config = head_config(len(vocab))
    params = head_params(config, seed=6, dtype=np.float64)
    trained = Runner(params, config, dtype="float64", transition_weight=0.5)
    trained.set_optimizer("adam", lr=0.01)
    trained.train_step(small_batch)
    assert {f"m/{name}" for name in HEAD} <= set(trained.optimizer_state())
    assert all(not np.array_equal(trained.get_params()[name], params[name]) for name in HEAD)

    frozen = Runner(params, config, dtype="float64", transition_weight=0.5)
    frozen.set_optimizer("adam", lr=0.01, frozen=HEAD)
    frozen.train_step(small_batch)
    assert not {f"m/{name}" for name in HEAD} & set(frozen.optimizer_state())
    for name in HEAD:
        assert np.array_equal(frozen.get_params()[name], params[name]), name
    assert not np.array_equal(frozen.get_params()["tracker.kernel_hidden"], params["tracker.kernel_hidden"])


# --------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------


def test_device_argument(small_config, small_batch, device):
    params = init_params(small_config, seed=8, dtype=np.float64)
    runner = Runner(params, small_config, dtype="float64", device=device)
    leaf = jax.tree_util.tree_leaves(runner.model.params)[0]
    assert leaf.devices() == {jax.devices(device)[0]}
    assert runner.layout == DEFAULT_LAYOUT
    try:
        gpu = jax.devices("gpu")
    except RuntimeError:
        gpu = []
    if gpu:
        cpu = Runner(params, small_config, dtype="float64", device="cpu")
        on_gpu = Runner(params, small_config, dtype="float64", device="gpu")
        for a, b in zip(on_gpu.encode(small_batch), cpu.encode(small_batch)):
            assert max_abs_err(a, b) <= 1e-12
        assert isinstance(jax.devices("gpu")[0].memory_stats()["peak_bytes_in_use"], int)
    else:
        with pytest.raises(ValueError, match="no JAX gpu device"):
            Runner(params, small_config, device="gpu")


# What `bench explain` must report of JAX (tests/test_explain.py calls these).

def check_explain(r: dict, batch: dict) -> None:
    for fn in ("encode", "loss_and_grads"):
        assert r[fn]["eqns"] > 0 and all(n > 0 for n in r[fn]["scan_body_eqns"])
        assert r[fn]["compile_s"] > 0 and r[fn]["call_s"] > 0
    assert r["encode"]["scans"] == 1 and r["loss_and_grads"]["scans"] == 2  # forward, reversed
    assert r["encode"]["scan_lengths"] == [batch["num_steps"]]


def check_bad_input(t: dict, k: dict) -> None:
    """No error at all."""
    assert t["outcome"].startswith("ran") and k["outcome"].endswith("no (NaN)")
