"""Exercise 4, answered: torch.compile on the list model, its graph breaks and its recompiles.

torch.compile's front end (Dynamo) reads the Python bytecode of `encode` and
records the tensor operations it meets into a graph, until it meets what a
graph cannot hold: `int(transitions[b, t])` is a tensor's value read by
Python (Tensor.item()), so the graph breaks there. A break inside a Python
loop makes Dynamo give up on the whole function, which runs as plain Python
(eagerly); it still compiles the small functions `encode` calls (the list
comprehensions, tracker_step, reduce_step), each specialised on the Python
values it saw: a sentence index, a sentence's length, how many sentences
reduce at a step. Other values, other trees: a recompile.

The backend is "eager": Dynamo captures the graphs and Python runs them as
they are, with no code generated. The breaks and the recompiles are Dynamo's,
the same under every backend; Inductor would also generate and compile C++ for
each small graph, which takes far longer on a 2-core machine and changes no
count here (python -m lessons.today times both).

Run from the repository root:  .venv/bin/python -m lessons.answers.compile_lists
"""

import logging

import torch
import torch._dynamo

from lessons.pytorch_lists import encode
from lessons.setup import lesson_batches, report


class Log(logging.Handler):
    """What torch._logging says about graph breaks and recompiles, kept."""

    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def take(self, prefix: str) -> list[str]:
        found = [m for m in self.messages if m.startswith(prefix)]
        self.messages = [m for m in self.messages if not m.startswith(prefix)]
        return found


def compile_two_batches(backend="eager", dynamic=None):
    """Compile encode, run it on two batches of other trees (the premises, then the hypotheses, of the same
    pairs: the same shapes). Per batch: (encodings, reference encodings, and the messages logged: graph breaks,
    recompiles, functions that reached the recompile limit and run uncompiled from then on)."""
    config, params, batches = lesson_batches()
    w = {name: torch.tensor(value) for name, value in params.items()}
    torch._dynamo.reset()
    log = Log()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(log)
    torch._logging.set_logs(graph_breaks=True, recompiles=True)
    try:
        fn = torch.compile(encode, backend=backend, dynamic=dynamic)
        seen = []
        for tokens, transitions, expected in batches:
            out = fn(w, torch.as_tensor(tokens).long(), torch.as_tensor(transitions), config.hidden_dim,
                     config.tracker_dim)
            seen.append((out.detach().numpy(), expected, log.take("Graph break in user code"), log.take("Recompiling"),
                         log.take("torch._dynamo hit config.recompile_limit")))
    finally:
        torch._logging.set_logs()
        logger.removeHandler(log)
        torch._dynamo.reset()
    return seen


def explain():
    """torch._dynamo.explain on the first batch: how many graphs and breaks Dynamo counts."""
    config, params, ((tokens, transitions, _), _) = lesson_batches()
    w = {name: torch.tensor(value) for name, value in params.items()}
    torch._dynamo.reset()
    found = torch._dynamo.explain(encode)(w, torch.as_tensor(tokens).long(), torch.as_tensor(transitions),
                                          config.hidden_dim, config.tracker_dim)
    torch._dynamo.reset()
    return found


def main():
    found = explain()
    print(f"torch._dynamo.explain: {found.graph_count} graphs, {found.graph_break_count} graph breaks")
    seen = compile_two_batches()  # the premises, then the hypotheses
    for k, (out, expected, breaks, recompiles, limits) in enumerate(seen, 1):
        report(f"batch {k}, compiled", out, expected, ("premises", "hypotheses")[k - 1])
        print(f"batch {k}: {len(breaks)} graph breaks, {len(recompiles)} recompiles, "
              f"recompile limit reached {len(limits)} times")
    breaks = seen[0][2]
    print("the first break:", " ".join(breaks[0].split("\n")[:4]) if breaks else "none")
    return found, seen


if __name__ == "__main__":
    main()
