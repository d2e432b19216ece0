# %% [markdown]
# # SPINN in DyNet, written for ONE sentence: no batch dimension anywhere
# Run: `.venv/bin/python -m lessons.dynet_loop`.
#
# `encode` builds one sentence's graph: a Python list as its stack, an index as its buffer and
# a Python `if` per step, as you would trace the algorithm by hand.
# `main` adds every sentence, in a plain Python loop, to ONE graph.
# DyNet finds the batches itself when it evaluates the graph (autobatching): it groups the
# nodes of the same shape and kind across all sentences.
# What it prints: the graph's nodes, the groups DyNet ran them in, and a backward pass.

# %%
import os
import re
import subprocess
import sys

import numpy as np

from impl_dynet.library import dy  # never a bare `import dynet` (see that module)
from lessons.setup import ROOT, lesson_inputs, reference_gradients, report, report_gradients

PAD, SHIFT, REDUCE = 0, 1, 2
AUTOBATCHING = True  # DyNet finds the batches as it evaluates a graph (exercise 7 says False)


# %% [markdown]
# The weights, as DyNet keeps them. DyNet computes y = W x: each kernel [in, out] is transposed.

# %%
def load(params):  # (the collection, which must stay alive, and the weights by name)
    collection = dy.ParameterCollection()
    embedding = collection.lookup_parameters_from_numpy(params["embed.embedding"])
    weights = {"embed.embedding": embedding}
    for name, value in params.items():
        if name != "embed.embedding":
            value = value.T if value.ndim == 2 else value
            value = np.ascontiguousarray(value, dtype=np.float32)
            weights[name] = collection.parameters_from_numpy(value)
    return collection, weights


def gates(z, size, count):  # z cut into `count` pieces of `size`
    return [dy.pick_range(z, k * size, (k + 1) * size) for k in range(count)]


# %% [markdown]
# One sentence's graph: the algorithm as you would run it by hand.

