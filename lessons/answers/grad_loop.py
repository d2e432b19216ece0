# %% [markdown]
# # Exercise 3, answered: jax.grad through a loop whose length is data
# Run: `.venv/bin/python -m lessons.answers.grad_loop`.
#
# SPINN's loop could stop at a batch's last real step, a length read from the data.
# The same question on x**n, n an array: lax.while_loop (or fori_loop with a traced bound,
# which becomes one) runs n steps, and reverse mode refuses it: it would have to keep every
# step's values for the backward pass without knowing how many there will be.
# Forward mode (jax.jvp, jacfwd) is accepted: it carries the derivative along as it goes.
#
# The answers: a fixed trip count (fori_loop with Python ints, which becomes a scan), or, when
# n varies, a scan of a bound's length that masks the steps past n: what the lessons do with
# PAD. One jitted gradient of the masked scan serves every n, traced and compiled once: n is
# an array, so its value is not part of the trace. Each answer is checked against
# d(x**n)/dx = n x**(n-1).

# %%
import jax
import jax.numpy as jnp
from jax import lax

from lessons.jax_scan import Events

MAX_STEPS = 8  # the bound the masked scan runs to (T in the lessons)


def power_while(x, n):
    """x**n by a loop that stops when its counter reaches n."""
    def body(carry):
        return carry[0] + 1, carry[1] * x
    return lax.while_loop(lambda carry: carry[0] < n, body, (0, jnp.ones_like(x)))[1]


def power_fori_traced(x, n):  # n traced (under jit): a while_loop
    return lax.fori_loop(0, n, lambda i, y: y * x, jnp.ones_like(x))


def power_fori_static(x):  # Python ints: a scan of 4 steps
    return lax.fori_loop(0, 4, lambda i, y: y * x, jnp.ones_like(x))


def power_masked_scan(x, n):
    """MAX_STEPS steps always; a step past n keeps y as it is (a PAD step)."""
    def step(y, t):
        return jnp.where(t < n, y * x, y), None
    return lax.scan(step, jnp.ones_like(x), jnp.arange(MAX_STEPS))[0]


def refusal(fn, *args):
    """The error jax.grad raises for fn, or None if it differentiated."""
    try:
        jax.grad(fn)(*args)
    except ValueError as err:
        return err
    return None


# %% [markdown]
# The masked scan's gradient for every n from 1 to 8: one `jax.jit(jax.grad(...))`, made once,
# called eight times. JAX's own events count its traces and compiles.

# %%
def masked_for_every_n(x) -> tuple[dict, int, int]:  # ({n: gradient}, traces, compiles)
    gradient = jax.jit(jax.grad(power_masked_scan))  # made once, outside the loop
    with Events("power_masked_scan") as events:
        grads = {n: float(gradient(x, jnp.asarray(n))) for n in range(1, MAX_STEPS + 1)}
    traces = len(events.since(0, "jaxpr_trace_duration"))
    compiles = len(events.since(0, "backend_compile_duration"))
    return grads, traces, compiles


# %%
def main():
    x, n = 2.0, jnp.asarray(4)
    analytic = float(n * x ** (n - 1))  # 32
    found = {"while_loop": refusal(power_while, x, n),
             "fori_loop, n traced by jit": refusal(jax.jit(power_fori_traced), x, n)}
    for name, err in found.items():
        print(f"jax.grad through {name}: {type(err).__name__}:")
        print(f"    {str(err).splitlines()[0][:96]}")
    forward = float(jax.jacfwd(power_while)(x, n))
    static = float(jax.grad(power_fori_static)(x))
    masked, traces, compiles = masked_for_every_n(x)
    print(f"d(x**4)/dx at x = 2 is {analytic}: jacfwd through while_loop {forward},")
    print(f"    grad of fori_loop(0, 4) {static}, grad of the masked scan {masked[4]}")
    right = [masked[k] == k * x ** (k - 1) for k in masked]
    print(f"the masked scan's gradient for n = 1..{MAX_STEPS}: {traces} trace, {compiles} "
          f"compile, right for every n: {all(right)}")
    return found, forward, static, masked, (traces, compiles)


# %%
if __name__ == "__main__":
    main()
