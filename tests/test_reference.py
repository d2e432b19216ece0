"""The float64 NumPy reference: the spec's arithmetic by hand, PAD invariance,
and its hand-written gradients against central finite differences: the
supervised loss with and without the transition head, and REINFORCE at fixed
uniform numbers (docs/spec.md §3, §7)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from shared import parsing, reference
from shared.params import ModelConfig, init_params
from shared.transitions import PAD, REDUCE, SHIFT, parse


def sig(x):
    return 1 / (1 + np.exp(-x))


def arrays(sentences, ids, num_tokens, num_steps):
    tokens = np.zeros((len(sentences), num_tokens), np.int32)
    transitions = np.zeros((len(sentences), num_steps), np.int32)
    for row, s in enumerate(sentences):
        tokens[row, :len(s.tokens)] = [ids[w] for w in s.tokens]
        transitions[row, :len(s.transitions)] = s.transitions
    return tokens, transitions


CONFIG = ModelConfig(vocab_size=14, embed_dim=4, hidden_dim=3, tracker_dim=2, mlp_dim=5, mlp_layers=2)
IDS = {w: i + 2 for i, w in enumerate("abcdefghijkl")}


def test_one_word_sentence_is_its_projected_leaf():
    p = init_params(CONFIG, seed=0, dtype=np.float64)
    tokens, transitions = arrays([parse("c")], IDS, 1, 1)
    h = reference.encode(p, CONFIG, tokens, transitions)[0]
    leaf = p["embed.embedding"][IDS["c"]] @ p["projection.kernel"] + p["projection.bias"]
    np.testing.assert_allclose(h, leaf[:3], rtol=0, atol=1e-15)


def test_two_word_sentence_by_hand():
    """docs/spec.md §3 written out for ( a b ): tracker runs at SHIFT, SHIFT, REDUCE."""
    p = init_params(CONFIG, seed=1, dtype=np.float64)
    H, D = 3, 2
    leaves = [p["embed.embedding"][IDS[w]] @ p["projection.kernel"] + p["projection.bias"] for w in "ab"]
    (ha, ca), (hb, cb) = [(v[:H], v[H:]) for v in leaves]
    zero = np.zeros(H)
    ht, ct = np.zeros(D), np.zeros(D)
    for b, s1, s2 in ((ha, zero, zero), (hb, ha, zero), (zero, hb, ha)):
        z = np.concatenate([b, s1, s2]) @ p["tracker.kernel_input"] + ht @ p["tracker.kernel_hidden"] + p["tracker.bias"]
        i, f, g, o = np.split(z, 4)
        ct = sig(f) * ct + sig(i) * np.tanh(g)
        ht = sig(o) * np.tanh(ct)
    z = (ha @ p["reduce.left.kernel"] + p["reduce.left.bias"] + hb @ p["reduce.right.kernel"]
         + ht @ p["reduce.track.kernel"])
    a, i, f1, f2, o = np.split(z, 5)
    c = np.tanh(a) * sig(i) + sig(f1) * ca + sig(f2) * cb
    expected = sig(o) * np.tanh(c)
    tokens, transitions = arrays([parse("( a b )")], IDS, 2, 3)
    np.testing.assert_allclose(reference.encode(p, CONFIG, tokens, transitions)[0], expected, rtol=0, atol=1e-14)


def test_pad_anywhere_changes_nothing():
    p = init_params(CONFIG, seed=2, dtype=np.float64)
    s = parse("( ( a b ) ( c ( d e ) ) )")
    tokens, transitions = arrays([s], IDS, 5, 9)
    base = reference.encode(p, CONFIG, tokens, transitions)
    rng = np.random.default_rng(0)
    for _ in range(5):
        padded = list(s.transitions)
        for _ in range(4):
            padded.insert(int(rng.integers(0, len(padded) + 1)), PAD)
        t = np.array([padded], np.int32)
        assert np.array_equal(reference.encode(p, CONFIG, np.pad(tokens, ((0, 0), (0, 3))), t), base)


def test_bad_transitions_are_rejected():
    p = init_params(CONFIG, seed=0, dtype=np.float64)
    tokens = np.array([[2, 3]])
    with pytest.raises(ValueError, match="REDUCE"):
        reference.encode(p, CONFIG, tokens, np.array([[SHIFT, REDUCE, SHIFT]]))
    with pytest.raises(ValueError, match="items on the stack"):
        reference.encode(p, CONFIG, tokens, np.array([[SHIFT, SHIFT, PAD]]))


def _batch():
    sentences = [parse("( ( a b ) ( c ( d e ) ) )"), parse("( f g )"), parse("h"), parse("( ( i j ) k )")]
    premise = arrays(sentences, IDS, 6, 12)
    hypothesis = arrays(sentences[::-1], IDS, 6, 12)
    return types.SimpleNamespace(premise_tokens=premise[0], premise_transitions=premise[1],
                                 hypothesis_tokens=hypothesis[0], hypothesis_transitions=hypothesis[1],
                                 labels=np.array([0, 1, 2, 1]))


def _random_biases(params, seed=0):
    """Random biases: with zero biases a layer fed by all-dead ReLUs sits exactly
    on the kink at 0, where finite differences average the two one-sided slopes."""
    rng = np.random.default_rng(seed)
    return {name: value + rng.normal(0, 0.3, value.shape) if name.endswith("bias") else value
            for name, value in params.items()}


def _numeric_grads(loss_fn, params, eps=1e-4):
    """Central finite differences of ``loss_fn(params)`` for every entry of every parameter."""
    numeric = {}
    for name, weight in params.items():
        numeric[name] = np.zeros_like(weight)
        for index in np.ndindex(weight.shape):
            shifted = {k: v.copy() for k, v in params.items()}
            shifted[name][index] += eps
            up = loss_fn(shifted)
            shifted[name][index] -= 2 * eps
            down = loss_fn(shifted)
            numeric[name][index] = (up - down) / (2 * eps)
    return numeric


def _assert_grads_match(grads, numeric):
    assert set(grads) == set(numeric)
    for name, value in numeric.items():
        scale = max(np.abs(value).max(), 1e-8)
        assert np.abs(grads[name] - value).max() / scale < 1e-6, name
        if name != "embed.embedding":  # only looked-up rows get gradient
            assert np.abs(value).max() > 0, f"{name}: the test batch does not exercise it"


@pytest.mark.parametrize("tracker_dim,mlp_layers", [(2, 2), (0, 1), (2, 0)], ids=["full", "no-tracker", "no-mlp"])
def test_gradients_match_finite_differences(tracker_dim, mlp_layers):
    config = CONFIG.replace(tracker_dim=tracker_dim, mlp_layers=mlp_layers)
    params = _random_biases(init_params(config, seed=1, dtype=np.float64))
    batch = _batch()
    value, grads = reference.loss_and_grads(params, config, batch)
    assert value == pytest.approx(reference.loss(params, config, batch), abs=1e-15)
    _assert_grads_match(grads, _numeric_grads(lambda p: reference.loss(p, config, batch), params))


# --------------------------------------------------------------------------
# The transition head (docs/spec.md §7)
# --------------------------------------------------------------------------

HEAD = CONFIG.replace(transition_head=True)


def _head_params(config=HEAD, seed=1):
    params = _random_biases(init_params(config, seed=seed, dtype=np.float64))
    # A head large enough that its logits differ clearly from step to step.
    params["tracker.transition.kernel"] = params["tracker.transition.kernel"] * 3
    return params


def test_head_logits_by_hand():
    """t = h_t @ kernel + bias, read after each step's tracker update, for ( a b )."""
    p = _head_params()
    H, D = 3, 2
    leaves = [p["embed.embedding"][IDS[w]] @ p["projection.kernel"] + p["projection.bias"] for w in "ab"]
    (ha, _), (hb, _) = [(v[:H], v[H:]) for v in leaves]
    zero = np.zeros(H)
    ht, ct = np.zeros(D), np.zeros(D)
    expected = []
    for b, s1, s2 in ((ha, zero, zero), (hb, ha, zero), (zero, hb, ha)):
        z = np.concatenate([b, s1, s2]) @ p["tracker.kernel_input"] + ht @ p["tracker.kernel_hidden"] + p["tracker.bias"]
        i, f, g, o = np.split(z, 4)
        ct = sig(f) * ct + sig(i) * np.tanh(g)
        ht = sig(o) * np.tanh(ct)
        expected.append(ht @ p["tracker.transition.kernel"] + p["tracker.transition.bias"])
    tokens, transitions = arrays([parse("( a b )")], IDS, 2, 5)
    batch = types.SimpleNamespace(premise_tokens=tokens, premise_transitions=transitions,
                                  hypothesis_tokens=tokens, hypothesis_transitions=transitions,
                                  labels=np.array([0]))
    parsed = reference.parse(p, HEAD, batch, mode="gold")
    np.testing.assert_allclose(parsed.premise_transition_logits[0, :3], np.stack(expected), rtol=0, atol=1e-14)
    assert np.all(parsed.premise_transition_logits[0, 3:] == 0)  # PAD steps
    np.testing.assert_array_equal(parsed.premise_transitions, transitions)
    # The head changes nothing of the encoding: gold mode is forward() exactly.
    out = reference.forward(p, HEAD, batch)
    np.testing.assert_array_equal(parsed.premise, out.premise)
    np.testing.assert_array_equal(parsed.logits, out.logits)


