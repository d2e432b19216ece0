"""Useful work, counted once from the transitions actually present, and the limit of a batch: its useful dense products
alone, back to back, on the machine's fastest routine.

Only the matrix products of docs/spec.md §3 are counted (2 FLOPs per multiply-add): they are the work a dense matmul
peak can be compared with. Gate nonlinearities and elementwise products are O(H) per step against O(H^2) for the
products, so leaving them out changes the count by about 1 % at H=300 and keeps the count a clean lower bound. Padding
(PAD steps, padded tokens) is never counted: it is work the implementation chose to do, not useful work. Training counts
3x the forward products: the backward pass of ``x @ W`` needs two products of the same size (``dx = dy @ W.T``, ``dW =
x.T @ dy``).

Why the limit, and what it times, is docs/spec.md §6, "Decision: the limit". Here: with the tracker, each step's tracker
product reads the sentences still active (their buffer front, stack top and below it, and their last state, against the
tracker's input and hidden kernels side by side) and its Reduce product those that reduce (left, right and the tracker's
h against Reduce's three kernels); the tracker of step t needs step t - 1's compositions, so no two steps can merge.
Without the tracker every node of a height can be composed once the height below is: one Reduce product per height.
"""

from __future__ import annotations

import time

import numpy as np

from shared.batching import sentences_transitions
from shared.padding import loop_length
from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT, reduce_heights

TRAIN_FACTOR = 3
REPEATS = 3  # a batch's products are timed this many times; the fastest counts


def sentence_flops(config: ModelConfig, transitions: np.ndarray) -> int:
    """Forward matmul FLOPs of encoding sentences with these transitions <int>[B, T]."""
    E, H = config.embed_dim, config.hidden_dim
    transitions = np.asarray(transitions)
    shifts = int(np.sum(transitions == SHIFT))
    reduces = int(np.sum(transitions == REDUCE))
    steps = shifts + reduces  # non-PAD steps: the tracker runs on each
    tracker, reduce = _step_flops(config)
    leaves = shifts * 2 * E * 2 * H  # x @ projection.kernel [E, 2H]
    return leaves + steps * tracker + reduces * reduce


def _step_flops(config: ModelConfig) -> tuple[int, int]:
    """Matmul FLOPs of one sentence's tracker step and of one composition."""
    H, D = config.hidden_dim, config.tracker_dim
    tracker = 2 * (3 * H * 4 * D + D * 4 * D) if D > 0 else 0
    reduce = 2 * (2 * H * 5 * H + (D * 5 * H if D > 0 else 0))
    return tracker, reduce


def masked_flops(config: ModelConfig, batch) -> int:
    """Forward matmul FLOPs that the masked algorithm computes for a pair batch: every sentence runs the tracker and a
    composition at every step up to the batch's last real one (batch_flops counts only the steps that act)."""
    transitions = sentences_transitions(batch)
    tracker, reduce = _step_flops(config)
    real = sentence_flops(config, transitions)
    real_loop = int(np.sum(transitions != PAD)) * tracker + int(np.sum(transitions == REDUCE)) * reduce
    every_step = transitions.shape[0] * loop_length(transitions) * (tracker + reduce)
    return real - real_loop + every_step + classifier_flops(config, batch.size)


def classifier_flops(config: ModelConfig, batch_size: int) -> int:
    """Forward matmul FLOPs of the MLP and output layer for batch_size pairs."""
    widths = [4 * config.hidden_dim] + [config.mlp_dim] * config.mlp_layers + [3]  # the features, each layer, logits
    return batch_size * sum(2 * a * b for a, b in zip(widths, widths[1:]))


def scheduled_flops(config: ModelConfig, batch, graph: dict, mode: str = "infer") -> int:
    """Matmul FLOPs that a host-scheduled level program computes for a pair batch, padding included, from the rows its
    runner's ``last_graph`` says it computed."""
    E, H = config.embed_dim, config.hidden_dim
    S, N = 2 * batch.size, np.shape(batch.premise_tokens)[1]
    tracker, reduce = _step_flops(config)
    forward = (S * N * 2 * E * 2 * H + int(graph["tracker_rows"]) * tracker + int(graph["reduce_rows"]) * reduce
               + classifier_flops(config, batch.size))
    return TRAIN_FACTOR * forward if mode == "train" else forward


def batch_flops(config: ModelConfig, batch, mode: str = "infer") -> int:
    """Useful FLOPs of one pair batch in ``infer`` or ``train`` mode."""
    forward = (sentence_flops(config, batch.premise_transitions)
               + sentence_flops(config, batch.hypothesis_transitions)
               + classifier_flops(config, batch.size))
    if mode in ("infer", "train"):
        return TRAIN_FACTOR * forward if mode == "train" else forward
    raise ValueError(f"unknown mode {mode!r}; expected 'infer' or 'train'")


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
    """The (left, right) arrays of every product of the batch in ``mode`` (in training each one's two backward products
    after it), the weights shared between steps as a model's are."""
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
