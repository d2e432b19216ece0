"""``python -m bench init``: a vocabulary from data and a fresh parameter file."""

from __future__ import annotations

import argparse
import sys

from bench.config import add_data_arguments, add_size_arguments, load_dataset, model_config, shows_progress
from bench.progress import stage
from shared.params import ParamFile, init_params, save_params


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


def cmd_init(args: argparse.Namespace) -> int:
    dataset = load_dataset(args)
    if dataset.report is not None:
        print(dataset.report, file=sys.stderr)
    fresh = fresh_params(args, dataset.pairs, args.seed, lowercase=not args.no_lowercase)
    save_params(args.out, fresh.params, fresh.config, fresh.vocab)
    n_weights = sum(v.size for v in fresh.params.values())
    print(f"wrote {args.out}: vocabulary {len(fresh.vocab)} words from {dataset.name}, "
          f"{n_weights:,} weights, config {fresh.config.to_json()}")
    return 0


def fresh_params(args: argparse.Namespace, pairs, seed: int, lowercase: bool = True):
    """A ParamFile of fresh weights: the vocabulary of ``pairs``, the sizes of the flags, ``--glove``'s embedding."""
    from shared.glove import load_glove
    from shared.vocab import Vocabulary

    with stage("vocabulary", len(pairs), unit="pairs", enabled=shows_progress(args)) as progress:
        vocab = Vocabulary.from_pairs(pairs, min_freq=args.min_freq, lowercase=lowercase, max_size=args.max_vocab,
                                      progress=progress.update)
    config = model_config(args, len(vocab), lowercase)
    params = init_params(config, seed=seed)
    if args.glove:
        with stage("GloVe", unit="lines", enabled=shows_progress(args)) as progress:
            report = load_glove(args.glove, vocab, params["embed.embedding"], progress=progress.update)
        print(report, file=sys.stderr)
    return ParamFile(params, config, vocab.to_array())
