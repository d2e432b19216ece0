# %% [markdown]
# # Exercise 4, answered: torch.compile on the list model
# Run: `.venv/bin/python -m lessons.answers.compile_lists`.
#
# Dynamo, torch.compile's front end, records `encode`'s tensor operations into a graph until
# Python reads a tensor's value (`int(transitions[s, t])`): a graph break. The break is inside
# a loop, so the whole function runs as plain Python, and only the small functions it calls
# are compiled, each specialised on the Python values and shapes it saw: other trees, a
# recompile.
#
# What the time goes to. The first pass over the two batches compiles every specialisation
# (a graph per new shape or Python value): `backend="eager"` only records each graph,
# Inductor also writes and builds code for it, seconds a graph. After that nothing compiles
# (the answer counts the graphs), and a pass is run time alone: hundreds of calls of small
# compiled functions on tensors of a few rows, each call checking its guards and launching
# its kernels. On tensors this small that overhead is the run time, which is why neither
# backend beats plain PyTorch here, and Inductor's generated code can be the slowest.

# %%
import contextlib
import logging.handlers
import re
import statistics
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from lessons.pytorch_lists import encode
from lessons.setup import lesson_batches, report


@contextlib.contextmanager
def fresh_dynamo(**logs):
    """Dynamo reset, set_logs(**logs); its log (breaks, recompiles, warnings) kept, not printed."""
    torch._logging.set_logs(**logs)  # first: it gives the loggers new handlers
    logger = logging.getLogger("torch._dynamo")
    log = logging.handlers.BufferingHandler(capacity=10**9)
    theirs, logger.handlers = logger.handlers, [log]  # its own handlers print
    torch._dynamo.reset()
    try:
        yield log.buffer
    finally:
        logger.handlers = theirs
        torch._logging.set_logs()
        torch._dynamo.reset()


def inputs():  # encode's arguments, and the reference: the premises, then the hypotheses
    config, params, batches = lesson_batches()
    w = {name: torch.tensor(value) for name, value in params.items()}
    H, D = config.hidden_dim, config.tracker_dim
    return [((w, torch.as_tensor(t), torch.as_tensor(ts), H, D), e) for t, ts, e in batches]


def compile_two_batches(backend="eager", dynamic=None):
    """Compile encode, run it on the two batches. Per batch: (encodings, reference encodings,
    and the messages logged: graph breaks, recompiles, and functions that reached the recompile
    limit and run uncompiled from then on)."""
    kinds = ("Graph break in user code", "Recompiling", "torch._dynamo hit config.recompile_limit")
    with fresh_dynamo(graph_breaks=True, recompiles=True) as records:
        fn, seen = torch.compile(encode, backend=backend, dynamic=dynamic), []
        for args, expected in inputs():
            before, out = len(records), fn(*args).detach().numpy()
            new = [record.getMessage() for record in records[before:]]
            seen.append((out, expected, *([m for m in new if m.startswith(k)] for k in kinds)))
    return seen


def explain():  # torch._dynamo.explain on the first batch: how many graphs and breaks
    with fresh_dynamo():
        return torch._dynamo.explain(encode)(*inputs()[0][0])


# %% [markdown]
# The timing: per backend, the first pass (compiling included), then rounds in which a plain
# pass and a compiled pass alternate, so both see the same machine; the medians are kept, and
# the graphs Dynamo compiled in each part are counted.

# %%
def passes(backend, rounds=5) -> dict:
    """Seconds for the two batches, compiled with `backend`: the first pass, the median later
    pass, the median plain pass of the same rounds, and the graphs compiled in each part."""
    batches = [args for args, _ in inputs()]

    def timed(fn) -> float:
        start = time.perf_counter()
        for args in batches:
            fn(*args)
        return time.perf_counter() - start
    with fresh_dynamo():
        compiled = torch.compile(encode, backend=backend)
        graphs = counters["stats"]["unique_graphs"]
        first = timed(compiled)
        compiled_first = counters["stats"]["unique_graphs"] - graphs
        later, plain = [], []
        for _ in range(rounds):
            plain.append(timed(encode))
            later.append(timed(compiled))
        compiled_later = counters["stats"]["unique_graphs"] - graphs - compiled_first
    return {"first": first, "later": statistics.median(later), "plain": statistics.median(plain),
            "graphs_first": compiled_first, "graphs_later": compiled_later}


def worth_waiting(times) -> tuple:  # the backend that pays back soonest, and after how many passes
    pays = {}
    for backend, t in times.items():
        if t["later"] < 0.9 * t["plain"]:  # at least 10 % faster a pass, once compiled
            pays[backend] = (t["first"] - t["plain"]) / (t["plain"] - t["later"])
    best = min(pays, key=pays.get, default=None)  # None: no backend runs 10 % faster
    return best, pays.get(best)


# %%
def main():
    found, seen = explain(), compile_two_batches()  # the premises, then the hypotheses
    for k, (out, expected, breaks, again, limits) in enumerate(seen, 1):
        report(f"batch {k}, compiled", out, expected, ("premises", "hypotheses")[k - 1])
        print(f"batch {k}: {len(breaks)} graph breaks, {len(again)} recompiles, "
              f"{len(limits)} hit the recompile limit")
    where = [re.search(r"pytorch_lists\.py:(\d+)", m).group(1) for m in seen[0][2]]
    why = re.search(r"encountered:\s+(.+)", seen[0][2][0]).group(1)
    print(f"the first break, pytorch_lists.py:{where[0]}:")
    print(f"    {why}")
    print(f"torch._dynamo.explain says {found.graph_count} graphs and "
          f"{found.graph_break_count} breaks; the log names {len(where)} breaks:")
    print("    explain counts every graph compiled (each small function, once per specialisation)")
    print("    and calls each after the first a break; the log names each place a trace broke,")
    print(f"    lines {', '.join(where)} of pytorch_lists.py")
    times = {backend: passes(backend) for backend in ("eager", "inductor")}
    for backend, t in times.items():
        compiling = t["first"] - t["later"]  # the first pass, less what a pass takes to run
        print(f'backend="{backend}": the first pass {t["first"]:.2f} s, compiling '
              f'{t["graphs_first"]} graphs: {compiling / t["graphs_first"]:.2f} s each, about;')
        print(f'    then {t["later"]:.3f} s a pass, compiling {t["graphs_later"]} graphs, '
              f'against {t["plain"]:.3f} s a plain pass in the same rounds')
    best, after = worth_waiting(times)
    print("worth waiting for: " + (f'backend="{best}", after {after:,.0f} passes' if best else
                                   "neither: compiled, a pass runs no 10 % faster than plain"))
    return found, seen, times


# %%
if __name__ == "__main__":
    main()
