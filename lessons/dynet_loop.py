"""SPINN in DyNet, written for ONE sentence: no batch dimension anywhere.

What to notice: `encode` builds one sentence's graph with a Python list as
its stack, an index as its buffer and a Python `if` per step, exactly as you
would trace the algorithm by hand. `main` loops over the sentences in plain
Python and adds every one of them to ONE computation graph. Nothing in the
model ever sees a batch: DyNet finds the batches itself when the graph is
evaluated (`dy.renew_cg(autobatching=True)`), grouping the nodes of the same
shape and kind across all sentences. Turning autobatching off gives the same
numbers, computed one node at a time.

Run from the repository root:  .venv/bin/python -m lessons.dynet_loop
"""

from __future__ import annotations

import numpy as np

from impl_dynet.library import dy  # never a bare `import dynet` (see that module)
from lessons.setup import lesson_inputs, report

SHIFT, REDUCE = 1, 2


def load(params):
    """DyNet parameters from the canonical arrays. DyNet multiplies column
    vectors, y = W x, so each kernel [in, out] is stored transposed."""
    collection = dy.ParameterCollection()
    weights = {"embed": collection.lookup_parameters_from_numpy(params["embed.embedding"])}
    for name, value in params.items():
        if name != "embed.embedding":
            value = value.T if value.ndim == 2 else value
            weights[name] = collection.parameters_from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    return collection, weights


def gates(z, size, count):
    return [dy.pick_range(z, k * size, (k + 1) * size) for k in range(count)]


def encode(w, H, D, tokens, transitions):
    """One sentence's graph; returns the h of the one item left on its stack."""
    leaves = []
    for token in tokens[: (len(transitions) + 1) // 2]:  # a sentence of n words has 2n - 1 steps
        hc = w["projection.kernel"] * dy.lookup(w["embed"], int(token)) + w["projection.bias"]
        leaves.append((dy.pick_range(hc, 0, H), dy.pick_range(hc, H, 2 * H)))
    stack, front = [], 0  # the buffer is leaves[front:]
    h_t = c_t = dy.zeros(D)
    zero = dy.zeros(H)
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


def encode_all(w, config, tokens, transitions, autobatching):
    """A plain Python loop over the sentences, all into ONE graph, evaluated once."""
    dy.renew_cg(autobatching=autobatching)
    roots = [encode(w, config.hidden_dim, config.tracker_dim, toks, [op for op in ops if op != 0])
             for toks, ops in zip(tokens, transitions)]  # PAD (0) steps do nothing: drop them
    return dy.concatenate_cols(roots).npvalue().T.astype(np.float32)  # [B, H]


def main() -> float:
    config, params, tokens, transitions, expected = lesson_inputs()
    _collection, w = load(params)  # keep the collection alive while its parameters are used
    encodings = encode_all(w, config, tokens, transitions, autobatching=True)
    unbatched = encode_all(w, config, tokens, transitions, autobatching=False)
    print(f"autobatching on vs off: largest difference {np.max(np.abs(encodings - unbatched)):.1e}")
    return report("dynet, one sentence at a time", encodings, expected)


if __name__ == "__main__":
    main()
