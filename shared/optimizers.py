"""Optimizers: one set of names and hyperparameters, one state layout, a NumPy reference.

Every Runner takes the same ``set_optimizer(name, lr, **hyper)`` call and maps
it onto its framework's own optimizer. This module fixes what they all share:

* the names and hyperparameters (:data:`DEFAULTS`), with the same defaults
  everywhere, so no library's own default (an Adam epsilon of 1e-7, an
  RMSprop decay of 0.99, ...) slips in;
* the layout of the optimizer state in a checkpoint (:func:`state_shapes`):
  ``step`` (the number of updates taken) and one array per slot and trainable
  parameter, named ``{slot}/{parameter}`` in the canonical ``[in, out]``
  layout, so a state saved by one framework loads into another;
* a float64 NumPy implementation of each update (:func:`apply`), the
  reference the frameworks are compared with.

The updates, per parameter ``p`` with gradient ``g`` (``wd``: ``weight_decay``,
a coupled L2 term: ``g <- g + wd * p`` before the update, which is the
gradient of ``wd/2 * |p|^2`` added to the loss):

* ``sgd``:      ``b = momentum * b + g``; ``p -= lr * b``  (``b = g`` without momentum)
* ``adam``:     ``m = b1 m + (1-b1) g``; ``v = b2 v + (1-b2) g^2``;
                ``p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)``
* ``rmsprop``:  ``v = rho v + (1-rho) g^2``; ``p -= lr * g / sqrt(v + eps)``
                (epsilon inside the root, as the 2016 SPINN code places it)

Where a library places epsilon differently, its ``impl_*/train.py`` says so
and, where the library lets it, feeds the optimizer what turns its update
into the one above. An Adam that adds epsilon to ``sqrt(v)`` before the bias
correction of v acts as ``eps / sqrt(1 - b2^t)`` above (30 times eps at step
1) unless it is fed ``eps * sqrt(1 - b2^t)``; an RMSprop that adds epsilon
outside the root (``g / (sqrt(v) + eps)``) with no option to change it
differs from the others wherever sqrt(v) is not much larger than sqrt(eps).
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

import numpy as np

OPTIMIZERS = ("sgd", "adam", "rmsprop")

# Hyperparameters and their defaults (the same in every framework).
DEFAULTS: dict[str, dict[str, float]] = {
    "sgd": {"momentum": 0.0, "weight_decay": 0.0},
    "adam": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    "rmsprop": {"rho": 0.9, "eps": 1e-8, "weight_decay": 0.0},
}

STEP = "step"  # the state entry that counts updates (0-d int64)


def resolve(name: str, hyper: Mapping[str, float] | None = None) -> dict[str, float]:
    """The full hyperparameters of optimizer ``name``: defaults, overridden by
    ``hyper``. Unknown names or keys raise ValueError naming the choices."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    hyper = dict(hyper or {})
    unknown = sorted(set(hyper) - set(DEFAULTS[name]))
    if unknown:
        raise ValueError(f"optimizer {name!r} takes {', '.join(sorted(DEFAULTS[name]))}; "
                         f"unknown: {', '.join(unknown)}")
    out = {**DEFAULTS[name], **{k: float(v) for k, v in hyper.items()}}
    for key in ("momentum", "beta1", "beta2", "rho"):
        if key in out and not 0.0 <= out[key] < 1.0:
            raise ValueError(f"optimizer {name!r}: {key} must be in [0, 1), got {out[key]}")
    if out.get("eps", 1.0) <= 0.0 or out["weight_decay"] < 0.0:
        raise ValueError(f"optimizer {name!r}: eps must be > 0 and weight_decay >= 0, got {out}")
    return out


def slots(name: str, hyper: Mapping[str, float]) -> tuple[str, ...]:
    """The per-parameter state arrays of an optimizer, in order."""
    if name == "sgd":
        return ("momentum",) if hyper.get("momentum", 0.0) > 0.0 else ()
    if name == "adam":
        return ("m", "v")
    if name == "rmsprop":
        return ("v",)
    raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")


