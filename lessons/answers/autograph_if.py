# %% [markdown]
# # Exercise 5, answered: `if op == SHIFT` on a tensor in tf.function, AutoGraph on and off
# Run: `.venv/bin/python -m lessons.answers.autograph_if`.
#
# The encoder is written for one sentence, as dynet_loop is: `for op in transitions:` and
# `if op == SHIFT:`, on tensors that have no value while tf.function traces.
# AutoGraph (tf.function's default) rewrites the source first: the `for` becomes a
# tf.while_loop, the `if` a tf.cond, both in the graph (the stack is one tensor: a Python list
# cannot live in a graph loop).
# With autograph=False, as in tensorflow_while and the suite, nothing is rewritten, and the
# `if` asks a tensor for a Python bool: refused.

# %%
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN's start-up notice, past any log level
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lessons.setup import lesson_inputs, report  # noqa: E402

PAD, SHIFT, REDUCE = 0, 1, 2


def choose(op, shifted, reduced):  # the SHIFT/REDUCE choice as a learner first writes it
    if op == SHIFT:
        return shifted
    return reduced


def build_encoder(params, autograph=True):
    w = {name: tf.constant(value) for name, value in params.items()}
    H, D = w["reduce.right.kernel"].shape[0], w["tracker.kernel_hidden"].shape[0]
    sig = tf.sigmoid

    @tf.function(autograph=autograph, input_signature=[tf.TensorSpec([None], tf.int32)] * 2)
    def encode(tokens, transitions):  # one sentence: its words [n], its 2n - 1 steps -> [H]
        leaves = tf.gather(w["embed.embedding"], tokens) @ w["projection.kernel"]
        leaves += w["projection.bias"]
        n = tf.shape(tokens)[0]
        stack = tf.zeros([n + 1, 2 * H])  # slot k holds the item at depth k
        sp, bp = tf.constant(0), tf.constant(0)
        h_t, c_t = tf.zeros([1, D]), tf.zeros([1, D])
        for op in transitions:  # AutoGraph: a tf.while_loop
            front = tf.gather(leaves, tf.minimum(bp, n - 1)) * tf.cast(bp < n, tf.float32)
            top = tf.gather(stack, tf.maximum(sp - 1, 0)) * tf.cast(sp >= 1, tf.float32)
            below = tf.gather(stack, tf.maximum(sp - 2, 0)) * tf.cast(sp >= 2, tf.float32)
            z = (tf.concat([front[:H], top[:H], below[:H]], 0)[None] @ w["tracker.kernel_input"]
                 + h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"])
            i, f, g, o = tf.split(z, 4, axis=1)
            c_t = sig(f) * c_t + sig(i) * tf.tanh(g)
            h_t = sig(o) * tf.tanh(c_t)
            if op == SHIFT:  # AutoGraph: a tf.cond; both branches set stack, sp and bp
                stack = tf.tensor_scatter_nd_update(stack, [[sp]], front[None])
                sp, bp = sp + 1, bp + 1
            else:  # REDUCE: compose the top two, write the result where the left one was
                z = (below[None, :H] @ w["reduce.left.kernel"] + w["reduce.left.bias"]
                     + top[None, :H] @ w["reduce.right.kernel"] + h_t @ w["reduce.track.kernel"])
                a, i, f1, f2, o = tf.split(z, 5, axis=1)
                c = tf.tanh(a) * sig(i) + sig(f1) * below[None, H:] + sig(f2) * top[None, H:]
                item = tf.concat([sig(o) * tf.tanh(c), c], 1)
                stack = tf.tensor_scatter_nd_update(stack, [[sp - 2]], item)
                sp = sp - 1
        return stack[0, :H]

    return encode


def encode_all(encode, tokens, transitions):  # one sentence at a time, PAD dropped; one trace
    real = [ops[ops != PAD] for ops in transitions]
    return np.stack([encode(toks[: (len(ops) + 1) // 2], ops).numpy()
                     for toks, ops in zip(tokens, real)])


def refusal(autograph=False):  # the error tracing `choose` on a tensor raises, or None
    try:
        traced = tf.function(choose, autograph=autograph)
        traced.get_concrete_function(tf.TensorSpec([], tf.int32), [0.0], [1.0])
    except tf.errors.OperatorNotAllowedInGraphError as err:
        return err
    return None


def graph_ops(encode):  # the control-flow ops of the traced graph, in its functions too
    graph = encode.get_concrete_function().graph.as_graph_def()
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    return sorted(ops & {"While", "StatelessWhile", "If", "StatelessIf"})


# %%
def main():
    _config, params, tokens, transitions, expected = lesson_inputs()
    encode = build_encoder(params)
    encodings = encode_all(encode, tokens, transitions)
    report("exercise 5, AutoGraph's tf.while_loop and tf.cond", encodings, expected)
    print(f"the traced graph's control flow: {', '.join(graph_ops(encode))};")
    print("AutoGraph's rewrite (tf.autograph.to_code), the `for` and the `if`:")
    code = [line.strip() for line in tf.autograph.to_code(encode.python_function).splitlines()]
    rewritten = [line for line in code if "ag__.for_stmt" in line or "ag__.if_stmt" in line]
    print("\n".join(f"    {line[:90]} ..." for line in rewritten))
    refused = refusal()
    print(f"`if op == SHIFT` with autograph=False: {type(refused).__name__}:")
    print(f"    {str(refused).split('. ')[0][:96]}")
    return encodings, expected, refused


# %%
if __name__ == "__main__":
    main()
