"""The checks of the runner contract (docs/runner-interface.md), written once.

The public methods of shared.runner.Runner call these on the host before
they dispatch to an implementation, so every framework refuses the same
arguments with the same one-line message: the loss weights, the labels, the
parse mode, the uniforms, the baseline, the sentence lengths a decided parse
reads, and the tokens and transitions of every batch (:func:`check_batch`).
The float64 reference (shared/reference/) calls them too. NumPy only.
"""

from __future__ import annotations

import math

import numpy as np

from .params import ModelConfig
from .parsing import check_mode
from .transitions import PAD, REDUCE, SHIFT

# The transition head's kernel (docs/spec.md §7): the canonical name every
# error about a missing head points to.
HEAD_KERNEL = "tracker.transition.kernel"
DEFAULT_REINFORCE_WEIGHT = 1.0
DEFAULT_ENTROPY_WEIGHT = 0.0
SIDES = ("premise", "hypothesis")


def require_head(config: ModelConfig, what: str) -> None:
    """ValueError naming the head's kernel unless ``config`` has a transition head."""
    if not config.transition_head:
        raise ValueError(f"{what} needs the transition head, but the model has no {HEAD_KERNEL!r} "
                         "(its config has transition_head false; docs/spec.md §7)")


def check_transition_weight(config: ModelConfig, transition_weight: float) -> float:
    """The supervised loss's weight (docs/spec.md §7) as a float: >= 0, and > 0 only with a head."""
    transition_weight = float(transition_weight)
    if not transition_weight >= 0.0:
        raise ValueError(f"transition_weight must be >= 0, got {transition_weight}")
    if transition_weight > 0.0:
        require_head(config, f"transition_weight {transition_weight}")
    return transition_weight


def check_weights(config: ModelConfig, reinforce_weight: float, entropy_weight: float) -> tuple[float, float]:
    """The REINFORCE weights ``reinforce_weight`` and ``entropy_weight`` as floats.

    Both must be finite and >= 0. A weight set to anything but its default
    asks for REINFORCE, which needs the transition head.
    """
    weights = {"reinforce_weight": reinforce_weight, "entropy_weight": entropy_weight}
    for name, value in weights.items():
        value = float(value)
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        weights[name] = value
    if (weights["reinforce_weight"] != DEFAULT_REINFORCE_WEIGHT
            or weights["entropy_weight"] != DEFAULT_ENTROPY_WEIGHT):
        require_head(config, f"reinforce_weight {weights['reinforce_weight']}, "
                             f"entropy_weight {weights['entropy_weight']}")
    return weights["reinforce_weight"], weights["entropy_weight"]


def check_labels(batch) -> np.ndarray:
    """The batch's labels as <int32>[B], every one a class 0..2 (a loss cannot use NO_LABEL rows)."""
    labels = np.asarray(batch.labels)
    if np.any((labels < 0) | (labels > 2)):
        raise ValueError("the loss needs labels 0..2 on every row (filter out unlabeled rows)")
    return labels.astype(np.int32)


def check_baseline(baseline) -> float:
    """REINFORCE's baseline b as a finite float."""
    baseline = float(baseline)
    if not math.isfinite(baseline):
        raise ValueError(f"the baseline must be a finite number, got {baseline}")
    return baseline


def check_uniforms(batch, uniforms, what: str = "sampled mode") -> tuple[np.ndarray, np.ndarray]:
    """(premise_u, hypothesis_u) as <float64>[B, T] arrays of the batch's shape (docs/spec.md §7)."""
    if uniforms is None:
        raise ValueError(f"{what} needs uniforms (premise_u, hypothesis_u): see shared.parsing.uniforms_for")
    if len(uniforms) != 2:
        raise ValueError(f"uniforms: expected (premise_u, hypothesis_u), got {len(uniforms)} arrays")
    out = []
    for side, u in zip(SIDES, uniforms):
        shape = np.shape(getattr(batch, f"{side}_transitions"))
        if np.shape(u) != shape:
            raise ValueError(f"{side} uniforms: expected shape {shape} (the batch's [B, T]), got {np.shape(u)}")
        out.append(np.asarray(u, dtype=np.float64))
    return tuple(out)


