"""SPINN in PyTorch, define-by-run: plain Python decides the graph.

The autograd graph is recorded while ordinary Python runs: every stack and
buffer is a Python list per example, the transition steps a Python ``for``
loop, and each example takes a Python ``if`` on SHIFT or REDUCE, so each
batch's graph is built from its own trees and freed after the backward pass
(docs/static-vs-dynamic.md). The only batching is inside the cells, which
gather the examples acting at a step into one matrix. When the model chooses
its own parse (docs/spec.md §7), the ``if`` is taken on the head's verdict,
read back to Python once per step with a choice (docs/decided-graphs.md).
This is the algorithm of James Bradbury's 2017 PyTorch SPINN in today's
PyTorch, with the arithmetic of docs/spec.md §3.

The modules are those of every package (docs/surface.md). The encoder's
algorithm is a family module, one ``SPINN`` class each, picked by the runner
option ``family``: ``lists.py`` (the above, the default), ``masked.py``
(impl_jax's algorithm, padded arrays, pointers and masks, with the same cells
in PyTorch eager; ``compiled.py`` puts its step under ``torch.compile``,
``compile=True``) and ``levels.py`` (the batch's gold trees scheduled on the
host into levels, one batched Reduce per level, reading and writing a
``node_table.py`` NodeTable). ``head.py`` holds the
decision rule that lists.py and masked.py apply; ``dropout.py`` and
``params.py`` what the training modules share: dropout's randomness and the
parameters by canonical name.
"""
