"""Dropout masks (docs/spec.md §3) for one training step, drawn on the host
from (seed, step) alone, so a resumed run draws the masks of the
uninterrupted one: graph.new_graph draws them, classifier.SNLIClassifier
multiplies them into the projected leaves and into the input of every
classifier layer (the features, each ReLU output).
"""

from __future__ import annotations

import numpy as np

from shared.params import ModelConfig

from .library import dy


class Masks:
    """Inverted-dropout masks for one training step, a pure function of
    (seed, step) and the batch's shape: leaves <float32>[S, N, 2H] and, per
    classifier layer k = 0..L (the output layer last), inputs <float32>[B, width_k]."""

    def __init__(self, rate: float, seed: int, step: int, config: ModelConfig, num_sentences: int,
                 num_tokens: int):
        rng = np.random.default_rng([seed, step])
        keep = 1.0 - rate
        H, B = config.hidden_dim, num_sentences // 2
        widths = [4 * H] + [config.mlp_dim] * config.mlp_layers

        def draw(shape):
            return ((rng.random(shape) < keep) / keep).astype(np.float32)

        self.leaves = draw((num_sentences, num_tokens, 2 * H))
        self.layers = [draw((B, width)) for width in widths]

    def leaf(self, sentence: int, position: int) -> dy.Expression:
        return dy.inputTensor(self.leaves[sentence, position])

    def layer(self, k: int, pair: int) -> dy.Expression:
        return dy.inputTensor(self.layers[k][pair])
