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

Modules. The surface every package shares (docs/surface.md): ``cells``
(Tracker, Reduce), ``classifier`` (SNLIClassifier: embedding, one SPINN pass
over premises and hypotheses, the MLP; the family's SPINN class is its
``encoder``), ``convert`` (canonical <-> Flax weights), ``train`` (the Model
and Optimizer values, loss, gradients, optax, the training step),
``reinforce`` (the REINFORCE loss and step), ``replicas`` (data parallelism:
the batch sharded over a mesh of devices), ``runner`` (the adapter of
docs/runner-interface.md), ``platform`` and ``explain`` (what the harness asks
of the framework). The families (bench/frameworks.py), one SPINN each, the
runner's ``family=``: ``masked`` (the scan over the batch by hand, both
stack layouts; the default), ``vmap`` (SPINN written for one sentence and
batched by ``jax.vmap``: ``jax-vmap``), ``levels`` (a level schedule made on
the host: ``jax-levels``). What they share is ``shift_reduce`` and ``head``
(the decision rule of a decided parse); what the other modules share: ``params`` (the parameter tree: its shapes, its split
into trained and frozen parts), ``forward`` (the classifier applied to a
batch, dropout's key), ``compilation_cache`` (the persistent cache's
switch), ``distributed`` (a job of several processes), ``jaxprs`` (what a
traced program holds).
"""
