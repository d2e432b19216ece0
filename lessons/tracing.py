# %% [markdown]
# # Tracing and retracing: what tf.function and jax.jit run, and when they run it again
# Run: `.venv/bin/python -m lessons.tracing`.
#
# Both static frameworks build their graph by running your Python function once with
# stand-ins: tensors that have a shape and a dtype but no value (tracing). The graph is cached
# under that shape and dtype; a call with another one runs the Python function again
# (retracing). Everything Python does while tracing happens once per trace, not once per call.
#
# One small function serves every example: the leaves of a batch, each word's embedding
# projected to an item [h; c]. Each example counts its traces with a Python counter in the
# function's body (Python runs only while tracing) and prints the count.
# The calls: batches of premises of five shapes [S, N]; one shape comes twice.

# %%
import contextlib
import io
import logging.handlers
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN's start-up notice, past any log level
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lessons.setup import lesson_inputs  # noqa: E402


def batches(tokens) -> list[np.ndarray]:  # the premises' tokens [S, N], cut to five shapes
    return [tokens, tokens[:4], tokens[:2], tokens, tokens[:4, :10]]


def shapes(calls) -> str:
    return ", ".join(str(list(tokens.shape)) for tokens in calls)


def times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


# %% [markdown]
# ## TensorFlow: `tf.function`
# A `tf.function` traces once per input signature: the shapes and dtypes of its tensors.
# Without one given, the signature is each call's own shapes. (TensorFlow also logs a warning
# once a function has retraced often in its last calls; the lesson keeps it off the screen.)
#
# **Predict, then run.** Five calls, four distinct shapes: how many traces?

# %%
def tf_leaves(params, **options):  # a tf.function making the leaves, and its trace counter
    embedding = tf.constant(params["embed.embedding"])
    kernel, bias = tf.constant(params["projection.kernel"]), tf.constant(params["projection.bias"])
    traces = []

    @tf.function(**options)
    def leaves(tokens):  # [S, N] -> [S, N, 2H]
        traces.append(tokens.shape)  # Python: runs while tracing, never when the graph runs
        return tf.gather(embedding, tokens) @ kernel + bias
    return leaves, traces


def tf_traces(params, calls, name, **options) -> int:  # call it on every batch; count traces
    leaves, traces = tf_leaves(params, **options)
    logger, caught = logging.getLogger("tensorflow"), logging.handlers.BufferingHandler(100)
    theirs, logger.handlers = logger.handlers, [caught]  # its retracing warning: not printed
    try:
        for tokens in calls:
            leaves(tf.constant(tokens))
    finally:
        logger.handlers = theirs
    assert len(traces) == leaves.experimental_get_tracing_count()  # TensorFlow's own count
    seen = ", ".join(str(shape) for shape in traces)
    print(f"tf.function, {name}: traced {times(len(traces))} for {len(calls)} calls: {seen}")
    return len(traces)


# %% active="ipynb"
# config, params, tokens, transitions, expected = lesson_inputs()
# calls = batches(tokens)
# print("the calls:", shapes(calls))
# traces = tf_traces(params, calls, "plain")

# %% [markdown]
# An `input_signature` says which shapes to accept; `None` leaves a size open. One trace
# then serves every batch, as in `tensorflow_while` (an op that needs a size reads it from
# the tensor, `tf.shape`, while the graph runs).
#
# **Predict, then run.** With `TensorSpec([None, None], tf.int32)`: how many traces?

# %% active="ipynb"
# traces = tf_traces(params, calls, "input_signature [None, None]",
#                    input_signature=[tf.TensorSpec([None, None], tf.int32)])

# %% [markdown]
# `reduce_retracing=True` lets TensorFlow widen the signature itself: when a call's shape
# misses every trace, it traces again with the differing sizes left open (`None`).
#
# **Predict, then run.** Which shapes will the traces have?

# %% active="ipynb"
# traces = tf_traces(params, calls, "reduce_retracing=True", reduce_retracing=True)

# %% [markdown]
# ## JAX: `jax.jit`
# `jax.jit` traces once per shape and dtype of its array arguments (and per value of its
# static arguments), then compiles what it traced. A Python `print` in the function runs
# while tracing, and shows the tracer; `jax.debug.print` is put into the program, and runs
# on every call.
#
# **Predict, then run.** Five calls, four distinct shapes: how many times does each print run?

