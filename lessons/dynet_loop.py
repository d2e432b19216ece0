# %% [markdown]
# # SPINN in DyNet, written for ONE sentence: no batch dimension anywhere
# `encode` builds one sentence's graph with a Python list as its stack, an index as its buffer and a Python `if` per
# step, as you would trace the algorithm by hand; `main` adds every sentence, in a plain Python loop, to ONE graph.
# DyNet finds the batches itself when it evaluates the graph (autobatching), grouping the nodes of the same shape and
# kind across all sentences. It prints the nodes and the groups. Run: `.venv/bin/python -m lessons.dynet_loop`.

# %%
import os
import re
import subprocess
import sys

import numpy as np

from impl_dynet.library import dy  # never a bare `import dynet` (see that module)
from lessons.setup import ROOT, lesson_inputs, report

SHIFT, REDUCE = 1, 2


def load(params):
    """DyNet parameters from the canonical arrays. DyNet computes y = W x: each kernel [in, out] is transposed."""
    collection = dy.ParameterCollection()
    weights = {"embed": collection.lookup_parameters_from_numpy(params["embed.embedding"])}
    for name, value in params.items():
        if name != "embed.embedding":
            value = value.T if value.ndim == 2 else value
            weights[name] = collection.parameters_from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    return collection, weights


def gates(z, size, count):
    return [dy.pick_range(z, k * size, (k + 1) * size) for k in range(count)]


def encode(w, H, D, tokens, transitions):  # one sentence's graph -> the h of the one item left on its stack
    leaves = []
    for token in tokens[: (len(transitions) + 1) // 2]:  # a sentence of n words has 2n - 1 steps
        hc = w["projection.kernel"] * dy.lookup(w["embed"], int(token)) + w["projection.bias"]
        leaves.append((dy.pick_range(hc, 0, H), dy.pick_range(hc, H, 2 * H)))
    stack, front, zero = [], 0, dy.zeros(H)  # the buffer is leaves[front:]
    h_t = c_t = dy.zeros(D)
    for op in transitions:
        b = leaves[front][0] if front < len(leaves) else zero
        s1 = stack[-1][0] if len(stack) >= 1 else zero
        s2 = stack[-2][0] if len(stack) >= 2 else zero
        z = (w["tracker.kernel_input"] * dy.concatenate([b, s1, s2])
             + w["tracker.kernel_hidden"] * h_t + w["tracker.bias"])
        i, f, g, o = gates(z, D, 4)
        c_t = dy.cmult(dy.logistic(f), c_t) + dy.cmult(dy.logistic(i), dy.tanh(g))
        h_t = dy.cmult(dy.logistic(o), dy.tanh(c_t))
        if op == SHIFT:
            stack.append(leaves[front])
            front += 1
        else:  # REDUCE: right is on top, left below it
            (right_h, right_c), (left_h, left_c) = stack.pop(), stack.pop()
            z = (w["reduce.left.kernel"] * left_h + w["reduce.left.bias"]
                 + w["reduce.right.kernel"] * right_h + w["reduce.track.kernel"] * h_t)
            a, i, f1, f2, o = gates(z, H, 5)
            c = (dy.cmult(dy.tanh(a), dy.logistic(i)) + dy.cmult(dy.logistic(f1), left_c)
                 + dy.cmult(dy.logistic(f2), right_c))
            stack.append((dy.cmult(dy.logistic(o), dy.tanh(c)), c))
    assert len(stack) == 1 and front == len(leaves)
    return stack[0][0]


def encode_all(w, config, tokens, transitions, autobatching=True):  # every sentence into ONE graph, evaluated once
    dy.renew_cg(autobatching=autobatching)
    roots = [encode(w, config.hidden_dim, config.tracker_dim, toks, [op for op in ops if op != 0])
             for toks, ops in zip(tokens, transitions)]  # PAD (0) steps do nothing: drop them
    return dy.concatenate_cols(roots).npvalue().T.astype(np.float32)  # [B, H]


# %% [markdown]
# DyNet tells its groups only through its profiler, set when DyNet starts: a child process with it on (read by
# impl_dynet/library.py) evaluates the same graph, printing `BatchSize:K operation` for each group of K nodes.

# %%
def groups() -> list[int]:  # the nodes of each group the profiled child ran
    child = subprocess.run([sys.executable, "-m", "lessons.dynet_loop", "--profiled"], cwd=ROOT, check=True,
                           env={**os.environ, "SPINN_DYNET_PROFILING": "2"}, capture_output=True, text=True)
    return [int(k) for k in re.findall(r"^BatchSize:(\d+) ", child.stdout, re.MULTILINE)]


def main() -> float:
    config, params, tokens, transitions, expected = lesson_inputs()
    _collection, w = load(params)  # keep the collection alive while its parameters are used
    encodings = encode_all(w, config, tokens, transitions)
    if "--profiled" in sys.argv[1:]:  # the child: the graph is built and evaluated, the profiler has printed
        return 0.0
    sizes = groups()
    print(f"one graph for {len(tokens)} sentences: {sum(sizes)} nodes, which autobatching ran in {len(sizes)} groups "
          f"(the largest {max(sizes)} nodes)")
    return report("dynet, one sentence at a time", encodings, expected)


if __name__ == "__main__":
    main()
