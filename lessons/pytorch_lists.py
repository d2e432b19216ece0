"""SPINN define-by-run in PyTorch, the way Bradbury's 2017 SPINN did it.

Each sentence keeps its own stack and buffer as Python lists of (h, c)
tensors; the transition steps are a Python for loop, and each sentence
takes a Python `if` on its own SHIFT or REDUCE. What to notice: Python
decides, per sentence and per step, which operations run, so the graph
autograd records is shaped by this batch's trees; another batch records
another graph. Batching survives only inside a step: the tracker runs once
for all sentences still working, and that step's REDUCEs are stacked into
one matrix product. Run from the repository root:

    .venv/bin/python -m lessons.pytorch_lists
"""

import torch

from lessons.setup import lesson_inputs, report

PAD, SHIFT, REDUCE = 0, 1, 2


def tracker_step(w, front, top, second, h_t, c_t):
    """LSTM over the parser state, K sentences at once: rows [K, H] and [K, D]."""
    z = torch.cat([front, top, second], 1) @ w["tracker.kernel_input"] + h_t @ w["tracker.kernel_hidden"]
    i, f, g, o = (z + w["tracker.bias"]).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_t + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def reduce_step(w, left_h, left_c, right_h, right_c, track_h):
    """TreeLSTM composition of K (left, right) pairs at once: rows [K, H]."""
    z = (left_h @ w["reduce.left.kernel"] + w["reduce.left.bias"] + right_h @ w["reduce.right.kernel"]
         + track_h @ w["reduce.track.kernel"])
    a, i, f1, f2, o = z.chunk(5, dim=1)
    c = torch.tanh(a) * torch.sigmoid(i) + torch.sigmoid(f1) * left_c + torch.sigmoid(f2) * right_c
    return torch.sigmoid(o) * torch.tanh(c), c


def encode(w, tokens, transitions, H, D):
    """Premises -> encodings [B, H]: the h of the one item left on each stack."""
    B, T = transitions.shape
    leaves = w["embed.embedding"][tokens] @ w["projection.kernel"] + w["projection.bias"]  # [B, N, 2H]
    buffers, stacks = [], []
    for b in range(B):
        n = int((transitions[b] == SHIFT).sum())  # a sentence's words: its first n tokens
        # The buffer is reversed so that buffer[-1] is the front and pop() takes the first word.
        buffers.append([(leaves[b, k, :H], leaves[b, k, H:]) for k in reversed(range(n))])
        stacks.append([])
    tracker = [(torch.zeros(D), torch.zeros(D)) for _ in range(B)]  # (h_t, c_t) per sentence
    zeros = torch.zeros(H)

    def h_at(items, depth):  # h of items[-depth], zeros(H) when there is no such item
        return items[-depth][0] if len(items) >= depth else zeros

    for t in range(T):  # a plain Python loop over the transition steps
        ops = [int(transitions[b, t]) for b in range(B)]
        active = [b for b in range(B) if ops[b] != PAD]  # PAD: nothing happens, not even the tracker
        if not active:
            continue
        # Per-step batching: gather the active sentences' rows, run the tracker once for all of them.
        h_t, c_t = tracker_step(w,
                                torch.stack([h_at(buffers[b], 1) for b in active]),
                                torch.stack([h_at(stacks[b], 1) for b in active]),
                                torch.stack([h_at(stacks[b], 2) for b in active]),
                                torch.stack([tracker[b][0] for b in active]),
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
            h, c = reduce_step(w,
                               torch.stack([item[0] for item in lefts]), torch.stack([item[1] for item in lefts]),
                               torch.stack([item[0] for item in rights]), torch.stack([item[1] for item in rights]),
                               torch.stack([tracker[b][0] for b in reducing]))
            for row, b in enumerate(reducing):
                stacks[b].append((h[row], c[row]))  # unbatch: each sentence gets its row back
    return torch.stack([stack[-1][0] for stack in stacks])


def main() -> float:
    config, params, tokens, transitions, expected = lesson_inputs()
    weights = {name: torch.tensor(value) for name, value in params.items()}
    tokens, transitions = torch.as_tensor(tokens).long(), torch.as_tensor(transitions)
    encodings = encode(weights, tokens, transitions, config.hidden_dim, config.tracker_dim)
    return report("pytorch, Python lists", encodings.detach().numpy(), expected)


if __name__ == "__main__":
    main()
