"""The shared update rules of shared/optimizers.py in float32 NumPy: DyNet's
optimizer where the runner keeps the shared rules (``trainer="shared"``, the
default; train.py says why not DyNet's own trainers there).

:class:`SharedRules` is sgd, adam or rmsprop as shared/optimizers.py defines
them (coupled weight decay g + wd p, Adam's epsilon after the bias
correction of v, RMSprop's inside the square root), with its state held in
the shared layout itself: ``step`` and ``{slot}/{parameter}`` arrays.
train.Optimizer is this class under the name every package gives its
optimizer; graph.update applies it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from shared import optimizers


class SharedRules:
    """sgd, adam or rmsprop (``name``) with the shared hyperparameters (``hyper``,
    shared.optimizers.resolve'd: a ValueError names an unknown one), the
    canonical parameters it leaves unchanged (``frozen``), the rate ``lr``,
    and its state in the shared layout (``state``, float32 slots)."""

    def __init__(self, name: str, lr: float, hyper: Mapping[str, float], frozen: Sequence[str],
                 shapes: Mapping[str, tuple]):
        self.name = name
        self.hyper = optimizers.resolve(name, hyper)
        self.frozen = tuple(optimizers.check_frozen(frozen, shapes))
        self.lr = float(lr)
        self.shapes = dict(shapes)
        self.state = optimizers.zero_state(name, self.hyper, shapes, self.frozen, dtype=np.float32)

    @property
    def trainable(self) -> set[str]:
        return set(self.shapes) - set(self.frozen)

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> set[str]:
        """One update of ``params`` (canonical float32 arrays, replaced by new
        ones) from ``grads``; returns the names it changed."""
        t = int(self.state[optimizers.STEP]) + 1
        hyper, lr, state = self.hyper, self.lr, self.state
        for name in self.trainable:
            p, g = params[name], grads[name]
            if hyper["weight_decay"]:
                g = g + hyper["weight_decay"] * p
            if self.name == "sgd":
                if hyper["momentum"] > 0.0:
                    g = state[f"momentum/{name}"] = hyper["momentum"] * state[f"momentum/{name}"] + g
                params[name] = p - lr * g
            elif self.name == "adam":
                b1, b2 = hyper["beta1"], hyper["beta2"]
                m = state[f"m/{name}"] = b1 * state[f"m/{name}"] + (1 - b1) * g
                v = state[f"v/{name}"] = b2 * state[f"v/{name}"] + (1 - b2) * g * g
                params[name] = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + hyper["eps"])
            else:
                v = state[f"v/{name}"] = hyper["rho"] * state[f"v/{name}"] + (1 - hyper["rho"]) * g * g
                params[name] = p - lr * g / np.sqrt(v + hyper["eps"])
        state[optimizers.STEP] = np.array(t, dtype=np.int64)
        return self.trainable
