"""``init``, ``encode`` (docs/spec.md §5) and ``data``: the model-file and data commands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from bench.config import add_size_arguments, model_config, quiet_frameworks
from bench.datasets import add_data_arguments, load_dataset
from bench.frameworks import NAMES, make_runner
from bench.progress import Progress


def register(sub) -> None:
    p = sub.add_parser("init", help="build a vocabulary from data and write a fresh parameter file")
    add_data_arguments(p)
    add_size_arguments(p)
    p.add_argument("--min-freq", type=int, default=1, help="drop rarer words [default: %(default)s]")
    p.add_argument("--max-vocab", type=int, default=None, help="keep at most this many words")
    p.add_argument("--no-lowercase", action="store_true", help="keep the case of words")
    p.add_argument("--glove", default=None, help="GloVe text file to fill the embedding from")
    p.add_argument("--seed", type=int, default=0, help="initialisation seed [default: %(default)s]")
    p.add_argument("--out", required=True, help="parameter file to write (.npz)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("encode", help="encode every row of an SNLI jsonl file (docs/spec.md §5)")
    p.add_argument("--framework", required=True, choices=NAMES,
                   help="a framework or one of its variants (e.g. tensorflow-xla)")
    p.add_argument("--params", required=True, help="canonical parameter file (.npz)")
    p.add_argument("--data", required=True, help="SNLI-format pairs (.jsonl or .txt)")
    p.add_argument("--out", required=True, help="output .npz: premise, hypothesis, logits, pair_id")
    p.add_argument("--batch-size", type=int, default=128, help="pairs per batch [default: %(default)s]")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--dtype", default=None, choices=("float32", "float64"),
                   help="compute precision [default: float64 for reference, else float32]")
    p.set_defaults(func=cmd_encode)

    p = sub.add_parser("data", help="statistics of a data set: rows, lengths, tree depth, padding waste")
    add_data_arguments(p)
    p.add_argument("--batch-size", type=int, default=128, help="for the padding figures [default: %(default)s]")
    p.set_defaults(func=cmd_data)


# --------------------------------------------------------------------------
# init
# --------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from shared.glove import load_glove
    from shared.params import init_params, save_params
    from shared.vocab import Vocabulary

    dataset = load_dataset(args)
    if dataset.report is not None:
        print(dataset.report, file=sys.stderr)
    lowercase = not args.no_lowercase
    vocab = Vocabulary.from_pairs(dataset.pairs, min_freq=args.min_freq, lowercase=lowercase,
                                  max_size=args.max_vocab)
    config = model_config(args, len(vocab), lowercase)
    params = init_params(config, seed=args.seed)
    if args.glove:
        report = load_glove(args.glove, vocab, params["embed.embedding"])
        print(report, file=sys.stderr)
    save_params(args.out, params, config, vocab.to_array())
    n_weights = sum(v.size for v in params.values())
    print(f"wrote {args.out}: vocabulary {len(vocab)} words from {dataset.name}, "
          f"{n_weights:,} weights, config {config.to_json()}")
    return 0


# --------------------------------------------------------------------------
# encode (docs/spec.md §5)
# --------------------------------------------------------------------------


def encode_pairs(runner, pairs, vocab, batch_size: int, progress: Progress | None = None):
    """Encode pairs in file order, ``batch_size`` at a time, each chunk padded to
    its length bucket (so a compiled implementation sees few shapes)."""
    from shared.batching import bucket_size, make_pair_batch, pair_length

    premise, hypothesis, logits = [], [], []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        width = bucket_size(max(pair_length(p) for p in chunk))
        p, h, l = runner.encode(make_pair_batch(chunk, vocab, num_tokens=width))
        premise.append(p)
        hypothesis.append(h)
        logits.append(l)
        if progress:
            progress.update(len(chunk))
    return np.concatenate(premise), np.concatenate(hypothesis), np.concatenate(logits)


def cmd_encode(args: argparse.Namespace) -> int:
    from shared.params import load_params
    from shared.snli import NO_LABEL, read_snli
    from shared.vocab import Vocabulary

    quiet_frameworks()
    loaded = load_params(args.params)
    vocab = Vocabulary.from_array(loaded.vocab, lowercase=loaded.config.lowercase)
    pairs, _ = read_snli(args.data, keep_unlabeled=True)
    if not pairs:
        raise SystemExit(f"error: no rows in {args.data}")
    dtype = args.dtype or ("float64" if args.framework == "reference" else "float32")
    runner = make_runner(args.framework, loaded.params, loaded.config, dtype=dtype, device=args.device)
    with Progress(f"encode {args.framework}", len(pairs), unit="pairs") as progress:
        premise, hypothesis, logits = encode_pairs(runner, pairs, vocab, args.batch_size, progress=progress)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, premise=premise.astype(np.float32), hypothesis=hypothesis.astype(np.float32),
             logits=logits.astype(np.float32), pair_id=np.array([p.pair_id for p in pairs], dtype=str))
    os.replace(tmp, out)
    unlabeled = sum(p.label == NO_LABEL for p in pairs)
    print(f"wrote {out}: {len(pairs)} rows ({unlabeled} without gold label), "
          f"H={premise.shape[1]}, framework {args.framework} ({dtype})")
    return 0


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------


def cmd_data(args: argparse.Namespace) -> int:
    from shared.batching import make_batches
    from shared.stats import dataset_stats, format_stats
    from shared.vocab import Vocabulary

    dataset = load_dataset(args)
    vocab = Vocabulary.from_pairs(dataset.pairs, lowercase=True)
    batches = make_batches(dataset.pairs, vocab, args.batch_size) if dataset.pairs else []
    stats = dataset_stats(dataset.pairs, dataset.report, batches)
    print(f"data: {dataset.name}, vocabulary {len(vocab)} words, batch size {args.batch_size}")
    print(format_stats(stats))
    return 0
