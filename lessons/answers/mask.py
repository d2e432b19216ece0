# %% [markdown]
# # Exercise 1, answered: the SHIFT/REDUCE choice written as masks, in plain NumPy
# Run: `.venv/bin/python -m lessons.answers.mask`.
#
# pytorch_lists asks Python, sentence by sentence, which branch to take. Here no step ever
# looks at one sentence: each step reads every sentence's op, turns it into three boolean
# masks (SHIFT, REDUCE, not PAD), computes BOTH branches for every sentence, and keeps one
# with np.where. The stack holds the vectors themselves (a padded [S, N + 1, 2H] array, not
# the lessons' thin stack of row numbers); sp is each stack's depth and bp each buffer's front.
#
# Exercise 6 is answered here too: `track_pad=True` lets the tracker run on PAD steps.

# %%
import numpy as np

from lessons.setup import lesson_inputs, report

PAD, SHIFT, REDUCE = 0, 1, 2


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def masks(op):
    """One step's ops [S] -> (is_shift, is_reduce, active), three boolean [S] arrays."""
    return op == SHIFT, op == REDUCE, op != PAD


def encode(w, tokens, transitions, track_pad=False):
    """tokens [S, N], transitions [S, T] -> the h of the item left on each stack, [S, H]."""
    (S, N), T = tokens.shape, transitions.shape[1]
    H, D = w["reduce.right.kernel"].shape[0], w["tracker.kernel_hidden"].shape[0]
    leaves = w["embed.embedding"][tokens] @ w["projection.kernel"] + w["projection.bias"]
    n = (transitions == SHIFT).sum(axis=1)  # words per sentence
    rows = np.arange(S)
    stack = np.zeros((S, N + 1, 2 * H), leaves.dtype)
    sp, bp = np.zeros(S, int), np.zeros(S, int)  # each stack's depth, each buffer's front
    h_t = c_t = np.zeros((S, D), leaves.dtype)

    def at(cond, value):  # a [S, 2H] read, zeros where cond is False: "no such item"
        return np.where(cond[:, None], value, 0.0)

    for t in range(T):  # one loop for the batch; no loop, and no `if`, over sentences
        is_shift, is_reduce, active = masks(transitions[:, t])
        keep = np.ones_like(active) if track_pad else active  # exercise 6: PAD steps too

        front = at(bp < n, leaves[rows, np.minimum(bp, N - 1)])
        top = at(sp >= 1, stack[rows, np.maximum(sp - 1, 0)])
        below = at(sp >= 2, stack[rows, np.maximum(sp - 2, 0)])

        x = np.concatenate([front[:, :H], top[:, :H], below[:, :H]], 1)
        z = x @ w["tracker.kernel_input"] + h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"]
        i, f, g, o = np.split(z, 4, axis=1)
        c_new = sigmoid(f) * c_t + sigmoid(i) * np.tanh(g)
        h_t = np.where(keep[:, None], sigmoid(o) * np.tanh(c_new), h_t)
        c_t = np.where(keep[:, None], c_new, c_t)

        z = below[:, :H] @ w["reduce.left.kernel"] + w["reduce.left.bias"]
        z = z + top[:, :H] @ w["reduce.right.kernel"] + h_t @ w["reduce.track.kernel"]
        a, i, f1, f2, o = np.split(z, 5, axis=1)
        c = np.tanh(a) * sigmoid(i) + sigmoid(f1) * below[:, H:] + sigmoid(f2) * top[:, H:]
        composed = np.concatenate([sigmoid(o) * np.tanh(c), c], axis=1)

        # The where-select: SHIFT pushes the front leaf at slot sp, REDUCE writes the composed
        # item over the left one at slot sp - 2, PAD writes back what was there.
        slot = sp - 2 * is_reduce
        pushed = np.where(is_shift[:, None], front, composed)
        stack[rows, slot] = np.where(active[:, None], pushed, stack[rows, slot])
        sp = sp + is_shift - is_reduce
        bp = bp + is_shift
    return stack[:, 0, :H]


def left_padded(transitions):
    """The same transitions with each sentence's PADs moved before its first real step."""
    return np.stack([np.concatenate([ops[ops == PAD], ops[ops != PAD]]) for ops in transitions])


def changed(before, after) -> list[int]:  # the sentences whose encoding is not the same
    return [s for s in range(len(before)) if not np.array_equal(before[s], after[s])]


# %% [markdown]
# Exercise 6: with PAD last, the tracker's extra steps come after the sentence's last REDUCE,
# and nothing reads the tracker after that; with PAD first, the tracker has moved before the
# first real step, and every REDUCE reads that state.

# %%
def pad_changes(params, tokens, transitions) -> dict[str, list[int]]:
    """Exercise 6: the sentences whose encodings change when the tracker runs on PAD steps."""
    found = {}
    for where, ops in (("PAD last", transitions), ("PAD first", left_padded(transitions))):
        plain = encode(params, tokens, ops)
        found[where] = changed(plain, encode(params, tokens, ops, track_pad=True))
    padded = [s for s in range(len(transitions)) if (transitions[s] == PAD).any()]
    print(f"exercise 6, the tracker on PAD steps: the sentences with PAD steps are {padded};")
    for where, sentences in found.items():
        print(f"    with {where}, the encodings that change are those of sentences {sentences}")
    return found


# %%
def main() -> float:
    _config, params, tokens, transitions, expected = lesson_inputs()
    encodings = encode(params, tokens, transitions)
    err = report("exercise 1, NumPy masks and np.where", encodings, expected)
    pad_changes(params, tokens, transitions)
    return err


# %%
if __name__ == "__main__":
    main()
