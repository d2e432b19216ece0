# %% [markdown]
# # Exercise 7, answered: DyNet with autobatching off
# Run: `.venv/bin/python -m lessons.answers.autobatching`.
#
# The graph is the same with autobatching on or off: the same sentences, the same nodes.
# What changes is how DyNet runs it. With autobatching, it groups the nodes of the same kind
# and shape across sentences and runs each group as one operation (its profiler prints each
# group); without, it runs every node as an operation of its own (the profiler has no groups
# to print). The numbers stay: each node computes the same thing either way. The gradients
# agree to rounding: a batched backward adds a weight's contributions in another order.
#
# Everything here is dynet_loop's, on its batch and model, run both ways.

# %%
import statistics
import sys
import time

import numpy as np

from lessons import dynet_loop
from lessons.setup import lesson_inputs


def run_with(autobatching, config, params, tokens, transitions):
    """dynet_loop's graph, forward and backward, with autobatching on or off: (encodings,
    gradients, seconds the run took)."""
    dynet_loop.AUTOBATCHING = autobatching
    try:
        _collection, w = dynet_loop.load(params)  # fresh weights: their gradients start at 0
        start = time.perf_counter()
        encodings = dynet_loop.run(w, config, tokens, transitions)
        seconds = time.perf_counter() - start
        return encodings, dynet_loop.gradients(w), seconds
    finally:
        dynet_loop.AUTOBATCHING = True  # the lesson as written


def largest_change(before: dict, after: dict) -> float:  # relative to each weight's largest
    return max(float(np.max(np.abs(after[k] - before[k])) / max(1.0, np.max(np.abs(before[k]))))
               for k in before)


# %%
def main():
    config, params, tokens, transitions, _expected = lesson_inputs()
    if "--profiled" in sys.argv[1:]:  # the profiled child: the graph with autobatching off
        run_with(False, config, params, tokens, transitions)
        dynet_loop.dy.print_text_graphviz()
        return None
    runs = {flag: run_with(flag, config, params, tokens, transitions) for flag in (True, False)}
    ran = {True: dynet_loop.profile(), False: dynet_loop.profile("lessons.answers.autobatching")}
    for flag, (groups, nodes) in ran.items():
        print(f"autobatching {'on' if flag else 'off'}: {len(nodes)} nodes; "
              f"the profiler reports {len(groups)} groups")
    (on, on_grads, *_), (off, off_grads, *_) = runs.values()
    print(f"the encodings of the two runs differ by at most {np.max(np.abs(on - off)):.1e}, "
          f"the gradients by {largest_change(on_grads, off_grads):.1e}")
    seconds = {flag: [] for flag in runs}
    for _ in range(3):  # interleaved rounds: both ways see the same machine
        for flag in seconds:
            seconds[flag].append(run_with(flag, config, params, tokens, transitions)[2])
    on_s, off_s = (statistics.median(seconds[flag]) for flag in (True, False))
    print(f"forward and backward, the median of 3 runs: {on_s * 1e3:.1f} ms with autobatching, "
          f"{off_s * 1e3:.1f} ms without")
    return runs, ran


# %%
if __name__ == "__main__":
    main()
