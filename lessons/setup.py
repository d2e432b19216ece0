"""What every lesson starts from: eight real SNLI premises, a tiny SPINN's
weights, and the float64 reference's encodings of those premises to check
against. Nothing here is framework code; each lesson is.

Notation (docs/spec.md §3): B sentences in a batch, N token slots, T = 2N - 1
transition slots (SHIFT = 1, REDUCE = 2, PAD = 0), E the word vector size,
H the size of h and of c (a stack item is [h; c], 2H numbers), D the
tracker's size. The weights are the canonical arrays every framework loads:
``embed.embedding`` [V, E], ``projection.kernel`` [E, 2H] (a leaf's [h; c]),
``tracker.kernel_input`` [3H, 4D] (buffer front, stack top, second from the
top; gates i, f, g, o), ``tracker.kernel_hidden`` [D, 4D], ``tracker.bias``
[4D], and Reduce's ``reduce.left.kernel`` [H, 5H], ``reduce.right.kernel``
[H, 5H], ``reduce.track.kernel`` [D, 5H], ``reduce.left.bias`` [5H] (gates
a, i, f1, f2, o).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared import reference
from shared.batching import make_pair_batch
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, read_snli
from shared.vocab import Vocabulary

TOLERANCE = 1e-5  # float32 arithmetic against float64: rounding, not a bug
ROOT = Path(__file__).resolve().parents[1]  # the repository's root


def lesson_batches():
    """(config, float32 weights, two batches): the premises and the hypotheses of the same eight pairs, each
    (tokens [B, N], transitions [B, T], reference encodings [B, H]): the same weights, other trees."""
    pairs, _ = read_snli(SAMPLE_PATH)
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), embed_dim=16, hidden_dim=16, tracker_dim=8, mlp_dim=16,
                         mlp_layers=1)
    params = init_params(config, seed=0, dtype=np.float32)
    batch = make_pair_batch(pairs[:8], vocab)
    out = reference.forward(params, config, batch)
    return config, params, [(batch.premise_tokens, batch.premise_transitions, out.premise),
                            (batch.hypothesis_tokens, batch.hypothesis_transitions, out.hypothesis)]


def lesson_inputs():
    """(config, float32 weights, premise tokens [B, N], premise transitions [B, T], reference encodings [B, H])."""
    config, params, ((tokens, transitions, expected), _) = lesson_batches()
    return config, params, tokens, transitions, expected


def report(name: str, encodings, expected, what: str = "premises") -> float:
    """Print and return the largest difference from the reference."""
    err = float(np.max(np.abs(np.asarray(encodings, dtype=np.float64) - expected)))
    print(f"{name}: {len(expected)} {what} encoded, largest difference from the float64 reference {err:.1e}"
          f" ({'agrees' if err <= TOLERANCE else 'DISAGREES'})")
    return err