def test_transition_loss_by_hand():
    params = _head_params()
    batch = _batch()
    weight = 0.7
    parsed = reference.parse(params, HEAD, batch, mode="gold")
    steps = []
    for side in ("premise", "hypothesis"):
        gold = getattr(batch, f"{side}_transitions")
        logits = getattr(parsed, f"{side}_transition_logits")
        for row, column in zip(*np.nonzero(gold)):
            t = logits[row, column]
            probs = np.exp(t) / np.exp(t).sum()
            steps.append(-np.log(probs[0 if gold[row, column] == SHIFT else 1]))
    class_ce = reference.loss(params, HEAD, batch)
    expected = class_ce + weight * np.mean(steps)
    assert reference.loss(params, HEAD, batch, transition_weight=weight) == pytest.approx(expected, rel=1e-13)
    assert reference.loss_and_grads(params, HEAD, batch, weight)[0] == pytest.approx(expected, rel=1e-13)


HEAD_VARIANTS = {"full": dict(tracker_dim=2, mlp_layers=2), "no-mlp": dict(tracker_dim=2, mlp_layers=0),
                 "tracker-1": dict(tracker_dim=1, mlp_layers=1)}


@pytest.mark.parametrize("variant", sorted(HEAD_VARIANTS))
def test_supervised_gradients_match_finite_differences(variant):
    config = HEAD.replace(**HEAD_VARIANTS[variant])
    params = _head_params(config)
    batch = _batch()
    weight = 0.7
    value, grads = reference.loss_and_grads(params, config, batch, transition_weight=weight)
    assert value == pytest.approx(reference.loss(params, config, batch, weight), abs=1e-15)
    numeric = _numeric_grads(lambda p: reference.loss(p, config, batch, weight), params)
    _assert_grads_match(grads, numeric)


