"""The SNLI classifier around the JAX SPINN (docs/spec.md §3): the embedding,
the leaf projection, one SPINN pass over premises and hypotheses together,
and the MLP on [p, q, p - q, p * q]; with a transition head, the same in the
parse modes of docs/spec.md §7.

The encoder is a field, ``encoder``: the SPINN class of a family
(masked.py's, a ``lax.scan`` over the batch by hand; vmap.py's, written for
one sentence and batched by ``jax.vmap``; levels.py's, whose classifier takes
the schedule too), all with the same parameters. This module imports none of
them: the runner imports the family it runs and hands its class over. The
leaves are made here, once for the whole batch, so the encoder takes the same
input as PyTorch's and TensorFlow's SPINN, and every JAX encoder reads the
same leaves (the same dropout masks too).

Training mode is a field too, ``training`` (False: eval mode): the runner
clones the module with ``training=True`` for the programs it trains, and
dropout's key comes through ``apply(..., rngs={"dropout": key})``.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .cells import Dtype
from .shift_reduce import DEFAULT_LAYOUT


class SNLIClassifier(nn.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    Dropout (rate ``dropout_rate``) acts on the projected leaves and on the
    input of every classifier layer, in training only (``training=True``,
    with a "dropout" rng passed to ``apply``)."""

    config: ModelConfig
    encoder: type  # the family's SPINN class (masked.SPINN, vmap.SPINN, levels.SPINN)
    layout: str = DEFAULT_LAYOUT
    dropout_rate: float = 0.0  # leaves and MLP inputs, training only
    dtype: Dtype = jnp.float32  # the parameters'
    unroll: int = 1
    skip_tail: bool = True  # SPINN.skip_tail: the runner turns it off for the programs it differentiates
    training: bool = False  # dropout on (with a "dropout" rng)

    def setup(self):
        c = self.config
        self.embed = nn.Embed(c.vocab_size, c.embed_dim, param_dtype=self.dtype)
        self.projection = nn.Dense(2 * c.hidden_dim, param_dtype=self.dtype)  # -> [h; c] of each leaf
        self.spinn = self.encoder(c, layout=self.layout, dtype=self.dtype, unroll=self.unroll,
                                  skip_tail=self.skip_tail)
        self.mlp = [nn.Dense(c.mlp_dim, param_dtype=self.dtype) for _ in range(c.mlp_layers)]
        self.output = nn.Dense(3, param_dtype=self.dtype)
        self.leaf_dropout = nn.Dropout(self.dropout_rate)
        self.mlp_dropout = nn.Dropout(self.dropout_rate)

    def __call__(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions):
        """<int32>[B, N] tokens and [B, T] transitions of both sides ->
        (premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3])."""
        B = premise_tokens.shape[0]
        # One encoder pass over 2B sentences: the scan runs T steps once, not twice.
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)
        encodings = self.encode(tokens, transitions)
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def encode(self, tokens, transitions):
        """tokens <int32>[S, N], transitions <int32>[S, T] -> encodings <float>[S, H]:
        embed, project (dropout on the leaves in training), run SPINN's gold-mode loop."""
        leaves = self._leaves(tokens)  # [S, N, 2H]: every sentence's buffer at once
        return self.spinn.encode(leaves, transitions)

    def parse(self, premise_tokens, premise_transitions, hypothesis_tokens, hypothesis_transitions,
              mode: str = "predicted", uniforms=None) -> tuple[SentenceParses, jnp.ndarray]:
        """Both sides through ``SPINN.parse`` in ``mode`` (docs/spec.md §7), as one batch of 2B sentences.

        uniforms: sampled mode's (premise_u, hypothesis_u) <float>[B, T] each,
        else None. Returns (shared.parsing.SentenceParses of the 2B sentences,
        premises first; logits <float>[B, 3]).
        """
        B = premise_tokens.shape[0]
        tokens = jnp.concatenate([premise_tokens, hypothesis_tokens], axis=0)
        transitions = jnp.concatenate([premise_transitions, hypothesis_transitions], axis=0)
        u = None if uniforms is None else jnp.concatenate(uniforms, axis=0)
        leaves = self._leaves(tokens)  # [2B, N, 2H], as in encode
        parses = self.spinn.parse(leaves, transitions, mode, u)
        premise, hypothesis = parses.encodings[:B], parses.encodings[B:]
        return parses, self.classify(premise, hypothesis)

    def _leaves(self, tokens):
        """tokens <int32>[S, N] -> leaves <float>[S, N, 2H], [h; c] of every word:
        SPINN's buffer, made here for all 2B sentences at once (as in PyTorch and TensorFlow)."""
        leaves = self.projection(self.embed(tokens))
        return self.leaf_dropout(leaves, deterministic=not self.training)

    def classify(self, premise, hypothesis):
        """premise, hypothesis <float>[B, H] -> class logits <float>[B, 3]: the
        MLP over the features [p, q, p - q, p * q] (dropout on every layer's input in training)."""
        x = jnp.concatenate([premise, hypothesis, premise - hypothesis, premise * hypothesis], axis=-1)
        # Dropout on the input of every classifier layer, as in the 2017 code.
        for layer in self.mlp:
            x = nn.relu(layer(self.mlp_dropout(x, deterministic=not self.training)))
        return self.output(self.mlp_dropout(x, deterministic=not self.training))
