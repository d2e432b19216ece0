"""Parses decided by the model (docs/spec.md §7): the decision rule, the uniform
numbers, the reference's predicted and sampled parses on hand-written edge
cases, their independence of batch mates and padding, and the parse metrics."""

from __future__ import annotations

import types

import numpy as np
import pytest

from shared import parse_metrics, parsing, reference
from shared.params import ModelConfig, init_params
from shared.parse_metrics import ParseCounts, parse_agreement
from shared.parsing import MODES, Parsed, batch_uniforms, check_mode, decide, pair_uniforms, sentence_lengths
from shared.transitions import PAD, REDUCE, SHIFT, check_transitions, parse, plain_transitions

CONFIG = ModelConfig(vocab_size=70, embed_dim=4, hidden_dim=3, tracker_dim=2, mlp_dim=5, mlp_layers=1,
                     transition_head=True)


def _params(seed=0, kernel_scale=3.0, bias=None):
    params = init_params(CONFIG, seed=seed, dtype=np.float64)
    params["tracker.transition.kernel"] = params["tracker.transition.kernel"] * kernel_scale
    if bias is not None:
        params["tracker.transition.bias"] = np.asarray(bias, dtype=np.float64)
    return params


def _sentence_row(transitions, width):
    row = np.zeros(width, np.int32)
    row[:len(transitions)] = transitions
    return row


def _batch(premises, hypotheses, num_tokens=None, num_steps=None, token_offset=2):
    """A pair batch of shaped sentences given as transition lists (tokens are
    consecutive ids), padded to ``num_tokens`` and ``num_steps``."""
    n_max = max(sum(op == SHIFT for op in t) for t in premises + hypotheses)
    num_tokens = num_tokens or n_max
    num_steps = num_steps or 2 * num_tokens - 1
    arrays = {}
    for side, sentences in (("premise", premises), ("hypothesis", hypotheses)):
        tokens = np.zeros((len(sentences), num_tokens), np.int32)
        for row, t in enumerate(sentences):
            n = sum(op == SHIFT for op in t)
            tokens[row, :n] = (token_offset + row * 7 + np.arange(n)) % (CONFIG.vocab_size - 2) + 2
        arrays[f"{side}_tokens"] = tokens
        arrays[f"{side}_transitions"] = np.stack([_sentence_row(t, num_steps) for t in sentences])
    return types.SimpleNamespace(**arrays, labels=np.arange(len(premises), dtype=np.int32) % 3)


def _check_parse(followed_row, n):
    """Valid, exactly 2n-1 steps, then only PAD."""
    steps = parse_metrics.strip_pad(followed_row)
    assert len(steps) == 2 * n - 1
    assert np.all(followed_row[2 * n - 1:] == PAD) and np.all(followed_row[:2 * n - 1] != PAD)
    check_transitions(steps, n)


# --------------------------------------------------------------------------
# Modes and the vectorised decision rule
# --------------------------------------------------------------------------


def test_modes():
    assert MODES == ("gold", "predicted", "sampled")
    for mode in MODES:
        assert check_mode(mode) == mode
    with pytest.raises(ValueError, match="unknown transitions mode 'greedy'"):
        check_mode("greedy")
    with pytest.raises(ValueError, match="gold mode follows"):
        decide(np.zeros(2), None, True, True, "gold")
    with pytest.raises(ValueError, match="uniform"):
        decide(np.zeros(2), None, True, True, "sampled")


def _actions(decided):
    """The action codes of decide's masks: REDUCE, SHIFT, or PAD where neither."""
    is_shift, is_reduce, _, _ = decided
    return np.where(is_reduce, REDUCE, np.where(is_shift, SHIFT, PAD))


