"""The SNLI classifier around the one-sentence SPINN (docs/spec.md §3, §7):
the leaves (embedding, projection), one SPINN run per sentence, the MLP on
[p, q, p - q, p * q] per pair, all added to one computation graph.

:class:`Graph` starts a fresh graph (``dy.renew_cg``) with autobatching on
or off, which is the only thing that differs between the implementations
``dynet`` and ``dynet-unbatched``: the code that builds the graph is the
same, sentence after sentence, and DyNet decides at evaluation time whether
to run each node alone or grouped with its likes.

Dropout (docs/spec.md §3): the masks come from :class:`Masks`, drawn on the
host from (seed, step) alone, and are multiplied into the projected leaves
and into the input of every classifier layer (the features, each ReLU
output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared import parsing
from shared.batching import PairBatch
from shared.params import ModelConfig

from .cells import Item
from .convert import Weights
from .library import dy, pools_checked
from .model import SPINN, Clock, Followed, parse_decided


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


@dataclass
class Run:
    """What one pair batch added to the graph: per sentence (premises first)
    its Followed record, per pair its class logits [3]."""

    sentences: list[Followed]
    logits: list[dy.Expression]
    host_syncs: int = 0

    def encodings(self) -> dy.Expression:
        """<float>[H, S]: the roots side by side, as one node."""
        return dy.concatenate_cols([run.root for run in self.sentences])

    def class_logits(self) -> dy.Expression:
        """<float>[3, B]."""
        return dy.concatenate_cols(self.logits)


class Graph:
    """One computation graph: the classifier's weights as this graph sees them."""

    def __init__(self, weights: Weights, *, autobatch: bool, masks: Masks | None = None,
                 update_embedding: bool = True):
        self.clock = Clock()
        dy.renew_cg(autobatching=autobatch)
        self.weights = weights
        self.config = weights.config
        self.spinn = SPINN(weights, self.clock)
        self.masks = masks
        self.update_embedding = update_embedding  # False: the (frozen) embedding gets no gradient
        self.tokens: set[int] = set()  # the embedding rows this graph looked up

    def leaves(self, tokens: list[int], sentence: int) -> list[Item]:
        """The items (h, c) of one sentence's words: [h; c] = embed[token] @ projection."""
        w, H = self.weights, self.config.hidden_dim
        self.tokens.update(tokens)
        items = []
        for position, token in enumerate(tokens):
            x = dy.lookup(w.embedding, token, update=self.update_embedding)
            projected = dy.affine_transform([w["projection.b"], w["projection.W"], x])
            if self.masks is not None:
                projected = dy.cmult(projected, self.masks.leaf(sentence, position))
            items.append((dy.pick_range(projected, 0, H), dy.pick_range(projected, H, 2 * H)))
        return items

    def classify(self, premise: dy.Expression, hypothesis: dy.Expression, pair: int) -> dy.Expression:
        """Encodings [H] each -> class logits [3]."""
        w = self.weights
        f = dy.concatenate([premise, hypothesis, premise - hypothesis, dy.cmult(premise, hypothesis)])
        for k in range(self.config.mlp_layers):
            f = dy.rectify(dy.affine_transform([w[f"mlp.{k}.b"], w[f"mlp.{k}.W"], self._dropped(f, k, pair)]))
        return dy.affine_transform([w["output.b"], w["output.W"], self._dropped(f, self.config.mlp_layers, pair)])

    def _dropped(self, f: dy.Expression, k: int, pair: int) -> dy.Expression:
        return f if self.masks is None else dy.cmult(f, self.masks.layer(k, pair))

    def run(self, batch: PairBatch, mode: str = "gold", head: bool = False,
            uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> Run:
        """The pair batch as 2B sentences (premises first) and B classifications.

        Gold mode follows the batch's transitions, one sentence after the
        other (``head``: scoring every step); predicted and sampled mode let
        the head decide, all sentences a step at a time (model.parse_decided).
        """
        tokens = np.concatenate([batch.premise_tokens, batch.hypothesis_tokens]).tolist()
        transitions = np.concatenate([batch.premise_transitions, batch.hypothesis_transitions])
        lengths = parsing.sentence_lengths(transitions).tolist()
        leaves = [self.leaves(row[:n], s) for s, (row, n) in enumerate(zip(tokens, lengths))]
        host_syncs = 0
        if mode == "gold":
            sentences = [self.spinn.follow(items, row, head) for items, row in zip(leaves, transitions)]
        else:
            u = np.concatenate(uniforms) if uniforms is not None else None
            sentences, host_syncs = parse_decided(self.spinn, leaves, transitions.shape[1], mode, u)
        B = len(batch.premise_tokens)
        logits = [self.classify(sentences[i].root, sentences[B + i].root, i) for i in range(B)]
        return Run(sentences, logits, host_syncs)

    def values(self, *exprs: dy.Expression) -> list[np.ndarray]:
        """One forward pass up to the latest of ``exprs`` (autobatched, when
        on, across everything built since the last one), then their values
        as float32 arrays."""
        with self.clock.section(), pools_checked():
            dy.forward(list(exprs))
            return [np.asarray(e.npvalue(), dtype=np.float32) for e in exprs]
