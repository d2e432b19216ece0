"""``python -m bench evaluate``: accuracy, loss, confusion and parse metrics of a parameter file
(bench/train/evaluation.py)."""

from __future__ import annotations

import argparse

import numpy as np

from bench import frameworks
from bench.config import (add_data_arguments, add_device_argument, add_dtype_argument, add_framework_argument,
                          load_dataset, load_model)
from bench.records import write_json
from bench.train.evaluation import evaluate_pairs, evaluate_parses, format_confusion, format_parse_evaluation


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy and confusion matrix of a parameter file on SNLI-format data")
    add_framework_argument(p)
    p.add_argument("--params", required=True, help="canonical parameter file (.npz)")
    add_data_arguments(p)
    p.set_defaults(split="dev")
    p.add_argument("--batch-size", type=int, default=128, help="[default: %(default)s]")
    add_device_argument(p)
    add_dtype_argument(p)
    p.add_argument("--out", default=None, help="also write the result as JSON here")
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    dtype, loaded, vocab = load_model(args)
    dataset = load_dataset(args, keep_unlabeled=True)
    runner = frameworks.make_runner(args.framework, loaded.params, loaded.config, dtype=dtype, device=args.device)
    result = evaluate_pairs(runner, dataset.pairs, vocab, batch_size=args.batch_size)
    parses = (evaluate_parses(runner, dataset.pairs, vocab, batch_size=args.batch_size)
              if loaded.config.transition_head else None)
    name = str(dataset.report.path) if dataset.report is not None else dataset.name  # the file actually read
    print(f"{args.framework} ({dtype}) on {name}: accuracy {result.accuracy:.2%} "
          f"({int(np.trace(result.confusion)):,} of {result.pairs:,} pairs; {result.skipped_unlabeled:,} rows "
          f"without gold label left out), loss {result.loss:.4f}")
    print(format_confusion(result.confusion))
    if parses is not None:
        print(format_parse_evaluation(parses))
    if args.out:
        write_json(args.out, {"framework": args.framework, "dtype": dtype, "params": str(args.params), "data": name,
                              **result.to_dict(), **({"parsing": parses.to_dict()} if parses else {})})
    return 0
