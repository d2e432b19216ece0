# %% [markdown]
# # SPINN as ONE static TensorFlow graph: a tf.while_loop over the steps
# Run: `.venv/bin/python -m lessons.tensorflow_while`.
#
# The trees are data (a transitions tensor), not code.
# The loop body is traced once, with unknown S, N and T, and no Python `if` looks at a transition.
# SHIFT and REDUCE are masks: every sentence runs the tracker and a REDUCE at every step,
# and tf.where keeps what its op asks for (PAD keeps nothing).
#
# The stack is row numbers into `thin`, a tf.TensorArray of every item ever made:
# rows 0..N-1 the leaves, row N+t step t's REDUCE, a last row of zeros for "no such item".
# A sentence keeps its pointers, a depth sp and a buffer pointer bp.
# What it prints: one trace serves batches of two shapes; the gradient is a second loop.

# %%
import os
import re
from collections import Counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN's start-up notice, past any log level
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lessons.setup import (lesson_batches, reference_gradients, report,  # noqa: E402
                           report_gradients)

PAD, SHIFT, REDUCE = 0, 1, 2
# Two int32 matrices of any size: one trace serves every S, N and T
SIGNATURE = [tf.TensorSpec([None, None], tf.int32)] * 2


# %% [markdown]
# The encoder. `w` holds the weights (arrays, or tf.Variables when a gradient is wanted).

# %%
def build_encoder(weights):  # one tf.function, traced once, for batches of any shape
    w = {name: value if isinstance(value, tf.Variable) else tf.constant(value)
         for name, value in weights.items()}
    H, D = w["reduce.right.kernel"].shape[0], w["tracker.kernel_hidden"].shape[0]
    sig = tf.sigmoid

    @tf.function(autograph=False, input_signature=SIGNATURE)  # exercise 9 takes it away
    def encode(tokens, transitions):  # [S, N], [S, T] -> [S, H]
        S, N = tf.unstack(tf.shape(tokens))  # sizes read while the graph runs
        T = tf.shape(transitions)[1]
        R = N + T + 1  # rows of the thin stack; row R - 1 stays zeros
        leaves = tf.gather(w["embed.embedding"], tokens) @ w["projection.kernel"]
        leaves += w["projection.bias"]  # [S, N, 2H]
        # Item (row r, sentence s) at address r * S + s: the leaves first, the zero row last.
        thin = tf.TensorArray(tf.float32, size=R * S, element_shape=[2 * H], clear_after_read=False)
        by_row = tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * S, 2 * H])
        thin = thin.scatter(tf.range(N * S), by_row)
        thin = thin.scatter((R - 1) * S + tf.range(S), tf.zeros([S, 2 * H]))
        n_leaves = tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1)  # [S]
        slots = tf.range(N + 1)[None, :]  # stack slots: at most N items, plus one free

        def body(t, thin, pointers, sp, bp, h_t, c_t):
            op = transitions[:, t]  # [S]: a tensor, never looked at in Python
            is_shift, is_reduce = tf.equal(op, SHIFT), tf.equal(op, REDUCE)
            active = tf.not_equal(op, PAD)[:, None]
            # Read buffer front, stack top, second from top (the zero row where there is none).
            top = tf.gather(pointers, tf.maximum(sp - 1, 0), batch_dims=1)
            below = tf.gather(pointers, tf.maximum(sp - 2, 0), batch_dims=1)
            front_row = tf.where(bp < n_leaves, bp, R - 1)
            top_row = tf.where(sp >= 1, top, R - 1)
            below_row = tf.where(sp >= 2, below, R - 1)
            rows = tf.stack([front_row, top_row, below_row], axis=1)  # [S, 3]
            addresses = tf.reshape(rows * S + tf.range(S)[:, None], [-1])
            items = tf.reshape(thin.gather(addresses), [S, 3, 2 * H])
            right, left = items[:, 1], items[:, 2]  # REDUCE pops the top (right), then the left

            # Tracker, for every sentence; its new state is kept where op is not PAD.
            z = tf.reshape(items[:, :, :H], [S, 3 * H]) @ w["tracker.kernel_input"]
            z += h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"]
            i, f, g, o = tf.split(z, 4, axis=1)
            c_new = sig(f) * c_t + sig(i) * tf.tanh(g)
            c_t = tf.where(active, c_new, c_t)
            h_t = tf.where(active, sig(o) * tf.tanh(c_new), h_t)

            # REDUCE, for every sentence; the result is row N + t, which only a REDUCE points at.
            z = left[:, :H] @ w["reduce.left.kernel"] + w["reduce.left.bias"]
            z += right[:, :H] @ w["reduce.right.kernel"] + h_t @ w["reduce.track.kernel"]
            a, i, f1, f2, o = tf.split(z, 5, axis=1)
            c = tf.tanh(a) * sig(i) + sig(f1) * left[:, H:] + sig(f2) * right[:, H:]
            new_item = tf.concat([sig(o) * tf.tanh(c), c], axis=1)  # [S, 2H]
            thin = thin.scatter((N + t) * S + tf.range(S), new_item)  # row N + t, written once

            # SHIFT pushes leaf bp at slot sp; REDUCE row N + t at slot sp - 2; PAD nothing.
            slot = sp - 2 * tf.cast(is_reduce, tf.int32)
            target = tf.where(is_shift, bp, N + t)
            written = tf.equal(slots, slot[:, None]) & active
            pointers = tf.where(written, target[:, None], pointers)
            sp += tf.cast(is_shift, tf.int32) - tf.cast(is_reduce, tf.int32)
            bp += tf.cast(is_shift, tf.int32)
            return t + 1, thin, pointers, sp, bp, h_t, c_t

        sp = bp = tf.zeros([S], tf.int32)  # each stack's depth, each buffer's front
        h_t = c_t = tf.zeros([S, D])  # the tracker's state
        pointers = tf.zeros([S, N + 1], tf.int32)
        start = (tf.constant(0), thin, pointers, sp, bp, h_t, c_t)
        _, thin, pointers, *_ = tf.while_loop(lambda t, *_: t < T, body, start)
        root = thin.gather(pointers[:, 0] * S + tf.range(S))  # the one item left, in slot 0
        return root[:, :H]
    return encode


