"""``python -m bench run`` and ``report``: the cross-framework benchmark.

``plan`` (the run command) decides what to measure and starts one ``worker`` process per implementation; the worker
times each (mode, batch size) with ``measure``, using ``devices`` (versions, matmul peak, memory) and ``flops`` (useful
work counted from the transitions), and appends one record a line; ``report`` renders tables, targets and plots from the
records.
"""
