"""The levels' node table in PyTorch: rows written in place, outside autograd, whose gradient is one buffer.

What ``tf.TensorArray`` is to impl_tensorflow/levels.py and the scan's carry
to impl_jax/levels.py: the container of the node table the level loop reads
(:meth:`NodeTable.gather`) and writes (:meth:`NodeTable.write`, a block of
rows at a time, each row written once). TensorFlow's TensorArray is a
library type whose gradient is itself a TensorArray, one buffer; XLA
updates a scan's carry in place and its cotangent is one buffer. PyTorch has
no such type, so the suite writes one here, and impl_pytorch/levels.py uses
it as TensorFlow's levels.py uses its TensorArray.

Why not a plain tensor that autograd tracks: the gradient of a gather is as
large as its source, so a tracked table costs a table-sized zero fill and sum
per read in the backward pass, and a table-sized copy per in-place write of
a block. Measured on the benchmark's batches of 128 pairs (H=300, a batch of
N=16 and one of N=32, a training step each, 7 interleaved rounds, one
thread, on a 2-core machine shared with other work, medians of the rounds'
ratios): a plain autograd table (the leaves and zeros concatenated, each
block written in place, each read an index_select) took 1.42x as long as
this one with the tracker and 1.44x without it, with the same gradients.

How: the rows live in a tensor no autograd graph records; two
``torch.autograd.Function``\\ s read (:class:`_Read`) and write
(:class:`_Write`) them and share one gradient buffer per table: a read's
backward adds its rows' gradient into the buffer, a write's backward hands
its block the buffer's rows. A token (a 0-d tensor, the table's ``flow``, as
a TensorArray names its own) passes from each write to the next reads and
writes and orders the backward pass: a block's gradient is taken only after
every read of it has added to it. A write returns a new NodeTable (the same
rows, the new flow), as a TensorArray's does.
"""

from __future__ import annotations

import torch


class NodeTable:
    """A table of rows <float>[size, width], zeros until written (:meth:`zeros`
    makes one): rows read with :meth:`gather`, written with :meth:`write`,
    each row at most once, before any read of it; the gradient of every read
    and write flows through autograd as if the table were a tensor it
    tracked. ``buffers``: the rows, their gradient buffer (made by the first
    backward that needs it) and the count of writes, shared by every
    NodeTable a write returns; ``flow``: the token that orders them."""

    def __init__(self, buffers: dict, flow: torch.Tensor):
        self.buffers, self.flow = buffers, flow

    @classmethod
    def zeros(cls, size: int, width: int, *, dtype: torch.dtype = torch.float32, device=None) -> NodeTable:
        """A table of ``size`` rows of ``width`` zeros."""
        buffers = {"rows": torch.zeros((size, width), dtype=dtype, device=device), "grad": None, "writes": 0}
        # The first flow takes part in autograd's graph whenever one is recorded, so that the first write is in it
        # (its backward the table's last), even where what it writes needs no gradient.
        return cls(buffers, torch.zeros((), dtype=dtype, device=device, requires_grad=torch.is_grad_enabled()))

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """The rows ``rows`` <int64>[K] -> <float>[K, width]."""
        return _Read.apply(self.flow, self.buffers, rows)

    def write(self, row: int, block: torch.Tensor) -> NodeTable:
        """``block`` <float>[K, width] into the rows from ``row`` on (rows not written before) -> the table after it
        (the same rows; its flow orders the reads and writes after this one)."""
        return NodeTable(self.buffers, _Write.apply(block, self.flow, self.buffers, row))


class _Write(torch.autograd.Function):
    """A block <float>[K, width] into the rows at ``row`` (in place, outside
    autograd) -> a new flow (0-d) that the next reads and writes take."""

    @staticmethod
    def forward(ctx, block: torch.Tensor, flow: torch.Tensor, buffers: dict, row: int) -> torch.Tensor:
        buffers["rows"][row:row + block.shape[0]] = block
        ctx.buffers, ctx.rows, ctx.first = buffers, slice(row, row + block.shape[0]), buffers["writes"] == 0
        buffers["writes"] += 1
        return flow.new_zeros(())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_flow: torch.Tensor):
        # Every read of these rows came after this write, so its backward has run (no read at all: no buffer).
        grad = ctx.buffers["grad"]
        block = grad[ctx.rows].clone() if grad is not None and ctx.needs_input_grad[0] else None
        if ctx.first:  # the table's first write: the last backward of the table, the buffer is done
            ctx.buffers["grad"] = None  # (a second backward through a retained graph starts from zeros)
        return block, grad_flow, None, None


class _Read(torch.autograd.Function):
    """flow, rows <int64>[K] -> <float>[K, width]; the backward adds their
    gradient into the table's buffer."""

    @staticmethod
    def forward(ctx, flow: torch.Tensor, buffers: dict, rows: torch.Tensor) -> torch.Tensor:
        ctx.set_materialize_grads(False)  # an output nothing read has no gradient to add
        ctx.buffers = buffers
        ctx.save_for_backward(rows)
        return buffers["rows"].index_select(0, rows)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor | None):
        (rows,) = ctx.saved_tensors
        if grad is not None:
            if ctx.buffers["grad"] is None:  # the first backward that needs it makes the buffer
                ctx.buffers["grad"] = torch.zeros_like(ctx.buffers["rows"])
            ctx.buffers["grad"].index_add_(0, rows, grad)
        return ctx.buffers["rows"].new_zeros(()), None, None  # the flow's: it orders, it carries nothing
