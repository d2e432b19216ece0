"""How much of a batch is padding (docs/spec.md §6, "the padding share"): the PAD share of the transition slots
every implementation computes, of those a loop that stops after the batch's last real step computes, and of
the token slots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from shared.batching import PairBatch, sentences_transitions
from shared.transitions import PAD, SHIFT


@dataclass
class PaddingShare:
    """How much of a list of batches is padding (premise and hypothesis together)."""

    real_steps: int  # SHIFT/REDUCE slots
    padded_steps: int  # PAD slots
    total_steps: int  # all transition slots, 2 * sum(B * T)
    waste: float  # padded_steps / total_steps: the fraction of steps that do no work
    loop_steps: int  # the slots of a loop that stops at each batch's last real step: 2 * sum(B * T_real)
    loop_waste: float  # the PAD share of those: what a loop that stops early still runs for nothing
    real_tokens: int  # tokens actually present (one SHIFT each)
    token_slots: int  # 2 * sum(B * N)
    num_batches: int
    shapes: list[tuple[int, int]]  # sorted distinct (N, T): one trace each when compiled


def loop_length(transitions: np.ndarray) -> int:
    """T_real of ``transitions`` <int>[S, T]: one past the last step that is not PAD in any row, the steps a loop that
    stops after the batch's last real step runs (0 when every step is PAD)."""
    acting = (np.asarray(transitions) != PAD).any(axis=0)
    return int(np.flatnonzero(acting).max(initial=-1)) + 1


def padding_share(batches: Sequence[PairBatch]) -> PaddingShare:
    """Count real and padded slots over ``batches``."""
    real_steps = total_steps = real_tokens = token_slots = loop_steps = 0
    shapes: set[tuple[int, int]] = set()
    for batch in batches:
        # Premise and hypothesis together: an implementation may run both sides as one batch.
        loop_steps += 2 * batch.size * loop_length(sentences_transitions(batch))
        for transitions, tokens in ((batch.premise_transitions, batch.premise_tokens),
                                    (batch.hypothesis_transitions, batch.hypothesis_tokens)):
            real_steps += int(np.count_nonzero(transitions != PAD))
            total_steps += transitions.size
            # Count tokens by SHIFTs, not by non-zero ids: a literal "<pad>" word in the text would also have id 0.
            real_tokens += int(np.count_nonzero(transitions == SHIFT))
            token_slots += tokens.size
        shapes.add((batch.num_tokens, batch.num_steps))
    padded_steps = total_steps - real_steps
    return PaddingShare(real_steps, padded_steps, total_steps, padded_steps / total_steps if total_steps else 0.0,
                        loop_steps, (loop_steps - real_steps) / loop_steps if loop_steps else 0.0, real_tokens,
                        token_slots, len(batches), sorted(shapes))
