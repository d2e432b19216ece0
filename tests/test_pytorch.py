"""PyTorch-specific checks (the agreement with the reference, and the one
host read per step with a choice, live in test_contract.py): the .npz round
trip, dropout, the per-batch graph, the cells' batching, float64 end to end,
and for parses decided by the model: the count of steps with a choice, a
graph that follows the chosen trees, differentiable logprob and entropy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from impl_pytorch import convert, train
from impl_pytorch.cells import Reduce
from impl_pytorch.dropout import seeded
from impl_pytorch.runner import Runner
from shared import parsing, reference
from shared.batching import make_pair_batch
from shared.compare import GRAD_REL_TOL_F64, grad_rel_errs, max_abs_err
from shared.params import ParamError, init_params, load_params, save_params
from shared.runner import CompileStats
from shared.snli import Pair
from shared.transitions import PAD, REDUCE, SHIFT
from tests.helpers import assert_npz_files_identical, shaped_sentence, small_config_for, steps_with_a_choice


def build(params, config, dtype: str = "float32", family: str = "lists") -> torch.nn.Module:
    """The classifier a runner builds (on the CPU, in ``dtype``, ``params`` copied in by convert.from_canonical)."""
    return Runner(params, config, dtype=dtype, family=family).model


def labels_of(batch) -> torch.Tensor:
    return torch.as_tensor(batch.labels.astype(np.int64))


# --------------------------------------------------------------------------
# Canonical .npz
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("tracker_dim,mlp_layers", [(3, 2), (0, 0)], ids=["tracker", "bare"])
def test_load_save_npz_bit_identical(tmp_path, vocab, dtype, tracker_dim, mlp_layers):
    config = small_config_for(len(vocab), tracker_dim=tracker_dim, mlp_layers=mlp_layers)
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    save_params(first, init_params(config, seed=1, dtype=dtype), config, vocab.words)
    loaded = load_params(first)
    model = build(loaded.params, loaded.config, dtype=np.dtype(dtype).name)
    save_params(second, convert.to_canonical(model), model.config, loaded.vocab)
    assert_npz_files_identical(first, second)


def test_kernels_are_transposed_into_linear_weights(small_config):
    params = init_params(small_config, seed=2)
    model = build(params, small_config)
    state = model.state_dict()
    for name, (torch_name, transposed) in convert.name_map(small_config).items():
        expected = params[name].T if transposed else params[name]
        assert np.array_equal(state[torch_name].numpy(), expected), name
    # nn.Linear computes x @ weight.T: the canonical x @ kernel
    x = np.random.default_rng(0).standard_normal((4, small_config.hidden_dim)).astype(np.float32)
    got = model.spinn.reduce.left(torch.from_numpy(x)).detach().numpy()
    want = x @ params["reduce.left.kernel"] + params["reduce.left.bias"]
    assert max_abs_err(got, want) <= 1e-6


def test_model_does_not_share_memory_with_the_given_arrays(small_config, small_batch):
    params = init_params(small_config, seed=2)
    before = {name: value.copy() for name, value in params.items()}
    runner = Runner(params, small_config)
    runner.set_optimizer("sgd", lr=1.0)
    runner.train_step(small_batch)
    for name in params:
        assert np.array_equal(params[name], before[name]), name
    assert not np.array_equal(runner.get_params()["reduce.left.kernel"], before["reduce.left.kernel"])


@pytest.mark.parametrize("name", ["reduce.right.kernel", "tracker.bias", "mlp.1.kernel"])
def test_missing_entry_is_named(small_config, name):
    params = init_params(small_config, seed=2)
    model = build(params, small_config)
    del params[name]
    with pytest.raises(ParamError, match=f"missing parameter '{name}'"):
        convert.from_canonical(params, model)
    with pytest.raises(ParamError, match=f"missing parameter '{name}'"):
        Runner(params, small_config)


@pytest.mark.parametrize("name", ["tracker.kernel_input", "projection.bias", "output.kernel"])
def test_wrong_shape_is_named(small_config, name):
    params = init_params(small_config, seed=2)
    model = build(params, small_config)
    params[name] = params[name].T if params[name].ndim == 2 else params[name][:-1]
    with pytest.raises(ParamError, match=f"'{name}' has shape"):
        convert.from_canonical(params, model)


def test_bad_file_entries_are_named(tmp_path, small_config, vocab):
    good = tmp_path / "good.npz"
    save_params(good, init_params(small_config, seed=2), small_config, vocab.words)
    arrays = dict(np.load(good, allow_pickle=False))
    missing, wrong = dict(arrays), dict(arrays)
    del missing["reduce.track.kernel"]
    wrong["embed.embedding"] = wrong["embed.embedding"][:, :-1]
    np.savez(tmp_path / "missing.npz", **missing)
    np.savez(tmp_path / "wrong.npz", **wrong)
    with pytest.raises(ParamError, match="reduce.track.kernel"):
        load_params(tmp_path / "missing.npz")
    with pytest.raises(ParamError, match=r"'embed.embedding' has shape \(\d+, 5\), expected \(\d+, 6\)"):
        load_params(tmp_path / "wrong.npz")


# --------------------------------------------------------------------------
# Dropout: training only
# --------------------------------------------------------------------------


def test_dropout_acts_in_training_only(small_config, small_batch):
    params = init_params(small_config, seed=3, dtype=np.float64)
    noisy = Runner(params, small_config, dtype="float64", dropout=0.5)
    plain = Runner(params, small_config, dtype="float64", dropout=0.0)
    device = torch.device("cpu")
    inputs = small_batch.arrays()[:4]  # tokens and transitions, premise then hypothesis

    # Eval mode: deterministic, and the same as a model without dropout.
    first, second, without = noisy.encode(small_batch), noisy.encode(small_batch), plain.encode(small_batch)
    for a, b, c in zip(first, second, without):
        assert np.array_equal(a, b) and np.array_equal(a, c)

    # Train mode with dropout: each (seed, step) draws its own masks,
    # and the same (seed, step) draws the same ones.
    def train_logits(runner, seed, step):
        runner.model.train()
        with torch.no_grad(), seeded(seed, step, device):
            return runner.model(*inputs)[2].numpy()

    rng_state = torch.get_rng_state()
    step0, step1, other_seed = (train_logits(noisy, 0, 0), train_logits(noisy, 0, 1), train_logits(noisy, 1, 0))
    assert np.array_equal(torch.get_rng_state().numpy(), rng_state.numpy())  # the caller's RNG is untouched
    assert max_abs_err(step0, step1) > 1e-3
    assert max_abs_err(step0, other_seed) > 1e-3
    assert max_abs_err(step0, first[2]) > 1e-3
    assert np.array_equal(step0, train_logits(noisy, 0, 0))

    # Train mode with dropout 0 is eval mode exactly.
    assert np.array_equal(train_logits(plain, 0, 0), without[2])

    # The Runner's training steps: repeatable from the seed, different across seeds.
    def first_losses(seed):
        runner = Runner(params, small_config, dtype="float64", dropout=0.5, seed=seed)
        runner.set_optimizer("sgd", lr=0.0)  # lr 0: only the dropout masks change between steps
        return [runner.train_step(small_batch) for _ in range(2)]

    a, b, c = first_losses(0), first_losses(0), first_losses(1)
    assert a == b
    assert a[0] != a[1] and a[0] != c[0]
    ref_loss = reference.loss(params, small_config, small_batch)
    plain.set_optimizer("sgd", lr=0.0)
    assert abs(plain.train_step(small_batch) - ref_loss) <= 1e-12  # dropout 0 trains on the eval loss


# --------------------------------------------------------------------------
# The graph is built from the data, per batch
# --------------------------------------------------------------------------


def autograd_nodes(tensor: torch.Tensor) -> list:
    """Every autograd node reachable from tensor.grad_fn."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return list(seen)