def test_decide_by_hand():
    logits = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.0, 9.0], [9.0, 0.0], [3.0, 3.0]])
    can_shift = np.array([True, True, True, False, True, False])
    can_reduce = np.array([True, True, True, True, False, False])
    predicted = decide(logits, None, can_shift, can_reduce, "predicted")
    #                                  R wins  S wins  tie -> S  forced R  forced S  finished
    np.testing.assert_array_equal(_actions(predicted), [REDUCE, SHIFT, SHIFT, REDUCE, SHIFT, PAD])
    assert predicted[0].dtype == bool and predicted[2] is None and predicted[3] is None  # no terms in predicted mode
    p_reduce = 1 / (1 + np.exp(-(logits[:, 1] - logits[:, 0])))
    below = decide(logits, p_reduce - 1e-9, can_shift, can_reduce, "sampled")
    above = decide(logits, p_reduce + 1e-9, can_shift, can_reduce, "sampled")
    np.testing.assert_array_equal(_actions(below), [REDUCE, REDUCE, REDUCE, REDUCE, SHIFT, PAD])
    np.testing.assert_array_equal(_actions(above), [SHIFT, SHIFT, SHIFT, REDUCE, SHIFT, PAD])
    # The terms of a choice: log p of the action taken and the entropy; a forced step adds nothing.
    np.testing.assert_allclose(below[2][:3], np.log(p_reduce[:3]), rtol=1e-12)
    np.testing.assert_allclose(above[2][:3], np.log1p(-p_reduce[:3]), rtol=1e-12)
    entropy = -(p_reduce * np.log(p_reduce) + (1 - p_reduce) * np.log1p(-p_reduce))
    np.testing.assert_allclose(below[3][:3], entropy[:3], rtol=1e-12)
    assert not np.any(below[2][3:]) and not np.any(below[3][3:])


def _rule_for_one_step(logits, can_shift, can_reduce, mode, u):
    """docs/spec.md §7 written out plainly for one step, the oracle decide is held to."""
    if not (can_shift or can_reduce):
        return PAD
    if not (can_shift and can_reduce):
        return SHIFT if can_shift else REDUCE
    if mode == "predicted":
        return REDUCE if logits[1] > logits[0] else SHIFT
    return REDUCE if u < float(parsing.reduce_probability(logits)) else SHIFT


def test_decide_agrees_with_the_rule_written_out():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (500, 2))
    logits[:50, 1] = logits[:50, 0]  # ties
    uniform = rng.random(500)
    can_shift, can_reduce = rng.random(500) < 0.7, rng.random(500) < 0.7
    choice = can_shift & can_reduce
    for mode in ("predicted", "sampled"):
        decided = decide(logits, uniform, can_shift, can_reduce, mode)
        actions = _actions(decided)
        assert 0 < np.count_nonzero(choice & (actions == REDUCE)) < np.count_nonzero(choice)  # both ways chosen
        for k in range(500):
            assert actions[k] == _rule_for_one_step(logits[k], can_shift[k], can_reduce[k], mode, uniform[k])
        if mode == "sampled":
            taken = np.where(actions == REDUCE, REDUCE, SHIFT)
            np.testing.assert_array_equal(decided[2], np.where(choice, parsing.action_logprob(logits, taken), 0))
            np.testing.assert_array_equal(decided[3], np.where(choice, parsing.bernoulli_entropy(logits), 0))


