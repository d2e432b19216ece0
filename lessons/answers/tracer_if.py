# %% [markdown]
# # Exercise 2, answered: a Python `if` inside `lax.scan`, with jit and without
# Run: `.venv/bin/python -m lessons.answers.tracer_if`.
#
# jit calls the function once with tracers: stand-ins that carry a shape and a dtype but no
# value. `op == SHIFT` on a tracer is another tracer, and Python's `if` asks it for a bool it
# does not have: JAX raises TracerBoolConversionError (a ConcretizationTypeError).
#
# Taking jit away does not help inside `jax_scan`: `lax.scan` traces its step function once,
# to make the one body it runs T times, whoever calls it. So the step's op is a tracer with or
# without jit. A plain function outside any scan does run without jit: then op is an array.
#
# What takes the `if`'s place: a mask, `jnp.where(op == SHIFT, ...)`, which computes both
# sides and selects (what `jax_scan` does); or `lax.cond`, which puts the branch into the
# program. Under vmap (one op per sentence) lax.cond becomes a select too: both branches run.

# %%
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lessons.setup import lesson_inputs

PAD, SHIFT, REDUCE = 0, 1, 2


def python_if(op):
    """The learner's first try: Python decides, on the op's value."""
    if op == SHIFT:
        return 1
    return 2


def step_with_if(count, op):  # a scan step that asks Python: SHIFTs counted, one op a step
    return (count + 1 if op == SHIFT else count), None


def refused(fn, *args):
    """The ConcretizationTypeError that calling fn raises, or None if it ran."""
    try:
        fn(*args)
    except jax.errors.ConcretizationTypeError as err:
        return err
    return None


def with_where(ops):
    """The mask answer, for every sentence's op at once: [S] -> [S]."""
    return jnp.where(ops == SHIFT, 1, 2)


def with_cond(op):
    """The branch answer, for one op: the branch is in the program, chosen when it runs."""
    return lax.cond(op == SHIFT, lambda: 1, lambda: 2)


# %%
def main():
    _config, _params, _tokens, transitions, _expected = lesson_inputs()
    ops = transitions[0]  # the first sentence's transitions, one a step
    print(f"python_if(op) on an array: {python_if(ops[0])}: a concrete value answers the `if`")
    errors = {"under jit": refused(jax.jit(python_if), ops[0]),
              "in a lax.scan step, without jit": refused(lax.scan, step_with_if, 0, ops),
              "in a lax.scan step, under jit": refused(jax.jit(lax.scan, static_argnums=0),
                                                       step_with_if, 0, ops)}
    for where, err in errors.items():
        print(f"the `if` {where}: {type(err).__name__ if err else 'runs'}")
    print(f"    {str(errors['under jit']).splitlines()[0][:96]}")
    t = next(t for t in range(transitions.shape[1]) if len(set(transitions[:, t])) > 1)
    steps = transitions[:, t]  # the first step at which the sentences do not all do the same
    where = np.asarray(jax.jit(with_where)(steps))
    conds = np.asarray(jax.jit(jax.vmap(with_cond))(steps))
    expected = np.array([python_if(op) for op in steps])
    print(f"step {t}, ops {steps}: jnp.where {where}, vmap(lax.cond) {conds},")
    print(f"    Python one op at a time {expected}")
    jaxpr = str(jax.make_jaxpr(jax.vmap(with_cond))(steps))
    traced = "select_n" if "select_n" in jaxpr else "cond"
    print(f"vmap(lax.cond) traced to {traced}: both branches run per sentence")
    return errors, where, conds, expected


# %%
if __name__ == "__main__":
    main()