def check_lengths(batch, mode: str) -> None:
    """What predicted and sampled mode read of a batch's transitions: each
    row's number of SHIFTs, n, the sentence's length, which must be 1..N with
    2n-1 <= T (the steps a decided parse takes)."""
    for side in SIDES:
        N = np.shape(getattr(batch, f"{side}_tokens"))[1]
        transitions = np.asarray(getattr(batch, f"{side}_transitions"))
        T = transitions.shape[1]
        shifts = np.count_nonzero(transitions == SHIFT, axis=1)
        if np.any(shifts < 1):
            raise ValueError(f"{mode} mode: {side} row {int(np.argmin(shifts))} has no SHIFT, "
                             "so the sentence has no tokens")
        if np.any(shifts > N):
            s = int(np.argmax(shifts))
            raise ValueError(f"{mode} mode: {side} row {s} has {shifts[s]} SHIFTs, but the batch has N={N} "
                             "token slots")
        if np.any(2 * shifts - 1 > T):
            s = int(np.argmax(shifts))
            raise ValueError(f"{mode} mode: {side} row {s} has {shifts[s]} tokens, which need "
                             f"{2 * shifts[s] - 1} steps; the batch has T={T}")


def check_batch(batch, config: ModelConfig, mode: str = "gold") -> None:
    """ValueError, naming the side, row and step, unless every token id is in
    the vocabulary and (gold mode) every row is a valid transition sequence
    for at most N tokens (docs/spec.md §1), or (predicted, sampled)
    :func:`check_lengths` passes.

    Vectorised: a Python loop per sentence would cost more than some encoder
    runs. A traced graph cannot stop mid-loop with a message of ours, and a
    compiled program would silently read the wrong rows: this is the check
    each of them relies on.
    """
    for side in SIDES:
        tokens = np.asarray(getattr(batch, f"{side}_tokens"))
        transitions = np.asarray(getattr(batch, f"{side}_transitions"))
        if tokens.ndim != 2 or transitions.ndim != 2 or tokens.shape[0] != transitions.shape[0]:
            raise ValueError(f"{side}: tokens {tokens.shape} and transitions {transitions.shape} "
                             "must be [B, N] and [B, T]")
        outside = (tokens < 0) | (tokens >= config.vocab_size)
        if outside.any():
            s, t = np.argwhere(outside)[0]
            raise ValueError(f"{side} row {s}, position {t}: token id outside the vocabulary "
                             f"[0, {config.vocab_size})")
        if mode != "gold":
            continue
        is_shift, is_reduce = transitions == SHIFT, transitions == REDUCE
        unknown = ~(is_shift | is_reduce | (transitions == PAD))
        if unknown.any():
            s, t = np.argwhere(unknown)[0]
            raise ValueError(f"{side} row {s}, step {t}: unknown transition code {transitions[s, t]}")
        depth = np.cumsum(is_shift, axis=1) - np.cumsum(is_reduce, axis=1)  # items after each step
        too_few = is_reduce & (depth < 1)  # a REDUCE found fewer than two items before it
        if too_few.any():
            s, t = np.argwhere(too_few)[0]
            raise ValueError(f"{side} row {s}, step {t}: REDUCE with fewer than two items on the stack")
        shifts, reduces = is_shift.sum(axis=1), is_reduce.sum(axis=1)
        wrong = (shifts == 0) | (shifts > tokens.shape[1]) | (reduces != shifts - 1)
        if wrong.any():
            s = int(np.argmax(wrong))
            if shifts[s] == 0:
                raise ValueError(f"{side} row {s}: no SHIFT (an empty sentence)")
            if shifts[s] > tokens.shape[1]:
                raise ValueError(f"{side} row {s}: {shifts[s]} SHIFTs but only N={tokens.shape[1]} token slots")
            raise ValueError(f"{side} row {s}: {reduces[s]} REDUCEs for {shifts[s]} SHIFTs "
                             f"(expected {shifts[s] - 1})")
    if mode != "gold":
        check_lengths(batch, mode)


def check_parse(config: ModelConfig, batch, mode: str, uniforms) -> tuple[np.ndarray, np.ndarray] | None:
    """The checks of ``parse(batch, mode, uniforms)``, the batch's included; the uniforms as float64
    arrays in sampled mode, None in the others (where giving them is an error:
    nothing would read them)."""
    check_mode(mode)
    require_head(config, f"parse ({mode} mode)")
    if mode == "sampled":
        uniforms = check_uniforms(batch, uniforms)
    elif uniforms is not None:
        raise ValueError(f"uniforms are for sampled mode only; {mode} mode does not draw")
    check_batch(batch, config, mode)
    return uniforms
