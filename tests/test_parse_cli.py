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
from bench.train.checkpoints import latest_checkpoint, load_checkpoint
from bench.records import read_metrics
from bench.train.config import TrainConfig
from bench.train.trainer import Trainer
from shared import parse_metrics, parsing, reference
from shared.arithmetic import arithmetic_pairs
from shared.batching import make_pair_batch
from shared.compare import TRAIN_LOSS_REL_TOL_ADAM
from shared.params import ModelConfig, ParamFile, init_params, load_params, save_params
from shared.snli import SAMPLE_PATH, read_snli
from shared.transitions import PAD, check_transitions
from shared.vocab import Vocabulary
from tests.helpers import curve_rel_err

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
    assert parse_metrics.parse_agreement(ref.premise_transitions, gold.premise_transitions) < 0.9


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


# --------------------------------------------------------------------------
# train --transition-weight: the supervised loss of docs/spec.md §7
# --------------------------------------------------------------------------

ARITH_TRAIN = arithmetic_pairs(48, seed=0, min_len=2, max_len=4)  # 6 batches of 8, sentences of 3 to 7 tokens
ARITH_DEV = arithmetic_pairs(8, seed=1, min_len=2, max_len=4)
ARITH_VOCAB = Vocabulary.from_pairs(ARITH_TRAIN, lowercase=True)
ARITH_CONFIG = ModelConfig(vocab_size=len(ARITH_VOCAB), embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=6,
                           mlp_layers=1, transition_head=True)
ARITH_INIT = ParamFile(init_params(ARITH_CONFIG, seed=1), ARITH_CONFIG, ARITH_VOCAB.to_array())
SUPERVISED = dict(batch_size=8, buckets=(8,), eval_batch_size=8, optimizer="adam", lr=0.02, transition_weight=2.0,
                  log_every=1, train_eval_pairs=0)
CURVE_STEPS = 10


@pytest.fixture(scope="module")
def supervised_runs(tmp_path_factory):
    """Memoized: framework -> (run folder, TrainResult) of CURVE_STEPS supervised steps."""
    root = tmp_path_factory.mktemp("supervised")
    cache = {}

    def run(name: str):
        if name not in cache:
            cfg = TrainConfig(framework=name, dtype="float64" if name == "reference" else "float32",
                              steps=CURVE_STEPS, **SUPERVISED)
            out = root / name
            cache[name] = (out, Trainer(cfg, out, ARITH_TRAIN, init=ARITH_INIT, dev_pairs=ARITH_DEV,
                                        progress=False).run())
        return cache[name]

    return run


def loss_curve(out) -> np.ndarray:
    return np.array([r["loss"] for r in read_metrics(out) if r["kind"] == "train"])


@framework
def test_supervised_training_follows_the_reference(supervised_runs, framework):
    """Same weights, same batches: the loss (class + transition term) follows
    the float64 reference step by step, and so does the trained head."""
    out, result = supervised_runs(framework)
    ref_out, ref_result = supervised_runs("reference")
    got, want = loss_curve(out), loss_curve(ref_out)
    assert len(got) == len(want) == CURVE_STEPS
    assert curve_rel_err(got, want) <= TRAIN_LOSS_REL_TOL_ADAM
    assert want[-1] < want[0]
    head = result.params[HEAD_KERNEL]
    assert np.abs(head - ref_result.params[HEAD_KERNEL]).max() <= 1e-3
    assert np.abs(ref_result.params[HEAD_KERNEL] - ARITH_INIT.params[HEAD_KERNEL]).max() > 1e-2  # it was trained


def test_transition_weight_changes_the_loss(supervised_runs):
    """The weight reaches the runner: the first loss is the class loss plus
    the weighted transition term of the reference."""
    out, _ = supervised_runs("reference")
    first = loss_curve(out)[0]
    batch = make_pair_batch([ARITH_TRAIN[i] for i in range(8)], ARITH_VOCAB, num_tokens=8)
    class_only = reference.loss(ARITH_INIT.params, ARITH_CONFIG, batch)
    assert first > class_only + 0.5  # two times a two-way cross-entropy of about log 2


