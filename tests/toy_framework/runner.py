"""The toy framework's runner: the float64 NumPy reference behind the runner
contract, with results in the runner's dtype and no REINFORCE.

Written against shared.runner.Runner alone (the protected methods it
dispatches to, after checking the inputs), as a new framework would be.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from shared import optimizers, reference
from shared.params import ModelConfig, cast_params, param_shapes
from shared.parsing import Parsed
from shared.runner import Runner as RunnerBase


class Runner(RunnerBase):
    framework = "toy"
    unsupported = {"reinforce": "the toy framework stops at supervised training",
                   "gpu": "the toy framework is NumPy on the CPU"}

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, **weights):
        if device != "cpu":
            self.require("gpu")
        if dropout:
            raise ValueError("the toy framework has no dropout")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed, **weights)
        self.params = cast_params(params, np.float64)  # computed in float64, returned in dtype
        self.lr = None
        self.state: dict[str, np.ndarray] = {}

    def _out(self, array: np.ndarray) -> np.ndarray:
        """A copy in the runner's dtype (never the runner's own array)."""
        return np.array(array, dtype=self.dtype)

    def _encode(self, batch):
        out = reference.forward(self.params, self.config, batch)
        return self._out(out.premise), self._out(out.hypothesis), self._out(out.logits)

    def _loss_and_grads(self, batch):
        loss, grads = reference.loss_and_grads(self.params, self.config, batch, self.transition_weight)
        return float(loss), {name: self._out(grad) for name, grad in grads.items()}

    def _parse(self, batch, mode: str, uniforms) -> Parsed:
        parsed = reference.parse(self.params, self.config, batch, mode, uniforms)
        return dataclasses.replace(parsed, **{name: self._out(value) for name, value in parsed.to_dict().items()
                                              if not name.endswith("_transitions")})

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
        loss, grads = reference.loss_and_grads(self.params, self.config, batch, self.transition_weight)
        self.params = optimizers.apply(name, hyper, self.lr, self.params, grads, self.state, frozen)
        self.steps = int(self.state[optimizers.STEP])
        return float(loss)

    def optimizer_state(self) -> dict[str, np.ndarray]:
        self._need_optimizer()
        return {key: np.array(value) if key == optimizers.STEP else self._out(value) for key, value in self.state.items()}

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        name, hyper, frozen = self.optimizer
        optimizers.check_state(state, optimizers.state_shapes(name, hyper, param_shapes(self.config), frozen))
        self.state = {key: np.array(value, dtype=np.int64 if key == optimizers.STEP else np.float64)
                      for key, value in state.items()}
        self.steps = int(self.state[optimizers.STEP])

    def get_params(self) -> dict[str, np.ndarray]:
        return {name: self._out(value) for name, value in self.params.items()}
