"""The SNLI classifier around SPINN (docs/spec.md §3): the embedding, the leaf
projection, one SPINN pass over premises and hypotheses together, and the MLP
on [p, q, p - q, p * q]; with a transition head, the same in the parse modes
of docs/spec.md §7.

One classifier serves every algorithm family: the constructor takes the
family's SPINN class as ``encoder`` (masked.SPINN, one ``tf.while_loop``;
lists.SPINN, define-by-run), with the same Tracker and Reduce and so the same
variables. levels.py's LevelClassifier adds the level schedule as one more
input of its programs.

Training mode is not an argument of these methods: ``with model.dropout(seed,
step):`` turns dropout on for what is traced (or run) inside, with masks drawn
from (seed, step) alone (docs/runner-interface.md), and a data-parallel
replica's shard of the batch (replicas.py) where it gives one.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import tensorflow as tf

from shared.params import ModelConfig

from .layers import Embedding, Linear


class SNLIClassifier(tf.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    ``encoder``: the SPINN class of an algorithm family (masked.SPINN,
    lists.SPINN), built with the model's dtype and, where given, ``container``
    (masked.py's). Dropout (rate ``dropout``) acts on the projected leaves and
    on the input of every classifier layer (the features and each ReLU
    output), inside :meth:`dropout` only. It is stateless: a traced graph
    draws new masks at every step from the step number, an input, and a run
    is repeatable.
    """

    def __init__(self, config: ModelConfig, *, encoder: type, dtype: tf.DType = tf.float32, dropout: float = 0.0,
                 container: str | None = None, name: str = "snli_classifier"):
        super().__init__(name=name)
        self.config = config
        self.dropout_rate = float(dropout)
        self._training = threading.local()  # .dropout: (seed <int>[2] of the step, shard) inside dropout(), per thread
        H, M = config.hidden_dim, config.mlp_dim
        with self.name_scope:
            self.embed = Embedding(config.vocab_size, config.embed_dim, dtype)
            self.projection = Linear(config.embed_dim, 2 * H, dtype, name="projection")  # -> [h; c] of each leaf
            self.spinn = encoder(config, dtype=dtype, **({} if container is None else {"container": container}))
            widths = [4 * H] + [M] * config.mlp_layers
            self.mlp = [Linear(a, b, dtype, name=f"mlp_{k}") for k, (a, b) in enumerate(zip(widths[:-1], widths[1:]))]
            self.output = Linear(widths[-1], 3, dtype, name="output")

    @contextlib.contextmanager
    def dropout(self, seed: int, step, shard=None):
        """Training mode for what is built (traced, or run eagerly) inside:
        dropout at ``dropout_rate``, its masks a function of (seed, step) only.
        ``seed``: the Runner's seed, a Python int (fixed in a trace); ``step``:
        the step number, an int or an int64 scalar tensor (an input of a traced
        step, so every step draws new masks without a retrace, and a resumed
        run draws those of an uninterrupted one). ``shard``: the pairs are one
        data-parallel replica's rows of a larger batch (replicas.py), whose
        masks they get. Kept per thread: MirroredStrategy traces each replica
        in its own."""
        step_seed = None
        if self.dropout_rate > 0.0:  # the step's stateless seed; each dropout site folds in its number (_dropout)
            base = np.random.SeedSequence(seed).generate_state(2) % (2**31 - 1)  # the run's, on the host
            step_seed = tf.random.experimental.stateless_fold_in(tf.constant(base, tf.int32), tf.cast(step, tf.int64))
        outer = getattr(self._training, "dropout", None)
        self._training.dropout = (step_seed, shard)
        try:
            yield
        finally:
            self._training.dropout = outer

    def _dropout(self, x: tf.Tensor, site: int) -> tf.Tensor:
        """Dropout inside :meth:`dropout`, else x. Site 0 acts on sentence rows
        (the leaves), the others on pair rows (the classifier's inputs); each
        site draws its own stream."""
        training = getattr(self._training, "dropout", None)
        if training is None or self.dropout_rate == 0.0:
            return x
        step_seed, shard = training
        site_seed = tf.random.experimental.stateless_fold_in(step_seed, site)  # one stream per dropout site
        if shard is not None:
            return shard.dropout(x, self.dropout_rate, site_seed, sentences=site == 0)
        return tf.nn.experimental.stateless_dropout(x, rate=self.dropout_rate, seed=site_seed)

    def _leaves(self, tokens: tf.Tensor) -> tf.Tensor:
        """tokens <int32>[S, N] -> the projected leaves <float>[S, N, 2H], [h; c] of each token, after dropout."""
        return self._dropout(self.projection(self.embed(tokens)), 0)

    def encode(self, tokens: tf.Tensor, transitions: tf.Tensor) -> tf.Tensor:
        """tokens <int32>[S, N], transitions <int32>[S, T] -> encodings <float>[S, H]."""
        return self.spinn.encode(self._leaves(tokens), transitions)

    def classify(self, premise: tf.Tensor, hypothesis: tf.Tensor) -> tf.Tensor:
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
            f = tf.nn.relu(layer(self._dropout(f, 1 + k)))
        return self.output(self._dropout(f, 1 + len(self.mlp)))

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions):
        """<int32>[B, N] tokens and [B, T] transitions of both sides ->
        (premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3])."""
        B = tf.shape(premise_tokens)[0]
        # Premise and hypothesis share N, T and the SPINN weights, so they run
        # as one batch of 2B sentences: one while loop of T steps, not two.
        tokens = tf.concat([premise_tokens, hypothesis_tokens], axis=0)  # [2B, N]
        transitions = tf.concat([premise_transitions, hypothesis_transitions], axis=0)  # [2B, T]
        encodings = self.encode(tokens, transitions)  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None):
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
        parses = self.spinn.parse(self._leaves(tokens), transitions, mode, uniforms)
        premise, hypothesis = parses.encodings[:B], parses.encodings[B:]
        return parses, self.classify(premise, hypothesis)