# %%
def encode(w, H, D, tokens, transitions):  # -> the h of the one item left on the stack
    leaves = []
    for token in tokens[: (len(transitions) + 1) // 2]:  # n words have 2n - 1 steps
        x = dy.lookup(w["embed.embedding"], int(token))
        hc = w["projection.kernel"] * x + w["projection.bias"]
        leaves.append((dy.pick_range(hc, 0, H), dy.pick_range(hc, H, 2 * H)))
    stack = []  # the items, the top last
    front = 0  # the buffer is leaves[front:]
    zero = dy.zeros(H)  # "no such item"
    h_t = c_t = dy.zeros(D)
    for op in transitions:
        b = leaves[front][0] if front < len(leaves) else zero
        s1 = stack[-1][0] if len(stack) >= 1 else zero
        s2 = stack[-2][0] if len(stack) >= 2 else zero
        z = w["tracker.kernel_input"] * dy.concatenate([b, s1, s2])
        z = z + w["tracker.kernel_hidden"] * h_t + w["tracker.bias"]
        i, f, g, o = gates(z, D, 4)
        c_t = dy.cmult(dy.logistic(f), c_t) + dy.cmult(dy.logistic(i), dy.tanh(g))
        h_t = dy.cmult(dy.logistic(o), dy.tanh(c_t))
        if op == SHIFT:
            stack.append(leaves[front])
            front += 1
        else:  # REDUCE: right is on top, left below it
            (right_h, right_c), (left_h, left_c) = stack.pop(), stack.pop()
            z = w["reduce.left.kernel"] * left_h + w["reduce.left.bias"]
            z = z + w["reduce.right.kernel"] * right_h + w["reduce.track.kernel"] * h_t
            a, i, f1, f2, o = gates(z, H, 5)
            c = dy.cmult(dy.tanh(a), dy.logistic(i))
            c = c + dy.cmult(dy.logistic(f1), left_c) + dy.cmult(dy.logistic(f2), right_c)
            stack.append((dy.cmult(dy.logistic(o), dy.tanh(c)), c))
    assert len(stack) == 1 and front == len(leaves)
    return stack[0][0]


def encode_all(w, config, tokens, transitions):  # every sentence's root, into the current graph
    H, D = config.hidden_dim, config.tracker_dim
    return [encode(w, H, D, toks, [op for op in ops if op != PAD])  # PAD does nothing: dropped
            for toks, ops in zip(tokens, transitions)]


# %% [markdown]
# Two instruments, both in a child process: this lesson run again. DyNet prints its graph's
# nodes (`dy.print_text_graphviz`) from C++ onto the process's stderr, which a child's caller
# reads whole. DyNet tells its groups only through its profiler, set when DyNet starts: the
# child starts with it on (impl_dynet/library.py reads the setting), and it prints
# `BatchSize:K operation` for each group of K nodes it runs.

# %%
def child(module, flag) -> subprocess.CompletedProcess:  # `python -m module flag`, profiled
    return subprocess.run([sys.executable, "-m", module, flag], cwd=ROOT,
                          env={**os.environ, "SPINN_DYNET_PROFILING": "2"},
                          check=True, capture_output=True, text=True)


def nodes_of(printed: str) -> list[str]:  # the nodes DyNet printed, one `vK = operation` each
    labels = re.findall(r'label="([^"]*)"', printed)
    return [re.sub(r" @ 0x[0-9a-f]+|\s*\(MEM:[^)]*\)", "", label)  # no memory addresses, sizes
            for label in labels]


def profile(module="lessons.dynet_loop") -> tuple[list[int], list[str]]:
    """(the nodes of each group the child ran, the nodes of its graph): main's graph, profiled."""
    done = child(module, "--profiled")
    groups = [int(k) for k in re.findall(r"^BatchSize:(\d+) ", done.stdout, re.MULTILINE)]
    return groups, nodes_of(done.stderr)


# %% [markdown]
# The graph itself, for one sentence of two words (SHIFT, SHIFT, REDUCE): every node DyNet
# holds, `vK = operation(inputs)`, in DyNet's notation (`*` a matrix product, `\cdot` an
# elementwise one, `\sigma` the logistic). Nothing has run yet; the graph is a recipe.
#
# **Predict, then run.** Three steps, each a tracker update, and one REDUCE: will the graph
# hold the tracker's operations once, or once a step?

# %%
def tiny_graph() -> None:  # the first premise's first two words, one REDUCE; DyNet prints it
    config, params, tokens, *_ = lesson_inputs()
    _collection, w = load(params)
    dy.renew_cg()
    encode(w, config.hidden_dim, config.tracker_dim, tokens[0][:2], [SHIFT, SHIFT, REDUCE])
    dy.print_text_graphviz()


def show_graph() -> None:  # the tiny graph, as a child process printed it
    print("\n".join(nodes_of(child("lessons.dynet_loop", "--tiny-graph").stderr)))


# %% active="ipynb"
# show_graph()

# %% [markdown]
# **The backward pass.** `loss.backward()` runs over the same graph: with autobatching, DyNet
# walks the groups its forward pass ran, the last first, one batched derivative per group
# (its `BatchedExecutionEngine::backward`). The loss is the sum of every number of the
# encodings; the float64 reference's hand-written backward pass gives the same gradients.

# %%
def run(w, config, tokens, transitions):  # forward and backward: the encodings [S, H]
    dy.renew_cg(autobatching=AUTOBATCHING)
    encodings = dy.concatenate_cols(encode_all(w, config, tokens, transitions))  # [H, S]
    loss = dy.sum_elems(encodings)  # the sum of every number of the encodings
    loss.value()  # forward: the whole graph, evaluated once
    loss.backward()  # backward: each weight's gradient, kept by its parameter
    return encodings.npvalue().T.astype(np.float32)


def gradients(w) -> dict[str, np.ndarray]:  # the weights' gradients, in the canonical layout
    grads = {name: weight.grad_as_array() for name, weight in w.items()}
    return {name: g.T if g.ndim == 2 and name != "embed.embedding" else g
            for name, g in grads.items()}


def encode_and_count(config, params, tokens, transitions, expected) -> float:
    _collection, w = load(params)  # keep the collection alive while its parameters are used
    encodings = run(w, config, tokens, transitions)
    sizes, nodes = profile()
    print(f"one graph for {len(tokens)} sentences and their loss: {len(nodes)} nodes,")
    if sizes:
        print(f"    which autobatching ran in {len(sizes)} groups (the largest {max(sizes)} nodes)")
    else:
        print("    which DyNet ran one node at a time: its profiler reports no groups")
    err = report("dynet, one sentence at a time", encodings, expected)
    expected_grads = reference_gradients(params, config, tokens, transitions)
    return max(err, report_gradients("dynet, loss.backward()", gradients(w), expected_grads))


# %% [markdown]
# **Predict, then run.** Eight sentences, each written as its own graph, all in one:
# how many nodes, and in how many groups will DyNet run them? (The main loop of
# `pytorch_lists` makes one call per step for the tracker and one for the REDUCEs.)

# %% active="ipynb"
# config, params, tokens, transitions, expected = lesson_inputs()
# err = encode_and_count(config, params, tokens, transitions, expected)

# %% active="py"
def main() -> float:
    config, params, tokens, transitions, expected = lesson_inputs()
    if "--tiny-graph" in sys.argv[1:]:  # a child: the tiny graph, printed
        tiny_graph()
        return 0.0
    if "--profiled" in sys.argv[1:]:  # a child: the graph runs (the profiler prints its groups)
        _collection, w = load(params)
        run(w, config, tokens, transitions)
        dy.print_text_graphviz()
        return 0.0
    return encode_and_count(config, params, tokens, transitions, expected)


if __name__ == "__main__":
    main()