def predicted_nonlinearities(transitions: np.ndarray) -> tuple[int, int]:
    """(tanh nodes, sigmoid nodes) the graph must hold for sentences with
    these transitions <int>[S, T], encoded as one batch.

    One batched Tracker call per step where some sentence acts (2 tanh,
    3 sigmoid), one batched Reduce call per step where some sentence
    reduces (2 tanh, 4 sigmoid). A tracker call reaches the loss only when
    one of its sentences reduces at that step or later (otherwise its state
    is never read).
    """
    acts = transitions != PAD
    reduces = transitions == REDUCE
    reduces_now_or_later = np.flip(np.cumsum(np.flip(reduces, axis=1), axis=1), axis=1) > 0
    tracker_steps = int(np.any(acts & reduces_now_or_later, axis=0).sum())
    reduce_steps = int(np.any(reduces, axis=0).sum())
    return 2 * tracker_steps + 2 * reduce_steps, 3 * tracker_steps + 4 * reduce_steps


def count(nodes, name: str) -> int:
    return sum(node.name() == name for node in nodes)


def test_graph_is_rebuilt_per_batch_from_the_trees(small_config, vocab):
    words = vocab.words[2:8]  # six words: 11 steps, N = 6 and T = 11 for both batches
    same_shape = [Pair(shaped_sentence(words, "left"), shaped_sentence(words, "left"), 0, f"l{i}")
                  for i in range(3)]
    mixed = [Pair(shaped_sentence(words, "left"), shaped_sentence(words, "right"), 0, f"m{i}")
             for i in range(3)]
    left_batch, mixed_batch = make_pair_batch(same_shape, vocab), make_pair_batch(mixed, vocab)
    assert left_batch.premise_transitions.shape == mixed_batch.premise_transitions.shape == (3, 11)

    model = build(init_params(small_config, seed=4), small_config)

    def nonlinearities(pair_batch):
        nodes = autograd_nodes(train.batch_loss(model, pair_batch.arrays()))  # eval mode
        return count(nodes, "TanhBackward0"), count(nodes, "SigmoidBackward0"), len(nodes)

    def transitions(pair_batch):
        return np.concatenate([pair_batch.premise_transitions, pair_batch.hypothesis_transitions])

    left_counts, mixed_counts = nonlinearities(left_batch), nonlinearities(mixed_batch)
    # Left-branching (S S R S R ...): 11 tracker steps, REDUCE on steps 2, 4, 6, 8, 10.
    assert predicted_nonlinearities(transitions(left_batch)) == (2 * 11 + 2 * 5, 3 * 11 + 4 * 5)
    # Adding right-branching (S S S S S S R R R R R): REDUCE also on steps 7 and 9.
    assert predicted_nonlinearities(transitions(mixed_batch)) == (2 * 11 + 2 * 7, 3 * 11 + 4 * 7)
    assert left_counts[:2] == predicted_nonlinearities(transitions(left_batch))
    assert mixed_counts[:2] == predicted_nonlinearities(transitions(mixed_batch))
    # Same array shapes, different trees, different graphs; and the first
    # batch again gives its own graph again (nothing was kept from before).
    assert left_counts[2] != mixed_counts[2]
    assert nonlinearities(left_batch) == left_counts


