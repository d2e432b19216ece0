"""The SNLI classifier around a SPINN encoder (docs/spec.md §3): the
embedding, the leaf projection, one SPINN pass over premises and hypotheses
together, and the MLP on [p, q, p - q, p * q]; with a transition head, the
same in the parse modes of docs/spec.md §7.

One class for every family: the encoder is the ``SPINN`` class of the
family module given as ``encoder`` (lists.py: Python lists and a Python
loop; masked.py: padded arrays, pointers and masks; levels.py: a level
schedule made on the host), built with the same submodules (``tracker``,
``reduce``) and so the same parameters.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from shared.params import ModelConfig
from shared.parsing import SentenceParses

from .dropout import ShardDropout


class SNLIClassifier(nn.Module):
    """Embedding, leaf projection, SPINN, and the MLP on [p, q, p - q, p * q].

    ``encoder``: a family's SPINN class (``lists.SPINN``, ``masked.SPINN``,
    ``levels.SPINN``), built here as ``encoder(config)``. Dropout (rate
    ``dropout``) acts on the projected leaves and on the input of every
    classifier layer (the features and each ReLU output), as in the 2017
    code; ``model.eval()`` turns it off.

    Tokens may come as NumPy or as tensors: they go to the model's device (the
    device of its parameters) as int64. Transitions stay NumPy on the host,
    where lists.py and levels.py read them; masked.py moves them itself.
    """

    def __init__(self, config: ModelConfig, *, encoder: type[nn.Module], dropout: float = 0.0):
        super().__init__()
        self.config = config
        H, M = config.hidden_dim, config.mlp_dim
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.projection = nn.Linear(config.embed_dim, 2 * H)  # -> [h; c] of each leaf
        self.spinn = encoder(config)
        widths = [4 * H] + [M] * config.mlp_layers
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], 3)
        self.leaf_dropout = ShardDropout(dropout, rows="sentences")  # [2B, N, 2H]
        self.mlp_dropout = ShardDropout(dropout, rows="pairs")  # [B, width]

    def encode(self, tokens, transitions: np.ndarray) -> torch.Tensor:
        """tokens <int>[S, N] (NumPy or a tensor), transitions <int>[S, T]
        (NumPy, host) -> encodings <float>[S, H]: the leaves' [h; c] (dropout
        on them in training), then the family's SPINN.encode."""
        return self.spinn.encode(self._leaves(tokens), transitions)

    def classify(self, premise: torch.Tensor, hypothesis: torch.Tensor) -> torch.Tensor:
        """Encodings <float>[B, H] each -> logits <float>[B, 3]."""
        f = torch.cat([premise, hypothesis, premise - hypothesis, premise * hypothesis], dim=1)  # [B, 4H]
        for layer in self.mlp:
            f = torch.relu(layer(self.mlp_dropout(f)))
        return self.output(self.mlp_dropout(f))

    def forward(self, premise_tokens, premise_transitions: np.ndarray, hypothesis_tokens,
                hypothesis_transitions: np.ndarray):
        """-> premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3]."""
        B = len(premise_tokens)
        # Premise and hypothesis share N and T and the SPINN weights, so they
        # run as one batch of 2B sentences: half the Python loop iterations,
        # and twice the rows in every batched Tracker/Reduce call.
        encodings = self.encode(_sentences(premise_tokens, hypothesis_tokens),
                                _sentences(premise_transitions, hypothesis_transitions))  # [2B, H]
        premise, hypothesis = encodings[:B], encodings[B:]
        return premise, hypothesis, self.classify(premise, hypothesis)

    def parse(self, premise_tokens, premise_transitions: np.ndarray, hypothesis_tokens,
              hypothesis_transitions: np.ndarray, mode: str = "predicted",
              uniforms: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[SentenceParses, torch.Tensor]:
        """The pair batch in ``mode`` (docs/spec.md §7), with the transition
        head -> (SentenceParses of the 2B sentences, premises first; logits <float>[B, 3]).

        ``uniforms``: sampled mode, (premise_u, hypothesis_u) <float>[B, T]
        each. Everything stays differentiable: logprob and entropy too.
        """
        B = len(premise_tokens)
        if uniforms is not None:
            uniforms = _sentences(*uniforms)  # [2B, T]
        leaves = self._leaves(_sentences(premise_tokens, hypothesis_tokens))  # [2B, N, 2H]
        parses = self.spinn.parse(leaves, _sentences(premise_transitions, hypothesis_transitions), mode, uniforms)
        premise, hypothesis = parses.encodings[:B], parses.encodings[B:]
        return parses, self.classify(premise, hypothesis)

    def _leaves(self, tokens) -> torch.Tensor:
        """tokens <int>[S, N] (NumPy or a tensor) -> the leaves' [h; c] <float>[S, N, 2H] (dropout in training)."""
        return self.leaf_dropout(self.projection(self.embed(self._ids(tokens))))

    def _ids(self, tokens) -> torch.Tensor:
        """tokens <int>[S, N], NumPy or a tensor -> <int64>[S, N] on the model's device."""
        device = self.output.bias.device
        if torch.is_tensor(tokens):
            return tokens.to(device=device, dtype=torch.int64)
        return torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=device)  # int64 on the host, one copy


def _sentences(premise, hypothesis):
    """Premise rows, then hypothesis rows: one array of 2B sentences (NumPy
    stays NumPy on the host; tensors are concatenated where they are)."""
    if torch.is_tensor(premise):
        return torch.cat([premise, hypothesis])
    return np.concatenate([np.asarray(premise), np.asarray(hypothesis)])
