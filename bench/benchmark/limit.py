"""The limit of a batch: its useful dense products alone, back to back, on the machine's fastest routine.

Why, and what it times, is docs/spec.md §6, "Decision: the limit". Here: with the tracker, each step's tracker product
reads the sentences still active (their buffer front, stack top and below it, and their last state, against the
tracker's input and hidden kernels side by side) and its Reduce product those that reduce (left, right and the tracker's
h against Reduce's three kernels); the tracker of step t needs step t - 1's compositions, so no two steps can merge.
Without the tracker every node of a height can be composed once the height below is: one Reduce product per height.
"""

from __future__ import annotations

import time

import numpy as np

from shared.batching import sentences_transitions
from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT, reduce_heights

REPEATS = 3  # a batch's products are timed this many times; the fastest counts


def products(config: ModelConfig, batch) -> list[tuple[str, int]]:
    """The useful forward products of a pair batch, in the order they can run: (role, rows), the role naming
    the weight (bench.benchmark.limit.shapes) and rows the product's left operand's."""
    transitions = sentences_transitions(batch)
    out = [("projection", int(np.sum(transitions == SHIFT)))]
    if config.tracker_dim > 0:
        acting, reducing = (transitions != PAD).sum(axis=0), (transitions == REDUCE).sum(axis=0)
        for active, reduces in zip(acting.tolist(), reducing.tolist()):
            if active:
                out.append(("tracker", active))
            if reduces:
                out.append(("reduce", reduces))
    else:
        heights = np.bincount([h for row in transitions.tolist() for h in reduce_heights(row)]).tolist()
        out += [("reduce", count) for count in heights[1:] if count]
    out += [(f"mlp.{k}", batch.size) for k in range(config.mlp_layers)] + [("output", batch.size)]
    return out


def shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """Each role's weight, [in, out] (the kernels of one product side by side, docs/spec.md §3)."""
    E, H, D, M = config.embed_dim, config.hidden_dim, config.tracker_dim, config.mlp_dim
    out = {"projection": (E, 2 * H), "reduce": (2 * H + D, 5 * H), "output": (M if config.mlp_layers else 4 * H, 3)}
    if D > 0:
        out["tracker"] = (3 * H + D, 4 * D)
    out.update({f"mlp.{k}": (4 * H if k == 0 else M, M) for k in range(config.mlp_layers)})
    return out


def operands(config: ModelConfig, batch, mode: str, dtype: str, rng) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (left, right) arrays of every product of the batch in ``mode``: forward products, and in training
    each one's two backward products after it. Weights are shared between steps, as a model's are; the rows
    are slices of one buffer per role."""
    weights = {role: rng.standard_normal(shape).astype(dtype) for role, shape in shapes(config).items()}
    rows = {}
    for role, m in products(config, batch):
        rows[role] = max(rows.get(role, 0), m)
    inputs = {role: rng.standard_normal((m, weights[role].shape[0])).astype(dtype) for role, m in rows.items()}
    grads = {role: rng.standard_normal((m, weights[role].shape[1])).astype(dtype) for role, m in rows.items()}
    out = []
    for role, m in products(config, batch):
        x, w, dy = inputs[role][:m], weights[role], grads[role][:m]
        out.append((x, w))
        if mode == "train":
            out += [(dy, w.T), (x.T, dy)]  # dX = dY W^T, dW = X^T dY
    return out


def time_batches(platforms: dict, device: str, config: ModelConfig, batches: list, mode: str, dtype: str,
                 repeats: int = REPEATS) -> tuple[list[float], list[str]]:
    """For each batch, the fastest time of its products back to back over ``platforms`` (name -> a
    shared.platform.Platform: each its ``matmuls`` routine) and the name of the routine that took it."""
    rng = np.random.default_rng(0)
    best_s, best_by = [], []
    for batch in batches:
        pairs = operands(config, batch, mode, dtype, rng)
        best, by = float("inf"), ""
        for name, platform in platforms.items():
            run = platform.matmuls(pairs, device)
            run()  # warm-up: the device copies, the routine's first call of each shape
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                elapsed = time.perf_counter() - start
                if elapsed < best:
                    best, by = elapsed, name
        best_s.append(best)
        best_by.append(by)
    return best_s, best_by