def test_graph_matches_prediction_on_real_parses(small_config, small_batch):
    model = build(init_params(small_config, seed=4), small_config)
    nodes = autograd_nodes(train.batch_loss(model, small_batch.arrays()))
    transitions = np.concatenate([small_batch.premise_transitions, small_batch.hypothesis_transitions])
    assert (count(nodes, "TanhBackward0"), count(nodes, "SigmoidBackward0")) == \
        predicted_nonlinearities(transitions)


# --------------------------------------------------------------------------
# The pieces
# --------------------------------------------------------------------------


def test_cells_batch_the_items_of_the_lists_and_give_each_its_row_back():
    """Reduce called as a module (lists.py's way) on K items stacks them into
    rows, composes them in one call and gives item k row k back: the same
    numbers as compose on the rows already batched (masked.py's and levels.py's way)."""
    torch.manual_seed(0)
    H, D, K = 5, 3, 4
    reduce = Reduce(H, D, dtype=torch.float64)
    rows = [torch.randn(K, H, dtype=torch.float64) for _ in range(4)]
    tracking = torch.randn(K, D, dtype=torch.float64)
    lefts, rights = list(zip(rows[0].unbind(0), rows[1].unbind(0))), list(zip(rows[2].unbind(0), rows[3].unbind(0)))
    items = reduce(lefts, rights, list(tracking.unbind(0)))
    h, c = reduce.compose((rows[0], rows[1]), (rows[2], rows[3]), tracking)
    assert len(items) == K
    for k, (h_k, c_k) in enumerate(items):
        assert h_k.shape == c_k.shape == (H,)
        assert torch.equal(h_k, h[k]) and torch.equal(c_k, c[k])


