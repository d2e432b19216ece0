# %% [markdown]
# # SPINN define-by-run in PyTorch, as Bradbury's 2017 SPINN did it
# Run: `.venv/bin/python -m lessons.pytorch_lists`.
#
# Stacks and buffers are Python lists.
# Each sentence's `if` reads its transition, so Python decides every step.
# Each batch therefore records its own graph, the shape of its trees.
# What it prints: what Python read, the size of each graph, and a backward pass over one.

# %%
import torch

from lessons.setup import lesson_batches, reference_gradients, report, report_gradients

PAD, SHIFT, REDUCE = 0, 1, 2


# %% [markdown]
# The two cells of SPINN, each for K sentences at once (one row per sentence).

# %%
def tracker_step(w, front, top, second, h_t, c_t):  # LSTM over the parser state: [K, H], [K, D]
    x = torch.cat([front, top, second], 1)
    z = x @ w["tracker.kernel_input"] + h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"]
    i, f, g, o = z.chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_t + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def reduce_step(w, left_h, left_c, right_h, right_c, track_h):  # TreeLSTM of K pairs: [K, H]
    z = left_h @ w["reduce.left.kernel"] + w["reduce.left.bias"]
    z = z + right_h @ w["reduce.right.kernel"] + track_h @ w["reduce.track.kernel"]
    a, i, f1, f2, o = z.chunk(5, dim=1)
    c = torch.tanh(a) * torch.sigmoid(i)
    c = c + torch.sigmoid(f1) * left_c + torch.sigmoid(f2) * right_c
    return torch.sigmoid(o) * torch.tanh(c), c


# %% [markdown]
# The encoder: a Python loop over the steps, a Python `if` per sentence.
# Batching is by hand: one tracker call for every sentence at a step,
# and one TreeLSTM call for that step's REDUCEs.

# %%
def encode(w, tokens, transitions, H, D):  # tokens [S, N], transitions [S, T] -> [S, H]
    S, T = transitions.shape
    leaves = w["embed.embedding"][tokens] @ w["projection.kernel"] + w["projection.bias"]
    buffers = []
    for s in range(S):
        n = int((transitions[s] == SHIFT).sum())  # Python reads the word count: n words
        # The buffer, reversed: pop() takes the first word. A leaf is (h, c).
        buffers.append([(leaves[s, k, :H], leaves[s, k, H:]) for k in reversed(range(n))])
    stacks = [[] for _ in range(S)]
    tracker = [(torch.zeros(D), torch.zeros(D)) for _ in range(S)]  # each sentence's (h_t, c_t)
    zeros = torch.zeros(H)

    def h_at(items, depth):  # h of items[-depth], zeros(H) when there is no such item
        return items[-depth][0] if len(items) >= depth else zeros

    for t in range(T):  # a plain Python loop over the transition steps
        ops = [int(transitions[s, t]) for s in range(S)]  # Python reads each sentence's op
        tracked = [s for s in range(S) if ops[s] != PAD]  # PAD: nothing, not even the tracker
        if not tracked:
            continue
        h_t, c_t = tracker_step(  # one call for the rows of every tracked sentence
            w,
            torch.stack([h_at(buffers[s], 1) for s in tracked]),
            torch.stack([h_at(stacks[s], 1) for s in tracked]),
            torch.stack([h_at(stacks[s], 2) for s in tracked]),
            torch.stack([tracker[s][0] for s in tracked]),
            torch.stack([tracker[s][1] for s in tracked]))
        for row, s in enumerate(tracked):
            tracker[s] = (h_t[row], c_t[row])
        lefts, rights = [], []  # this step's REDUCEs: the items they pop,
        reducing = []  # and the sentences they are
        for s in range(S):
            if ops[s] == SHIFT:  # Python decides, sentence by sentence
                stacks[s].append(buffers[s].pop())
            elif ops[s] == REDUCE:  # pop right, then left; composed below, with the others
                rights.append(stacks[s].pop())
                lefts.append(stacks[s].pop())
                reducing.append(s)
        if reducing:  # all of this step's REDUCEs: one batched TreeLSTM call
            h, c = reduce_step(
                w,
                torch.stack([left[0] for left in lefts]),
                torch.stack([left[1] for left in lefts]),
                torch.stack([right[0] for right in rights]),
                torch.stack([right[1] for right in rights]),
                torch.stack([tracker[s][0] for s in reducing]))
            for row, s in enumerate(reducing):
                stacks[s].append((h[row], c[row]))  # unbatch: each sentence gets its row back
    return torch.stack([stack[-1][0] for stack in stacks])


# %% [markdown]
# Two instruments. `HostReads` counts the values Python reads out of tensors (`int(t)`,
# `t.item()`): each is a value Python needs before it can go on. `recorded` walks the graph
# autograd recorded behind a result, from its `grad_fn`: what `backward()` will walk.

# %%
class HostReads(torch.overrides.TorchFunctionMode):  # sees every call on a tensor
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__int__, torch.Tensor.item):
            self.reads = getattr(self, "reads", 0) + 1
        return func(*args, **(kwargs or {}))


