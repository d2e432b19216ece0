"""Where the commands get their sentence pairs: one resolver for ``--data``.

``--data`` takes
* ``sample`` (the default): the 1,289-row SNLI dev sample embedded in ``data/``;
* ``synthetic``: seeded synthetic pairs whose labels follow from tree structure;
* ``arithmetic``: seeded arithmetic expressions whose gold tree is the
  precedence parse (shared/arithmetic.py, docs/spec.md §7);
* ``shaped``: random words in trees of one shape and length (benchmarks);
* a path: an SNLI ``.jsonl`` or ``.txt`` file, or the unzipped ``snli_1.0/`` folder.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from shared import arithmetic, synthetic
from shared.snli import SAMPLE_PATH, LoadReport, Pair, read_snli

SHAPES = ("random", "left", "right", "balanced")


def add_data_arguments(parser: argparse.ArgumentParser, default: str = "sample") -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--data", default=default,
                       help="'sample' (embedded SNLI dev sample), 'synthetic', 'arithmetic', 'shaped', "
                            "or a path to SNLI (.jsonl, .txt or the snli_1.0/ folder) [default: %(default)s]")
    group.add_argument("--split", default="train", choices=("train", "dev", "test"),
                       help="split to read when --data is the snli_1.0/ folder [default: %(default)s]")
    group.add_argument("--num-pairs", type=int, default=None,
                       help="synthetic/arithmetic/shaped: how many pairs to generate; a path: read at most this many")
    group.add_argument("--shape", default="random", choices=SHAPES,
                       help="shaped: tree shape [default: %(default)s]")
    group.add_argument("--length", type=int, default=20, help="shaped: sentence length [default: %(default)s]")
    group.add_argument("--data-seed", type=int, default=0, help="seed of generated data [default: %(default)s]")


@dataclass
class Dataset:
    name: str
    pairs: list[Pair]
    report: LoadReport | None


def load_dataset(args: argparse.Namespace, keep_unlabeled: bool = False, split: str | None = None) -> Dataset:
    """The pairs that ``--data`` and its companions name."""
    data = args.data
    if data == "synthetic":
        n = args.num_pairs or 2000
        return Dataset(f"synthetic-{n}", synthetic.synthetic_pairs(n, seed=args.data_seed), None)
    if data == "arithmetic":
        n = args.num_pairs or 2000
        return Dataset(f"arithmetic-{n}", arithmetic.arithmetic_pairs(n, seed=args.data_seed), None)
    if data == "shaped":
        n = args.num_pairs or 512
        pairs = synthetic.shaped_pairs(n, length=args.length, shape=args.shape, seed=args.data_seed)
        return Dataset(f"shaped-{args.shape}-{args.length}", pairs, None)
    path = SAMPLE_PATH if data == "sample" else data
    pairs, report = read_snli(path, split=split or args.split, keep_unlabeled=keep_unlabeled,
                              limit=args.num_pairs)
    return Dataset("snli-dev-sample" if data == "sample" else str(data), pairs, report)
