"""The SNLI classifier around the static-graph SPINN (docs/spec.md §3): the
embedding, the leaf projection, one SPINN pass over premises and hypotheses
together, and the MLP on [p, q, p - q, p * q]; with a transition head, the
same in the parse modes of docs/spec.md §7.

The encoder is model.py's SPINN (one ``tf.while_loop``); eager.py subclasses
this classifier to swap in the define-by-run one, with the same variables.
"""

from __future__ import annotations

import tensorflow as tf

from shared.params import ModelConfig

from .cells import _Linear
from .masked import SPINN


class _Embedding(tf.Module):
    """The word vectors, ``embedding <float>[V, E]``. (What the other
    frameworks take from their library.)"""

    def __init__(self, vocab_size: int, embed_dim: int, dtype: tf.DType, name: str = "embed"):
        super().__init__(name=name)
        # Zeros only give the variable its shape: the values come from the
        # canonical parameters (convert.from_canonical), never from here.
        with self.name_scope:
            self.embedding = tf.Variable(tf.zeros([vocab_size, embed_dim], dtype), name="embedding")

    def __call__(self, tokens: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.embedding, tokens)


class SNLIClassifier(tf.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    Dropout (rate ``dropout``) acts on the projected leaves and on the input
    of every classifier layer (the features and each ReLU output), in
    training only. It is stateless: each call passes a seed <int32>[2], so a
    traced graph draws new masks at every step and a run is repeatable.
    """

    # The sentence encoder's class: impl_tensorflow/eager.py swaps in the
    # define-by-run SPINN, with the same Tracker and Reduce (the same weights).
    encoder_class = SPINN

    def __init__(self, config: ModelConfig, *, dtype: tf.DType = tf.float32, dropout: float = 0.0,
                 memory: str = "tensor_array", name: str = "snli_classifier"):
        super().__init__(name=name)
        self.config = config
        self.dropout = float(dropout)
        H, M = config.hidden_dim, config.mlp_dim
        with self.name_scope:
            self.embed = _Embedding(config.vocab_size, config.embed_dim, dtype)
            self.projection = _Linear(config.embed_dim, 2 * H, dtype, name="projection")  # -> [h; c] of each leaf
            self.spinn = self.encoder_class(config, dtype, memory)
            widths = [4 * H] + [M] * config.mlp_layers
            self.mlp = [_Linear(a, b, dtype, name=f"mlp_{k}") for k, (a, b) in enumerate(zip(widths[:-1], widths[1:]))]
            self.output = _Linear(widths[-1], 3, dtype, name="output")

    def _dropout(self, x: tf.Tensor, training: bool, seed, site: int, shard=None) -> tf.Tensor:
        """Site 0 acts on sentence rows (the leaves), the others on pair rows
        (the classifier's inputs). ``shard``: x holds one data-parallel
        replica's rows of a global batch, whose masks it gets (replicas.py's _Shard)."""
        if not training or self.dropout == 0.0:
            return x
        if seed is None:
            raise ValueError("training with dropout needs a seed")
        site_seed = tf.random.experimental.stateless_fold_in(seed, site)  # one stream per dropout site
        if shard is not None:
            return shard.dropout(x, self.dropout, site_seed, sentences=site == 0)
        return tf.nn.experimental.stateless_dropout(x, rate=self.dropout, seed=site_seed)

    def encode(self, tokens: tf.Tensor, transitions: tf.Tensor, training: bool = False, seed=None,
               shard=None) -> tf.Tensor:
        """tokens <int32>[S, N], transitions <int32>[S, T] -> encodings <float>[S, H]."""
        leaves = self.projection(self.embed(tokens))  # [S, N, 2H]
        return self.spinn.encode(self._dropout(leaves, training, seed, 0, shard), transitions)

    def classify(self, premise: tf.Tensor, hypothesis: tf.Tensor, training: bool = False, seed=None,
                 shard=None) -> tf.Tensor:
        """Encodings <float>[B, H] each -> logits <float>[B, 3]."""
        # f = [p, q, p - q, p * q]. Written so that p and q each feed one op
        # (the first concat) whose halves feed the difference and the product:
        # every gradient sum then has two terms, which floating point adds the
        # same in either order. Used three times, p would get a three-term
        # AddN, and TensorFlow's CPU AddN moves whichever input buffer it can
        # reuse to the front: the last bit of the gradients would vary from
        # run to run, and a resumed training run would drift from an
        # uninterrupted one.
        pair = tf.concat([premise, hypothesis], axis=1)  # [B, 2H]
        p, q = tf.split(pair, 2, axis=1)
        f = tf.concat([pair, p - q, p * q], axis=1)  # [B, 4H]
        for k, layer in enumerate(self.mlp):
            f = tf.nn.relu(layer(self._dropout(f, training, seed, 1 + k, shard)))
        return self.output(self._dropout(f, training, seed, 1 + len(self.mlp), shard))

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
                 training: bool = False, seed=None, shard=None):
        """<int32>[B, N] tokens and [B, T] transitions of both sides ->
        (premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3]).
        ``shard``: the B pairs are one data-parallel replica's rows of a larger
        batch (dropout draws that batch's masks and keeps these rows)."""
        B = tf.shape(premise_tokens)[0]
        # Premise and hypothesis share N, T and the SPINN weights, so they run
        # as one batch of 2B sentences: one while loop of T steps, not two.
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = tf.concat([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        encodings = self.encode(tokens, transitions, training, seed, shard)  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis, training, seed, shard)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None, training: bool = False, seed=None,
              shard=None):
        """Like __call__, with the transition head deciding (predicted, sampled)
        or scoring (gold) every step (docs/spec.md §7). uniforms: sampled mode,
        (premise_u, hypothesis_u) <float64>[B, T] each.

        Returns (shared.parsing.SentenceParses of the 2B sentences, premises
        first; logits <float>[B, 3]).
        """
        B = tf.shape(premise_tokens)[0]
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = tf.concat([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        if uniforms is not None:
            uniforms = tf.concat(uniforms, axis=0)  # [2B, T]
        leaves = self.projection(self.embed(tokens))  # [2B, N, 2H]
        parses = self.spinn.parse(self._dropout(leaves, training, seed, 0, shard), transitions, mode, uniforms)
        premise, hypothesis = parses.encodings[:B], parses.encodings[B:]
        return parses, self.classify(premise, hypothesis, training, seed, shard)
