"""The classifier applied to a batch, as every program of train.py and reinforce.py runs it.

A ``train.Model`` holds the Flax module and its parameters; a batch is a ``shared.batching.BatchArrays`` of
device arrays. Here the module runs in eval or training mode as asked (a clone of it with that
``training`` field), with dropout's key a function of (seed, step) only, and the batch's level schedule
passed on (``levels=``) where it has one (levels.py's LevelClassifier; every other family's batch holds
``()`` there).
"""

from __future__ import annotations

import jax

from shared.parsing import SentenceParses


def dropout_key(seed, step) -> jax.Array:
    """Dropout's key for training step ``step`` (an int or an <int32>[] array: a new step never
    recompiles) of a run seeded ``seed``.

    "rbg" (XLA's RngBitGenerator) rather than the default threefry: threefry's unrolled hash made the
    training step compile twice as slowly on the CPU. Masks are still a function of (seed, step) on a
    backend, so a resumed run draws the same ones."""
    return jax.random.fold_in(jax.random.key(seed, impl="rbg"), step)


def _apply(model, batch, *args, training: bool, seed, step, method=None):
    module = model.module.clone(training=training)
    rngs = {"dropout": dropout_key(seed, step)} if training else None
    schedule = {} if batch.levels == () else {"levels": batch.levels}
    return module.apply({"params": model.params}, batch.premise_tokens, batch.premise_transitions,
                        batch.hypothesis_tokens, batch.hypothesis_transitions, *args, rngs=rngs, method=method,
                        **schedule)


def forward(model, batch, *, training: bool = False, seed=0, step=0):
    """(premise <float>[B, H], hypothesis <float>[B, H], logits <float>[B, 3]): the classifier's
    ``__call__`` (gold transitions, no head)."""
    return _apply(model, batch, training=training, seed=seed, step=step)


def forward_parse(model, batch, mode: str, uniforms=None, *, training: bool = False, seed=0,
                  step=0) -> tuple[SentenceParses, jax.Array]:
    """The classifier's ``parse`` in ``mode`` (a Python string: each mode is its own program) ->
    (SentenceParses of the 2B sentences, premises first; logits <float>[B, 3]). ``uniforms``: sampled
    mode's (premise_u, hypothesis_u) <float>[B, T] each, else None."""
    return _apply(model, batch, mode, uniforms, training=training, seed=seed, step=step, method="parse")
