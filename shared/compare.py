"""Error measures used by the tests and the benchmark alike (defined once)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

# Agreement with the float64 reference (docs/spec.md §3; the implementation issues).
ENCODING_TOL_F32 = 1e-5  # max abs error of sentence encodings, float32
LOGITS_TOL_F32 = 1e-4  # max abs error of logits, float32
GRAD_REL_TOL_F64 = 1e-8  # relative gradient error, float64 (small model)
GRAD_REL_TOL_F32 = 1e-4  # relative gradient error, float32
F64_TOL = 1e-12  # float64 against the float64 reference: rounding only
LOGPROB_TOL_F32 = 1e-5  # a sampled parse's log-probability and entropy, float32


def tolerances(dtype: str) -> tuple[float, float, float, float]:
    """(encodings, logits, gradients relative, log-probability) for ``dtype`` against the float64 reference:
    what the tests and ``bench conform`` hold every implementation to."""
    if dtype == "float64":
        return F64_TOL, F64_TOL, GRAD_REL_TOL_F64, F64_TOL
    return ENCODING_TOL_F32, LOGITS_TOL_F32, GRAD_REL_TOL_F32, LOGPROB_TOL_F32


def max_abs_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def rel_err(value, reference) -> float:
    """max |value - reference| / max |reference| (0 when both are all zero).

    Scaled by the largest reference entry rather than entry by entry, so tiny
    gradient entries do not turn rounding into huge relative errors.
    """
    value = np.asarray(value, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    err = max_abs_err(value, reference)
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    if scale == 0.0:
        return err
    return err / scale


def grad_rel_errs(grads: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> dict[str, float]:
    """rel_err per canonical parameter; a missing or extra name is an error."""
    if set(grads) != set(reference):
        missing = sorted(set(reference) - set(grads))
        extra = sorted(set(grads) - set(reference))
        raise ValueError(f"gradient names differ: missing {missing}, extra {extra}")
    return {name: rel_err(grads[name], reference[name]) for name in reference}

# Training curves (bench train): per-step loss, relative to the other curve,
# float32 frameworks against each other and against the float64 reference.
TRAIN_LOSS_REL_TOL_SGD = 1e-4  # same weights, same batches, dropout off, plain SGD
TRAIN_LOSS_REL_TOL_ADAM = 1e-3  # Adam: each library places epsilon its own way
