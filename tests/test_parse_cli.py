"""The command line of parses decided by the model (docs/spec.md §5, §7):
``init --transition-head``, ``encode --transitions``, ``train --transition-weight``
and the parse metrics of ``evaluate``.

Every framework is compared with the float64 reference, never with itself.
The head's kernel is scaled up so that the decisions are clear (their margins
far above float32 rounding, docs/spec.md §7) and both actions are taken.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cli import main
from bench.frameworks import FRAMEWORKS
from shared import parsing, reference
from shared.batching import make_pair_batch
from shared.params import ModelConfig, init_params, load_params, save_params
from shared.snli import SAMPLE_PATH, read_snli
from shared.transitions import PAD, check_transitions
from shared.vocab import Vocabulary

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
HEAD_KERNEL = "tracker.transition.kernel"
ROWS = 24


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The first 24 rows of the sample, one of them without a gold label."""
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    with open(SAMPLE_PATH) as f:
        lines = [json.loads(next(f)) for _ in range(ROWS)]
    lines[5]["gold_label"] = "-"
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    return path


@pytest.fixture(scope="module")
def head_model(rows, tmp_path_factory):
    """A tiny model with a transition head whose kernel makes clear, mixed decisions."""
    pairs, _ = read_snli(rows, keep_unlabeled=True)
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=7,
                         mlp_layers=1, transition_head=True)
    params = init_params(config, seed=5)
    params[HEAD_KERNEL] = params[HEAD_KERNEL] * 8.0
    path = tmp_path_factory.mktemp("model") / "head.npz"
    save_params(path, params, config, vocab.to_array())
    return path


def reference_parse(model_path, rows_path, mode: str, seed: int = 0) -> parsing.Parsed:
    """The float64 reference's parse of all rows as one batch (no chunks)."""
    loaded = load_params(model_path)
    pairs, _ = read_snli(rows_path, keep_unlabeled=True)
    batch = make_pair_batch(pairs, Vocabulary.from_array(loaded.vocab, lowercase=True))
    uniforms = parsing.uniforms_for(batch, [p.row for p in pairs], seed) if mode == "sampled" else None
    return reference.parse(loaded.params, loaded.config, batch, mode, uniforms=uniforms)