def state_shapes(name: str, hyper: Mapping[str, float], param_shapes: Mapping[str, tuple],
                 frozen: Iterable[str] = ()) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every state entry: ``step`` () and ``{slot}/{param}``
    for each trainable (not frozen) parameter."""
    frozen = set(frozen)
    shapes: dict[str, tuple[int, ...]] = {STEP: ()}
    for slot in slots(name, hyper):
        for param, shape in param_shapes.items():
            if param not in frozen:
                shapes[f"{slot}/{param}"] = tuple(shape)
    return shapes


def check_frozen(frozen: Iterable[str], param_names: Iterable[str]) -> tuple[str, ...]:
    frozen = tuple(frozen)
    unknown = sorted(set(frozen) - set(param_names))
    if unknown:
        raise ValueError(f"cannot freeze {unknown}: no such parameter")
    return frozen


def check_state(state: Mapping[str, np.ndarray], expected: Mapping[str, tuple]) -> None:
    """Raise ValueError naming the first missing, extra or mis-shaped entry."""
    missing = [k for k in expected if k not in state]
    if missing:
        raise ValueError(f"optimizer state lacks {missing[0]!r} (expected shape {expected[missing[0]]})"
                         + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    extra = [k for k in state if k not in expected]
    if extra:
        raise ValueError(f"optimizer state has unexpected entry {extra[0]!r} (does it come from another "
                         f"optimizer or set of frozen parameters?)")
    for key, shape in expected.items():
        found = tuple(np.shape(state[key]))
        if found != tuple(shape):
            raise ValueError(f"optimizer state {key!r} has shape {found}, expected {tuple(shape)}")


def zero_state(name: str, hyper: Mapping[str, float], param_shapes: Mapping[str, tuple],
               frozen: Iterable[str] = (), dtype=np.float32) -> dict[str, np.ndarray]:
    """The state of an optimizer that has taken no step."""
    out: dict[str, np.ndarray] = {}
    for key, shape in state_shapes(name, hyper, param_shapes, frozen).items():
        out[key] = np.array(0, dtype=np.int64) if key == STEP else np.zeros(shape, dtype=dtype)
    return out


def describe(name: str, hyper: Mapping[str, float], lr: float, frozen: Iterable[str] = ()) -> str:
    """A JSON string naming the optimizer (stored beside the state)."""
    return json.dumps({"name": name, "lr": lr, "frozen": sorted(frozen), **hyper}, sort_keys=True)


def learning_rate(base: float, step: int, decay: float = 1.0, decay_steps: int = 10000) -> float:
    """``base * decay ** (step / decay_steps)``: the smooth exponential decay of
    the 2016 SPINN code (``learning_rate_decay_per_10k_steps``)."""
    if decay == 1.0:
        return float(base)
    return float(base * decay ** (step / decay_steps))


# --------------------------------------------------------------------------
# The NumPy reference (float64)
# --------------------------------------------------------------------------


def apply(name: str, hyper: Mapping[str, float], lr: float, params: Mapping[str, np.ndarray],
          grads: Mapping[str, np.ndarray], state: dict[str, np.ndarray],
          frozen: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """One update in float64: returns the new parameters and updates ``state``
    (the layout of :func:`state_shapes`) in place."""
    frozen = set(frozen)
    t = int(state[STEP]) + 1
    out = {}
    for key, p in params.items():
        p = np.asarray(p, dtype=np.float64)
        if key in frozen:
            out[key] = p.copy()
            continue
        g = np.asarray(grads[key], dtype=np.float64) + hyper["weight_decay"] * p
        if name == "sgd":
            if hyper["momentum"] > 0.0:
                b = hyper["momentum"] * state[f"momentum/{key}"] + g
                state[f"momentum/{key}"] = b
                g = b
            out[key] = p - lr * g
        elif name == "adam":
            b1, b2 = hyper["beta1"], hyper["beta2"]
            m = b1 * state[f"m/{key}"] + (1 - b1) * g
            v = b2 * state[f"v/{key}"] + (1 - b2) * g * g
            state[f"m/{key}"], state[f"v/{key}"] = m, v
            out[key] = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + hyper["eps"])
        elif name == "rmsprop":
            v = hyper["rho"] * state[f"v/{key}"] + (1 - hyper["rho"]) * g * g
            state[f"v/{key}"] = v
            out[key] = p - lr * g / np.sqrt(v + hyper["eps"])
        else:
            raise ValueError(f"unknown optimizer {name!r}")
    state[STEP] = np.array(t, dtype=np.int64)
    return out
