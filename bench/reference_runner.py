"""The float64 NumPy reference behind the runner interface (``--framework reference``)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from shared import reference
from shared.params import ModelConfig, cast_params


class Runner:
    framework = "reference"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float64",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, **options):
        if device != "cpu":
            raise ValueError("the NumPy reference runs on the CPU only")
        if dropout:
            raise ValueError("the reference has no dropout (it is the eval-mode oracle)")
        self.config = config
        self.params = cast_params(params, np.float64)
        self.lr = None

    def encode(self, batch):
        out = reference.forward(self.params, self.config, batch)
        return out.premise, out.hypothesis, out.logits

    def loss_and_grads(self, batch):
        return reference.loss_and_grads(self.params, self.config, batch)

    def set_optimizer(self, name: str, lr: float, **kwargs) -> None:
        if name != "sgd":
            raise ValueError("the reference implements plain SGD only")
        self.lr = lr

    def train_step(self, batch) -> float:
        if self.lr is None:
            raise RuntimeError("call set_optimizer first")
        value, grads = reference.loss_and_grads(self.params, self.config, batch)
        self.params = reference.sgd_step(self.params, grads, self.lr)
        return value

    def get_params(self):
        return {name: value.copy() for name, value in self.params.items()}

    def compile_stats(self) -> dict:
        return {"traces": 0, "compile_s": 0.0}