def test_reduce_matches_the_spec_formula():
    torch.manual_seed(0)
    H, D = 4, 3
    reduce = Reduce(H, D, dtype=torch.float64)
    left = (torch.randn(H, dtype=torch.float64), torch.randn(H, dtype=torch.float64))
    right = (torch.randn(H, dtype=torch.float64), torch.randn(H, dtype=torch.float64))
    tracking = torch.randn(D, dtype=torch.float64)
    [(h, c)] = reduce([left], [right], [tracking])
    z = reduce.left(left[0]) + reduce.right(right[0]) + reduce.track(tracking)
    a, i, f1, f2, o = z.detach().split(H)
    c_want = a.tanh() * i.sigmoid() + f1.sigmoid() * left[1] + f2.sigmoid() * right[1]
    assert torch.allclose(c, c_want, rtol=0, atol=1e-14)
    assert torch.allclose(h, o.sigmoid() * c_want.tanh(), rtol=0, atol=1e-14)


def test_pad_anywhere_changes_nothing(small_config, vocab):
    """PAD in the middle of a sequence is a no-op too, for the tracker as well."""
    params = init_params(small_config, seed=5, dtype=np.float64)
    model = build(params, small_config, dtype="float64")
    model.eval()
    ops = [SHIFT, SHIFT, REDUCE, SHIFT, SHIFT, REDUCE, REDUCE]
    padded = [PAD, SHIFT, PAD, PAD, SHIFT, REDUCE, PAD, SHIFT, SHIFT, PAD, REDUCE, REDUCE, PAD]
    tokens = np.array([[5, 6, 7, 8]] * 2)
    transitions = np.array([ops + [PAD] * 6, padded])
    with torch.no_grad():
        got = model.encode(torch.as_tensor(tokens), transitions).numpy()
    want = reference.encode(params, small_config, tokens[:1], transitions[:1])
    assert max_abs_err(got[0], want[0]) <= 1e-14
    assert max_abs_err(got[1], want[0]) <= 1e-14


@pytest.mark.parametrize("transitions,message", [
    ([SHIFT, REDUCE, SHIFT, PAD], "sentence 0, step 1: REDUCE with fewer than two items"),
    ([SHIFT, SHIFT, SHIFT, REDUCE], "sentence 0: 3 SHIFTs, but the batch has N=2 token slots"),
    ([SHIFT, SHIFT, PAD, PAD], "sentence 0: transitions leave 2 items on the stack"),
    ([SHIFT, SHIFT, 3, PAD], "sentence 0, step 2: unknown transition code 3"),
])
def test_bad_transitions_raise(small_config, transitions, message):
    model = build(init_params(small_config, seed=5), small_config)
    with torch.no_grad(), pytest.raises(ValueError, match=message):
        model.encode(torch.tensor([[5, 6]]), np.array([transitions]))


# --------------------------------------------------------------------------
# float64 end to end; devices; optimizers
# --------------------------------------------------------------------------


def test_loss_and_grads_changes_nothing(small_config, small_batch):
    params = init_params(small_config, seed=7, dtype=np.float64)
    runner = Runner(params, small_config, dtype="float64", dropout=0.5)
    first = runner.loss_and_grads(small_batch)
    second = runner.loss_and_grads(small_batch)  # eval mode: no dropout, and grads do not accumulate
    assert first[0] == second[0]
    for name in first[1]:
        assert np.array_equal(first[1][name], second[1][name]), name
    assert all(p.grad is None for p in runner.model.parameters())
    for name, value in runner.get_params().items():
        assert np.array_equal(value, params[name]), name


def test_device_argument(small_config, small_batch):
    params = init_params(small_config, seed=8, dtype=np.float64)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        Runner(params, small_config, device="tpu")
    if torch.cuda.is_available():
        gpu = Runner(params, small_config, dtype="float64", device="gpu")
        assert next(gpu.model.parameters()).device.type == "cuda"
        cpu = Runner(params, small_config, dtype="float64", device="cpu")
        for a, b in zip(gpu.encode(small_batch), cpu.encode(small_batch)):
            assert max_abs_err(a, b) <= 1e-12
    else:
        with pytest.raises(ValueError, match="no CUDA device"):
            Runner(params, small_config, device="gpu")


