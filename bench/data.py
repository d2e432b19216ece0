"""``python -m bench data``: statistics of a data set and of the benchmark's batches of it."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

from bench import ROOT
from bench.config import add_data_arguments, load_dataset, preset
from bench.progress import stage
from bench.run.padding import padding_share
from shared.batching import PairBatch
from shared.params import ModelConfig
from shared.snli import LABELS, NO_LABEL, LoadReport, Pair
from shared.transitions import build_tree, max_stack_depth, tree_depth


def register(sub) -> None:
    p = sub.add_parser("data", help="statistics of a data set: rows, lengths, tree depth, padding waste")
    add_data_arguments(p)
    p.add_argument("--batch-size", type=int, default=128, help="for the padding figures [default: %(default)s]")
    p.add_argument("--out", default=None, metavar="FILE.json",
                   help="also write the statistics as one JSON record, with what measured them (docs/spec.md §6)")
    p.set_defaults(func=cmd_data)


def cmd_data(args: argparse.Namespace) -> int:
    from bench.run.limit import batch_flops, flops, products
    from shared.batching import make_batches, make_sentence_batches, sentence_order
    from shared.vocab import Vocabulary

    dataset = load_dataset(args)
    with stage("vocabulary", len(dataset.pairs), unit="pairs") as progress:
        vocab = Vocabulary.from_pairs(dataset.pairs, lowercase=True, progress=progress.update)
    with stage("batches", len(dataset.pairs), unit="pairs") as progress:
        batches = make_batches(dataset.pairs, vocab, args.batch_size, progress=progress.update) \
            if dataset.pairs else []
    with stage("statistics", 2 * len(dataset.pairs), unit="sentences") as progress:
        stats = dataset_stats(dataset.pairs, dataset.report, batches, progress=progress.update)
    print(f"data: {dataset.name}, vocabulary {len(vocab)} words, batch size {args.batch_size}")
    print(format_stats(stats))
    # The benchmark's batches (docs/spec.md §2), and what the masked algorithm computes of them.
    sentences = []
    if len(dataset.pairs) >= args.batch_size:
        with stage("sorting sentences", 2 * len(dataset.pairs), unit="sentences") as progress:
            order = sentence_order(dataset.pairs, args.batch_size, progress=progress.update)
        with stage("sentence batches", len(order) // 2, unit="pairs") as progress:
            sentences = make_sentence_batches(dataset.pairs, vocab, args.batch_size, progress=progress.update,
                                              order=order)
    source = stats.get("source")
    if source and Path(source).resolve().is_relative_to(ROOT):  # a record names the repository's files relatively
        stats = {**stats, "source": Path(source).resolve().relative_to(ROOT).as_posix()}
    record = {"data": dataset.name, "vocabulary": len(vocab), "batch_size": args.batch_size, "pairs": stats}
    if sentences:
        pairs_loop = stats["padding"]["loop_waste"]
        padding = padding_share(sentences)
        config = ModelConfig(vocab_size=len(vocab), **preset("full"))
        ratio = (sum(flops(config, products(config, b, "loop"), "infer") for b in sentences)
                 / sum(batch_flops(config, b) for b in sentences))
        steps_per_batch = padding.loop_steps / (2 * args.batch_size * padding.num_batches)
        print(f"\nin a loop that stops at each batch's last real step, {pairs_loop:.1%} of the steps above are PAD\n"
              f"sentence batches (the benchmark's): {padding.num_batches:,} batches of {2 * args.batch_size} "
              f"sentences sorted by length; {padding.waste:.1%} of their slots are PAD, {padding.loop_waste:.1%} "
              f"in such a loop, of {steps_per_batch:.1f} steps a batch on average\n"
              f"the masked algorithm (every sentence runs the tracker and a composition at every step of that loop, "
              f"every token slot projected) "
              f"computes {ratio:.2f}x the useful FLOPs of the full-size model on them")
        record["sentences"] = {"padding": dataclasses.asdict(padding), "loop_steps_per_batch": steps_per_batch,
                               "masked_flops_over_useful": ratio}
    if args.out:
        from bench.provenance import machine, provenance, timestamp
        from bench.records import write_json

        write_json(args.out, {**record, **provenance(), **machine(), "timestamp": timestamp()})
        print(f"\nwrote {args.out}")
    return 0


# Histogram bin widths to choose from, so bin edges are round numbers.
_BIN_WIDTHS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_MAX_BINS = 20
_BAR_WIDTH = 40  # characters of the longest histogram bar


def length_histogram(lengths: Sequence[int]) -> list[dict]:
    """Bins ``{"lo", "hi", "count"}`` of equal round width covering 1..max(lengths), about 20 at most."""
    if not lengths:
        return []
    longest = max(lengths)
    width = next((w for w in _BIN_WIDTHS if math.ceil(longest / w) <= _MAX_BINS), _BIN_WIDTHS[-1])
    counts = Counter((n - 1) // width for n in lengths)
    return [{"lo": b * width + 1, "hi": (b + 1) * width, "count": counts.get(b, 0)}
            for b in range((longest - 1) // width + 1)]


def _summary(values: Sequence[int]) -> dict:
    if not values:
        return {"mean": 0.0, "max": 0, "min": 0}
    return {"mean": sum(values) / len(values), "max": max(values), "min": min(values)}


def dataset_stats(pairs: Sequence[Pair], report: LoadReport | None = None, batches: list[PairBatch] | None = None,
                  progress: Callable[[int], None] | None = None) -> dict:
    """Counts, sentence lengths, tree depths and padding waste of a dataset, as JSON-ready values."""
    sentences = [s for pair in pairs for s in (pair.premise, pair.hypothesis)]
    lengths, depths = [len(s) for s in sentences], []
    for done, s in enumerate(sentences, start=1):
        depths.append(tree_depth(build_tree(s.tokens, s.transitions)))
        if progress is not None and (done % 1000 == 0 or done == len(sentences)):
            progress(done % 1000 or 1000)
    labels = Counter(pair.label for pair in pairs)
    skipped = {key: 0 if report is None else getattr(report, key) for key in ("skipped_no_label", "skipped_malformed")}
    padding = None if batches is None else dataclasses.asdict(padding_share(batches))
    if padding is not None:
        padding["shapes"] = [list(shape) for shape in padding["shapes"]]  # JSON has no tuples
    return {"source": None if report is None else str(report.path),
            "rows": len(pairs) if report is None else report.rows_read, "kept": len(pairs),
            "skipped": sum(skipped.values()), **skipped, "labels": {
                **{name: labels.get(i, 0) for i, name in enumerate(LABELS)}, "unlabeled": labels.get(NO_LABEL, 0)},
            "sentences": len(sentences), "length": _summary(lengths), "length_histogram": length_histogram(lengths),
            "tree_depth": _summary(depths),
            "max_stack_depth": max((max_stack_depth(s.transitions) for s in sentences), default=0), "padding": padding}


def format_stats(stats: dict) -> str:
    """A human-readable block of :func:`dataset_stats`, with an ASCII histogram."""
    length, depth = stats["length"], stats["tree_depth"]
    labels = ", ".join(f"{name} {count:,}" for name, count in stats["labels"].items())
    lines = [f"source            {stats['source']}"] if stats.get("source") else []
    lines += [f"rows read         {stats['rows']:,}",
              f"pairs kept        {stats['kept']:,} (skipped: {stats['skipped_no_label']:,} without gold label, "
              f"{stats['skipped_malformed']:,} malformed)", f"labels            {labels}",
              f"sentence length   mean {length['mean']:.1f}, min {length['min']}, max {length['max']} "
              f"({stats['sentences']:,} sentences)", f"tree depth        mean {depth['mean']:.1f}, max {depth['max']}",
              f"max stack depth   {stats['max_stack_depth']}"]
    padding = stats.get("padding")
    if padding is not None:
        shapes = " ".join(f"({n},{t})" for n, t in padding["shapes"])
        lines.append(f"padding           {padding['waste']:.1%} of {padding['total_steps']:,} transition slots are "
                     f"PAD ({padding['num_batches']:,} batches; shapes (N,T): {shapes})")
    histogram = stats["length_histogram"]
    if histogram:
        lines += ["", "sentence length histogram (tokens: sentences)"]
        most = max(b["count"] for b in histogram) or 1
        label_width = len(f"{histogram[-1]['lo']}-{histogram[-1]['hi']}")
        for b in histogram:
            span = f"{b['lo']}" if b["lo"] == b["hi"] else f"{b['lo']}-{b['hi']}"
            bar = "#" * math.ceil(_BAR_WIDTH * b["count"] / most)
            lines.append(f"  {span:>{label_width}} | {bar:<{_BAR_WIDTH}} {b['count']:,}")
    return "\n".join(lines)
