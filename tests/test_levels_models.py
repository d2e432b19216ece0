"""The level-scheduled encoders agree with their framework's masked-step SPINN
in float64, values and gradients (same weights, gold parses)."""

import numpy as np
import pytest

from shared.levels import schedule, segments, uniform
from shared.params import ModelConfig
from shared.transitions import PAD, plain_transitions

from .helpers import F64_TOL

N = 9
SHAPES = [("left", 9), ("right", 5), ("balanced", 7), ("left", 1), ("balanced", 9), ("right", 2)]


def _transitions():
    T = 2 * N - 1
    rows = [plain_transitions(n, s) + [PAD] * (T - 2 * n + 1) for s, n in SHAPES]
    rows[1][3:3] = [PAD]  # a PAD inside a sequence changes nothing
    rows[1] = rows[1][:T]
    return np.array(rows, np.int32)


@pytest.mark.parametrize("tracker_dim", [0, 8])
def test_jax_levels_match_masked_scan(tracker_dim):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from impl_jax.levels import LevelSPINN
    from impl_jax.model import SPINN

    rng = np.random.default_rng(0)
    tr = _transitions()
    cfg = ModelConfig(vocab_size=10, hidden_dim=6, tracker_dim=tracker_dim)
    leaves = jnp.asarray(rng.standard_normal((len(SHAPES), N, 12)))
    masked = SPINN(cfg, param_dtype=jnp.float64)
    params = masked.init(jax.random.PRNGKey(0), leaves, jnp.asarray(tr), method=SPINN.encode)
    params = jax.tree_util.tree_map(lambda a: a + 0.1 * jnp.asarray(rng.standard_normal(a.shape)), params)
    sched = {k: (jnp.asarray(v) if hasattr(v, "shape") else v)
             for k, v in uniform(schedule(tr, N, tracker_dim > 0, (4,)), (4,)).items()}
    levels = LevelSPINN(cfg, param_dtype=jnp.float64)

    def want(p):
        return masked.apply(p, leaves, jnp.asarray(tr), method=SPINN.encode)

    def got(p):
        return levels.apply(p, leaves, sched, method=LevelSPINN.encode_scheduled)

    assert float(jnp.max(jnp.abs(jax.jit(got)(params) - want(params)))) < F64_TOL
    sch = schedule(tr, N, tracker_dim > 0, (2, 4))
    segs = [{k: (jnp.asarray(v) if hasattr(v, "shape") else v) for k, v in seg.items()} for seg in segments(sch)]
    by_runs = levels.apply(params, leaves, segs, sch.n_rows, jnp.asarray(sch.roots), method=LevelSPINN.encode_segments)
    assert float(jnp.max(jnp.abs(by_runs - want(params)))) < F64_TOL
    g_want = jax.grad(lambda p: jnp.sum(want(p) ** 2))(params)
    g_got = jax.grad(lambda p: jnp.sum(got(p) ** 2))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g_want), jax.tree_util.tree_leaves(g_got)):
        assert float(jnp.max(jnp.abs(a - b))) < F64_TOL


@pytest.mark.parametrize("memory", ["tensor_array", "dense"])
@pytest.mark.parametrize("tracker_dim", [0, 8])
def test_tensorflow_levels_match_while_loop(tracker_dim, memory):
    tf = pytest.importorskip("tensorflow")

    from impl_tensorflow.levels import LevelSPINN, level_inputs
    from shared.levels import ragged_arrays

    rng = np.random.default_rng(1)
    tr = _transitions()
    cfg = ModelConfig(vocab_size=10, hidden_dim=6, tracker_dim=tracker_dim)
    leaves = tf.constant(rng.standard_normal((len(SHAPES), N, 12)))
    model = LevelSPINN(cfg, tf.float64, memory)
    for v in model.trainable_variables:
        v.assign(0.3 * rng.standard_normal(v.shape))
    levels = [tf.constant(a) for a in level_inputs(ragged_arrays(tr, N, tracker_dim > 0)[0])]
    with tf.GradientTape(persistent=True) as tape:
        want = model.encode(leaves, tf.constant(tr))
        got = tf.function(lambda x: model.encode_program(x, levels))(leaves)
        loss_want, loss_got = tf.reduce_sum(want ** 2), tf.reduce_sum(got ** 2)
    assert float(tf.reduce_max(tf.abs(got - want))) < F64_TOL
    for a, b in zip(tape.gradient(loss_want, model.trainable_variables),
                    tape.gradient(loss_got, model.trainable_variables)):
        assert float(tf.reduce_max(tf.abs(a - b))) < F64_TOL


# --------------------------------------------------------------------------
# Through the runner: the registry's jax-levels and tensorflow-levels
# --------------------------------------------------------------------------