def test_optimizers_are_torch_optim(small_config):
    runner = Runner(init_params(small_config, seed=9), small_config)
    runner.set_optimizer("sgd", lr=0.1, momentum=0.9)
    assert isinstance(runner.optimizer, train.Optimizer)
    assert (runner.optimizer.name, runner.optimizer.frozen) == ("sgd", ())
    assert runner.optimizer.hyper["momentum"] == 0.9 and runner.optimizer.hyper["weight_decay"] == 0.0
    inner = runner.optimizer.torch_optimizer
    assert isinstance(inner, torch.optim.SGD) and inner.defaults["momentum"] == 0.9
    runner.set_optimizer("adam", lr=0.1, frozen=("embed.embedding",))
    inner = runner.optimizer.torch_optimizer
    assert isinstance(inner, torch.optim.Adam) and runner.optimizer.frozen == ("embed.embedding",)
    assert inner.defaults["eps"] == 1e-8  # the shared default, whatever torch's is
    given = {id(param) for group in inner.param_groups for param in group["params"]}
    assert id(runner.model.embed.weight) not in given and len(given) == len(list(runner.model.parameters())) - 1
    runner.set_optimizer("rmsprop", lr=0.1)
    inner = runner.optimizer.torch_optimizer
    assert isinstance(inner, torch.optim.RMSprop)
    assert inner.defaults["alpha"] == 0.9  # shared rho, not torch's 0.99
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'"):
        runner.set_optimizer("adagrad", lr=0.1)
    assert runner.compile_stats() == CompileStats()  # eager: nothing traced or compiled


# --------------------------------------------------------------------------
# Parses decided by the model (docs/spec.md §7)
# --------------------------------------------------------------------------


def head_setup(vocab, seed: int, scale: float = 8.0, dtype=np.float64):
    """A small model with a transition head whose kernel is scaled up, so that
    both actions win at some steps."""
    config = small_config_for(len(vocab), tracker_dim=4).replace(transition_head=True)
    params = init_params(config, seed=seed, dtype=dtype)
    params["tracker.transition.kernel"] = (params["tracker.transition.kernel"] * scale).astype(dtype)
    return config, params


def test_steps_with_a_choice_replay():
    """The test's own count: a step is a choice where the buffer is not empty
    and the stack holds two items or more."""
    left = [SHIFT, SHIFT, REDUCE, SHIFT, REDUCE]  # step 2 only (stack a b, buffer c)
    right = [SHIFT, SHIFT, SHIFT, REDUCE, REDUCE]  # step 2 only (at step 3 the buffer is empty)
    assert steps_with_a_choice(np.array([left])) == 1
    assert steps_with_a_choice(np.array([right])) == 1
    assert steps_with_a_choice(np.array([[SHIFT, PAD, PAD, PAD, PAD], left])) == 1
    assert steps_with_a_choice(np.array([[SHIFT, SHIFT, SHIFT, SHIFT, REDUCE, REDUCE, REDUCE]])) == 2


def test_predicted_graph_follows_the_predicted_trees(vocab, small_batch):
    """The autograd graph of a predicted-mode loss is built from the trees the
    model chose: two heads that parse differently give graphs of different
    sizes, each with exactly the Tracker and Reduce calls its own parses need."""
    config, params = head_setup(vocab, seed=13)
    flipped = dict(params)
    flipped["tracker.transition.kernel"] = -params["tracker.transition.kernel"]
    flipped["tracker.transition.bias"] = params["tracker.transition.bias"] + np.array([0.0, 1.0])
    labels = labels_of(small_batch)

    def graph(weights):
        model = build(weights, config, dtype="float64")
        model.eval()
        encoded, logits = model.parse(*small_batch.arrays()[:4], mode="predicted")
        nodes = autograd_nodes(torch.nn.functional.cross_entropy(logits, labels))
        return encoded.transitions, (count(nodes, "TanhBackward0"), count(nodes, "SigmoidBackward0")), len(nodes)

    first, first_counts, first_size = graph(params)
    second, second_counts, second_size = graph(flipped)
    assert not np.array_equal(first, second)
    assert first_counts == predicted_nonlinearities(first)
    assert second_counts == predicted_nonlinearities(second)
    assert first_counts != second_counts and first_size != second_size


