"""SPINN compiled by JAX: one jax.jit program, one lax.scan over the T steps.

Notice: jit traces `encode` once, with abstract shapes, so no Python `if`
can look at a value (exercise 2): SHIFT, REDUCE and PAD are masks
(jnp.where), every sentence computes the tracker AND a REDUCE at every step,
and PAD changes nothing. The "thin stack": `items` holds every item ever made
(rows 0..N-1 the leaves, row N+t written at step t); a sentence keeps only
row numbers (its stack of pointers), a depth sp and a buffer pointer bp, all
in the scan's carry. The scan runs all T steps, even past a sentence's end:
jax.grad refuses a loop whose length depends on data (exercise 3).

Run it from the repository root:  .venv/bin/python -m lessons.jax_scan
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lessons.setup import lesson_inputs, report

PAD, SHIFT, REDUCE = 0, 1, 2


def encode(p, tokens, transitions):
    """tokens [B, N], transitions [B, T] -> the h of each stack's last item, [B, H]."""
    (B, N), T = tokens.shape, transitions.shape[1]
    H, D = p["projection.kernel"].shape[1] // 2, p["tracker.kernel_hidden"].shape[0]
    leaves = p["embed.embedding"][tokens] @ p["projection.kernel"] + p["projection.bias"]  # [B, N, 2H]
    rows, n = jnp.arange(B), jnp.sum(transitions == SHIFT, axis=1)  # n: words per sentence

    def step(carry, xs):
        (items, stack, sp, bp, h_t, c_t), (op, t) = carry, xs  # op [B]: every sentence's transition
        is_shift, is_reduce, active = op == SHIFT, op == REDUCE, op != PAD

        def from_top(k):  # the item k places from the top (zeros when missing), [B, 2H]: follow the pointer
            return jnp.where((sp >= k)[:, None], items[rows, stack[rows, jnp.maximum(sp - k, 0)]], 0.0)
        top, below = from_top(1), from_top(2)
        front = jnp.where((bp < n)[:, None], items[rows, jnp.minimum(bp, N - 1)], 0.0)
        # The tracker, for every sentence; PAD keeps the old state.
        z = (jnp.concatenate([front[:, :H], top[:, :H], below[:, :H]], axis=1) @ p["tracker.kernel_input"]
             + h_t @ p["tracker.kernel_hidden"] + p["tracker.bias"])
        i, f, g, o = jnp.split(z, 4, axis=1)
        c_new = jax.nn.sigmoid(f) * c_t + jax.nn.sigmoid(i) * jnp.tanh(g)
        h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
        h_t, c_t = jnp.where(active[:, None], h_new, h_t), jnp.where(active[:, None], c_new, c_t)
        # REDUCE, for every sentence (left = below, right = top); kept only where op is REDUCE.
        z = (below[:, :H] @ p["reduce.left.kernel"] + p["reduce.left.bias"] + top[:, :H] @ p["reduce.right.kernel"]
             + h_t @ p["reduce.track.kernel"])
        a, i, f1, f2, o = jnp.split(z, 5, axis=1)
        c = jnp.tanh(a) * jax.nn.sigmoid(i) + jax.nn.sigmoid(f1) * below[:, H:] + jax.nn.sigmoid(f2) * top[:, H:]
        items = items.at[:, N + t].set(jnp.concatenate([jax.nn.sigmoid(o) * jnp.tanh(c), c], axis=1))
        # Push a pointer: SHIFT pushes the front leaf's row bp, REDUCE pops two and pushes row N+t.
        slot = sp - 2 * is_reduce
        stack = stack.at[rows, slot].set(jnp.where(active, jnp.where(is_shift, bp, N + t), stack[rows, slot]))
        return (items, stack, sp + is_shift - is_reduce, bp + is_shift, h_t, c_t), None

    items = jnp.concatenate([leaves, jnp.zeros((B, T, 2 * H), leaves.dtype)], axis=1)  # [B, N+T, 2H]
    zero, state = jnp.zeros(B, jnp.int32), jnp.zeros((B, D), leaves.dtype)
    carry = (items, jnp.zeros((B, N + 1), jnp.int32), zero, zero, state, state)
    (items, stack, *_), _ = lax.scan(step, carry, (transitions.T, jnp.arange(T, dtype=jnp.int32)))
    return items[rows, stack[:, 0], :H]


def exercise_python_if(transitions):
    """Exercise 2: branch on the op with Python. Answer: a mask, jnp.where(op == SHIFT, ...)."""
    def step_kind(op):
        if op == SHIFT:  # op is a tracer under jit: it has a shape, not a value
            return 1
        return 2
    try:
        jax.jit(step_kind)(transitions[0, 0])
    except jax.errors.ConcretizationTypeError as e:
        answer = jax.jit(lambda op: jnp.where(op == SHIFT, 1, 2))(transitions[0])
        print(f"exercise 2, `if op == SHIFT:` under jit: {type(e).__name__}: {str(e).splitlines()[0]}"
              f" answer, jnp.where: {np.asarray(answer)[:5]}")


def exercise_grad_while_loop():
    """Exercise 3: jax.grad through lax.while_loop. Answer: lax.scan with a fixed length T."""
    def loop(x):  # x**4, by a loop whose stopping test reads the carry
        return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * x), (0, 1.0))[1]
    try:
        jax.grad(loop)(2.0)
    except ValueError as e:
        answer = jax.grad(lambda x: lax.scan(lambda y, _: (y * x, None), 1.0, None, length=4)[0])(2.0)
        print(f"exercise 3, jax.grad through while_loop: {str(e).splitlines()[0]}"
              f" answer, lax.scan of 4 steps: d(x**4)/dx at 2 = {float(answer)}")


def main() -> float:
    config, params, tokens, transitions, expected = lesson_inputs()
    exercise_python_if(transitions)
    exercise_grad_while_loop()
    encodings = jax.jit(encode)(params, tokens, transitions)  # numpy in; the program is traced once
    return report("jax, lax.scan under jit", np.asarray(encodings), expected)


if __name__ == "__main__":
    main()
