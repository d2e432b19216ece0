"""Where the commands get their sentence pairs: one resolver for ``--data``.

``--data`` takes
* ``sample`` (the default): the 1,289-row SNLI dev sample embedded in ``data/``;
* ``synthetic``: seeded synthetic pairs whose labels follow from tree structure;
* ``shaped``: random words in trees of one shape and length (benchmarks);
* ``arithmetic``: expressions whose tree decides their value (docs/spec.md §7);
* a path: an SNLI ``.jsonl`` or ``.txt`` file, or the unzipped ``snli_1.0/`` folder.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.progress import stage
from shared.snli import PARSES, SAMPLE_PATH, LoadReport, Pair, labelled_pairs, read_snli, with_parse

SHAPES = ("random", "left", "right", "balanced")


def add_data_arguments(parser: argparse.ArgumentParser, default: str = "sample") -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--data", default=default,
                       help="'sample' (embedded SNLI dev sample), 'synthetic', 'shaped', 'arithmetic', "
                            "or a path to SNLI (.jsonl, .txt or the snli_1.0/ folder) [default: %(default)s]")
    group.add_argument("--split", default="train", choices=("train", "dev", "test"),
                       help="split to read when --data is the snli_1.0/ folder [default: %(default)s]")
    group.add_argument("--num-pairs", type=int, default=None,
                       help="synthetic/arithmetic/shaped: how many pairs to generate; a path: read at most this many")
    group.add_argument("--rows", type=row_range, default=None, metavar="START:END",
                       help="sample or a path: only the data rows START to END-1 (0-based; either may be left out: "
                            ":1000, 1000:) [default: every row]")
    group.add_argument("--shape", default="random", choices=SHAPES,
                       help="shaped: tree shape [default: %(default)s]")
    group.add_argument("--length", type=int, default=20, help="shaped: sentence length [default: %(default)s]")
    group.add_argument("--data-seed", type=int, default=0, help="seed of generated data [default: %(default)s]")
    group.add_argument("--numbers", default="4:8",
                       help="arithmetic: how many numbers an expression has, MIN:MAX [default: %(default)s]")
    group.add_argument("--parse", default="gold", choices=PARSES,
                       help="the trees: the data's own, or one fixed shape for every sentence (left- or "
                            "right-branching, or balanced: the first ceil(n/2) words, then the rest) "
                            "[default: %(default)s]")


def row_range(text: str) -> tuple[int, int | None]:
    """``START:END`` (either may be empty) as (start, end or None); an argparse error for anything else."""
    first, colon, last = text.partition(":")
    try:
        start, end = int(first or 0), (int(last) if last else None)
    except ValueError:
        start = end = -1
    if not colon or start < 0 or (end is not None and end <= start):
        raise argparse.ArgumentTypeError(f"expected START:END with 0 <= START < END (e.g. :1000 or 1000:), "
                                         f"got {text!r}")
    return start, end


def rows_label(rows: tuple[int, int | None] | None) -> str:
    """How a data set's name says which rows it took: "-rows0-1000", "-rows1000-end", or ""."""
    return f"-rows{rows[0]}-{'end' if rows[1] is None else rows[1]}" if rows else ""


def number_range(args: argparse.Namespace) -> tuple[int, int]:
    """``--numbers MIN:MAX`` as two ints."""
    try:
        low, high = (int(part) for part in getattr(args, "numbers", "4:8").split(":"))
    except ValueError:
        raise ValueError(f"--numbers: expected MIN:MAX, e.g. 4:8, got {args.numbers!r}") from None
    return low, high


@dataclass
class Dataset:
    name: str
    pairs: list[Pair]
    report: LoadReport | None


def shows_progress(args: argparse.Namespace) -> bool:
    """Whether a command shows the progress of its loading stages (not with ``--quiet``)."""
    return not getattr(args, "quiet", False)


def load_dataset(args: argparse.Namespace, keep_unlabeled: bool = False, split: str | None = None) -> Dataset:
    """The pairs that ``--data`` and its companions name, with the trees of ``--parse``."""
    dataset = _load(args, keep_unlabeled, split)
    dataset.pairs = with_parse(dataset.pairs, getattr(args, "parse", "gold"))
    return dataset


def _load(args: argparse.Namespace, keep_unlabeled: bool, split: str | None) -> Dataset:
    data = args.data
    if getattr(args, "rows", None) and data in ("synthetic", "arithmetic", "shaped"):
        raise ValueError(f"--rows selects rows of a file; --data {data} generates its pairs (use --num-pairs)")
    # Each generator is imported where its data is asked for: a record names the modules that ran.
    if data in ("synthetic", "shaped"):
        from shared import synthetic
    if data == "synthetic":
        n = args.num_pairs or 2000
        return Dataset(f"synthetic-{n}", synthetic.synthetic_pairs(n, seed=args.data_seed), None)
    if data == "arithmetic":
        from shared.arithmetic import arithmetic_pairs

        n = args.num_pairs or 2000
        low, high = number_range(args)
        return Dataset(f"arithmetic-{n}-seed{args.data_seed}-numbers{low}to{high}",
                       arithmetic_pairs(n, seed=args.data_seed, min_len=low, max_len=high), None)
    if data == "shaped":
        n = args.num_pairs or 512
        pairs = synthetic.shaped_pairs(n, length=args.length, shape=args.shape, seed=args.data_seed)
        return Dataset(f"shaped-{args.shape}-{args.length}", pairs, None)
    path = SAMPLE_PATH if data == "sample" else data
    rows = getattr(args, "rows", None)
    with stage("read", enabled=shows_progress(args)) as progress:
        pairs, report = read_snli(path, split=split or args.split, keep_unlabeled=keep_unlabeled,
                                  limit=args.num_pairs, rows=rows, progress=progress.update)
    # Every row read unlabelled: refused alike by every command, before any of them builds on nothing.
    labelled_pairs(pairs, report.path, rows=report.rows_read)
    name = "snli-dev-sample" if data == "sample" else str(data)
    return Dataset(name + rows_label(rows), pairs, report)
