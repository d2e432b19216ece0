"""The float64 NumPy reference behind the runner interface (``--framework reference``), and its platform.

Training uses the NumPy optimizers of shared/optimizers.py, so the reference
is also the oracle for training curves (``bench train --framework reference``
on a small model: it is slow, one example at a time).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from shared import optimizers, reference
from shared import reinforce as shared_reinforce
from shared.params import ModelConfig, cast_params, param_shapes
from shared.parsing import Parsed
from shared.platform import Platform as PlatformBase
from shared.runner import Runner as RunnerBase


class Platform(PlatformBase):
    """A CPU, NumPy's version, nothing to configure."""
    name = "reference"
    library = "numpy"


class Runner(RunnerBase):
    framework = "reference"
    # The oracle the others are checked against computes in float64 alone: asked for float32 it refuses,
    # rather than answer in another precision than asked.
    unsupported = {"float32": "the NumPy reference is the float64 oracle"}

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float64",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, transition_weight: float = 0.0,
                 reinforce_weight: float = 1.0, entropy_weight: float = 0.0, **options):
        if dtype != "float64":
            self.require(dtype)
        if device != "cpu":
            raise ValueError("the NumPy reference runs on the CPU only")
        if dropout:
            raise ValueError("the reference has no dropout (it is the eval-mode oracle)")
        super().__init__(params, config, dtype="float64", device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight)
        self.params = cast_params(params, np.float64)
        self.optimizer = None  # (name, hyperparameters, frozen names)
        self.lr = None
        self.state: dict[str, np.ndarray] = {}

    def _encode(self, batch):
        out = reference.forward(self.params, self.config, batch)
        return out.premise, out.hypothesis, out.logits

    def _parse(self, batch, mode: str, uniforms) -> Parsed:
        """docs/spec.md §7: the float64 reference's parse (see shared.reference.parse)."""
        return reference.parse(self.params, self.config, batch, mode, uniforms)

    def _loss_and_grads(self, batch):
        return reference.loss_and_grads(self.params, self.config, batch, self.transition_weight)

    def _reinforce_loss_and_grads(self, batch, uniforms, baseline):
        return reference.reinforce_loss_and_grads(self.params, self.config, batch, uniforms, baseline,
                                                  self.reinforce_weight, self.entropy_weight)

    def _reinforce_step(self, batch, uniforms, baseline) -> dict:
        """One optimizer step on the REINFORCE loss (the parse is run a second
        time for its record: the reference favours plainness over speed)."""
        name, hyper, frozen = self.optimizer
        value, grads, rewards = self._reinforce_loss_and_grads(batch, uniforms, baseline)
        parsed = reference.parse(self.params, self.config, batch, "sampled", uniforms)
        self.params = optimizers.apply(name, hyper, self.lr, self.params, grads, self.state, frozen)
        self.steps = int(self.state[optimizers.STEP])
        return shared_reinforce.step_record(
            value, rewards, parsed.premise_logprob, parsed.hypothesis_logprob, parsed.premise_entropy,
            parsed.hypothesis_entropy, parsed.premise_transitions, parsed.hypothesis_transitions)

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        hyper = optimizers.resolve(name, hyper)
        frozen = optimizers.check_frozen(frozen, self.params)
        self.optimizer = (name, hyper, frozen)
        self.lr = lr
        self.state = optimizers.zero_state(name, hyper, param_shapes(self.config), frozen, dtype=np.float64)

    def set_learning_rate(self, lr: float) -> None:
        self._need_optimizer()
        self.lr = lr

    def _train_step(self, batch) -> float:
        name, hyper, frozen = self.optimizer
        value, grads = reference.loss_and_grads(self.params, self.config, batch, self.transition_weight)
        self.params = optimizers.apply(name, hyper, self.lr, self.params, grads, self.state, frozen)
        self.steps = int(self.state[optimizers.STEP])
        return value

    def optimizer_state(self) -> dict[str, np.ndarray]:
        self._need_optimizer()
        return {key: np.array(value, copy=True) for key, value in self.state.items()}

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        name, hyper, frozen = self.optimizer
        optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(self.config), frozen))
        self.state = {key: np.array(value, dtype=np.int64 if key == optimizers.STEP else np.float64)
                      for key, value in state.items()}
        self.steps = int(self.state[optimizers.STEP])

    def get_params(self):
        return {name: value.copy() for name, value in self.params.items()}
