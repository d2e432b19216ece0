# %% [markdown]
# # SPINN compiled by JAX: one jax.jit program, one lax.scan over the T steps
# Run: `.venv/bin/python -m lessons.jax_scan`.
#
# jit traces `encode` with stand-ins that have a shape but no value (the tracing lesson shows
# what that forbids). SHIFT, REDUCE and PAD are masks (jnp.where): every sentence computes the
# tracker AND a REDUCE at every step, and PAD changes nothing.
#
# The thin stack: `items` holds every item ever made (rows 0..N-1 the leaves, row N+t written
# at step t). A sentence keeps only row numbers (its stack of pointers), a depth sp and a buffer
# pointer bp, all in the scan's carry. The scan runs all T steps, even past a sentence's end
# (exercise 3 asks why).
# What it prints: jit traces and compiles once per new shape; the gradient is a second scan.

# %%
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lessons.setup import lesson_batches, reference_gradients, report, report_gradients

PAD, SHIFT, REDUCE = 0, 1, 2


# %% [markdown]
# The encoder: one `step` for every sentence at once, and `lax.scan` to run it T times.

# %%
def encode(p, tokens, transitions):  # tokens [S, N], transitions [S, T] -> [S, H]
    (S, N), T = tokens.shape, transitions.shape[1]
    H, D = p["projection.kernel"].shape[1] // 2, p["tracker.kernel_hidden"].shape[0]
    leaves = p["embed.embedding"][tokens] @ p["projection.kernel"] + p["projection.bias"]
    rows = jnp.arange(S)
    n = jnp.sum(transitions == SHIFT, axis=1)  # words per sentence
    sig = jax.nn.sigmoid

    def step(carry, xs):
        items, stack, sp, bp, h_t, c_t = carry
        op, t = xs  # op [S]: every sentence's transition at step t
        is_shift = op == SHIFT  # the masks: [S] booleans
        is_reduce = op == REDUCE
        active = op != PAD

        def from_top(k):  # the item k places from the top, [S, 2H] (zeros when missing)
            row = stack[rows, jnp.maximum(sp - k, 0)]  # follow the pointer
            return jnp.where((sp >= k)[:, None], items[rows, row], 0.0)
        top, below = from_top(1), from_top(2)
        front = jnp.where((bp < n)[:, None], items[rows, jnp.minimum(bp, N - 1)], 0.0)
        # The tracker, for every sentence; PAD keeps the old state.
        x = jnp.concatenate([front[:, :H], top[:, :H], below[:, :H]], axis=1)
        z = x @ p["tracker.kernel_input"] + h_t @ p["tracker.kernel_hidden"] + p["tracker.bias"]
        i, f, g, o = jnp.split(z, 4, axis=1)
        c_new = sig(f) * c_t + sig(i) * jnp.tanh(g)
        h_new = sig(o) * jnp.tanh(c_new)
        h_t = jnp.where(active[:, None], h_new, h_t)
        c_t = jnp.where(active[:, None], c_new, c_t)
        # REDUCE, for every sentence (left = below, right = top); kept only where op is REDUCE.
        z = below[:, :H] @ p["reduce.left.kernel"] + p["reduce.left.bias"]
        z += top[:, :H] @ p["reduce.right.kernel"] + h_t @ p["reduce.track.kernel"]
        a, i, f1, f2, o = jnp.split(z, 5, axis=1)
        c = jnp.tanh(a) * sig(i) + sig(f1) * below[:, H:] + sig(f2) * top[:, H:]
        items = items.at[:, N + t].set(jnp.concatenate([sig(o) * jnp.tanh(c), c], axis=1))
        # Push a pointer: SHIFT pushes the front leaf's row bp, REDUCE pops two, pushes row N+t.
        slot = sp - 2 * is_reduce
        pushed = jnp.where(active, jnp.where(is_shift, bp, N + t), stack[rows, slot])
        stack = stack.at[rows, slot].set(pushed)
        return (items, stack, sp + is_shift - is_reduce, bp + is_shift, h_t, c_t), None

    items = jnp.concatenate([leaves, jnp.zeros((S, T, 2 * H), leaves.dtype)], axis=1)
    zero = jnp.zeros(S, jnp.int32)  # sp and bp
    state = jnp.zeros((S, D), leaves.dtype)  # h_t and c_t
    carry = (items, jnp.zeros((S, N + 1), jnp.int32), zero, zero, state, state)
    steps = (transitions.T, jnp.arange(T, dtype=jnp.int32))  # scan's xs: step t's ops, and t
    (items, stack, *_), _ = lax.scan(step, carry, steps)
    return items[rows, stack[:, 0], :H]


# %% [markdown]
# JAX reports each trace and each compile through `jax.monitoring`: a listener counts them.

# %%
class Events:  # what JAX reports while it runs a function, by name: (event, seconds)
    def __init__(self, name="encode"):
        self.name, self.seen = name, []

    def __call__(self, event, seconds, fun_name="", **_):
        if self.name in fun_name:
            self.seen.append((event.rsplit("/", 1)[-1], seconds))

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *_):
        jax.monitoring.unregister_event_duration_listener(self)

    def since(self, k, event) -> list[float]:  # the seconds of each such event after the k-th
        return [seconds for name, seconds in self.seen[k:] if name == event]