# %% [markdown]
# What a graph holds: its ops, and the functions it calls (a loop's body is one). A
# `tf.function` keeps a graph per trace, its concrete function for one input signature.

# %%
def graph_of(function, tokens, transitions):  # the graph traced for these inputs' signature
    concrete = function.get_concrete_function(tf.constant(tokens), tf.constant(transitions))
    return concrete.graph.as_graph_def()


def while_loops(graph) -> dict[str, int]:  # each while loop the graph runs: where, body's ops
    library = {f.signature.name: f for f in graph.library.function}
    todo, seen = [("the graph", graph.node)], set()
    loops = {}
    while todo:  # from the graph's own ops into each function it calls, and each loop's body
        where, nodes = todo.pop(0)
        for node in nodes:
            if node.op in ("While", "StatelessWhile"):
                loops[where] = len(library[node.attr["body"].func.name].node_def)
            for key in ("f", "body"):  # a function call; a loop's body
                name = node.attr[key].func.name if key in node.attr else ""
                if name and name not in seen:
                    seen.add(name)
                    short = re.sub(r"^_+(inference_+)?|_\d+", "", name)  # TF's name, no numbers
                    todo.append((short, library[name].node_def))
    return loops


# %% [markdown]
# **Predict, then run.** Three batches: the premises [8, 67], the hypotheses [8, 67], and four
# premises [4, 67]. How many times will `tf.function` trace `encode`?

