"""The SNLI classifier around the one-sentence SPINN (docs/spec.md §3, §7):
the leaves (embedding, projection), one SPINN run per sentence, the MLP on
[p, q, p - q, p * q] per pair, all added to one computation graph.

:class:`SNLIClassifier` starts a fresh graph (``dy.renew_cg``) with
autobatching on or off, which is the only thing that differs between the
implementations ``dynet`` and ``dynet-unbatched`` (docs/autobatching.md).

Dropout (docs/spec.md §3): the masks come from :class:`_Masks`, drawn on the
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
from .convert import _Weights
from .library import dy, pools_checked
from .model import SPINN, _Clock, _Followed


class _Masks:
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
class _Run:
    """What one pair batch added to the graph: per sentence (premises first)
    its root [H] and (after a parse) its _Followed record, per pair its class
    logits [3]."""

    roots: list[dy.Expression]
    logits: list[dy.Expression]
    sentences: list[_Followed] | None = None
    host_syncs: int = 0

    def encodings(self) -> dy.Expression:
        """<float>[H, S]: the roots side by side, as one node."""
        return dy.concatenate_cols(self.roots)

    def class_logits(self) -> dy.Expression:
        """<float>[3, B]."""
        return dy.concatenate_cols(self.logits)


def _sentences(premise: np.ndarray, hypothesis: np.ndarray) -> np.ndarray:
    """A pair batch's two sides as one batch of 2B sentences, premises first."""
    return np.concatenate([np.asarray(premise), np.asarray(hypothesis)])


class SNLIClassifier:
    """The classifier's weights as one computation graph sees them: an instance
    IS one graph (``dy.renew_cg`` when it is made), and a batch is one
    instance, its methods adding every sentence and pair to that graph; the
    values are read by one forward pass afterwards (train.py)."""

    def __init__(self, weights: _Weights, *, autobatch: bool, masks: _Masks | None = None,
                 update_embedding: bool = True):
        self.clock = _Clock()
        dy.renew_cg(autobatching=autobatch)
        self.weights = weights
        self.config = weights.config
        self.spinn = SPINN(weights, self.clock)
        self.masks = masks
        self.update_embedding = update_embedding  # False: the (frozen) embedding gets no gradient
        self.tokens: set[int] = set()  # the embedding rows this graph looked up

    def encode(self, tokens: np.ndarray, transitions: np.ndarray) -> list[dy.Expression]:
        """tokens <int>[S, N], gold transitions <int>[S, T] -> one root [H] per
        sentence (a list, not [S, H]: each sentence is its own nodes of this graph)."""
        leaves = self._leaves_of(tokens, transitions)
        return [self.spinn.encode(items, row) for items, row in zip(leaves, transitions)]

    def classify(self, premise: list[dy.Expression], hypothesis: list[dy.Expression]) -> list[dy.Expression]:
        """Encodings [H] of B premises and B hypotheses -> class logits [3] per
        pair (a list, not [B, 3]: each pair is its own nodes of this graph)."""
        return [self._classify_pair(p, q, i) for i, (p, q) in enumerate(zip(premise, hypothesis))]

    def parse(self, premise_tokens: np.ndarray, premise_transitions: np.ndarray, hypothesis_tokens: np.ndarray,
              hypothesis_transitions: np.ndarray, mode: str = "predicted",
              uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> _Run:
        """The pair batch in ``mode`` (docs/spec.md §7), the head scoring every
        step, as 2B sentences (premises first) and B classifications, in this
        graph: gold mode follows the given transitions one sentence after the
        other, predicted and sampled mode let the head decide, all sentences a
        step at a time (SPINN.parse). ``uniforms``: sampled mode,
        (premise_u, hypothesis_u) <float64>[B, T] each."""
        transitions = _sentences(premise_transitions, hypothesis_transitions)
        leaves = self._leaves_of(_sentences(premise_tokens, hypothesis_tokens), transitions)
        u = _sentences(*uniforms) if uniforms is not None else None
        sentences, host_syncs = self.spinn.parse(leaves, transitions, mode, u)
        roots = [sentence.root for sentence in sentences]
        B = len(premise_tokens)
        return _Run(roots, self.classify(roots[:B], roots[B:]), sentences, host_syncs)

    def _forward(self, batch: PairBatch) -> _Run:
        """Gold mode without the head: the batch's 2B roots and B class logits."""
        roots = self.encode(_sentences(batch.premise_tokens, batch.hypothesis_tokens),
                            _sentences(batch.premise_transitions, batch.hypothesis_transitions))
        B = len(batch.premise_tokens)
        return _Run(roots, self.classify(roots[:B], roots[B:]))

    def _leaves_of(self, tokens: np.ndarray, transitions: np.ndarray) -> list[list[Item]]:
        """Every sentence's items, its n words only (n from its transitions)."""
        lengths = parsing.sentence_lengths(transitions).tolist()
        return [self._leaves(row[:n], s) for s, (row, n) in enumerate(zip(np.asarray(tokens).tolist(), lengths))]

    def _leaves(self, tokens: list[int], sentence: int) -> list[Item]:
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

    def _classify_pair(self, premise: dy.Expression, hypothesis: dy.Expression, pair: int) -> dy.Expression:
        """Encodings [H] each -> class logits [3]."""
        w = self.weights
        f = dy.concatenate([premise, hypothesis, premise - hypothesis, dy.cmult(premise, hypothesis)])
        for k in range(self.config.mlp_layers):
            f = dy.rectify(dy.affine_transform([w[f"mlp.{k}.b"], w[f"mlp.{k}.W"], self._dropped(f, k, pair)]))
        return dy.affine_transform([w["output.b"], w["output.W"], self._dropped(f, self.config.mlp_layers, pair)])

    def _dropped(self, f: dy.Expression, k: int, pair: int) -> dy.Expression:
        return f if self.masks is None else dy.cmult(f, self.masks.layer(k, pair))

    def _values(self, *exprs: dy.Expression) -> list[np.ndarray]:
        """One forward pass up to the latest of ``exprs`` (autobatched, when
        on, across everything built since the last one), then their values
        as float32 arrays."""
        with self.clock.section(), pools_checked():
            dy.forward(list(exprs))
            return [np.asarray(e.npvalue(), dtype=np.float32) for e in exprs]
