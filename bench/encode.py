"""``python -m bench encode``: every row of an SNLI file encoded by one implementation (docs/spec.md §5)."""

from __future__ import annotations

import argparse

import numpy as np

from bench import frameworks
from bench.config import add_device_argument, add_dtype_argument, add_framework_argument, load_model
from bench.progress import Progress
from shared.batching import bucket_size, make_pair_batch, pair_length
from shared.contract import HEAD_KERNEL
from shared.files import written_aside
from shared.parsing import uniforms_for
from shared.snli import NO_LABEL, read_snli
from shared.transitions import PAD


def register(sub) -> None:
    p = sub.add_parser("encode", help="encode every row of an SNLI jsonl file (docs/spec.md §5)")
    add_framework_argument(p)
    p.add_argument("--params", required=True, help="canonical parameter file (.npz)")
    p.add_argument("--data", required=True, help="SNLI-format pairs (.jsonl or .txt)")
    p.add_argument("--out", required=True, help="output .npz: premise, hypothesis, logits, pair_id")
    p.add_argument("--batch-size", type=int, default=128, help="pairs per batch [default: %(default)s]")
    add_device_argument(p)
    add_dtype_argument(p)
    p.add_argument("--transitions", default="gold", choices=("gold", "predicted", "sampled"),
                   help="the parse followed: the data's (gold) or the model's transition head "
                        "(docs/spec.md §7) [default: %(default)s]")
    p.add_argument("--seed", type=int, default=None, help="sampled: seed of the uniform numbers, epoch 0 [default: 0]")
    p.set_defaults(func=cmd_encode)


def encode_pairs(runner, pairs, vocab, batch_size: int, progress: Progress, transitions: str = "gold",
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Encode pairs in file order, ``batch_size`` at a time, padded to length buckets: docs/spec.md §5's arrays."""
    parts: dict[str, list] = {}
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        width = bucket_size(max(pair_length(p) for p in chunk))
        batch = make_pair_batch(chunk, vocab, num_tokens=width)
        if transitions == "gold":
            arrays = dict(zip(("premise", "hypothesis", "logits"), runner.encode(batch)))
        else:
            uniforms = uniforms_for(batch, [p.row for p in chunk], seed, epoch=0) if transitions == "sampled" else None
            parsed = runner.parse(batch, transitions, uniforms=uniforms).to_dict()
            keep = ["premise", "hypothesis", "logits", "premise_transitions", "hypothesis_transitions"]
            if transitions == "sampled":
                keep += ["premise_logprob", "hypothesis_logprob"]
            arrays = {name: parsed[name] for name in keep}
        for name, value in arrays.items():
            parts.setdefault(name, []).append(np.asarray(value))
        progress.update(len(chunk))
    out = {}
    longest = 2 * max(max(len(p.premise), len(p.hypothesis)) for p in pairs) - 1
    for name, values in parts.items():
        if name.endswith("_transitions"):  # each chunk's width is its bucket's: cut or pad to the file's T
            values = [np.pad(v[:, :longest], ((0, 0), (0, max(0, longest - v.shape[1]))), constant_values=PAD)
                      for v in values]
        out[name] = np.concatenate(values).astype(np.int32 if name.endswith("_transitions") else np.float32)
    return out


def cmd_encode(args: argparse.Namespace) -> int:
    dtype, loaded, vocab = load_model(args)
    if args.seed is not None and args.transitions != "sampled":  # flags that do not fit: a one-line ValueError
        raise ValueError(f"--seed seeds the uniform numbers of --transitions sampled; it means nothing with "
                         f"--transitions {args.transitions}")
    if args.transitions != "gold" and not loaded.config.transition_head:
        raise ValueError(f"--transitions {args.transitions} needs a transition head, but {args.params} has no "
                         f"{HEAD_KERNEL!r} (make one with: python -m bench init --transition-head)")
    seed = args.seed or 0  # sampled mode's seed, 0 by default
    pairs, _ = read_snli(args.data, keep_unlabeled=True)  # an empty file: EmptyDataError, exit 2
    runner = frameworks.make_runner(args.framework, loaded.params, loaded.config, dtype=dtype, device=args.device)
    with Progress(f"encode {args.framework}", len(pairs), unit="pairs") as progress:
        saved = encode_pairs(runner, pairs, vocab, args.batch_size, progress=progress,
                             transitions=args.transitions, seed=seed)
    with written_aside(args.out) as tmp, open(tmp, "wb") as file:
        np.savez(file, **saved, pair_id=np.array([p.pair_id for p in pairs], dtype=str))
    unlabeled = sum(p.label == NO_LABEL for p in pairs)
    mode = "" if args.transitions == "gold" else f", {args.transitions} transitions" + (
        f" (seed {seed})" if args.transitions == "sampled" else "")
    print(f"wrote {args.out}: {len(pairs)} rows ({unlabeled} without gold label), "
          f"H={saved['premise'].shape[1]}, framework {args.framework} ({dtype}){mode}")
    return 0
