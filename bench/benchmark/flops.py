"""Useful work, counted once, from the transitions actually present.

Only the matrix products of docs/spec.md §3 are counted (2 FLOPs per multiply-add): they are the work a dense matmul
peak can be compared with. Gate nonlinearities and elementwise products are O(H) per step against O(H^2) for the
products, so leaving them out changes the count by about 1 % at H=300 and keeps the count a clean lower bound. Padding
(PAD steps, padded tokens) is never counted: it is work the implementation chose to do, not useful work.

Training counts 3x the forward products: the backward pass of ``x @ W`` needs two products of the same size (``dx = dy @
W.T``, ``dW = x.T @ dy``).
"""

from __future__ import annotations

import numpy as np

from shared.batching import sentences_transitions
from shared.padding import loop_length
from shared.params import ModelConfig
from shared.transitions import PAD, REDUCE, SHIFT

TRAIN_FACTOR = 3


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
    """Forward matmul FLOPs that the masked algorithm computes for a pair batch: its loop runs to the batch's last real
    step, and at every step every sentence runs the tracker and a composition, used or not (its masks keep the results
    of the real ones only). Compare with :func:`batch_flops`, which counts only the steps that act."""
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
    """Matmul FLOPs that a host-scheduled level program computes for a pair batch, padding included: the leaf projection
    of every token slot, the tracker on ``graph["tracker_rows"]`` rows and Reduce on ``graph["reduce_rows"]`` rows (the
    runner's ``last_graph``, counted from the schedule it ran), and the classifier. Over :func:`batch_flops` it is the
    schedule's computed share of useful work."""
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
