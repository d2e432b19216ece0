"""The SNLI classifier around the define-by-run SPINN (docs/spec.md §3): the
embedding, the leaf projection, one SPINN pass over premises and hypotheses
together, and the MLP on [p, q, p - q, p * q]; with a transition head, the
same in the parse modes of docs/spec.md §7.

The encoder is model.py's SPINN (Python lists, a Python loop); masked.py
subclasses this classifier to swap in the padded-array one, with the same
parameters.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
from torch import nn

from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .model import SPINN

# A data-parallel replica's share of the global batch while it takes a step
# (replicas.py): (pairs in the global batch, this replica's pair rows), else None.
_SHARD: tuple[int, np.ndarray] | None = None


@contextlib.contextmanager
def _replica_shard(total: int, rows: np.ndarray) -> Iterator[None]:
    """Inside the block, dropout draws the masks of a global batch of ``total``
    pairs and keeps those of ``rows`` (the pairs this replica computes)."""
    global _SHARD
    before, _SHARD = _SHARD, (total, np.asarray(rows, dtype=np.int64))
    try:
        yield
    finally:
        _SHARD = before


class _ShardDropout(nn.Dropout):
    """``nn.Dropout``, except inside :func:`_replica_shard`: there the mask is
    drawn for the whole global batch, exactly as nn.Dropout draws it on a CPU
    (``bernoulli_`` on a tensor of the global shape, then ``/ (1 - p)``), and
    cut to this replica's rows, so a pair gets the mask it would get in one
    process. ``rows`` says what the tensor's first axis holds: "sentences"
    (premises then hypotheses, 2B rows) or "pairs" (B rows)."""

    def __init__(self, p: float, rows: str):
        super().__init__(p)
        self.rows = rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _SHARD is None or not self.training or self.p == 0.0:
            return super().forward(x)
        total, pairs = _SHARD
        if self.rows == "sentences":
            total, pairs = 2 * total, np.concatenate([pairs, total + pairs])
        noise = torch.empty((total,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device).bernoulli_(1 - self.p)
        noise.div_(1 - self.p)
        return x * noise[torch.as_tensor(pairs, device=x.device)]


class SNLIClassifier(nn.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    Dropout (rate ``dropout``) acts on the projected leaves and on the input
    of every classifier layer (the features and each ReLU output), as in the
    2017 code; ``model.eval()`` turns it off.
    """

    # The encoder's algorithm: masked.py swaps in the padded-array SPINN, with
    # the same submodules (Tracker, Reduce) and so the same parameter names.
    encoder_class: type[nn.Module] = SPINN

    def __init__(self, config: ModelConfig, dropout: float = 0.0):
        super().__init__()
        self.config = config
        H, M = config.hidden_dim, config.mlp_dim
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.projection = nn.Linear(config.embed_dim, 2 * H)  # -> [h; c] of each leaf
        self.spinn = self.encoder_class(config)
        widths = [4 * H] + [M] * config.mlp_layers
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], 3)
        self.leaf_dropout = _ShardDropout(dropout, rows="sentences")  # [2B, N, 2H]
        self.mlp_dropout = _ShardDropout(dropout, rows="pairs")  # [B, width]

    def encode(self, tokens: torch.Tensor, transitions: np.ndarray) -> torch.Tensor:
        """tokens <int64>[S, N] (on the model's device), transitions <int>[S, T]
        (NumPy) -> encodings <float>[S, H]."""
        leaves = self.leaf_dropout(self.projection(self.embed(tokens)))  # [S, N, 2H]
        return self.spinn(leaves, transitions)

    def classify(self, premise: torch.Tensor, hypothesis: torch.Tensor) -> torch.Tensor:
        """Encodings <float>[B, H] each -> logits <float>[B, 3]."""
        f = torch.cat([premise, hypothesis, premise - hypothesis, premise * hypothesis], dim=1)  # [B, 4H]
        for layer in self.mlp:
            f = torch.relu(layer(self.mlp_dropout(f)))
        return self.output(self.mlp_dropout(f))

    def forward(self, premise_tokens: torch.Tensor, premise_transitions: np.ndarray,
                hypothesis_tokens: torch.Tensor, hypothesis_transitions: np.ndarray):
        """-> premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3]."""
        B = premise_tokens.shape[0]
        # Premise and hypothesis share N and T and the SPINN weights, so they
        # run as one batch of 2B sentences: half the Python loop iterations,
        # and twice the rows in every batched Tracker/Reduce call.
        tokens = torch.cat([premise_tokens, hypothesis_tokens])  # [2B, N]
        transitions = np.concatenate([np.asarray(premise_transitions), np.asarray(hypothesis_transitions)])
        encodings = self.encode(tokens, transitions)  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def parse(self, premise_tokens: torch.Tensor, premise_transitions: np.ndarray,
              hypothesis_tokens: torch.Tensor, hypothesis_transitions: np.ndarray, mode: str = "predicted",
              uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[SentenceParses, torch.Tensor]:
        """The pair batch in ``mode`` (docs/spec.md §7), with the transition
        head -> (SentenceParses of the 2B sentences, premises first; logits <float>[B, 3]).

        ``uniforms``: sampled mode, (premise_u, hypothesis_u) <float>[B, T]
        each. Everything stays differentiable: logprob and entropy too.
        """
        B = premise_tokens.shape[0]
        tokens = torch.cat([premise_tokens, hypothesis_tokens])  # [2B, N], as in forward
        transitions = np.concatenate([np.asarray(premise_transitions), np.asarray(hypothesis_transitions)])
        if uniforms is not None:
            uniforms = np.concatenate([np.asarray(uniforms[0]), np.asarray(uniforms[1])])  # [2B, T]
        leaves = self.leaf_dropout(self.projection(self.embed(tokens)))  # [2B, N, 2H]
        parses = self.spinn.parse(leaves, transitions, mode, uniforms)
        premise, hypothesis = parses.encodings[:B], parses.encodings[B:]
        return parses, self.classify(premise, hypothesis)
