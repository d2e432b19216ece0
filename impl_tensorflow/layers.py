"""The two layers TensorFlow's core has no plain form of, shared by cells.py and
classifier.py (what the other frameworks take from their library), and how a
loop reads its weights once (the SPINN families' loops: :func:`step_variables`),
and the containers a loop's table may live in (:data:`CONTAINERS`).

``Linear`` is ``x @ kernel + bias`` with the kernel <float>[in, out] as in
the canonical file; ``Embedding`` is the word vectors <float>[V, E]. Their
variables start as zeros: the values come from the canonical parameters
(convert.from_canonical), never from here.

:func:`read_once` and :func:`read`: a variable read inside a
``tf.while_loop`` body is a new tensor at every step, and the backward pass
keeps one per step (under XLA, a copy per step). So a loop is built inside
``read_once(variables)``, which reads them once, before the loop, and the
cells take their weights through ``read``: inside the context the tensors
read on entry, elsewhere the variables themselves. The tensors are kept per
thread, since MirroredStrategy traces each replica's step in its own thread
(replicas.py).
"""

from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

# What holds a loop's table of rows (masked.py's thin stack, levels.py's node table), the runner's ``container=``:
# a TensorArray (the CPU graph executor, which copies a plain tensor updated in a while loop at every step) or a
# dense tensor (XLA, which cannot compile the TensorArray scatter, and GPUs). Defined here, which both modules import.
CONTAINERS = ("tensor_array", "dense")


class Linear(tf.Module):
    """``x @ kernel + bias`` on the last axis; kernel <float>[in, out] as in
    the canonical file."""

    def __init__(self, in_dim: int, out_dim: int, dtype: tf.DType, name: str):
        super().__init__(name=name)
        with self.name_scope:
            self.kernel = tf.Variable(tf.zeros([in_dim, out_dim], dtype), name="kernel")
            self.bias = tf.Variable(tf.zeros([out_dim], dtype), name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.tensordot(x, self.kernel, axes=1) + self.bias


class Embedding(tf.Module):
    """The word vectors, ``embedding <float>[V, E]``."""

    def __init__(self, vocab_size: int, embed_dim: int, dtype: tf.DType, name: str = "embed"):
        super().__init__(name=name)
        with self.name_scope:
            self.embedding = tf.Variable(tf.zeros([vocab_size, embed_dim], dtype), name="embedding")

    def __call__(self, tokens: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.embedding, tokens)


_reads = threading.local()  # .values: {variable reference: the tensor read on entry}, this thread's


@contextlib.contextmanager
def read_once(*variables: tf.Variable):
    """Inside, ``read(v)`` of each of ``variables`` is one tensor, read here,
    on entry (before the loop built inside: see the module docstring)."""
    outer = getattr(_reads, "values", {})
    _reads.values = {**outer, **{v.ref(): v.read_value() for v in variables}}
    try:
        yield
    finally:
        _reads.values = outer


def read(*variables: tf.Variable) -> tuple:
    """Each variable's value as a step takes it: the tensor an enclosing
    :func:`read_once` read, else the variable itself."""
    values = getattr(_reads, "values", {})
    return tuple(values.get(v.ref(), v) for v in variables)


def step_variables(spinn, head: bool) -> list[tf.Variable]:
    """The variables a step of ``spinn`` (lists.py's or masked.py's SPINN)
    reads, for :func:`read_once`: its tracker's, its Reduce's, and the
    transition head's where the run uses it (encode reads no head: its graph
    is that of a model without one)."""
    tracker = [spinn.tracker.kernel, spinn.tracker.bias] if spinn.tracker is not None else []
    transition = [spinn.tracker.transition.kernel, spinn.tracker.transition.bias] if head else []
    return tracker + [spinn.reduce.kernel, spinn.reduce.bias] + transition
