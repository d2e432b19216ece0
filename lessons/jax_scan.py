# %% [markdown]
# # SPINN compiled by JAX: one jax.jit program, one lax.scan over the T steps
# jit traces `encode` with stand-ins that have a shape but no value (exercise 2 tries a Python `if` on one): SHIFT,
# REDUCE and PAD are masks (jnp.where), every sentence computes the tracker AND a REDUCE at every step, and PAD
# changes nothing. The thin stack: `items` holds every item ever made (rows 0..N-1 the leaves, row N+t written at
# step t); a sentence keeps only row numbers (its stack of pointers), a depth sp and a buffer pointer bp, all in the
# scan's carry. The scan runs all T steps, even past a sentence's end (exercise 3 asks why). What it prints: jit
# traces and compiles once per new shape, not for a batch of a shape it has seen. Run: `python -m lessons.jax_scan`.

# %%
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lessons.setup import lesson_batches, report

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


# %%
def main() -> float:
    _config, params, batches = lesson_batches()  # the premises and the hypotheses of 8 pairs,
    batches.append(tuple(array[:4] for array in batches[0]))  # and 4 premises: another shape
    events = []  # what JAX reports as it traces and compiles encode: (event, seconds)

    def listen(event, seconds, fun_name="", **_):
        if fun_name in ("encode", "jit(encode)"):
            events.append((event.rsplit("/", 1)[-1], seconds))
    jax.clear_caches()  # nothing compiled before: this run's compiles are its own
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        jitted, encodings = jax.jit(encode), []
        for (tokens, transitions, _), what in zip(batches, ("the premises", "the hypotheses", "4 premises")):
            start, before = time.perf_counter(), len(events)
            encodings.append(np.asarray(jitted(params, tokens, transitions)))  # numpy in: a program per shape
            seconds = time.perf_counter() - start
            traces = [s for event, s in events[before:] if event == "jaxpr_trace_duration"]
            compiles = [s for event, s in events[before:] if event == "backend_compile_duration"]
            print(f"{what} {list(transitions.shape)}: traced {len(traces)}, compiled {len(compiles)} "
                  f"({sum(compiles):.2f} s); the call took {seconds:.3f} s")
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return report("jax, lax.scan under jit", np.concatenate(encodings), np.concatenate([b[2] for b in batches]),
                  f"sentences in {len(batches)} batches")


if __name__ == "__main__":
    main()