def test_head_with_weight_zero_has_zero_gradients():
    params = _head_params()
    batch = _batch()
    value, grads = reference.loss_and_grads(params, HEAD, batch)
    assert np.all(grads["tracker.transition.kernel"] == 0) and np.all(grads["tracker.transition.bias"] == 0)
    headless = {k: v for k, v in params.items() if "transition" not in k}
    value_without, grads_without = reference.loss_and_grads(headless, CONFIG, batch)
    assert value == value_without
    for name, grad in grads_without.items():
        np.testing.assert_array_equal(grads[name], grad, err_msg=name)


def test_transition_weight_without_head_names_the_entry():
    params = init_params(CONFIG, seed=0, dtype=np.float64)
    with pytest.raises(ValueError, match="'tracker.transition.kernel'"):
        reference.loss_and_grads(params, CONFIG, _batch(), transition_weight=0.5)
    with pytest.raises(ValueError, match="'tracker.transition.kernel'"):
        reference.loss(params, CONFIG, _batch(), transition_weight=0.5)
    with pytest.raises(ValueError, match="transition_weight must be >= 0"):
        reference.loss_and_grads(_head_params(), HEAD, _batch(), transition_weight=-1.0)


def _uniforms(batch, seed=3):
    rows = np.arange(len(batch.labels)) + 10
    return parsing.uniforms_for(batch, rows, seed=seed)


