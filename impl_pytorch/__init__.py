"""SPINN in PyTorch, define-by-run: plain Python decides the graph.

What this package shows about its framework: the autograd graph is recorded
while ordinary Python runs. Every stack and buffer is a Python list per
example, the transition steps are a Python ``for`` loop, and each example
takes a Python ``if`` on SHIFT or REDUCE, so the graph of one batch is built
from that batch's trees and thrown away after the backward pass. Nothing is
traced or compiled; the only batching is inside :class:`~impl_pytorch.cells.Tracker`
and :class:`~impl_pytorch.cells.Reduce`, which gather the examples acting at
this step into one matrix (``batch``) and hand the rows back (``unbatch``).
This is the algorithm of James Bradbury's 2017 PyTorch SPINN (NVIDIA blog
"Recursive Neural Networks with PyTorch") in today's PyTorch, with the
arithmetic of docs/spec.md §3.

When the model chooses its own parse (docs/spec.md §7, ``SPINN.parse``), the
same loop brings the transition head's logits back to Python once per step
that has a choice, and the ``if`` is taken on the model's decision instead of
the data's: the host round trip a define-by-run parser pays.

Files: ``cells.py`` (Tracker and Reduce, batched per step), ``model.py``
(SPINN: the list-based loop and its parse), ``classifier.py`` (embedding,
projection, one SPINN pass over premises and hypotheses, the MLP),
``convert.py`` (canonical .npz <-> modules), ``train.py`` (losses, gradients,
optimizers, dropout, parse), ``reinforce.py`` (the REINFORCE loss and step),
``runner.py`` (the adapter of docs/runner-interface.md), ``platform.py`` and
``explain.py`` (what the harness asks of the framework). Beside them, for the
variants matrix: ``masked.py`` runs impl_jax's algorithm (padded arrays,
pointers, masks) with the same cells in PyTorch eager (runner option
``algorithm="masked"``), and ``compiled.py`` puts it under ``torch.compile``
(``compile=True``).
"""
