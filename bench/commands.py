"""``init``, ``encode`` (docs/spec.md §5) and ``data``: the model-file and data commands."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from bench import ROOT, frameworks
from bench.config import (add_data_arguments, add_device_argument, add_dtype_argument, add_framework_argument,
                          add_size_arguments, load_dataset, load_model, model_config, preset, shows_progress)
from bench.progress import Progress, stage
from shared.files import written_aside
from shared.params import ModelConfig, ParamFile, init_params, save_params
from shared.snli import NO_LABEL, read_snli
from shared.transitions import PAD


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

    p = sub.add_parser("data", help="statistics of a data set: rows, lengths, tree depth, padding waste")
    add_data_arguments(p)
    p.add_argument("--batch-size", type=int, default=128, help="for the padding figures [default: %(default)s]")
    p.add_argument("--out", default=None, metavar="FILE.json",
                   help="also write the statistics as one JSON record, with what measured them (docs/spec.md §6)")
    p.set_defaults(func=cmd_data)


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
    """A ParamFile of fresh weights (``bench init``, ``bench train`` without ``--init``): the vocabulary of ``pairs``
    (``--min-freq``, ``--max-vocab``), the sizes of the flags, the embedding filled from ``--glove`` if given."""
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


def encode_pairs(runner, pairs, vocab, batch_size: int, progress: Progress, transitions: str = "gold",
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Encode pairs in file order, ``batch_size`` at a time, each chunk padded to its length bucket: the arrays of
    docs/spec.md §5 (float32; the transitions int32)."""
    from shared.batching import bucket_size, make_pair_batch, pair_length
    from shared.parsing import uniforms_for

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


def check_transitions_flags(transitions: str, seed: int | None, config, params_path) -> int:
    """The seed of sampled mode (0 by default); a one-line ValueError for flags that do not fit."""
    from shared.contract import HEAD_KERNEL

    if seed is not None and transitions != "sampled":
        raise ValueError(f"--seed seeds the uniform numbers of --transitions sampled; it means nothing with "
                         f"--transitions {transitions}")
    if transitions != "gold" and not config.transition_head:
        raise ValueError(f"--transitions {transitions} needs a transition head, but {params_path} has no "
                         f"{HEAD_KERNEL!r} (make one with: python -m bench init --transition-head)")
    return 0 if seed is None else seed


def cmd_encode(args: argparse.Namespace) -> int:
    dtype, loaded, vocab = load_model(args)
    seed = check_transitions_flags(args.transitions, args.seed, loaded.config, args.params)
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


def cmd_data(args: argparse.Namespace) -> int:
    from bench.run.limit import batch_flops, flops, products
    from shared.batching import make_batches, make_sentence_batches, sentence_order
    from shared.padding import padding_report
    from shared.stats import dataset_stats, format_stats
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
        report = padding_report(sentences)
        config = ModelConfig(vocab_size=len(vocab), **preset("full"))
        ratio = (sum(flops(config, products(config, b, "loop"), "infer") for b in sentences)
                 / sum(batch_flops(config, b) for b in sentences))
        steps_per_batch = report.loop_steps / (2 * args.batch_size * report.num_batches)
        print(f"\nin a loop that stops at each batch's last real step, {pairs_loop:.1%} of the steps above are PAD\n"
              f"sentence batches (the benchmark's): {report.num_batches:,} batches of {2 * args.batch_size} "
              f"sentences sorted by length; {report.waste:.1%} of their slots are PAD, {report.loop_waste:.1%} "
              f"in such a loop, of {steps_per_batch:.1f} steps a batch on average\n"
              f"the masked algorithm (every sentence runs the tracker and a composition at every step of that loop, "
              f"every token slot projected) "
              f"computes {ratio:.2f}x the useful FLOPs of the full-size model on them")
        record["sentences"] = {"padding": dataclasses.asdict(report), "loop_steps_per_batch": steps_per_batch,
                               "masked_flops_over_useful": ratio}
    if args.out:
        from bench.provenance import machine, provenance, timestamp
        from bench.records import write_json

        write_json(args.out, {**record, **provenance(), **machine(), "timestamp": timestamp()})
        print(f"\nwrote {args.out}")
    return 0
