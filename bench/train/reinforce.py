"""``bench train --transitions reinforce``: parses learned by reward (docs/spec.md §7, REINFORCE)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bench.train.evaluation import Evaluation, ParseEvaluation, evaluate_parses
from bench.train.trainer import Trainer
from shared import parse_metrics, parsing
from shared import reinforce as shared_reinforce
from shared.params import ParamFile, init_params
from shared.snli import Pair

TRANSITIONS = ("gold", "reinforce")
# Per-step numbers of a reinforce_step record averaged into each "train" record.
WINDOW_KEYS = ("reward", "logprob", "entropy", "choice_reduce_share", "left_share", "right_share")


@dataclass(frozen=True)
class ReinforceSettings:
    reinforce_weight: float = 1.0  # weight of the score term
    entropy_weight: float = 0.0  # weight of the entropy bonus

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("parses")
    group.add_argument("--transitions", default="gold", choices=TRANSITIONS,
                       help="gold: follow the data's trees; reinforce: sample the model's own parses and "
                            "train the transition head by REINFORCE (docs/spec.md §7) [default: %(default)s]")
    group.add_argument("--reinforce-weight", type=float, default=1.0,
                       help="reinforce: weight of the score term [default: %(default)s]")
    group.add_argument("--entropy-weight", type=float, default=0.0,
                       help="reinforce: weight of the entropy bonus [default: %(default)s]")


def settings_from_args(args: argparse.Namespace) -> ReinforceSettings | None:
    """The REINFORCE settings, or None when training follows the data's trees."""
    if args.transitions != "reinforce":
        if args.reinforce_weight != 1.0 or args.entropy_weight != 0.0:
            raise ValueError("--reinforce-weight and --entropy-weight need --transitions reinforce")
        return None
    return ReinforceSettings(args.reinforce_weight, args.entropy_weight)


def with_head(model: ParamFile, seed: int) -> ParamFile:
    """The model with a transition head: unchanged if it has one, else the head of ``seed`` added."""
    if model.config.transition_head:
        return model
    config = dataclasses.replace(model.config, transition_head=True)
    fresh = init_params(config, seed=seed)
    params = dict(model.params)
    for name in set(fresh) - set(params):
        params[name] = fresh[name].astype(next(iter(params.values())).dtype)
    return ParamFile(params, config, model.vocab)


@dataclass
class ParsedEvaluation(Evaluation):
    """An evaluation in predicted mode, with the parses' metrics against the pairs' own trees."""

    parse: dict = dataclasses.field(default_factory=dict)  # ParseCounts.as_dict() against the data's trees

    def to_dict(self) -> dict:
        return {**super().to_dict(), "mode": "predicted", **{f"parse_{k}": v for k, v in self.parse.items()}}


class ReinforceTrainer(Trainer):
    """bench/train/trainer.py's Trainer, each step a REINFORCE step (module docstring)."""

    def __init__(self, cfg, out_dir, train_pairs: Sequence[Pair], *, settings: ReinforceSettings, **options):
        self.settings = settings
        # pairs made in memory have no data row (docs/spec.md §2): their position seeds their samples
        train_pairs = [p if p.row >= 0 else dataclasses.replace(p, row=i) for i, p in enumerate(train_pairs)]
        options["runner_options"] = {**options.get("runner_options", {}), **settings.to_dict()}
        super().__init__(cfg, out_dir, train_pairs, **options)
        shared_reinforce.require_head(self.model.config, "--transitions reinforce")
        self.baseline = self.checkpoint.state.get("baseline") if self.checkpoint is not None else None
        self._steps: list[dict] = []  # the reinforce_step records since the last "train" record
        self._parse_counts = parse_metrics.ParseCounts()

    def _find_checkpoint(self, resume: bool):
        self.run_info["reinforce"] = self.settings.to_dict()
        if resume and (self.out_dir / "run.json").exists():
            saved = json.loads((self.out_dir / "run.json").read_text()).get("reinforce")
            if saved != self.run_info["reinforce"]:
                raise ValueError(f"--resume: the REINFORCE settings were {saved}, now {self.run_info['reinforce']}; "
                                 "give the same settings as the first command")
        return super()._find_checkpoint(resume)

    def _optimizer_step(self, batch, pairs: Sequence[Pair]) -> float:
        u = parsing.uniforms_for(batch, rows=[p.row for p in pairs], seed=self.cfg.seed, epoch=self.epoch)
        if self.baseline is None:  # the first step of a run: b is this batch's mean reward
            _, _, rewards = self.runner.reinforce_loss_and_grads(batch, u, 0.0)
            self.baseline = shared_reinforce.update_baseline(None, float(np.mean(rewards)))
        record = self.runner.reinforce_step(batch, u, self.baseline)
        self.baseline = shared_reinforce.update_baseline(self.baseline, record["reward"])
        self._steps.append({key: record[key] for key in WINDOW_KEYS})
        for side in ("premise", "hypothesis"):
            self._parse_counts += parse_metrics.ParseCounts.of_parses(record[f"{side}_transitions"],
                                                                getattr(batch, f"{side}_transitions"))
        return record["loss"]

    def _window_fields(self) -> dict:
        fields = {key: float(np.nanmean([step[key] for step in self._steps])) for key in WINDOW_KEYS}
        fields.update(baseline=self.baseline, bracket_f1=self._parse_counts.bracket_f1,
                      exact_parse_rate=self._parse_counts.exact_parse_rate)
        self._steps, self._parse_counts = [], parse_metrics.ParseCounts()
        return fields

    def _evaluate(self, pairs: Sequence[Pair]) -> tuple[ParsedEvaluation, ParseEvaluation]:
        parses = evaluate_parses(self.runner, pairs, self.vocab, batch_size=self.cfg.eval_batch_size,
                                 buckets=self.cfg.buckets)
        return ParsedEvaluation(**parses.followed, parse=parses.counts.as_dict()), parses  # one pass for both

    def _state_fields(self) -> dict:
        return {"baseline": self.baseline}