# %%
def encode_batches(encode, batches) -> float:  # every batch through encode; count its traces
    encodings = [encode(tf.constant(tokens), tf.constant(transitions)).numpy()
                 for tokens, transitions, _ in batches]
    shapes = ", ".join(str(list(b[1].shape)) for b in batches)
    traces = encode.experimental_get_tracing_count()
    graph = graph_of(encode, *batches[0][:2])  # the graph that ran the first batch
    (body,) = while_loops(graph).values()
    print(f"{len(batches)} batches of transitions {shapes}:")
    print(f"    tf.function traced encode {traces} time{'s' if traces != 1 else ''}; "
          f"the first batch's graph has {len(graph.node)} ops")
    print(f"    and {body} more in the loop's body, which runs T times")
    return report("tensorflow, tf.while_loop", np.concatenate(encodings),
                  np.concatenate([b[2] for b in batches]), f"sentences in {len(batches)} batches")


def three_batches():  # the premises and the hypotheses of 8 pairs, then 4 premises
    config, params, batches = lesson_batches()
    batches.append(tuple(array[:4] for array in batches[0]))  # another shape
    return config, params, batches


# %% active="ipynb"
# config, params, batches = three_batches()
# encode = build_encoder(params)
# err = encode_batches(encode, batches)

# %% [markdown]
# The graph itself: the op types of `encode`'s concrete function, then those of its loop's body.
#
# **Predict, then run.** The premises take 67 steps. How many copies of the step's ops does
# the graph hold?

# %%
def show_graph(encode, tokens, transitions) -> None:
    graph = graph_of(encode, tokens, transitions)
    ops = Counter(node.op for node in graph.node)
    print("encode's graph:", ", ".join(f"{op} {k}" for op, k in ops.most_common()))
    for function in graph.library.function:
        kinds = Counter(node.op for node in function.node_def)
        print(f"\nfunction {function.signature.name} ({len(function.node_def)} ops):")
        print(", ".join(f"{op} {k}" for op, k in kinds.most_common()))


# %% active="ipynb"
# show_graph(encode, *batches[0][:2])

# %% [markdown]
# **The backward pass.** `tf.GradientTape` inside a `tf.function` differentiates the graph,
# and the gradient of a while loop is another while loop: it runs the body's derivative T
# times, from the last step back, reading what the forward loop kept. TensorFlow rewrites the
# forward function for it (`forward_encode`): its loop now also keeps each step's values for
# the backward one (`backward_encode`), so its body has more ops than `encode`'s own.
#
# **Predict, then run.** How many while loops will the gradient's graph hold?

# %%
def build_gradients(params):  # a tf.function: the gradients of the sum of the encodings
    weights = {name: tf.Variable(value) for name, value in params.items()}
    encode = build_encoder(weights)

    @tf.function(autograph=False, input_signature=SIGNATURE)
    def gradients(tokens, transitions):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encode(tokens, transitions))
        grads = tape.gradient(loss, weights)  # the embedding's: rows, as tf.IndexedSlices
        return {name: tf.convert_to_tensor(g) for name, g in grads.items() if g is not None}
    return gradients


def backward(config, params, batch) -> float:  # differentiate, count the loops, check
    tokens, transitions, _ = batch
    gradients = build_gradients(params)
    grads = gradients(tf.constant(tokens), tf.constant(transitions))
    loops = while_loops(graph_of(gradients, tokens, transitions))
    print(f"the gradient's graph runs {len(loops)} while loops:")
    for where, ops in loops.items():
        print(f"    one in {where}, its body {ops} ops")
    expected = reference_gradients(params, config, tokens, transitions)
    return report_gradients("tensorflow, GradientTape", {k: v.numpy() for k, v in grads.items()},
                            expected)


# %% active="ipynb"
# err = backward(config, params, batches[0])

# %% active="py"
def main() -> float:
    config, params, batches = three_batches()
    err = encode_batches(build_encoder(params), batches)
    return max(err, backward(config, params, batches[0]))


if __name__ == "__main__":
    main()
