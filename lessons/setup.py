"""What every lesson starts from: eight real SNLI pairs, a tiny SPINN's weights, and the float64
reference's encodings and gradients to check against.
Nothing here is framework code; each lesson is.

Notation (docs/glossary.md): B pairs in a batch; S the sentences one call encodes (the lessons
encode the B premises, or the B hypotheses, so S = B; the suite encodes both at once, S = 2B);
N token slots, T = 2N - 1 transition slots (SHIFT = 1, REDUCE = 2, PAD = 0); E the word vector
size; H the size of h and of c (a stack item is [h; c], 2H numbers); D the tracker's size.

The weights are the canonical arrays every framework loads:
``embed.embedding`` [V, E], ``projection.kernel`` [E, 2H] (a leaf's [h; c]);
``tracker.kernel_input`` [3H, 4D] (buffer front, stack top, second from the top; gates i, f, g, o),
``tracker.kernel_hidden`` [D, 4D], ``tracker.bias`` [4D];
Reduce's ``reduce.left.kernel`` [H, 5H], ``reduce.right.kernel`` [H, 5H],
``reduce.track.kernel`` [D, 5H], ``reduce.left.bias`` [5H] (gates a, i, f1, f2, o).

The lessons' backward passes differentiate one loss, the sum of every number of the encodings
[S, H]; the reference's hand-written backward pass (shared/reference/encoder.py) gives its
gradients in float64.
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
# The weights an encoder uses (the classifier's, mlp.* and output.*, are not the lessons')
ENCODER_WEIGHTS = ("embed.embedding", "projection.kernel", "projection.bias",
                   "tracker.kernel_input", "tracker.kernel_hidden", "tracker.bias",
                   "reduce.left.kernel", "reduce.left.bias",
                   "reduce.right.kernel", "reduce.track.kernel")


def lesson_batches():
    """(config, float32 weights, two batches): the premises, then the hypotheses, of eight pairs.

    Each batch is (tokens [S, N], transitions [S, T], reference encodings [S, H]), S = 8:
    the same weights and shapes, other trees."""
    pairs, _ = read_snli(SAMPLE_PATH)
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), embed_dim=16, hidden_dim=16, tracker_dim=8,
                         mlp_dim=16, mlp_layers=1)
    params = init_params(config, seed=0, dtype=np.float32)
    batch = make_pair_batch(pairs[:8], vocab)
    out = reference.forward(params, config, batch)
    premises = (batch.premise_tokens, batch.premise_transitions, out.premise)
    hypotheses = (batch.hypothesis_tokens, batch.hypothesis_transitions, out.hypothesis)
    return config, params, [premises, hypotheses]


def lesson_inputs():
    """(config, float32 weights, premise tokens [S, N], their transitions [S, T], reference
    encodings [S, H])."""
    config, params, ((tokens, transitions, expected), _) = lesson_batches()
    return config, params, tokens, transitions, expected


def reference_gradients(params, config, tokens, transitions) -> dict[str, np.ndarray]:
    """The float64 reference's gradients of the lessons' loss, the sum of every number of the
    encodings [S, H], with respect to each encoder weight (ENCODER_WEIGHTS)."""
    weights = reference.encoder.as_f64(params)
    grads = {name: np.zeros_like(value) for name, value in weights.items()}
    ones = np.ones(config.hidden_dim)  # d loss / d encoding: 1 for every number
    for sentence_tokens, sentence_transitions in zip(tokens, transitions):
        _root, tape = reference.encoder.encode_sentence(weights, config, sentence_tokens,
                                                        sentence_transitions)
        reference.encoder.encoder_backward(weights, config, tape, ones, grads)
    return {name: grads[name] for name in ENCODER_WEIGHTS}


def report(name: str, encodings, expected, what: str = "premises") -> float:
    """Print and return the largest difference from the reference."""
    err = float(np.max(np.abs(np.asarray(encodings, dtype=np.float64) - expected)))
    verdict = "agrees" if err <= TOLERANCE else "DISAGREES"
    print(f"{name}: {len(expected)} {what} encoded,")
    print(f"    largest difference from the float64 reference {err:.1e} ({verdict})")
    return err


def report_gradients(name: str, grads, expected) -> float:
    """Print and return the largest difference of the gradients from the reference's, each
    weight's measured against its largest gradient (a sum over many steps can be large)."""
    errs = []
    for weight, want in expected.items():
        got = np.asarray(grads[weight], dtype=np.float64)
        errs.append(float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))))
    err = max(errs)
    verdict = "agrees" if err <= TOLERANCE else "DISAGREES"
    print(f"{name}: the gradients of {len(expected)} weights,")
    print(f"    largest difference from the float64 reference {err:.1e} ({verdict})")
    return err