def test_epoch_end_evaluation_reports_parses(supervised_runs):
    out, _ = supervised_runs("reference")
    evals = [r for r in read_metrics(out) if r["kind"] == "eval"]
    assert evals and evals[-1]["split"] == "dev"
    parsing_ = evals[-1]["parsing"]
    assert parsing_["sentences"] == 2 * len(ARITH_DEV)
    for key in ("transition_accuracy", "exact_parse_rate", "bracket_f1", "accuracy_gold_parse",
                "accuracy_predicted_parse"):
        assert 0.0 <= parsing_[key] <= 1.0, key
    assert parsing_["accuracy_gold_parse"] == evals[-1]["accuracy"]  # gold mode is encode's path
    assert parsing_["transition_loss"] > 0


def test_checkpoint_and_resume_keep_the_head(supervised_runs, tmp_path):
    """The head is in every checkpoint, and a run resumed from one ends where
    the straight run ended (PyTorch; the other frameworks share the loop)."""
    straight_out, straight = supervised_runs("pytorch")
    cfg = TrainConfig(framework="pytorch", steps=4, **SUPERVISED)
    Trainer(cfg, tmp_path, ARITH_TRAIN, init=ARITH_INIT, dev_pairs=ARITH_DEV, progress=False).run()
    saved = load_checkpoint(latest_checkpoint(tmp_path))
    assert saved.model.config.transition_head and saved.state["step"] == 4
    assert HEAD_KERNEL in saved.model.params and "tracker.transition.bias" in saved.model.params
    assert not np.array_equal(saved.model.params[HEAD_KERNEL], ARITH_INIT.params[HEAD_KERNEL])
    cfg.steps = CURVE_STEPS
    resumed = Trainer(cfg, tmp_path, ARITH_TRAIN, init=None, dev_pairs=ARITH_DEV, resume=True, progress=False).run()
    for name in (HEAD_KERNEL, "tracker.transition.bias"):
        np.testing.assert_array_equal(resumed.params[name], straight.params[name], err_msg=name)
    assert load_params(tmp_path / "model.npz").config.transition_head


