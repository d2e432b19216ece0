# %% [markdown]
# # Exercise 2, answered: `if op == SHIFT:` under jax.jit, the error, and two ways around it
# jit calls the function once with tracers: stand-ins that carry a shape and a dtype but no value. `op == SHIFT` on a
# tracer is another tracer, and Python's `if` asks it for a bool it does not have: JAX raises
# TracerBoolConversionError (a ConcretizationTypeError). Without jit the same function runs, because then op is a
# concrete array. The answers: a mask, jnp.where(op == SHIFT, ...), which computes both sides and selects; or
# lax.cond, which puts the branch into the program. Under vmap (one op per sentence) lax.cond becomes a select too:
# both branches run for every sentence.
# Run from the repository root: `.venv/bin/python -m lessons.answers.tracer_if`.

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


def meet_the_error(op):
    """The exception jit raises for python_if, or None if it ran."""
    try:
        jax.jit(python_if)(op)
    except jax.errors.ConcretizationTypeError as err:
        return err
    return None


def with_where(ops):
    """The mask answer, for every sentence's op at once: [B] -> [B]."""
    return jnp.where(ops == SHIFT, 1, 2)


def with_cond(op):
    """The branch answer, for one op: the branch is in the program, chosen when it runs."""
    return lax.cond(op == SHIFT, lambda: 1, lambda: 2)


# %%
def main():
    _config, _params, _tokens, transitions, _expected = lesson_inputs()
    ops = transitions[:, 0]  # every sentence's first step (a SHIFT)
    print(f"without jit, python_if(ops[0]) = {python_if(ops[0])}: a concrete value answers the `if`")
    err = meet_the_error(ops[0])
    print(f"under jit: {type(err).__name__} (a {jax.errors.ConcretizationTypeError.__name__}): "
          f"{str(err).splitlines()[0]}")
    t = next(t for t in range(transitions.shape[1]) if len(set(transitions[:, t])) > 1)
    steps = transitions[:, t]  # the first step at which the sentences do not all do the same
    where = np.asarray(jax.jit(with_where)(steps))
    conds = np.asarray(jax.jit(jax.vmap(with_cond))(steps))
    expected = np.array([python_if(op) for op in steps])
    print(f"step {t}, ops {steps}: jnp.where {where}, vmap(lax.cond) {conds}, Python one op at a time {expected}")
    jaxpr = str(jax.make_jaxpr(jax.vmap(with_cond))(steps))
    print(f"vmap(lax.cond) traced to {'select_n' if 'select_n' in jaxpr else 'cond'}: both branches run per sentence")
    return err, where, conds, expected


if __name__ == "__main__":
    main()
