# %% [markdown]
# # Exercise 4, answered: torch.compile on the list model (`python -m lessons.answers.compile_lists`)
# Dynamo, torch.compile's front end, records `encode`'s tensor operations into a graph until Python reads a tensor's
# value (`int(transitions[b, t])`): a break. Inside a loop, the whole function then runs as plain Python, and only the
# small functions it calls are compiled, each specialised on the Python values it saw: other trees, a recompile.

# %%
import contextlib
import logging.handlers
import re
import time

import torch
import torch._dynamo

from lessons.pytorch_lists import encode
from lessons.setup import lesson_batches, report


@contextlib.contextmanager
def fresh_dynamo(**logs):
    """Dynamo reset, set_logs(**logs); its log (breaks, recompiles, warnings) kept in a list, not printed."""
    torch._logging.set_logs(**logs)  # first: it gives the loggers new handlers
    logger, log = logging.getLogger("torch._dynamo"), logging.handlers.BufferingHandler(capacity=10**9)
    theirs, logger.handlers = logger.handlers, [log]  # its own handlers print
    torch._dynamo.reset()
    try:
        yield log.buffer
    finally:
        logger.handlers = theirs
        torch._logging.set_logs()
        torch._dynamo.reset()


def inputs():  # encode's arguments and reference encodings, the premises, then the hypotheses: other trees
    config, params, batches = lesson_batches()
    w = {name: torch.tensor(value) for name, value in params.items()}
    return [((w, torch.as_tensor(t), torch.as_tensor(ts), config.hidden_dim, config.tracker_dim), e)
            for t, ts, e in batches]


def compile_two_batches(backend="eager", dynamic=None):
    """Compile encode, run it on the two batches. Per batch: (encodings, reference encodings, and the messages
    logged: graph breaks, recompiles, functions that reached the recompile limit and run uncompiled from then on)."""
    kinds = ("Graph break in user code", "Recompiling", "torch._dynamo hit config.recompile_limit")
    with fresh_dynamo(graph_breaks=True, recompiles=True) as records:
        fn, seen = torch.compile(encode, backend=backend, dynamic=dynamic), []
        for args, expected in inputs():
            before, out = len(records), fn(*args).detach().numpy()
            new = [record.getMessage() for record in records[before:]]
            seen.append((out, expected, *([m for m in new if m.startswith(kind)] for kind in kinds)))
    return seen


def explain():  # torch._dynamo.explain on the first batch: how many graphs and breaks Dynamo counts
    with fresh_dynamo():
        return torch._dynamo.explain(encode)(*inputs()[0][0])


def passes(backend=None, rounds=10) -> tuple[float, float]:  # seconds for the two batches: the first time, the best
    fn, batches, seconds = encode if backend is None else torch.compile(encode, backend=backend), inputs(), []
    with fresh_dynamo():
        for _ in range(1 + rounds):
            start = time.perf_counter()
            for args, _ in batches:
                fn(*args)
            seconds.append(time.perf_counter() - start)
    return seconds[0], min(seconds[1:])


def worth_waiting(plain, times) -> tuple:  # the backend that pays back soonest, and after how many batches
    pays = {b: 2 * (first - plain) / (plain - later) for b, (first, later) in times.items() if later < 0.9 * plain}
    best = min(pays, key=pays.get, default=None)  # None when no backend runs the batches 10 % faster
    return best, pays.get(best)


# %%
def main():
    found, seen = explain(), compile_two_batches()  # the premises, then the hypotheses
    for k, (out, expected, breaks, again, limits) in enumerate(seen, 1):
        report(f"batch {k}, compiled", out, expected, ("premises", "hypotheses")[k - 1])
        print(f"batch {k}: {len(breaks)} graph breaks, {len(again)} recompiles, {len(limits)} hit the recompile limit")
    where = [re.search(r"pytorch_lists\.py:(\d+)", m).group(1) for m in seen[0][2]]  # the line of each break logged
    print(f"the first break, pytorch_lists.py:{where[0]}:", re.search(r"encountered:\s+(.+)", seen[0][2][0]).group(1))
    print(f"why torch._dynamo.explain says {found.graph_count} graphs and {found.graph_break_count} breaks where the "
          f"log says {len(where)}: explain counts every graph compiled (each small function, once per specialisation) "
          f"and calls each after the first a break; the log names each place a trace broke, lines {', '.join(where)} "
          "of pytorch_lists.py")
    plain, times = passes()[1], {backend: passes(backend) for backend in ("eager", "inductor")}
    print(f"the two batches take {plain:.3f} s uncompiled; compiled, " + "; ".join(
        f'backend="{b}": {first:.2f} s the first time, {later:.3f} s after' for b, (first, later) in times.items()))
    best, batches = worth_waiting(plain, times)
    print("worth waiting for: " + (f'backend="{best}", after {batches:,.0f} batches of trees it has compiled for'
                                   if best else "neither: compiled, the batches run no 10 % faster than uncompiled"))
    return found, seen, plain, times


if __name__ == "__main__":
    main()