# %%
def jax_leaves(p, tokens):  # [S, N] -> [S, N, 2H]
    print(f"  Python's print: tokens is {tokens}")
    jax.debug.print("  jax.debug.print: tokens[0, 0] is {t}", t=tokens[0, 0])
    return p["embed.embedding"][tokens] @ p["projection.kernel"] + p["projection.bias"]


def jax_prints(params, calls) -> tuple[int, int]:  # how often each print ran
    with contextlib.redirect_stdout(io.StringIO()) as out:  # kept, counted, shown below
        jitted = jax.jit(jax_leaves)
        for tokens in calls:
            jitted(params, tokens).block_until_ready()
        jax.effects_barrier()  # every jax.debug.print has run
    lines = out.getvalue().splitlines()
    python = [line for line in lines if "Python's print" in line]
    debug = [line for line in lines if "jax.debug.print" in line]
    print(f"jax.jit: for {len(calls)} calls, print ran {times(len(python))}, "
          f"jax.debug.print {times(len(debug))}; the first print said:")
    print(python[0][:100])
    return len(python), len(debug)


# %% active="ipynb"
# prints = jax_prints(params, calls)

# %% [markdown]
# While tracing, a value is a tracer: Python's `if` needs a bool, and a tracer has none.
# A shape is known while tracing, so an `if` on a shape is fine; one on a value is refused.
#
# **Predict, then run.** Which of the two functions below can jit trace?

# %%
def if_on_a_shape(tokens):  # the row count is part of the trace: a Python int
    return tokens * 2 if tokens.shape[0] > 4 else tokens


def if_on_a_value(tokens):  # the first word is a value: unknown while tracing
    return tokens * 2 if tokens[0, 0] > 4 else tokens


def jax_ifs(calls) -> dict[str, str]:  # what jit says of each, and how often it traced
    said = {}
    for function in (if_on_a_shape, if_on_a_value):
        traces = []

        def counted(tokens, function=function):
            traces.append(tokens.shape)  # Python: runs while tracing
            return function(tokens)
        jitted = jax.jit(counted)
        try:
            for tokens in calls:
                jitted(tokens)
            said[function.__name__] = "runs"
        except jax.errors.TracerBoolConversionError as err:
            said[function.__name__] = type(err).__name__
        print(f"jax.jit, {function.__name__}: {said[function.__name__]}, "
              f"after tracing {times(len(traces))}")
    return said


# %% active="ipynb"
# said = jax_ifs(calls)

# %% [markdown]
# `static_argnums` makes an argument part of the trace's key: jit sees its Python value, so
# an `if` on it is fine, and each new value traces (and compiles) again. It must be hashable:
# a flag, a size, a tuple, never an array.
#
# **Predict, then run.** Calls with the flag True, False, True, on one shape: how many traces?

# %%
def jax_static(params, tokens) -> int:  # a Python flag, static: one trace per value
    traces = []

    def leaves(p, tokens, with_bias):
        traces.append(with_bias)  # Python: runs while tracing
        out = p["embed.embedding"][tokens] @ p["projection.kernel"]
        if with_bias:  # a Python if on a static argument: a Python bool
            out = out + p["projection.bias"]
        return out
    jitted = jax.jit(leaves, static_argnums=2)
    flags = (True, False, True)
    for flag in flags:
        jitted(params, tokens, flag)
    print(f"jax.jit, static_argnums=2, the flag {', '.join(map(str, flags))}: "
          f"traced {times(len(traces))}")
    return len(traces)


# %% active="ipynb"
# traces = jax_static(params, tokens)

# %% active="py"
def main() -> dict:
    _config, params, tokens, _transitions, _expected = lesson_inputs()
    calls = batches(tokens)
    print("the calls:", shapes(calls))
    signature = [tf.TensorSpec([None, None], tf.int32)]
    return {"plain": tf_traces(params, calls, "plain"),
            "signature": tf_traces(params, calls, "input_signature [None, None]",
                                   input_signature=signature),
            "reduce": tf_traces(params, calls, "reduce_retracing=True", reduce_retracing=True),
            "prints": jax_prints(params, calls),
            "ifs": jax_ifs(calls),
            "static": jax_static(params, tokens)}


if __name__ == "__main__":
    main()
