"""The float64 NumPy reference: the spec's arithmetic by hand, PAD invariance,
and its hand-written gradients against central finite differences."""

from __future__ import annotations

import types

import numpy as np
import pytest

from shared import reference
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
    """SPEC §3 written out for ( a b ): tracker runs at SHIFT, SHIFT, REDUCE."""
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


@pytest.mark.parametrize("tracker_dim,mlp_layers", [(2, 2), (0, 1), (2, 0)], ids=["full", "no-tracker", "no-mlp"])
def test_gradients_match_finite_differences(tracker_dim, mlp_layers):
    config = CONFIG.replace(tracker_dim=tracker_dim, mlp_layers=mlp_layers)
    params = init_params(config, seed=1, dtype=np.float64)
    # Random biases: with zero biases a layer fed by all-dead ReLUs sits exactly
    # on the kink at 0, where finite differences average the two one-sided slopes.
    rng = np.random.default_rng(0)
    for name in params:
        if name.endswith("bias"):
            params[name] = params[name] + rng.normal(0, 0.3, params[name].shape)
    batch = _batch()
    value, grads = reference.loss_and_grads(params, config, batch)
    assert value == pytest.approx(reference.loss(params, config, batch), abs=1e-15)
    eps = 1e-4
    for name, weight in params.items():
        numeric = np.zeros_like(weight)
        for index in np.ndindex(weight.shape):
            shifted = {k: v.copy() for k, v in params.items()}
            shifted[name][index] += eps
            up = reference.loss(shifted, config, batch)
            shifted[name][index] -= 2 * eps
            down = reference.loss(shifted, config, batch)
            numeric[index] = (up - down) / (2 * eps)
        scale = max(np.abs(numeric).max(), 1e-8)
        assert np.abs(grads[name] - numeric).max() / scale < 1e-6, name
        if name != "embed.embedding":  # only looked-up rows get gradient
            assert np.abs(numeric).max() > 0, f"{name}: the test batch does not exercise it"


def test_sgd_step():
    params = init_params(CONFIG, seed=1, dtype=np.float64)
    value, grads = reference.loss_and_grads(params, CONFIG, _batch())
    stepped = reference.sgd_step(params, grads, lr=0.1)
    for name in params:
        np.testing.assert_array_equal(stepped[name], params[name] - 0.1 * grads[name])
    assert reference.loss(stepped, CONFIG, _batch()) < value