def test_the_reference_decides_by_decide():
    """The reference's step (reference.encoder.choose) is decide on one step's scalars."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        logits, u = rng.normal(0, 2, 2), rng.random()
        can_shift, can_reduce = bool(rng.random() < 0.7), bool(rng.random() < 0.7)
        if not (can_shift or can_reduce):
            continue
        for mode in ("predicted", "sampled"):
            is_shift, is_reduce, logprob, entropy = decide(logits[None], np.array([u]), [can_shift], [can_reduce],
                                                           mode)
            op, choice, step_logprob, step_entropy = reference.encoder.choose(logits, can_shift, can_reduce, mode, u)
            assert op == (REDUCE if is_reduce[0] else SHIFT) and choice == (can_shift and can_reduce)
            if mode == "sampled":
                assert (step_logprob, step_entropy) == (logprob[0], entropy[0])
            else:
                assert step_logprob == step_entropy == 0.0


def test_stable_logs_and_entropy():
    diffs = np.array([-1e4, -50.0, -1.0, 0.0, 2.0, 50.0, 1e4])
    logits = np.stack([np.zeros_like(diffs), diffs], axis=1)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow, no 0 * -inf
        log_r = parsing.action_logprob(logits, np.full(7, REDUCE))
        log_s = parsing.action_logprob(logits, np.full(7, SHIFT))
        entropy = parsing.bernoulli_entropy(logits)
    assert np.all(np.isfinite(log_r)) and np.all(np.isfinite(log_s)) and np.all(np.isfinite(entropy))
    d = diffs[1:6]  # moderate: the textbook formulas are accurate here
    p = 1 / (1 + np.exp(-d))
    np.testing.assert_allclose(log_r[1:6], -np.log1p(np.exp(-d)), rtol=1e-14)
    np.testing.assert_allclose(log_s[1:6], -np.log1p(np.exp(d)), rtol=1e-14)
    p = p[1:4]  # d = -1, 0, 2
    np.testing.assert_allclose(entropy[2:5], -(p * np.log(p) + (1 - p) * np.log(1 - p)), rtol=1e-12)
    # |d| = 50: entropy = (|d| + 1) e^-|d| to first order, where 1 - p rounds to 0
    np.testing.assert_allclose(entropy[[1, 5]], 51 * np.exp(-50.0), rtol=1e-12)
    assert log_r[-1] == 0 and log_s[0] == 0 and log_r[0] == -1e4 and log_s[-1] == -1e4
    assert entropy[0] == 0 and entropy[-1] == 0
    assert entropy[3] == pytest.approx(np.log(2), rel=1e-15)


def test_sentence_lengths():
    transitions = np.array([plain_transitions(3, "left") + [PAD] * 4, [SHIFT] + [PAD] * 8,
                            plain_transitions(5, "balanced")])
    np.testing.assert_array_equal(sentence_lengths(transitions), [3, 1, 5])


# --------------------------------------------------------------------------
# Uniform numbers
# --------------------------------------------------------------------------


def test_pair_uniforms_follow_the_contract():
    u_p, u_h = pair_uniforms(seed=7, epoch=2, row=11, n_premise=4, n_hypothesis=2)
    rng = np.random.default_rng([7, 2, 11])
    np.testing.assert_array_equal(u_p, rng.random(7))  # premise first: 2n_p - 1 numbers
    np.testing.assert_array_equal(u_h, rng.random(3))  # then the hypothesis
    again = pair_uniforms(7, 2, 11, 4, 2)
    assert np.array_equal(again[0], u_p) and np.array_equal(again[1], u_h)
    for other in (pair_uniforms(7, 2, 12, 4, 2), pair_uniforms(7, 3, 11, 4, 2), pair_uniforms(8, 2, 11, 4, 2)):
        assert not np.any(other[0] == u_p)
    assert pair_uniforms(7, 2, 11, 1, 1)[0].shape == (1,)


def test_pair_uniforms_reject_bad_input():
    with pytest.raises(ValueError, match="row must be a non-negative integer.*has no row"):
        pair_uniforms(0, 0, -1, 3, 3)
    with pytest.raises(ValueError, match="epoch"):
        pair_uniforms(0, -1, 0, 3, 3)
    with pytest.raises(ValueError, match="n_hypothesis"):
        pair_uniforms(0, 0, 0, 3, 0)


def test_batch_uniforms_layout():
    rows, n_p, n_h = [5, 0, 9], [3, 1, 6], [2, 4, 1]
    u_p, u_h = batch_uniforms(1, 0, rows, n_p, n_h, T=13)
    assert u_p.shape == u_h.shape == (3, 13) and u_p.dtype == np.float64
    for i in range(3):
        a, b = pair_uniforms(1, 0, rows[i], n_p[i], n_h[i])
        np.testing.assert_array_equal(u_p[i, :2 * n_p[i] - 1], a)
        np.testing.assert_array_equal(u_h[i, :2 * n_h[i] - 1], b)
        assert np.all(u_p[i, 2 * n_p[i] - 1:] == 0) and np.all(u_h[i, 2 * n_h[i] - 1:] == 0)
    # A pair's numbers do not depend on its batch mates or on T.
    alone = batch_uniforms(1, 0, rows[2:], n_p[2:], n_h[2:], T=20)
    np.testing.assert_array_equal(alone[0][0, :13], u_p[2])
    with pytest.raises(ValueError, match="T=9 steps cannot hold a sentence of 11 steps"):
        batch_uniforms(1, 0, rows, n_p, n_h, T=9)
    with pytest.raises(ValueError, match="one of each per pair"):
        batch_uniforms(1, 0, rows[:2], n_p, n_h, T=13)


# --------------------------------------------------------------------------
# The reference's predicted and sampled parses
# --------------------------------------------------------------------------

ONE = [SHIFT]
TWO = [SHIFT, SHIFT, REDUCE]
SIXTY_LEFT = plain_transitions(60, "left")
SIXTY_BALANCED = plain_transitions(60, "balanced")


def _parse_both(params, batch, mode, **kw):
    parsed = reference.parse(params, CONFIG, batch, mode=mode, **kw)
    return parsed.premise_transitions, parsed.hypothesis_transitions, parsed


@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_one_and_two_tokens_have_no_choice(mode):
    batch = _batch([ONE, TWO], [TWO, ONE], num_tokens=3)
    uniforms = parsing.uniforms_for(batch, [0, 1], seed=0)
    for bias in ([0.0, 50.0], [50.0, 0.0]):  # the head prefers REDUCE, then SHIFT, strongly
        premise, hypothesis, parsed = _parse_both(_params(bias=bias), batch, mode, uniforms=uniforms)
        np.testing.assert_array_equal(premise, [[SHIFT, PAD, PAD, PAD, PAD], [SHIFT, SHIFT, REDUCE, PAD, PAD]])
        np.testing.assert_array_equal(hypothesis, premise[::-1])
        # Forced steps add nothing to logprob or entropy.
        for name in ("premise_logprob", "hypothesis_logprob", "premise_entropy", "hypothesis_entropy"):
            assert np.all(getattr(parsed, name) == 0), name


def test_head_preferences_and_validity_forcing():
    """A head that always prefers REDUCE builds the left-branching tree: the first
    steps SHIFT because REDUCE needs two items. One that always prefers SHIFT,
    or ties (kernel and bias zero), builds the right-branching tree: the last
    steps REDUCE because the buffer is empty."""
    lengths = [1, 2, 3, 7, 60]
    sentences = [plain_transitions(n, "balanced") for n in lengths]
    batch = _batch(sentences, sentences[::-1])
    tie = _params(kernel_scale=0.0, bias=[0.0, 0.0])
    cases = {"left": _params(kernel_scale=0.0, bias=[0.0, 1.0]), "right": _params(kernel_scale=0.0, bias=[1.0, 0.0])}
    cases["tie"] = tie
    for name, params in cases.items():
        premise, hypothesis, _ = _parse_both(params, batch, "predicted")
        shape = "left" if name == "left" else "right"
        for row, n in enumerate(lengths):
            np.testing.assert_array_equal(premise[row, :2 * n - 1], plain_transitions(n, shape), err_msg=name)
            _check_parse(premise[row], n)
            _check_parse(hypothesis[len(lengths) - 1 - row], n)


@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_every_parse_is_valid(mode):
    rng = np.random.default_rng(1)
    sentences = [plain_transitions(int(n), "balanced") for n in rng.integers(1, 61, 12)] + [SIXTY_LEFT]
    batch = _batch(sentences, sentences[::-1], num_tokens=64, num_steps=130)
    uniforms = parsing.uniforms_for(batch, np.arange(13), seed=4)
    for seed in range(3):
        premise, hypothesis, parsed = _parse_both(_params(seed=seed), batch, mode, uniforms=uniforms)
        for followed, gold in ((premise, batch.premise_transitions), (hypothesis, batch.hypothesis_transitions)):
            for row in range(len(followed)):
                _check_parse(followed[row], int(np.sum(gold[row] == SHIFT)))
        # logits at the followed steps, zeros after
        real = premise != PAD
        assert np.all(parsed.premise_transition_logits[~real] == 0)
        assert np.all(np.any(parsed.premise_transition_logits[real] != 0, axis=-1))
    # the head really decides: not every sentence gets the gold (balanced) tree
    assert parse_agreement(premise, batch.premise_transitions) < 1


def test_predicted_logits_are_the_teacher_forced_ones_on_the_same_path():
    """Following its own predicted parse in gold mode gives the model the same
    logits at every step, and the argmax of each reproduces the parse where a
    choice existed."""
    sentences = [SIXTY_BALANCED, plain_transitions(9, "right"), TWO]
    batch = _batch(sentences, sentences)
    params = _params(seed=2)
    predicted = reference.parse(params, CONFIG, batch, mode="predicted")
    replay = types.SimpleNamespace(**{**vars(batch), "premise_transitions": predicted.premise_transitions,
                                      "hypothesis_transitions": predicted.hypothesis_transitions})
    gold = reference.parse(params, CONFIG, replay, mode="gold")
    np.testing.assert_array_equal(gold.premise_transition_logits, predicted.premise_transition_logits)
    np.testing.assert_array_equal(gold.premise, predicted.premise)
    for row in range(3):
        for t in _choice_steps(predicted.premise_transitions[row]):
            t_shift, t_reduce = predicted.premise_transition_logits[row, t]
            assert predicted.premise_transitions[row, t] == (REDUCE if t_reduce > t_shift else SHIFT)


@pytest.mark.parametrize("mode", ["predicted", "sampled"])
def test_parse_independent_of_batch_mates_and_padding(mode):
    rng = np.random.default_rng(5)
    premises = [plain_transitions(n, "balanced") for n in (5, 1, 12, 3)]
    hypotheses = [plain_transitions(int(n), "left") for n in (2, 8, 1, 12)]
    rows = [3, 17, 4, 40]
    batch = _batch(premises, hypotheses)
    params = _params(seed=3)
    whole = reference.parse(params, CONFIG, batch, mode=mode,
                            uniforms=parsing.uniforms_for(batch, rows, seed=9))
    T = batch.premise_transitions.shape[1]
    for i in range(4):
        # alone, with 5 extra token slots and 20 extra PAD columns, behind a new batch mate
        mate = [plain_transitions(int(rng.integers(1, 15)), "right")]
        wide = _batch(mate + [premises[i]], mate + [hypotheses[i]], num_tokens=17, num_steps=2 * 17 - 1 + 20)
        for side in ("premise", "hypothesis"):  # the same words as in the first batch
            n = int(np.sum(getattr(batch, f"{side}_transitions")[i] == SHIFT))
            getattr(wide, f"{side}_tokens")[1, :n] = getattr(batch, f"{side}_tokens")[i, :n]
        alone = reference.parse(params, CONFIG, wide, mode=mode,
                                uniforms=parsing.uniforms_for(wide, [99, rows[i]], seed=9))
        for side in ("premise", "hypothesis"):
            followed = getattr(alone, f"{side}_transitions")[1]
            np.testing.assert_array_equal(followed[:T], getattr(whole, f"{side}_transitions")[i])
            assert np.all(followed[T:] == PAD)
            np.testing.assert_array_equal(getattr(alone, f"{side}_transition_logits")[1, :T],
                                          getattr(whole, f"{side}_transition_logits")[i])
            np.testing.assert_array_equal(getattr(alone, side)[1], getattr(whole, side)[i])
            for stat in ("logprob", "entropy"):
                assert getattr(alone, f"{side}_{stat}")[1] == getattr(whole, f"{side}_{stat}")[i]
        np.testing.assert_allclose(alone.logits[1], whole.logits[i], rtol=0, atol=1e-12)


def test_sampled_extremes_of_u():
    """u = 0 REDUCEs wherever it may (left-branching); u just below 1 SHIFTs
    wherever it may (right-branching)."""
    lengths = [1, 2, 4, 30]
    sentences = [plain_transitions(n, "balanced") for n in lengths]
    batch = _batch(sentences, sentences)
    params = _params(seed=4)
    T = batch.premise_transitions.shape[1]
    for u, shape in ((0.0, "left"), (np.nextafter(1.0, 0.0), "right")):
        uniforms = (np.full((4, T), u), np.full((4, T), u))
        parsed = reference.parse(params, CONFIG, batch, mode="sampled", uniforms=uniforms)
        for row, n in enumerate(lengths):
            np.testing.assert_array_equal(parsed.premise_transitions[row, :2 * n - 1], plain_transitions(n, shape))


def _choice_steps(followed_row):
    """Indices of the steps where both actions were valid."""
    n = int(np.sum(followed_row == SHIFT))
    depth = shifted = 0
    steps = []
    for t, op in enumerate(followed_row):
        if op == PAD:
            break
        if depth >= 2 and shifted < n:
            steps.append(t)
        depth, shifted = (depth + 1, shifted + 1) if op == SHIFT else (depth - 1, shifted)
    return steps


def test_sampled_logprob_and_entropy_directly():
    lengths = [3, 6, 25, 1]
    sentences = [plain_transitions(n, "balanced") for n in lengths]
    batch = _batch(sentences, sentences[::-1])
    uniforms = parsing.uniforms_for(batch, [0, 1, 2, 3], seed=11)
    parsed = reference.parse(_params(seed=5), CONFIG, batch, mode="sampled", uniforms=uniforms)
    for side, u in zip(("premise", "hypothesis"), uniforms):
        followed = getattr(parsed, f"{side}_transitions")
        logits = getattr(parsed, f"{side}_transition_logits")
        for row in range(4):
            logprob = entropy = 0.0
            for t in _choice_steps(followed[row]):
                p_reduce = 1 / (1 + np.exp(logits[row, t, 0] - logits[row, t, 1]))
                reduced = followed[row, t] == REDUCE
                assert reduced == (u[row, t] < p_reduce)
                logprob += np.log(p_reduce if reduced else 1 - p_reduce)
                entropy -= p_reduce * np.log(p_reduce) + (1 - p_reduce) * np.log(1 - p_reduce)
            assert getattr(parsed, f"{side}_logprob")[row] == pytest.approx(logprob, rel=1e-12, abs=1e-300)
            assert getattr(parsed, f"{side}_entropy")[row] == pytest.approx(entropy, rel=1e-12, abs=1e-300)
    assert np.all(parsed.premise_logprob[:3] < 0) and parsed.premise_logprob[3] == 0
    # predicted mode reports no logprob or entropy
    predicted = reference.parse(_params(seed=5), CONFIG, batch, mode="predicted")
    assert np.all(predicted.premise_logprob == 0) and np.all(predicted.hypothesis_entropy == 0)


def test_saturated_logits_give_finite_values():
    sentences = [plain_transitions(n, "balanced") for n in (3, 10, 40)]
    batch = _batch(sentences, sentences)
    T = batch.premise_transitions.shape[1]
    zeros = (np.zeros((3, T)), np.zeros((3, T)))
    # p_R = σ(1e4) = 1: every choice REDUCEs with probability 1 and adds 0.
    sure = reference.parse(_params(kernel_scale=0.0, bias=[0.0, 1e4]), CONFIG, batch, mode="sampled",
                           uniforms=parsing.uniforms_for(batch, [0, 1, 2], seed=0))
    assert np.all(sure.premise_logprob == 0) and np.all(sure.premise_entropy == 0)
    # p_R = σ(-60) ≈ 8.8e-27 > 0 and u = 0: every choice takes the unlikely REDUCE.
    unlikely = reference.parse(_params(kernel_scale=0.0, bias=[60.0, 0.0]), CONFIG, batch, mode="sampled",
                               uniforms=zeros)
    for row, n in enumerate((3, 10, 40)):
        choices = len(_choice_steps(unlikely.premise_transitions[row]))
        assert choices == n - 2  # left-branching: a choice at each step from the third on, but the last
        assert unlikely.premise_logprob[row] == pytest.approx(-60.0 * choices, rel=1e-12)
        assert np.isfinite(unlikely.premise_entropy[row]) and unlikely.premise_entropy[row] >= 0
    # p_R = σ(-1e4) = 0 exactly: even u = 0 SHIFTs, and adds 0.
    never = reference.parse(_params(kernel_scale=0.0, bias=[1e4, 0.0]), CONFIG, batch, mode="sampled",
                            uniforms=zeros)
    assert np.all(never.premise_logprob == 0) and np.all(never.premise_entropy == 0)
    for field in ("premise_logprob", "hypothesis_logprob", "premise_entropy", "hypothesis_entropy"):
        for parsed in (sure, unlikely, never):
            assert np.all(np.isfinite(getattr(parsed, field)))


def test_parse_errors():
    batch = _batch([TWO], [ONE])
    headless = ModelConfig(vocab_size=70, embed_dim=4, hidden_dim=3, tracker_dim=2, mlp_dim=5, mlp_layers=1)
    with pytest.raises(ValueError, match="'tracker.transition.kernel'"):
        reference.parse(init_params(headless, seed=0, dtype=np.float64), headless, batch)
    with pytest.raises(ValueError, match="sampled mode needs uniforms"):
        reference.parse(_params(), CONFIG, batch, mode="sampled")
    with pytest.raises(ValueError, match="unknown transitions mode"):
        reference.parse(_params(), CONFIG, batch, mode="beam")
    empty = _batch([TWO], [ONE])
    empty.hypothesis_transitions[:] = PAD
    with pytest.raises(ValueError, match="no SHIFT"):
        reference.parse(_params(), CONFIG, empty)


def test_parsed_checks_shapes():
    batch = _batch([TWO, ONE], [ONE, TWO])
    parsed = reference.parse(_params(), CONFIG, batch, mode="predicted")
    arrays = parsed.to_dict()
    assert len(arrays) == 11
    assert parsed.premise_transitions.dtype == np.int32 and parsed.premise_transition_logits.shape == (2, 3, 2)
    with pytest.raises(ValueError, match=r"Parsed.hypothesis_entropy: expected shape \(2,\)"):
        Parsed(**{**arrays, "hypothesis_entropy": np.zeros(3)})
    with pytest.raises(ValueError, match="Parsed.premise_transitions: expected int32"):
        Parsed(**{**arrays, "premise_transitions": arrays["premise_transitions"].astype(np.int64)})


# --------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------


def _rows(*sentences, width=None):
    width = width or max(len(s) for s in sentences)
    return np.stack([_sentence_row(s, width) for s in sentences])


def bracket_f1(predicted, gold) -> float:
    return ParseCounts.of_parses(predicted, gold).bracket_f1


def test_bracket_f1_by_hand():
    gold = parse("( ( a b ) ( c d ) )").transitions  # brackets (0,2) (2,4); (0,4) is the sentence
    left = parse("( ( ( a b ) c ) d )").transitions  # brackets (0,2) (0,3)
    right = parse("( a ( b ( c d ) ) )").transitions  # brackets (2,4) (1,4)
    assert parse_metrics.constituent_spans(gold) == [(0, 2), (2, 4), (0, 4)]
    assert bracket_f1(_rows(left), _rows(gold)) == 0.5
    assert bracket_f1(_rows(right), _rows(gold)) == 0.5
    assert bracket_f1(_rows(gold), _rows(gold)) == 1.0
    assert bracket_f1(_rows(left), _rows(right)) == 0.0
    # summed over sentences: 1 + 1 + 0 matched of 2 + 2 + 2; the one-word sentence adds nothing
    assert bracket_f1(_rows(left, right, left, ONE), _rows(gold, gold, right, ONE, width=7)) == pytest.approx(1 / 3)
    # one- and two-word sentences have a single tree
    assert bracket_f1(_rows(ONE, TWO), _rows(ONE, TWO)) == 1.0
    with pytest.raises(ValueError, match="not the same sentence"):
        bracket_f1(_rows(TWO), _rows(gold))


def test_agreement_and_exact_rate():
    gold = parse("( ( a b ) ( c d ) )").transitions
    left = parse("( ( ( a b ) c ) d )").transitions
    a = _rows(gold, left, ONE, TWO)
    b = _rows(gold, gold, ONE, TWO, width=12)  # another width: PAD is ignored
    assert parse_agreement(a, b) == 0.75
    assert parse_agreement(a, a) == 1.0
    counts = ParseCounts.of_parses(a, b)
    assert counts.exact_parse_rate == 0.75 and counts.sentences == 4


def test_teacher_forced_accuracy_by_hand():
    gold = _rows(TWO, ONE)  # [[S, S, R], [S, PAD, PAD]]
    logits = np.zeros((2, 3, 2))
    logits[0, 0] = [1, 0]  # SHIFT: right
    logits[0, 1] = [0, 0]  # tie counts as SHIFT: right
    logits[0, 2] = [1, 0]  # SHIFT for a REDUCE: wrong
    logits[1, 0] = [0, 2]  # REDUCE for a SHIFT: wrong (no validity mask)
    logits[1, 1] = [0, 9]  # PAD: not scored
    assert ParseCounts.of_teacher_forced(logits, gold).transition_accuracy == 0.5


def test_parse_counts_over_batches():
    sentences = [plain_transitions(n, "balanced") for n in (4, 9, 1, 16)]
    batch = _batch(sentences, sentences[::-1])
    params = _params(seed=6)
    gold_mode = reference.parse(params, CONFIG, batch, mode="gold")
    predicted = reference.parse(params, CONFIG, batch, mode="predicted")
    counts = parse_metrics.parse_counts(gold_mode, predicted, batch.premise_transitions, batch.hypothesis_transitions)
    assert counts.sentences == 8 and counts.steps == 2 * sum(2 * n - 1 for n in (4, 9, 1, 16))
    both = np.concatenate([predicted.premise_transitions, predicted.hypothesis_transitions])
    gold = np.concatenate([batch.premise_transitions, batch.hypothesis_transitions])
    assert counts.bracket_f1 == bracket_f1(both, gold)
    assert counts.exact_parse_rate == parse_agreement(both, gold)
    logits = np.concatenate([gold_mode.premise_transition_logits, gold_mode.hypothesis_transition_logits])
    assert counts.transition_accuracy == ParseCounts.of_teacher_forced(logits, gold).transition_accuracy
    # counts add up across batches: two halves give the whole
    halves = [types.SimpleNamespace(**{k: v[s] for k, v in vars(batch).items()}) for s in (slice(0, 2), slice(2, 4))]
    total = ParseCounts()
    for half in halves:
        total += parse_metrics.parse_counts(reference.parse(params, CONFIG, half, mode="gold"),
                                      reference.parse(params, CONFIG, half, mode="predicted"),
                                      half.premise_transitions, half.hypothesis_transitions)
    assert total == counts
    assert set(counts.as_dict()) >= {"transition_accuracy", "exact_parse_rate", "bracket_f1"}
