"""SPINN in JAX: a whole batch of trees as fixed-size arrays, one compiled loop.

What this package shows about JAX:

* There is no Python control flow on values. Every sentence's stack is an
  array of fixed size with an integer stack pointer; ``lax.scan`` (lifted for
  Flax as ``nn.scan``) runs the same step T times, and SHIFT, REDUCE and PAD
  are selected per sentence by masks (``jnp.where``) and index arithmetic.
* ``jax.jit`` compiles the whole forward pass, and the whole training step
  (forward, backward, optax update) into one XLA program per batch shape.
  Compilation is explicit here (``jit(f).lower(...).compile()``), so it can be
  counted and timed: bucketing keeps the number of shapes, and so of
  compilations, small.
* Two stack layouts: a padded stack ``[S, N + 1, 2H]`` written with a scatter, and
  the thin stack of Bowman et al. (2016), ``[N + T, S, 2H]``, which holds every
  item ever made (the leaves, then one row per step) while the stack itself is
  a small integer array of back-pointers into it.
* Flax linen modules are pure descriptions; the weights are a plain pytree
  converted from the canonical ``.npz`` (``convert.py``), which ``jax.grad``
  differentiates and optax updates.

Modules: ``cells`` (Tracker, Reduce), ``model`` (SPINN: the scan, both stack
layouts, the parse), ``classifier`` (SNLIClassifier: embedding, one SPINN pass
over premises and hypotheses, the MLP), ``convert`` (canonical <-> Flax
weights), ``train`` (loss, gradients, optax, the training step),
``reinforce`` (the REINFORCE loss and step), ``replicas`` (data parallelism:
the batch sharded over a mesh of devices), ``runner`` (the adapter of
docs/runner-interface.md), ``platform`` and ``explain`` (what the harness asks
of the framework), ``vmap`` (SPINN written for one sentence and batched by
``jax.vmap``, the same weights: the ``jax-vmap`` implementation,
``algorithm="vmap"``). The surface the four packages share: docs/surface.md.
"""