def _min_margin(params, config, batch, uniforms):
    """The smallest |u - p_R| over sampled choice steps: finite differences
    must not move any p_R across its u, or the sampled parse would change."""
    parsed = reference.parse(params, config, batch, mode="sampled", uniforms=uniforms)
    margins = []
    for side, u in zip(("premise", "hypothesis"), uniforms):
        followed = getattr(parsed, f"{side}_transitions")
        p_reduce = parsing.reduce_probability(getattr(parsed, f"{side}_transition_logits"))
        for row in range(len(followed)):
            depth, shifted, n = 0, 0, int(np.sum(followed[row] == SHIFT))
            for t, op in enumerate(followed[row]):
                if op == PAD:
                    break
                if depth >= 2 and shifted < n:
                    margins.append(abs(u[row, t] - p_reduce[row, t]))
                depth, shifted = (depth + 1, shifted + 1) if op == SHIFT else (depth - 1, shifted)
    return min(margins)


def test_reinforce_loss_by_hand():
    params = _head_params()
    batch = _batch()
    uniforms = _uniforms(batch)
    baseline, rw, ew = -1.1, 0.8, 0.05
    parsed = reference.parse(params, HEAD, batch, mode="sampled", uniforms=uniforms)
    shifted = parsed.logits - parsed.logits.max(axis=1, keepdims=True)
    ce = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[np.arange(4), batch.labels]
    expected = (ce.mean() - rw * np.mean((-ce - baseline) * (parsed.premise_logprob + parsed.hypothesis_logprob))
                - ew * np.mean(parsed.premise_entropy + parsed.hypothesis_entropy))
    value, _, rewards = reference.reinforce_loss_and_grads(params, HEAD, batch, uniforms, baseline, rw, ew)
    assert value == pytest.approx(expected, rel=1e-13)
    np.testing.assert_allclose(rewards, -ce, rtol=1e-13)
    assert np.any(parsed.premise_logprob < 0)  # the batch has choice steps


@pytest.mark.parametrize("variant", ["full", "no-mlp"])
def test_reinforce_gradients_match_finite_differences(variant):
    config = HEAD.replace(**HEAD_VARIANTS[variant])
    params = _head_params(config)
    batch = _batch()
    uniforms = _uniforms(batch)
    assert _min_margin(params, config, batch, uniforms) > 1e-3
    baseline, rw, ew = -1.1, 0.8, 0.05
    value, grads, rewards = reference.reinforce_loss_and_grads(params, config, batch, uniforms, baseline, rw, ew)
    assert value == pytest.approx(reference.reinforce_loss(params, config, batch, uniforms, baseline, rw, ew),
                                  abs=1e-15)
    # No gradient through r: differentiate the loss with the rewards held at their values.
    loss_fn = lambda p: reference.reinforce_loss(p, config, batch, uniforms, baseline, rw, ew,  # noqa: E731
                                                 rewards=rewards)
    _assert_grads_match(grads, _numeric_grads(loss_fn, params))


def test_reinforce_needs_head_and_uniforms():
    batch = _batch()
    with pytest.raises(ValueError, match="'tracker.transition.kernel'"):
        reference.reinforce_loss_and_grads(init_params(CONFIG, seed=0, dtype=np.float64), CONFIG, batch,
                                           _uniforms(batch), 0.0)
    with pytest.raises(ValueError, match="uniforms"):
        reference.reinforce_loss_and_grads(_head_params(), HEAD, batch, None, 0.0)