def encode(tmp_path, name: str, model, rows, *extra: str) -> dict[str, np.ndarray]:
    out = tmp_path / f"{name}.npz"
    assert main(["encode", "--params", str(model), "--data", str(rows), "--out", str(out),
                 "--batch-size", "8", *extra]) == 0
    with np.load(out, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def check_followed(result: dict, ref: parsing.Parsed) -> None:
    """Shapes, dtypes, validity, and the reference's transitions (padded to the file's T)."""
    T = result["premise_transitions"].shape[1]
    lengths = {side: parsing.sentence_lengths(getattr(ref, f"{side}_transitions")) for side in ("premise",
                                                                                              "hypothesis")}
    assert T == 2 * max(int(n.max()) for n in lengths.values()) - 1  # the longest 2n-1 in the file
    for side in ("premise", "hypothesis"):
        got = result[f"{side}_transitions"]
        assert got.shape == (ROWS, T) and got.dtype == np.int32
        for row, n in zip(got, lengths[side]):
            steps = [int(op) for op in row if op != PAD]
            assert len(steps) == 2 * n - 1 and not row[2 * n - 1:].any()
            check_transitions(steps, int(n))
        expected = getattr(ref, f"{side}_transitions")[:, :T]
        np.testing.assert_array_equal(got, expected, err_msg=f"{side} transitions differ from the reference's")
        assert np.abs(result[side] - getattr(ref, side)).max() <= 1e-5
    assert np.abs(result["logits"] - ref.logits).max() <= 1e-4


def test_decisions_leave_the_gold_parse(head_model, rows):
    """The weights make real choices: otherwise agreement below would prove little."""
    ref = reference_parse(head_model, rows, "predicted")
    pairs, _ = read_snli(rows, keep_unlabeled=True)
    gold = make_pair_batch(pairs, Vocabulary.from_array(load_params(head_model).vocab, lowercase=True))
    assert parsing.parse_agreement(ref.premise_transitions, gold.premise_transitions) < 0.9


def test_init_with_a_transition_head(tmp_path):
    with_head, without = tmp_path / "head.npz", tmp_path / "plain.npz"
    for path, extra in ((with_head, ["--transition-head"]), (without, [])):
        assert main(["init", "--size", "small", "--num-pairs", "50", "--seed", "2", "--out", str(path), *extra]) == 0
    head, plain = load_params(with_head), load_params(without)
    assert head.config.transition_head and not plain.config.transition_head
    assert head.params[HEAD_KERNEL].shape == (8, 2) and "tracker.transition.bias" in head.params
    for name, value in plain.params.items():  # the head comes last: the other weights are the same
        np.testing.assert_array_equal(head.params[name], value, err_msg=name)


def test_init_head_needs_a_tracker(tmp_path, capsys):
    assert main(["init", "--size", "small", "--tracker-dim", "0", "--transition-head", "--num-pairs", "10",
                 "--out", str(tmp_path / "m.npz")]) == 2
    assert "--transition-head needs a tracker" in capsys.readouterr().err


def test_encode_gold_is_the_default(head_model, rows, tmp_path):
    default = encode(tmp_path, "default", head_model, rows, "--framework", "reference")
    gold = encode(tmp_path, "gold", head_model, rows, "--framework", "reference", "--transitions", "gold")
    assert sorted(default) == sorted(gold) == ["hypothesis", "logits", "pair_id", "premise"]
    for key in default:
        assert default[key].tobytes() == gold[key].tobytes(), key


@pytest.mark.parametrize("name", ("reference",) + FRAMEWORKS)
def test_encode_predicted_follows_the_reference(name, head_model, rows, tmp_path):
    result = encode(tmp_path, name, head_model, rows, "--framework", name, "--transitions", "predicted")
    assert sorted(result) == ["hypothesis", "hypothesis_transitions", "logits", "pair_id", "premise",
                              "premise_transitions"]
    check_followed(result, reference_parse(head_model, rows, "predicted"))


@pytest.mark.parametrize("name", ("reference",) + FRAMEWORKS)
def test_encode_sampled_follows_the_reference(name, head_model, rows, tmp_path):
    result = encode(tmp_path, name, head_model, rows, "--framework", name, "--transitions", "sampled",
                    "--seed", "7")
    ref = reference_parse(head_model, rows, "sampled", seed=7)
    check_followed(result, ref)
    for side in ("premise", "hypothesis"):
        got = result[f"{side}_logprob"]
        assert got.shape == (ROWS,) and got.dtype == np.float32
        assert np.abs(got - getattr(ref, f"{side}_logprob")).max() <= 1e-5
        assert (got < 0).any()  # sentences with choices have a logprob


def test_encode_sampled_depends_on_the_seed_only(head_model, rows, tmp_path):
    """The same seed again gives the same file (in another chunking too); another seed other samples."""
    first = encode(tmp_path, "a", head_model, rows, "--framework", "reference", "--transitions", "sampled",
                   "--seed", "7")
    again = encode(tmp_path, "b", head_model, rows, "--framework", "reference", "--transitions", "sampled",
                   "--seed", "7", "--batch-size", "5")
    other = encode(tmp_path, "c", head_model, rows, "--framework", "reference", "--transitions", "sampled",
                   "--seed", "8")
    for key in ("premise_transitions", "hypothesis_transitions"):
        np.testing.assert_array_equal(first[key], again[key])
    assert np.abs(first["premise_logprob"] - again["premise_logprob"]).max() <= 1e-6
    assert any((first[key] != other[key]).any() for key in ("premise_transitions", "hypothesis_transitions"))


@pytest.mark.parametrize("extra,message", [
    (["--transitions", "predicted"], "has no 'tracker.transition.kernel'"),
    (["--transitions", "sampled"], "has no 'tracker.transition.kernel'"),
    (["--seed", "3"], "--seed seeds the uniform numbers of --transitions sampled"),
])
def test_encode_errors_are_one_line(extra, message, rows, tmp_path, capsys):
    plain = tmp_path / "plain.npz"
    assert main(["init", "--size", "small", "--num-pairs", "20", "--out", str(plain)]) == 0
    capsys.readouterr()
    code = main(["encode", "--framework", "reference", "--params", str(plain), "--data", str(rows),
                 "--out", str(tmp_path / "o.npz"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.npz").exists()


def test_seed_with_predicted_is_refused(head_model, rows, tmp_path, capsys):
    code = main(["encode", "--framework", "reference", "--params", str(head_model), "--data", str(rows),
                 "--out", str(tmp_path / "o.npz"), "--transitions", "predicted", "--seed", "1"])
    assert code == 2 and "--seed" in capsys.readouterr().err
