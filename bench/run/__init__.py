"""``python -m bench run``: the cross-framework benchmark (how it measures: docs/benchmark.md, "The benchmark").

plan.py plans a run, driver.py drives it, worker.py is an implementation's process, limit.py counts and times a batch's
products, measurement.py is the record and its reading, targets.py the report's goals, estimate.py ``--estimate``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import frameworks
from bench.config import SIZES, add_data_arguments, add_device_argument, add_dtype_argument, size_help
from shared.batching import DEFAULT_BUCKETS

MODELS = ("spinn", "treelstm")  # treelstm: SPINN without its tracker (SPINN-PI-NT), a plain binary Tree-LSTM


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _buckets(text: str):
    """--buckets: boundaries (8,16,32,64), or auto / auto:K (K quantiles of the data's pair lengths)."""
    if text == "auto" or text.startswith("auto:"):
        count = text.partition(":")[2] or str(len(DEFAULT_BUCKETS))
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"expected auto or auto:K with K >= 1, got {text!r}")
        return f"auto:{int(count)}"
    return _int_list(text)


def _name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def register(sub) -> None:
    p = sub.add_parser("run", help="measure every implementation: speed, compile time, memory, agreement",
                       description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", type=_name_list, default=None,
                   help=f"comma-separated, from {','.join(frameworks.FRAMEWORKS)} [default: every installed one]")
    p.add_argument("--implementations", type=_name_list, default=None,
                   help=f"exact variants, from {','.join(frameworks.IMPLEMENTATIONS)} [default: those of the "
                        f"frameworks, except the opt-in {','.join(sorted(frameworks.OPT_IN))}]")
    p.add_argument("--batch-sizes", type=_int_list, default=None,
                   help="[default: 1,32,128, and 1,128 for model-decided transitions; quick: 1,8]")
    p.add_argument("--preset", choices=sorted(frameworks.PRESETS), default=None,
                   help="defaults for a kind of machine or a published protocol; flags given as well win. "
                        + ". ".join(f"{name}: {_describe(values)}" for name, values in frameworks.PRESETS.items()))
    p.add_argument("--model", choices=MODELS, default=None,
                   help="spinn: SPINN with its tracker; treelstm: the same without a tracker (tracker_dim 0), the "
                        "binary Tree-LSTM of the DyNet and TensorFlow Fold papers, gold parses only [default: spinn]")
    p.add_argument("--modes", type=_name_list, default=None, help="infer,train [default: both]")
    p.add_argument("--transitions", type=_name_list, default=None,
                   help="gold (the data's parse), predicted (inference follows the model's own parse), "
                        "sampled (the REINFORCE training step) [default: gold,predicted]")
    add_device_argument(p, DEVICES, None, help="auto: the GPU if the framework sees one, else the CPU; gpu: every "
                        "implementation on the GPU (refused where one cannot); gpu-host: the GPU for every framework "
                        "built with one (refused where it sees none), the CPU for those built without, as a host-side "
                        "reference (DyNet's wheel) [default: auto]")
    add_dtype_argument(p, "float32")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved timing rounds per measurement [default: 7; quick: 3]")
    p.add_argument("--round-time", type=float, default=None,
                   help="seconds the slowest implementation spends per round, roughly [default: 0.4; quick: 0.05]")
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help=f"{size_help()} (table2: the classifier one softmax layer, as Neubig et al.'s Tree-LSTM) "
                        "[default: full; quick with --quick]")
    p.add_argument("--quick", action="store_true",
                   help="tiny model, 64 pairs, 3 short rounds: the harness end to end in about a minute")
    p.add_argument("--out", default="results/latest", help="output folder [default: %(default)s]")
    p.add_argument("--resume", action="store_true", help="keep OUT/results.jsonl and measure only what it lacks")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds a worker may take for one step (start-up, a warm-up, a round) "
                        "[default: %(default)s]")
    p.add_argument("--buckets", type=_buckets, default=None,
                   help="token-count bucket boundaries of the batches, e.g. 8,12,16,24,32,64: finer buckets "
                        "mean less padding and more shapes to compile; auto:K takes the K quantiles of the "
                        "data's pair lengths (auto: K=4) [default: "
                        f"{','.join(map(str, DEFAULT_BUCKETS))}]")
    p.add_argument("--batching", choices=("sentences", "pairs"), default="sentences",
                   help="sentences: every batch holds 2B sentences of neighbouring lengths, paired in order (the "
                        "pairing is not the data's; the cost of a step is that of its sentences), so little of it is "
                        "padding; pairs: the data's pairs, grouped by the bucket of their longer sentence "
                        "[default: %(default)s]")
    p.add_argument("--compilation-cache", default=None, metavar="DIR",
                   help="turn on, in DIR, the persistent compilation cache of each measured framework whose "
                        "platform has one (off by default): a second run then loads compiled programs instead of "
                        "compiling them")
    p.add_argument("--estimate", default=None, metavar="DIR",
                   help="say how long the planned run would take, estimated from the records of an earlier run in "
                        "DIR (its results.jsonl, e.g. results/gpu-h100), and exit without measuring")
    add_data_arguments(p)
    p.set_defaults(func=cmd_run)


DEVICES = ("auto", "cpu", "gpu", "gpu-host")


def _describe(preset: dict) -> str:
    return "; ".join(f"--{key.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
                     for key, v in preset.items())


def cmd_run(args) -> int:
    from bench.lock import FolderLock
    from bench.run.measurement import load
    from bench.run.plan import busy_note, plan_run, planned_shapes, worker_specs

    plan = plan_run(args)  # refused here, before the folder is locked or a worker starts
    if args.estimate:
        from bench.run.estimate import estimate, format_estimate

        seconds, notes = estimate(plan, load([args.estimate]), planned_shapes(args, plan),
                                  measure_cache=not args.compilation_cache)
        print(format_estimate(seconds, notes, args.estimate))
        return 0
    out_dir = Path(args.out)
    with FolderLock(out_dir, f"bench run --out {args.out}") as lock:
        results = out_dir / "results.jsonl"
        if results.exists() and results.stat().st_size and not args.resume:
            raise ValueError(f"{results} already holds results: use --resume to complete it, "
                             f"or another --out (nothing is overwritten)")
        lock.announce()  # going to run: a refused run says only why
        from bench.run.driver import run  # imported when a run starts: planning needs none of it

        busy_note()
        return run(args, plan, worker_specs(args, plan.names, out_dir, plan.defaults), out_dir)
