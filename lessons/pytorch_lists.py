# %% [markdown]
# # SPINN define-by-run in PyTorch, as Bradbury's 2017 SPINN did it: `python -m lessons.pytorch_lists`
# Stacks and buffers are Python lists, and each sentence's `if` reads its transition: each batch records its own graph.

# %%
import torch

from lessons.setup import lesson_batches, report

PAD, SHIFT, REDUCE = 0, 1, 2


def tracker_step(w, front, top, second, h_t, c_t):  # LSTM over the parser state, K sentences: [K, H], [K, D]
    z = torch.cat([front, top, second], 1) @ w["tracker.kernel_input"] + h_t @ w["tracker.kernel_hidden"]
    i, f, g, o = (z + w["tracker.bias"]).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_t + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def reduce_step(w, left_h, left_c, right_h, right_c, track_h):  # TreeLSTM of K (left, right) pairs: [K, H]
    z = (left_h @ w["reduce.left.kernel"] + w["reduce.left.bias"] + right_h @ w["reduce.right.kernel"]
         + track_h @ w["reduce.track.kernel"])
    a, i, f1, f2, o = z.chunk(5, dim=1)
    c = torch.tanh(a) * torch.sigmoid(i) + torch.sigmoid(f1) * left_c + torch.sigmoid(f2) * right_c
    return torch.sigmoid(o) * torch.tanh(c), c


def encode(w, tokens, transitions, H, D):  # -> encodings [B, H]: the h of the one item left on each stack
    B, T = transitions.shape
    leaves = w["embed.embedding"][tokens] @ w["projection.kernel"] + w["projection.bias"]  # [B, N, 2H]
    buffers, stacks = [], [[] for _ in range(B)]
    for b in range(B):
        n = int((transitions[b] == SHIFT).sum())  # its n words, the buffer reversed: pop() takes the first word
        buffers.append([(leaves[b, k, :H], leaves[b, k, H:]) for k in reversed(range(n))])
    tracker, zeros = [(torch.zeros(D), torch.zeros(D)) for _ in range(B)], torch.zeros(H)  # tracker: (h_t, c_t)

    def h_at(items, depth):  # h of items[-depth], zeros(H) when there is no such item
        return items[-depth][0] if len(items) >= depth else zeros
    for t in range(T):  # a plain Python loop over the transition steps
        ops = [int(transitions[b, t]) for b in range(B)]
        active = [b for b in range(B) if ops[b] != PAD]  # PAD: nothing happens, not even the tracker
        if not active:
            continue
        h_t, c_t = tracker_step(  # batched by hand: the rows of every active sentence, one tracker call
            w, torch.stack([h_at(buffers[b], 1) for b in active]), torch.stack([h_at(stacks[b], 1) for b in active]),
            torch.stack([h_at(stacks[b], 2) for b in active]), torch.stack([tracker[b][0] for b in active]),
            torch.stack([tracker[b][1] for b in active]))
        for row, b in enumerate(active):
            tracker[b] = (h_t[row], c_t[row])
        lefts, rights, reducing = [], [], []
        for b in active:
            if ops[b] == SHIFT:  # Python decides, sentence by sentence
                stacks[b].append(buffers[b].pop())
            else:  # REDUCE: pop right, then left; compose below, together with the others
                rights.append(stacks[b].pop())
                lefts.append(stacks[b].pop())
                reducing.append(b)
        if reducing:  # all of this step's REDUCEs become one batched TreeLSTM call
            h, c = reduce_step(w, torch.stack([item[0] for item in lefts]), torch.stack([item[1] for item in lefts]),
                               torch.stack([item[0] for item in rights]), torch.stack([item[1] for item in rights]),
                               torch.stack([tracker[b][0] for b in reducing]))
            for row, b in enumerate(reducing):
                stacks[b].append((h[row], c[row]))  # unbatch: each sentence gets its row back
    return torch.stack([stack[-1][0] for stack in stacks])


# %%
class HostReads(torch.overrides.TorchFunctionMode):  # sees every call on a tensor; counts int(t) and t.item()
    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.reads = getattr(self, "reads", 0) + (func in (torch.Tensor.__int__, torch.Tensor.item))
        return func(*args, **(kwargs or {}))


def recorded(out) -> set:  # the nodes of the graph autograd recorded behind out: what backward() would walk
    seen, todo = set(), [out.grad_fn]
    while todo:
        if (node := todo.pop()) is not None and node not in seen:
            seen.add(node)
            todo += [parent for parent, _ in node.next_functions]
    return seen


def main() -> float:
    config, params, batches = lesson_batches()  # the premises, then the hypotheses, of the same 8 pairs
    weights, graphs, errors = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}, [], []
    for k, ((tokens, transitions, expected), what) in enumerate(zip(batches, ("premises", "hypotheses")), 1):
        with HostReads() as mode:
            out = encode(weights, *map(torch.as_tensor, (tokens, transitions)), config.hidden_dim, config.tracker_dim)
        graphs.append(recorded(out))
        print(f"batch {k}, the {what} {list(transitions.shape)}: Python read {mode.reads} values out of tensors; "
              f"autograd recorded a graph of {len(graphs[-1])} nodes")
        errors.append(report("pytorch, Python lists", out.detach().numpy(), expected, what))
    shared = {type(node).__name__ for node in graphs[0] & graphs[1]}
    print(f"the graphs share {len(graphs[0] & graphs[1])} nodes ({', '.join(shared)}): the weights', no operation")
    return max(errors)


if __name__ == "__main__":
    main()