def three_batches():  # the premises and the hypotheses of 8 pairs, then 4 premises
    config, params, batches = lesson_batches()
    batches.append(tuple(array[:4] for array in batches[0]))  # another shape
    return config, params, batches


# %% [markdown]
# **Predict, then run.** The premises [8, 67], then the hypotheses [8, 67], then four premises
# [4, 67]: for which calls will jit trace and compile?

# %%
def encode_batches(params, batches) -> float:  # one jitted encode; per call, traces and compiles
    jax.clear_caches()  # nothing compiled before: this run's compiles are its own
    jitted, encodings = jax.jit(encode), []
    names = ("the premises", "the hypotheses", "4 premises")
    with Events() as events:
        for (tokens, transitions, _), what in zip(batches, names):
            start, before = time.perf_counter(), len(events.seen)
            encodings.append(np.asarray(jitted(params, tokens, transitions)))
            seconds = time.perf_counter() - start
            traces = events.since(before, "jaxpr_trace_duration")
            compiles = events.since(before, "backend_compile_duration")
            print(f"{what} {list(transitions.shape)}: traced {len(traces)}, "
                  f"compiled {len(compiles)} ({sum(compiles):.2f} s); "
                  f"the call took {seconds:.3f} s")
    return report("jax, lax.scan under jit", np.concatenate(encodings),
                  np.concatenate([b[2] for b in batches]), f"sentences in {len(batches)} batches")


# %% active="ipynb"
# config, params, batches = three_batches()
# err = encode_batches(params, batches)

# %% [markdown]
# The graph itself: the jaxpr jit compiles, for one sentence of two words, one equation a line
# (`outputs = primitive inputs`, most parameters left out). JAX prints the scan's body first,
# `let jaxpr = { lambda ... }`: the step above as JAX recorded it (and small helpers, such as
# `_where`); then the program, `{ lambda ... }`, whose `scan` equation runs that body.
#
# **Predict, then run.** The sentence takes 3 steps: how many times will the step's equations
# appear in the jaxpr?

# %%
def bodies(eqn) -> list:  # the jaxprs inside an equation: a scan's body, a cond's branches
    found = []
    for value in eqn.params.values():
        for sub in value if isinstance(value, tuple) else (value,):
            sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
            found += [sub] if hasattr(sub, "eqns") else []
    return found


def show_jaxpr(jaxpr) -> None:  # JAX's own print of it, an equation's parameters left out
    lines, inside = [], False
    for line in jaxpr.pretty_print(use_color=False).splitlines():
        if inside:  # a parameter of the equation above, one a line, up to "] its inputs"
            if line.strip().startswith("]"):
                lines[-1] += line.strip()[1:]
                inside = False
            continue
        inside = line.endswith("[")
        lines.append(line[:-1] if inside else line)
    print("\n".join(line[:100] for line in lines))


def tiny_jaxpr(params, batch):  # the first premise's first two words: SHIFT, SHIFT, REDUCE
    tokens, transitions = batch[0][:1, :2], np.array([[SHIFT, SHIFT, REDUCE]], np.int32)
    return jax.make_jaxpr(encode)(params, tokens, transitions)


# %% active="ipynb"
# show_jaxpr(tiny_jaxpr(params, batches[0]))

# %% [markdown]
# **The backward pass.** `jax.grad` linearises the program and transposes it: the transpose of
# a scan is another scan, which runs the steps backwards (`reverse=True`) over what the forward
# scan kept. It is all in the gradient's jaxpr, before anything runs.
#
# **Predict, then run.** How many scans will the gradient's jaxpr hold, and in which direction?

# %%
def scans(jaxpr) -> list[bool]:  # the `reverse` flag of every scan in a jaxpr, nested ones too
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            found.append(bool(eqn.params["reverse"]))
        for sub in bodies(eqn):
            found += scans(sub)
    return found


def loss(p, tokens, transitions):  # the sum of every number of the encodings
    return encode(p, tokens, transitions).sum()


def backward(config, params, batch) -> float:  # differentiate, count the scans, check
    tokens, transitions, _ = batch
    gradient = jax.grad(loss)
    found = scans(jax.make_jaxpr(gradient)(params, tokens, transitions).jaxpr)
    print(f"the gradient's jaxpr holds {len(found)} scans: {found.count(False)} forward, "
          f"{found.count(True)} reversed (reverse=True, the transpose)")
    grads = jax.jit(gradient)(params, tokens, transitions)
    expected = reference_gradients(params, config, tokens, transitions)
    return report_gradients("jax, jax.grad", {k: np.asarray(v) for k, v in grads.items()},
                            expected)


# %% active="ipynb"
# err = backward(config, params, batches[0])

# %% active="py"
def main() -> float:
    config, params, batches = three_batches()
    err = encode_batches(params, batches)
    return max(err, backward(config, params, batches[0]))


if __name__ == "__main__":
    main()
