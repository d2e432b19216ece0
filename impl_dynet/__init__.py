"""SPINN in DyNet: the model written for ONE sentence, batched by DyNet at run time.

autobatch.py is SPINN for one sentence (a Python list is the stack, a
Python loop runs the transitions, no batch dimension, no padding, no masks:
the shape of the float64 reference); a batch is a plain loop over its
sentences that adds all their nodes to one graph, and DyNet's automatic
batching groups the nodes that share an operation and shapes when the graph
is evaluated (docs/autobatching.md). The implementation ``dynet-unbatched``
is the same code with autobatching off. When the model chooses its own
parse (docs/spec.md §7), every sentence advances one step at a time and the
graph is evaluated once per step that has a choice, so a decision can be
read back to Python.

Files, as docs/surface.md lays them out for every package: ``cells.py``
(Tracker and Reduce for one sentence, on DyNet's fused LSTM nodes),
``autobatch.py`` (the family module: SPINN, the stack, the buffer, the
transition loop, the decided parse), ``classifier.py`` (SNLIClassifier:
leaves, the MLP, one graph per pair batch), ``convert.py`` (canonical .npz
<-> the ParameterCollection), ``train.py`` (the Model, losses, gradients,
the optimizers, the parse), ``reinforce.py`` (the REINFORCE loss and step),
``runner.py`` (the adapter of docs/runner-interface.md), ``platform.py`` and
``explain.py`` (what the harness asks of the framework). Beside them, what
those modules share: ``weights.py`` (the ParameterCollection, laid out for
the fused nodes), ``graph.py`` (one call's graph: built with its dropout
masks, evaluated, timed by phase, its gradient read and applied),
``rules.py`` (the shared optimizer rules in NumPy), ``library.py`` (DyNet
imported with this project's settings: memory pools sized before it
starts). There is no ``replicas.py``: DyNet's Python API has no all-reduce
(docs/surface.md).

DyNet computes in float32 only and its wheel is CPU-only; the runner refuses
float64 and the GPU in one line.
"""
