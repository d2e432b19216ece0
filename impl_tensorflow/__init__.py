"""SPINN in TensorFlow 2, as one static graph: ``tf.function`` + ``tf.while_loop``.

What this package shows about its framework:

* The whole encoder is traced once into a graph. Sentence length, step count
  and batch size are ``None`` dimensions of the input signature, so ONE trace
  serves every batch shape (the Runner counts traces, and the tests fail if
  TensorFlow retraces).
* The transition steps are a ``tf.while_loop`` whose trip count is a
  run-time tensor. Nothing in the body may branch on a value in Python: SHIFT,
  REDUCE and PAD are chosen per sentence by masks (``tf.where``) and index
  arithmetic, and every sentence computes a tracker step and a composition at
  every step, whatever its transition.
* Parses decided by the model (docs/spec.md §7) stay in the graph: the
  transition head's logits, the validity of each action (from the pointers)
  and the rule (t_R > t_S, or u < p_R with u an input tensor) make ``op`` a
  ``tf.where`` inside the same loop body, followed by the same masked step as
  gold transitions. The followed transitions are written into TensorArrays,
  loop variables like the thin stack; a parse is one call, one trace per mode.
* The stack is the thin stack of Bowman et al. (2016): a table of rows
  written once (the leaves, then one composition per step), and an integer
  stack of row numbers per sentence. Its ``container`` in the graph executor is a
  ``tf.TensorArray`` (one element per row and sentence, read with ``gather``
  and written with ``scatter``), because a plain tensor updated inside a while
  loop is copied at every step; under XLA (``jit_compile=True``), which cannot
  compile TensorArray scatters but updates buffers in place, it is a plain
  tensor. The two are the same function with a different container.
* Weights live in ``tf.Variable``s inside ``tf.Module``s; the tracker's and
  the composition's kernels are fused (one matmul per step each), so the
  canonical ``.npz`` is split and joined on the way in and out (``convert.py``).
* Training uses ``tf.GradientTape`` (gradients flow back through the while
  loop) and Keras 3 optimizers (SGD, Adam, RMSprop) on the raw variables.
  Training mode is a context on the model (``with model.dropout(seed, step):``)
  set while a step is traced; dropout is stateless, its masks a function of
  (seed, step), the step number an input of the traced step.
* Data parallelism (``bench train --replicas K``, replicas.py) is ``tf.distribute``'s
  MirroredStrategy in one process: the variables and the optimizer mirrored
  on K devices (K logical CPU devices on a CPU), each step one
  ``tf.function`` whose replicas compute their rows of the batch and whose
  gradients Keras sums across them; dropout masks are drawn for the whole
  batch and cut per replica, so the step is the one-device step.
* Results are bit-identical from call to call, so a resumed training run
  equals an uninterrupted one. That takes care in TensorFlow: Grappler turns
  a chain of three adds into one ``AddN``, whose CPU kernel reorders its
  inputs by which buffer it can reuse; the model keeps every sum to two terms
  or a ``reduce_sum`` (cells.py's ``Reduce``, classifier.py's ``classify``).

Files: ``cells.py`` (Tracker and Reduce, fused kernels), one module per
algorithm family, each with its ``SPINN`` (bench/frameworks.py's
FAMILIES, the runner's ``family``): ``masked.py`` (the while loop,
its thin stack and its parse: ``tensorflow``, ``tensorflow-xla``),
``lists.py`` (the same cells run define-by-run in eager mode, as PyTorch runs
them: ``tensorflow-eager``) and ``levels.py`` (a level schedule made on the
host: ``tensorflow-levels``); ``classifier.py`` (embedding, projection, one
SPINN pass over premises and hypotheses, the MLP: one class for every
family), ``convert.py`` (canonical .npz <-> modules), ``train.py`` (loss,
gradients, optimizers), ``reinforce.py`` (the REINFORCE loss and step),
``replicas.py`` (the data-parallel step), ``runner.py`` (the adapter of
docs/runner-interface.md, with trace counting and the XLA switch),
``traced.py`` (its traced entry points), ``platform.py`` and ``explain.py``
(what the harness asks of the framework). The public names of these modules
are docs/surface.md's. What several of them share lives in modules named
for it: ``layers.py`` (Linear, Embedding, and reading a loop's weights
once), ``head.py`` (the transition head's arithmetic: the decision rule of a
decided parse, the transition loss's sum), ``variables.py`` (the variables by name),
``updates.py`` (the optimizer's update).
"""
