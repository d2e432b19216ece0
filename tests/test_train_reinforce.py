"""``bench train --transitions reinforce`` (bench/train/reinforce.py) in every framework.

Small model, arithmetic pairs (docs/spec.md §7), one bucket shape, so the
compiled frameworks compile each program once. Parametrized over frameworks
with ids; nothing is skipped.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cli import main
from bench.frameworks import FRAMEWORKS
from bench.train.checkpoints import latest_checkpoint, load_checkpoint
from bench.records import read_metrics
from bench.train.reinforce import ReinforceSettings, ReinforceTrainer, with_head
from bench.train.config import TrainConfig
from shared.arithmetic import arithmetic_pairs
from shared.params import ModelConfig, ParamFile, init_params
from shared.vocab import Vocabulary

framework = pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)

TRAIN_PAIRS = arithmetic_pairs(40, seed=0)  # 5 batches of 8 per epoch
DEV_PAIRS = arithmetic_pairs(8, seed=1)
VOCAB = Vocabulary.from_pairs(TRAIN_PAIRS, lowercase=True)
CONFIG = ModelConfig(vocab_size=len(VOCAB), embed_dim=8, hidden_dim=6, tracker_dim=4, mlp_dim=8, mlp_layers=1)
INIT = with_head(ParamFile(init_params(CONFIG, seed=0), CONFIG, VOCAB.to_array()), seed=0)
SETTINGS = ReinforceSettings(reinforce_weight=1.0, entropy_weight=0.01)
# One bucket (N=16 holds every expression of up to 8 numbers), batches of 8, a dropout rate.
COMMON = dict(batch_size=8, buckets=(16,), eval_batch_size=8, train_eval_pairs=0, dropout=0.1, seed=3,
              optimizer="sgd", lr=0.5, log_every=2)
TIMING_KEYS = {"elapsed_s", "pairs_per_s", "eval_s", "timestamp", "path", "from"}


def _run(framework, out, steps, resume=False):
    cfg = TrainConfig(framework=framework, steps=steps, epochs=2, **COMMON)
    return ReinforceTrainer(cfg, out, TRAIN_PAIRS, settings=SETTINGS, init=None if resume else INIT,
                            dev_pairs=DEV_PAIRS, resume=resume, progress=False).run()


def _records(out) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(out)
            if r["kind"] in ("train", "eval")]


@framework
def test_resume_continues_baseline_and_samples(framework, tmp_path):
    """7 steps straight == 3 steps, then --resume to 7 (across an epoch end,
    where the uniforms' epoch changes): the same samples, baseline, dropout
    masks and weights, exactly."""
    straight = _run(framework, tmp_path / "straight", 7)
    _run(framework, tmp_path / "cut", 3)
    assert latest_checkpoint(tmp_path / "cut").name == "step-00000003"
    resumed = _run(framework, tmp_path / "cut", 7, resume=True)
    assert resumed.steps == straight.steps == 7
    for name, value in straight.params.items():
        assert np.array_equal(resumed.params[name], value), name
    # The cut run logged a short window at its stop (step 3) and the resumed one
    # the rest of it (step 4); from the epoch end (step 5) the logs are the same.
    later = lambda out: [r for r in _records(out) if r["step"] >= 5]  # noqa: E731
    assert later(tmp_path / "cut") == later(tmp_path / "straight") != []
    last = load_checkpoint(latest_checkpoint(tmp_path / "straight")).state
    assert last["baseline"] == load_checkpoint(latest_checkpoint(tmp_path / "cut")).state["baseline"]
    assert not np.array_equal(straight.params["tracker.transition.kernel"],
                              INIT.params["tracker.transition.kernel"])  # the head learned

    train_records = [r for r in read_metrics(tmp_path / "straight") if r["kind"] == "train"]
    for key in ("reward", "baseline", "entropy", "logprob", "choice_reduce_share", "bracket_f1"):
        assert all(np.isfinite(r[key]) for r in train_records), key
    evals = [r for r in read_metrics(tmp_path / "straight") if r["kind"] == "eval"]
    assert evals and all(r["mode"] == "predicted" and 0 <= r["parse_bracket_f1"] <= 1 for r in evals)


def test_first_baseline_is_the_first_batch_mean_reward(tmp_path):
    """b after step 1 = 0.9 b0 + 0.1 r1, b0 the first batch's mean reward (eval mode, before the step)."""
    from bench.train.config import epoch_plan
    from shared import parsing
    from shared.batching import make_pair_batch, pair_length
    from shared.reference.runner import Runner

    cfg = TrainConfig(framework="reference", dtype="float64", steps=1, **{**COMMON, "dropout": 0.0})
    result = ReinforceTrainer(cfg, tmp_path, TRAIN_PAIRS, settings=SETTINGS, init=INIT, dev_pairs=[],
                              progress=False).run()
    size, indices = epoch_plan(np.array([pair_length(p) for p in TRAIN_PAIRS]), cfg, 0)[0]
    pairs = [TRAIN_PAIRS[i] for i in indices]
    batch = make_pair_batch(pairs, VOCAB, num_tokens=size)
    u = parsing.uniforms_for(batch, [p.row for p in pairs], seed=cfg.seed, epoch=0)
    runner = Runner(INIT.params, CONFIG.__class__(**{**CONFIG.__dict__, "transition_head": True}),
                    **SETTINGS.to_dict())
    b0 = float(np.mean(runner.reinforce_loss_and_grads(batch, u, 0.0)[2]))
    runner.set_optimizer("sgd", lr=0.5)
    r1 = runner.reinforce_step(batch, u, b0)["reward"]
    state = load_checkpoint(latest_checkpoint(tmp_path)).state
    assert state["baseline"] == pytest.approx(0.9 * b0 + 0.1 * r1, rel=1e-12)
    assert result.steps == 1


def test_cli_flags(tmp_path, capsys):
    base = ["train", "--framework", "pytorch", "--data", "arithmetic", "--num-pairs", "16", "--size", "small",
            "--batch-size", "8", "--steps", "2", "--dev", "none", "--train-eval-pairs", "0", "--quiet"]
    assert main(base + ["--entropy-weight", "0.1", "--out", str(tmp_path / "a")]) == 2
    assert "--transitions reinforce" in capsys.readouterr().err
    assert main(base + ["--transitions", "reinforce", "--reinforce-weight", "0.5", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["curves", str(tmp_path / "b"), "--no-plots"]) == 0
    assert "| reward (last) | baseline |" in capsys.readouterr().out
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run["reinforce"] == {"reinforce_weight": 0.5, "entropy_weight": 0.0}
    assert main(base + ["--transitions", "reinforce", "--reinforce-weight", "0.7", "--resume",
                        "--out", str(tmp_path / "b")]) == 2
    assert "REINFORCE settings" in capsys.readouterr().err