def recorded(out) -> set:  # the nodes of the graph autograd recorded behind out
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [parent for parent, _ in node.next_functions]
    return seen


def leaf_weights(params) -> dict:  # the weights as tensors that autograd records uses of
    return {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}


def forward(weights, config, batch, what) -> set:  # encode a batch; print what it cost
    tokens, transitions, expected = batch
    with HostReads() as mode:
        out = encode(weights, torch.as_tensor(tokens), torch.as_tensor(transitions),
                     config.hidden_dim, config.tracker_dim)
    graph = recorded(out)
    S, T = transitions.shape
    print(f"the {what}, [S, T] = [{S}, {T}]: Python read {mode.reads} values out of tensors,")
    print(f"    an op per sentence per step (S x T = {S * T}) and a word count per sentence ({S});")
    print(f"    autograd recorded a graph of {len(graph)} nodes")
    report("pytorch, Python lists", out.detach().numpy(), expected, what)
    return graph


# %% [markdown]
# **Predict, then run.** The premises are 8 sentences in 67 transition slots.
# How many values will Python read out of tensors to encode them?
# Is that number the same for any 8 sentences of 67 slots?

# %% active="ipynb"
# config, params, batches = lesson_batches()
# weights = leaf_weights(params)
# premises = forward(weights, config, batches[0], "premises")

# %% [markdown]
# **Predict, then run.** The hypotheses of the same pairs have the same shape, [8, 67].
# Will their graph have as many nodes as the premises'? Which nodes will the two graphs share?

# %%
def shared(first, second) -> None:  # the nodes two graphs have in common, by kind
    both = first & second
    kinds = sorted({type(node).__name__ for node in both})
    print(f"the graphs share {len(both)} nodes ({', '.join(kinds)}): the weights', no operation")


# %% active="ipynb"
# hypotheses = forward(weights, config, batches[1], "hypotheses")
# shared(premises, hypotheses)

# %% [markdown]
# The graph itself, for one sentence of two words (SHIFT, SHIFT, REDUCE): every node autograd
# recorded, each with the nodes it passes gradients to. `AccumulateGrad` is a weight.

# %%
def show_graph(out) -> None:  # print the recorded graph behind out, root first
    order, todo = [], [out.grad_fn]
    while todo:  # breadth first from the root
        node = todo.pop(0)
        if node is not None and node not in order:
            order.append(node)
            todo += [parent for parent, _ in node.next_functions]
    for k, node in enumerate(order):
        parents = [order.index(p) for p, _ in node.next_functions if p is not None]
        print(f"{k:3d} {type(node).__name__:18s} -> {parents}")


def tiny_graph(weights, config, batch):  # the first premise's first two words, one REDUCE
    tokens = torch.as_tensor(batch[0][:1, :2])
    transitions = torch.tensor([[SHIFT, SHIFT, REDUCE]])
    return encode(weights, tokens, transitions, config.hidden_dim, config.tracker_dim)


# %% active="ipynb"
# show_graph(tiny_graph(weights, config, batches[0]))

# %% [markdown]
# **The backward pass.** `backward()` walks the recorded graph from the loss back to the
# weights, running each node's derivative once; there is no other graph of the gradient.
# The loss is the sum of every number of the encodings; the float64 reference's hand-written
# backward pass gives the same gradients.
#
# **Predict, then run.** How many of the premises' recorded nodes will `backward()` run?

# %%
def backward(weights, config, batch) -> float:  # differentiate the loss, count, check
    tokens, transitions, _ = batch
    out = encode(weights, torch.as_tensor(tokens), torch.as_tensor(transitions),
                 config.hidden_dim, config.tracker_dim)
    graph, ran = recorded(out), []
    for node in graph:  # a hook on each node: called when backward() runs it
        node.register_hook(lambda *_, node=node: ran.append(node))
    chain, node = [], out.grad_fn
    while node is not None and len(chain) < 4:  # the first nodes back from the encodings
        chain.append(type(node).__name__)
        node = node.next_functions[0][0] if node.next_functions else None
    out.sum().backward()
    print(f"backward() ran {len(set(ran))} of the graph's {len(graph)} nodes, from the encodings':")
    print(f"    {' <- '.join(chain)} <- ...")
    grads = {name: weight.grad.numpy() for name, weight in weights.items()
             if weight.grad is not None}
    params = {name: weight.detach().numpy() for name, weight in weights.items()}
    expected = reference_gradients(params, config, tokens, transitions)
    return report_gradients("pytorch, backward()", grads, expected)


# %% active="ipynb"
# err = backward(weights, config, batches[0])

# %% active="py"
def main() -> float:
    config, params, batches = lesson_batches()  # the premises, then the hypotheses, of 8 pairs
    weights = leaf_weights(params)
    premises = forward(weights, config, batches[0], "premises")
    hypotheses = forward(weights, config, batches[1], "hypotheses")
    shared(premises, hypotheses)
    return backward(weights, config, batches[0])


if __name__ == "__main__":
    main()