def test_registered_as_opt_in_levels_variants():
    from bench import frameworks

    assert frameworks.resolve("jax-levels") == ("jax", {"algorithm": "levels"})
    assert frameworks.resolve("tensorflow-levels") == ("tensorflow", {"algorithm": "levels"})
    assert {"jax-levels", "tensorflow-levels"} <= frameworks.OPT_IN
    assert frameworks.matrix()[frameworks.LEVELS, "jax"] == ["jax-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "tensorflow"] == ["tensorflow-levels"]
    assert frameworks.matrix()[frameworks.LEVELS, "dynet"].startswith("not built")


@pytest.mark.parametrize("name", ["jax-levels", "tensorflow-levels"])
def test_levels_runner_bounds_its_programs_and_records_the_schedule(name, device, sample_pairs, vocab):
    """Decided parses are refused by the runner (the framework's own runner
    keeps them); batches of one (B, N, T) meet one program (JAX, with the
    tracker; TensorFlow: one trace for all); the last batch's level count
    and padding are in ``last_graph``."""
    from bench import frameworks
    from shared.batching import make_batches
    from shared.params import init_params

    from .helpers import head_config

    config = head_config(len(vocab))
    params = init_params(config, seed=3, dtype=np.float32)
    runner = frameworks.make_runner(name, params, config, dtype="float32", device=device)
    family = frameworks.make_runner(name.split("-")[0], params, config, dtype="float32", device=device)
    assert family.supports("predicted parse") and not runner.supports("predicted parse")
    assert type(runner).supports("sampled parse")  # the class answers for the framework, the runner for its variant
    batches = [b for b in make_batches(sample_pairs, vocab, batch_size=4) if b.num_tokens == 16 and b.size == 4]
    assert len(batches) >= 3
    with pytest.raises(NotImplementedError, match="no predicted parse: .*gold"):
        runner.parse(batches[0], "predicted")
    with pytest.raises(NotImplementedError, match="no reinforce: "):
        runner.reinforce_loss_and_grads(batches[0], None, 0.0)
    for batch in batches:
        runner.encode(batch)
        assert runner.last_graph["levels"] > 0 and 0 <= runner.last_graph["level_padding_pct"] < 100
        assert runner.last_phases["schedule"] > 0
    stats = runner.compile_stats()
    if name == "tensorflow-levels":
        assert stats.traces == 1
    else:
        assert stats.traces == len(set(stats.shapes)) <= len(batches)
        # with the tracker a level is a step, its width a class chosen inside the program: one program per bucket
        assert stats.shapes == [("encode", 4, 16, 31, 8)] and stats.traces == 1


@pytest.mark.parametrize("head", [False, True])
def test_jax_width_classes_match_masked_scan(head):
    """The tracker's steps with Reduce on per-step width classes (nn.switch):
    the masked scan's values, gradients and head logits, in float64."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from impl_jax.levels import LevelSPINN
    from impl_jax.model import SPINN
    from shared.levels import class_arrays

    rng = np.random.default_rng(2)
    tr = _transitions()
    T = tr.shape[1]
    cfg = ModelConfig(vocab_size=10, hidden_dim=6, tracker_dim=8, transition_head=head)
    leaves = jnp.asarray(rng.standard_normal((len(SHAPES), N, 12)))
    masked = SPINN(cfg, param_dtype=jnp.float64)
    params = masked.init(jax.random.PRNGKey(0), leaves, jnp.asarray(tr), method=SPINN.encode)
    params = jax.tree_util.tree_map(lambda a: a + 0.1 * jnp.asarray(rng.standard_normal(a.shape)), params)
    arrays = {k: jnp.asarray(v) for k, v in class_arrays(tr, N, n_levels=T, n_nodes=len(SHAPES) * (N - 1))[0].items()}
    levels = LevelSPINN(cfg, param_dtype=jnp.float64)

    def want(p):
        return masked.apply(p, leaves, jnp.asarray(tr), method=SPINN.encode)

    def got(p):
        return levels.apply(p, leaves, arrays, method=LevelSPINN.encode_program)

    assert float(jnp.max(jnp.abs(jax.jit(got)(params) - want(params)))) < F64_TOL
    g_want = jax.grad(lambda p: jnp.sum(want(p) ** 2))(params)
    g_got = jax.grad(lambda p: jnp.sum(got(p) ** 2))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g_want), jax.tree_util.tree_leaves(g_got)):
        assert float(jnp.max(jnp.abs(a - b))) < F64_TOL
    if head:
        parsed = masked.apply(params, leaves, jnp.asarray(tr), "gold", method=SPINN.parse)
        _, logits = levels.apply(params, leaves, arrays, True, method=LevelSPINN.encode_program)
        assert float(jnp.max(jnp.abs(logits - parsed.transition_logits))) < F64_TOL