def test_sampled_logprob_and_entropy_are_differentiable(vocab, small_batch):
    """logprob and entropy stay tensors with their graph (REINFORCE needs
    them): the REINFORCE loss built from them has the reference's gradient."""
    config, params = head_setup(vocab, seed=14)
    u = parsing.uniforms_for(small_batch, rows=list(range(small_batch.size)), seed=5)
    baseline, reinforce_weight, entropy_weight = -1.1, 0.8, 0.3
    ref_loss, ref_grads, ref_rewards = reference.reinforce_loss_and_grads(
        params, config, small_batch, u, baseline, reinforce_weight, entropy_weight)

    model = build(params, config, dtype="float64")
    model.eval()
    encoded, logits = model.parse(*small_batch.arrays()[:4], mode="sampled", uniforms=u)
    assert encoded.logprob.requires_grad and encoded.entropy.requires_grad
    B = small_batch.size
    ce = torch.nn.functional.cross_entropy(logits, labels_of(small_batch), reduction="none")
    rewards = -ce.detach()
    logprob = encoded.logprob[:B] + encoded.logprob[B:]
    entropy = encoded.entropy[:B] + encoded.entropy[B:]
    loss = (ce.mean() - reinforce_weight * ((rewards - baseline) * logprob).mean()
            - entropy_weight * entropy.mean())
    loss.backward()
    grads = convert.grads_to_canonical(model, {name: param.grad for name, param in model.named_parameters()})
    assert abs(loss.item() - ref_loss) <= 1e-12
    assert max_abs_err(rewards.numpy(), ref_rewards) <= 1e-12
    errors = grad_rel_errs(grads, ref_grads)
    assert max(errors.values()) <= GRAD_REL_TOL_F64, errors
    assert np.any(grads["tracker.transition.kernel"] != 0)


def test_head_loads_trains_and_saves(tmp_path, vocab, small_batch):
    """The head's two entries travel like every other weight: .npz round trip,
    optimizer state, frozen names."""
    config, params = head_setup(vocab, seed=15, dtype=np.float32)
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    save_params(first, params, config, vocab.words)
    loaded = load_params(first)
    model = build(loaded.params, loaded.config)
    assert model.spinn.tracker.transition is not None
    save_params(second, convert.to_canonical(model), loaded.config, loaded.vocab)
    assert_npz_files_identical(first, second)

    runner = Runner(params, config, transition_weight=1.0)
    runner.set_optimizer("adam", lr=0.01)
    runner.train_step(small_batch)
    state = runner.optimizer_state()
    assert np.any(state["m/tracker.transition.kernel"] != 0) and "v/tracker.transition.bias" in state
    assert not np.array_equal(runner.get_params()["tracker.transition.kernel"], params["tracker.transition.kernel"])

    frozen = Runner(params, config, transition_weight=1.0)
    frozen.set_optimizer("sgd", lr=0.1, frozen=("tracker.transition.kernel", "tracker.transition.bias"))
    frozen.train_step(small_batch)
    after = frozen.get_params()
    assert np.array_equal(after["tracker.transition.kernel"], params["tracker.transition.kernel"])
    assert np.array_equal(after["tracker.transition.bias"], params["tracker.transition.bias"])
    assert not np.array_equal(after["tracker.kernel_hidden"], params["tracker.kernel_hidden"])


def test_transition_weight_zero_leaves_the_head_out(vocab, small_batch):
    """Weight 0 is the plain loss (the gold path, head untouched: zero
    gradient); the weight changes the loss by exactly weight × transition loss."""
    config, params = head_setup(vocab, seed=16)
    plain_loss, plain_grads = Runner(params, config, dtype="float64").loss_and_grads(small_batch)
    assert not np.any(plain_grads["tracker.transition.kernel"]) and not np.any(plain_grads["tracker.transition.bias"])
    assert abs(plain_loss - reference.loss(params, config, small_batch)) <= 1e-12
    weighted, _ = Runner(params, config, dtype="float64", transition_weight=2.0).loss_and_grads(small_batch)
    half, _ = Runner(params, config, dtype="float64", transition_weight=1.0).loss_and_grads(small_batch)
    assert abs((weighted - plain_loss) - 2 * (half - plain_loss)) <= 1e-12
    assert weighted > half > plain_loss


# What `bench explain` must report of PyTorch (tests/test_explain.py calls these).

def check_explain(r: dict, batch: dict) -> None:
    assert r["autograd_nodes"] > 0 and r["parameters_reached"] > 0
    assert r["python_steps"] == batch["num_steps"] == 9
    assert r["tracker_calls"] > 0 and r["reduce_calls"] > 0 and r["traces"] == 0
    assert r["forward_s"] > 0 and r["backward_s"] >= 0


def check_bad_input(t: dict, k: dict) -> None:
    """An exception from a line of your own code."""
    assert t["outcome"] == "raised" and t["where"].startswith("impl_pytorch/lists.py, in _shift_or_reduce")
    assert "REDUCE with fewer than two items" in t["error"]
    assert k["outcome"] == "raised" and k["where"].startswith("impl_pytorch/classifier.py, in _leaves")
