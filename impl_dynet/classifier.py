"""The SNLI classifier around the one-sentence SPINN (docs/spec.md §3, §7):
the leaves (embedding, projection), one SPINN run per sentence, the MLP on
[p, q, p - q, p * q] per pair, all added to one computation graph.

:class:`SNLIClassifier` starts a fresh graph (``dy.renew_cg``) with
autobatching on or off, which is the only thing that differs between the
implementations ``dynet`` and ``dynet-unbatched`` (docs/autobatching.md).
Its methods add nodes and compute nothing; graph.py evaluates them.

Dropout (docs/spec.md §3): the masks (dropout.Masks, drawn on the host from
(seed, step) alone) are given to the constructor, and multiplied into the
projected leaves and into the input of every classifier layer (the
features, each ReLU output).
"""

from __future__ import annotations

import numpy as np

from shared import parsing
from shared.parsing import SentenceParses

from .cells import Item
from .dropout import Masks
from .library import dy
from .phases import Clock
from .weights import Weights


def _sentences(premise: np.ndarray, hypothesis: np.ndarray) -> np.ndarray:
    """A pair batch's two sides as one batch of 2B sentences, premises first."""
    return np.concatenate([np.asarray(premise), np.asarray(hypothesis)])


class SNLIClassifier:
    """The classifier's weights as one computation graph sees them: an instance
    IS one graph (``dy.renew_cg`` when it is made), and a batch is one
    instance, its methods adding every sentence and pair to that graph; the
    values are read by one forward pass afterwards (graph.py).

    ``encoder``: the family's SPINN class (autobatch.SPINN), built on this
    graph with ``weights`` and ``clock`` (where the graph's evaluations are
    timed, phases.Clock). ``masks``: dropout masks of a training step, or None.
    ``update_embedding``: False looks the embedding up as a constant (frozen:
    no gradient). ``tokens``: the embedding rows this graph looked up."""

    def __init__(self, weights: Weights, *, encoder: type, autobatch: bool, clock: Clock, masks: Masks | None = None,
                 update_embedding: bool = True):
        self.clock = clock
        dy.renew_cg(autobatching=autobatch)
        self.weights = weights
        self.config = weights.config
        self.spinn = encoder(weights, clock)
        self.masks = masks
        self.update_embedding = update_embedding
        self.tokens: set[int] = set()

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
              uniforms: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[SentenceParses, list[dy.Expression]]:
        """The pair batch in ``mode`` (docs/spec.md §7), the head scoring every
        step, as 2B sentences (premises first) and B classifications, in this
        graph: gold mode follows the given transitions one sentence after the
        other, predicted and sampled mode let the head decide, all sentences a
        step at a time (SPINN.parse). ``uniforms``: sampled mode,
        (premise_u, hypothesis_u) <float64>[B, T] each.

        -> (SPINN.parse's SentenceParses of the 2B sentences, its fields this
        graph's nodes; the class logits [3] of each pair, a list)."""
        transitions = _sentences(premise_transitions, hypothesis_transitions)
        leaves = self._leaves_of(_sentences(premise_tokens, hypothesis_tokens), transitions)
        u = _sentences(*uniforms) if uniforms is not None else None
        parses = self.spinn.parse(leaves, transitions, mode, u)
        B = len(premise_tokens)
        return parses, self.classify(parses.encodings[:B], parses.encodings[B:])

    def _leaves_of(self, tokens: np.ndarray, transitions: np.ndarray) -> list[list[Item]]:
        """Every sentence's items, its n words only (n from its transitions)."""
        n_leaves = parsing.sentence_lengths(transitions).tolist()
        return [self._leaves(row[:n], s) for s, (row, n) in enumerate(zip(np.asarray(tokens).tolist(), n_leaves))]

    def _leaves(self, tokens: list[int], sentence: int) -> list[Item]:
        """The items (h, c) of one sentence's words: [h; c] = embed[token] @ projection."""
        w, H = self.weights, self.config.hidden_dim
        self.tokens.update(tokens)
        items = []
        for position, token in enumerate(tokens):
            x = dy.lookup(w.embedding, token, update=self.update_embedding)
            projected = dy.affine_transform([w["projection.bias"], w["projection.kernel"], x])
            if self.masks is not None:
                projected = dy.cmult(projected, self.masks.leaf(sentence, position))
            items.append((dy.pick_range(projected, 0, H), dy.pick_range(projected, H, 2 * H)))
        return items

    def _classify_pair(self, premise: dy.Expression, hypothesis: dy.Expression, pair: int) -> dy.Expression:
        """Encodings [H] each -> class logits [3]."""
        w = self.weights
        f = dy.concatenate([premise, hypothesis, premise - hypothesis, dy.cmult(premise, hypothesis)])
        for k in range(self.config.mlp_layers):
            f = dy.rectify(dy.affine_transform([w[f"mlp.{k}.bias"], w[f"mlp.{k}.kernel"],
                                                self._dropped(f, k, pair)]))
        return dy.affine_transform([w["output.bias"], w["output.kernel"],
                                    self._dropped(f, self.config.mlp_layers, pair)])

    def _dropped(self, f: dy.Expression, k: int, pair: int) -> dy.Expression:
        return f if self.masks is None else dy.cmult(f, self.masks.layer(k, pair))