def test_train_refuses_a_transition_weight_without_a_head(tmp_path, capsys):
    code = main(["train", "--framework", "reference", "--data", "arithmetic", "--num-pairs", "16", "--size", "small",
                 "--transition-weight", "1", "--steps", "1", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "needs a model with a transition head" in err and len(err.strip().splitlines()) == 1


def test_train_command_with_a_head_on_arithmetic(tmp_path, capsys):
    """init in train: --transition-head makes the head, --data arithmetic the data."""
    out = tmp_path / "run"
    assert main(["train", "--framework", "tensorflow", "--data", "arithmetic", "--num-pairs", "32", "--dev-pairs", "8",
                 "--size", "small", "--transition-head", "--transition-weight", "1", "--batch-size", "16",
                 "--buckets", "32", "--train-eval-pairs", "0", "--quiet", "--out", str(out)]) == 0
    assert load_params(out / "model.npz").config.transition_head
    run = json.loads((out / "run.json").read_text())
    assert run["train"]["transition_weight"] == 1.0 and run["data"]["dev"] == "arithmetic-8-seed1-numbers4to8"
    assert "parsing" in [r for r in read_metrics(out) if r["kind"] == "eval"][-1]


# --------------------------------------------------------------------------
# evaluate: parse metrics on a case checked by hand
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_case(tmp_path_factory):
    """Two pairs of three-word sentences: premises left-branching, hypotheses
    right-branching; a model whose head always prefers REDUCE (t = (0, 1))
    and whose classifier always says neutral.

    By hand: it predicts left-branching trees, so the premises are exact and
    the hypotheses not: exact parses 2/4; brackets (the whole sentence left
    out) one per sentence, matched for the premises only: F1 1/2.
    Teacher-forced, REDUCE wins every step, right at the 2 REDUCEs of each
    sentence's 5 steps: accuracy 8/20 = 0.4; loss (12 softplus(1) + 8
    softplus(-1)) / 20. Labels neutral and entailment: accuracy 1/2 with
    either parse.
    """
    root = tmp_path_factory.mktemp("hand")
    data = root / "pairs.jsonl"
    rows = [("( ( a b ) c )", "( a ( b c ) )", "neutral"), ("( ( c b ) a )", "( b ( a c ) )", "entailment")]
    data.write_text("".join(json.dumps({"sentence1_binary_parse": p, "sentence2_binary_parse": h, "gold_label": g,
                                        "pairID": f"hand-{i}"}) + "\n" for i, (p, h, g) in enumerate(rows)))
    vocab = Vocabulary.from_array(np.array(["<pad>", "<unk>", "a", "b", "c"]), lowercase=True)
    config = ModelConfig(vocab_size=5, embed_dim=4, hidden_dim=3, tracker_dim=2, mlp_dim=4, mlp_layers=1,
                         transition_head=True)
    params = init_params(config, seed=0)
    params[HEAD_KERNEL][:] = 0.0
    params["tracker.transition.bias"][:] = (0.0, 1.0)
    params["output.kernel"][:] = 0.0
    params["output.bias"][:] = (0.0, 5.0, 0.0)
    model = root / "model.npz"
    save_params(model, params, config, vocab.to_array())
    return model, data


@pytest.mark.parametrize("name", ("reference",) + FRAMEWORKS)
def test_evaluate_parse_metrics_by_hand(name, hand_case, tmp_path, capsys):
    model, data = hand_case
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--framework", name, "--params", str(model), "--data", str(data),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "exact parses 50.00%" in printed and "bracket F1 50.00%" in printed
    result = json.loads(out.read_text())["parsing"]
    assert result["sentences"] == 4 and result["steps"] == 20
    assert result["transition_accuracy"] == pytest.approx(0.4)
    assert result["exact_parse_rate"] == pytest.approx(0.5) and result["bracket_f1"] == pytest.approx(0.5)
    softplus = lambda x: np.log1p(np.exp(x))  # noqa: E731
    assert result["transition_loss"] == pytest.approx((12 * softplus(1.0) + 8 * softplus(-1.0)) / 20, rel=1e-6)
    assert result["accuracy_gold_parse"] == result["accuracy_predicted_parse"] == 0.5


def test_evaluate_without_a_head_has_no_parse_metrics(rows, tmp_path, capsys):
    plain = tmp_path / "plain.npz"
    assert main(["init", "--size", "small", "--num-pairs", "20", "--out", str(plain)]) == 0
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--framework", "reference", "--params", str(plain), "--data", str(rows),
                 "--out", str(out)]) == 0
    assert "parsing" not in json.loads(out.read_text()) and "exact parses" not in capsys.readouterr().out


# --------------------------------------------------------------------------
# explain --parse: what deciding at run time costs each framework
# --------------------------------------------------------------------------


def test_explain_parse_counts_the_cost_of_deciding(capsys):
    assert main(["explain", "--parse", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    torch_, tf_, jax_ = result["pytorch"], result["tensorflow"], result["jax"]
    # Define-by-run reads decisions back to Python only when the model decides...
    assert torch_["gold"]["host_syncs"] == 0
    assert 0 < torch_["predicted"]["host_syncs"] <= torch_["predicted"]["python_steps"]
    # ... the static graphs decide inside the loop body: a few more ops, no more loops.
    assert tf_["predicted"]["body_ops"] > tf_["gold"]["body_ops"]
    assert tf_["predicted"]["while_loops"] == tf_["gold"]["while_loops"] == 1
    assert tf_["predicted"]["body_selects"] > tf_["gold"]["body_selects"] > 0
    assert jax_["predicted"]["body_eqns"] > jax_["gold"]["body_eqns"]
    assert jax_["predicted"]["scans"] == jax_["gold"]["scans"] == 1
    assert result["command"] == "python -m bench explain --parse"
