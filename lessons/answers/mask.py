# %% [markdown]
# # Exercise 1, answered: the SHIFT/REDUCE choice written as masks, in plain NumPy
# pytorch_lists asks Python, sentence by sentence, which branch to take. Here no step ever looks at one sentence: each
# step reads every sentence's op, turns it into three boolean masks (SHIFT, REDUCE, not PAD), computes BOTH branches
# for every sentence, and keeps one with np.where. The stack holds the vectors themselves (a padded [B, N + 1, 2H]
# array, not the lessons' thin stack of row numbers); sp is each stack's depth and bp each buffer's front.
# Exercise 6 is answered here too: ``track_pad=True`` lets the tracker run on PAD steps. Run from the repository root:
# `.venv/bin/python -m lessons.answers.mask`.

# %%
import numpy as np

from lessons.setup import lesson_inputs, report

PAD, SHIFT, REDUCE = 0, 1, 2


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def masks(op):
    """One step's ops [B] -> (is_shift, is_reduce, active), three boolean [B] arrays."""
    return op == SHIFT, op == REDUCE, op != PAD


def encode(w, tokens, transitions, track_pad=False):
    """tokens [B, N], transitions [B, T] -> the h of the item left on each stack, [B, H]."""
    (B, N), T = tokens.shape, transitions.shape[1]
    H, D = w["reduce.right.kernel"].shape[0], w["tracker.kernel_hidden"].shape[0]
    leaves = w["embed.embedding"][tokens] @ w["projection.kernel"] + w["projection.bias"]  # [B, N, 2H]
    n = (transitions == SHIFT).sum(axis=1)  # words per sentence
    rows = np.arange(B)
    stack = np.zeros((B, N + 1, 2 * H), leaves.dtype)
    sp, bp = np.zeros(B, int), np.zeros(B, int)
    h_t = c_t = np.zeros((B, D), leaves.dtype)
    for t in range(T):  # one loop for the batch; no loop, and no `if`, over sentences
        is_shift, is_reduce, active = masks(transitions[:, t])
        keep = np.ones_like(active) if track_pad else active  # exercise 6: the tracker on PAD steps too

        def at(cond, value):  # a [B, 2H] read, zeros where cond is False: "no such item"
            return np.where(cond[:, None], value, 0.0)
        front = at(bp < n, leaves[rows, np.minimum(bp, N - 1)])
        top, below = at(sp >= 1, stack[rows, np.maximum(sp - 1, 0)]), at(sp >= 2, stack[rows, np.maximum(sp - 2, 0)])

        z = (np.concatenate([front[:, :H], top[:, :H], below[:, :H]], 1) @ w["tracker.kernel_input"]
             + h_t @ w["tracker.kernel_hidden"] + w["tracker.bias"])
        i, f, g, o = np.split(z, 4, axis=1)
        c_new = sigmoid(f) * c_t + sigmoid(i) * np.tanh(g)
        h_t = np.where(keep[:, None], sigmoid(o) * np.tanh(c_new), h_t)
        c_t = np.where(keep[:, None], c_new, c_t)

        z = (below[:, :H] @ w["reduce.left.kernel"] + w["reduce.left.bias"] + top[:, :H] @ w["reduce.right.kernel"]
             + h_t @ w["reduce.track.kernel"])
        a, i, f1, f2, o = np.split(z, 5, axis=1)
        c = np.tanh(a) * sigmoid(i) + sigmoid(f1) * below[:, H:] + sigmoid(f2) * top[:, H:]
        composed = np.concatenate([sigmoid(o) * np.tanh(c), c], axis=1)

        # The where-select: SHIFT pushes the front leaf at slot sp, REDUCE writes the composed item over the
        # left one at slot sp - 2, PAD writes back what was there.
        slot = sp - 2 * is_reduce
        pushed = np.where(is_shift[:, None], front, composed)
        stack[rows, slot] = np.where(active[:, None], pushed, stack[rows, slot])
        sp, bp = sp + is_shift - is_reduce, bp + is_shift
    return stack[:, 0, :H]


def left_padded(transitions):
    """The same transitions with each sentence's PADs moved before its first real step."""
    return np.stack([np.concatenate([ops[ops == PAD], ops[ops != PAD]]) for ops in transitions])


# %%
def main() -> float:
    _config, params, tokens, transitions, expected = lesson_inputs()
    encodings = encode(params, tokens, transitions)
    err = report("exercise 1, NumPy masks and np.where", encodings, expected)
    # Exercise 6: the tracker on PAD steps changes nothing while every PAD comes after a sentence's last real
    # step (no REDUCE reads the tracker after it); moved before the real steps, the PADs change its state.
    after = np.abs(encode(params, tokens, transitions, track_pad=True) - encodings).max()
    moved = left_padded(transitions)
    before = np.abs(encode(params, tokens, moved, track_pad=True) - encode(params, tokens, moved)).max()
    print(f"exercise 6, the tracker on PAD steps: PAD last, largest change {after:.1e}; "
          f"PAD first, largest change {before:.1e}")
    return err


if __name__ == "__main__":
    main()
