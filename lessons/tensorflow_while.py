# %% [markdown]
# # SPINN as ONE static TensorFlow graph: a tf.while_loop over the steps
# The trees are data (a transitions tensor), not code: the loop body is traced once, with unknown B, N and T, and no
# Python `if` looks at a transition. SHIFT and REDUCE are masks: every sentence runs the tracker and a REDUCE at every
# step, and tf.where keeps what its op asks for (PAD keeps nothing). The stack is row numbers into `thin`, a
# tf.TensorArray of every item ever made (rows 0..N-1 the leaves, row N+t step t's REDUCE, a last row of zeros for
# "no such item"), written in place; a sentence keeps its pointers, a depth sp and a buffer pointer bp. What it
# prints: one trace serves batches of two shapes. Run: `.venv/bin/python -m lessons.tensorflow_while`.

# %%
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN's start-up notice, past any log level
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lessons.setup import lesson_batches, report  # noqa: E402

PAD, SHIFT, REDUCE = 0, 1, 2


def build_encoder(params):  # one tf.function, traced once, for batches of any shape
    w = {name: tf.constant(value) for name, value in params.items()}
    H, D, sig = w["reduce.right.kernel"].shape[0], w["tracker.kernel_hidden"].shape[0], tf.sigmoid

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
    def encode(tokens, transitions):  # [B, N], [B, T] -> [B, H]
        B, N, T = tf.shape(tokens)[0], tf.shape(tokens)[1], tf.shape(transitions)[1]
        R = N + T + 1  # rows of the thin stack; row R - 1 stays zeros
        leaves = tf.gather(w["embed.embedding"], tokens) @ w["projection.kernel"] + w["projection.bias"]
        # Item (row r, sentence s) at address r * B + s: the leaves first, the zero row last.
        thin = tf.TensorArray(tf.float32, size=R * B, element_shape=[2 * H], clear_after_read=False)
        thin = thin.scatter(tf.range(N * B), tf.reshape(tf.transpose(leaves, [1, 0, 2]), [N * B, 2 * H]))
        thin = thin.scatter((R - 1) * B + tf.range(B), tf.zeros([B, 2 * H]))
        n_leaves = tf.reduce_sum(tf.cast(tf.equal(transitions, SHIFT), tf.int32), axis=1)  # [B]
        slots = tf.range(N + 1)[None, :]  # stack slots: at most N items, plus one free

        def body(t, thin, pointers, sp, bp, h_t, c_t):
            op = transitions[:, t]  # [B]: a tensor, never looked at in Python
            is_shift, is_reduce = tf.equal(op, SHIFT), tf.equal(op, REDUCE)
            active = tf.not_equal(op, PAD)[:, None]
            # Read buffer front, stack top, second from top (the zero row where there is no such item).
            top = tf.gather(pointers, tf.maximum(sp - 1, 0), batch_dims=1)
            below = tf.gather(pointers, tf.maximum(sp - 2, 0), batch_dims=1)
            rows = tf.stack([tf.where(bp < n_leaves, bp, R - 1), tf.where(sp >= 1, top, R - 1),
                             tf.where(sp >= 2, below, R - 1)], axis=1)  # [B, 3]
            items = tf.reshape(thin.gather(tf.reshape(rows * B + tf.range(B)[:, None], [-1])), [B, 3, 2 * H])
            right, left = items[:, 1], items[:, 2]  # REDUCE pops the top (right), then the left

            # Tracker, for every sentence; its new state is kept where op is not PAD.
            z = (tf.reshape(items[:, :, :H], [B, 3 * H]) @ w["tracker.kernel_input"]
                 + h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"])
            i, f, g, o = tf.split(z, 4, axis=1)
            c_new = sig(f) * c_t + sig(i) * tf.tanh(g)
            c_t = tf.where(active, c_new, c_t)
            h_t = tf.where(active, sig(o) * tf.tanh(c_new), h_t)

            # REDUCE, for every sentence; the result is row N + t, which only a REDUCE points at.
            z = (left[:, :H] @ w["reduce.left.kernel"] + w["reduce.left.bias"]
                 + right[:, :H] @ w["reduce.right.kernel"] + h_t @ w["reduce.track.kernel"])
            a, i, f1, f2, o = tf.split(z, 5, axis=1)
            c = tf.tanh(a) * sig(i) + sig(f1) * left[:, H:] + sig(f2) * right[:, H:]
            new_item = tf.concat([sig(o) * tf.tanh(c), c], axis=1)  # [B, 2H]
            thin = thin.scatter((N + t) * B + tf.range(B), new_item)  # row N + t, written once, in place

            # SHIFT pushes leaf bp at slot sp; REDUCE row N + t at slot sp - 2 (left's); PAD nothing.
            slot = sp - 2 * tf.cast(is_reduce, tf.int32)
            target = tf.where(is_shift, bp, N + t)
            pointers = tf.where(tf.equal(slots, slot[:, None]) & active, target[:, None], pointers)
            sp += tf.cast(is_shift, tf.int32) - tf.cast(is_reduce, tf.int32)
            bp += tf.cast(is_shift, tf.int32)
            return t + 1, thin, pointers, sp, bp, h_t, c_t

        zeros_b, zeros_d = tf.zeros([B], tf.int32), tf.zeros([B, D])  # the start: sp, bp; the tracker's h_t, c_t
        start = (tf.constant(0), thin, tf.zeros([B, N + 1], tf.int32), zeros_b, zeros_b, zeros_d, zeros_d)
        _, thin, pointers, *_ = tf.while_loop(lambda t, *_: t < T, body, start)
        root = thin.gather(pointers[:, 0] * B + tf.range(B))  # the one item left, in slot 0
        return root[:, :H]
    return encode


# %%
def main() -> float:
    _config, params, batches = lesson_batches()  # the premises and the hypotheses of 8 pairs, then 4 premises:
    batches.append(tuple(array[:4] for array in batches[0]))  # another shape
    encode = build_encoder(params)
    encodings = [encode(tf.constant(tokens), tf.constant(transitions)).numpy() for tokens, transitions, _ in batches]
    graph = encode.get_concrete_function().graph.as_graph_def()  # the one graph; its loop's body is a function of it
    body = max(graph.library.function, key=lambda function: len(function.node_def))
    print(f"{len(batches)} batches of transitions {', '.join(str(list(b[1].shape)) for b in batches)}: tf.function "
          f"traced encode {encode.experimental_get_tracing_count()} time, into one graph of {len(graph.node)} ops and "
          f"{len(body.node_def)} more in the loop's body, which runs T times")
    return report("tensorflow, tf.while_loop", np.concatenate(encodings), np.concatenate([b[2] for b in batches]),
                  f"sentences in {len(batches)} batches")


if __name__ == "__main__":
    main()
