"""``python -m bench train`` and ``python -m bench evaluate``: training over the Runner interface."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

from bench import frameworks
from bench.config import (add_data_arguments, add_device_argument, add_dtype_argument, add_framework_argument,
                          add_size_arguments, default_dtype, generated, load_dataset, quiet_frameworks, row_range,
                          rows_label, shows_progress)
from bench.init import fresh_params
from bench.lock import FolderLock
from bench.progress import stage
from bench.train import reinforce
from bench.train.checkpoints import check_folder
from bench.train.config import TrainConfig
from bench.train.launch import launch_processes
from bench.train.trainer import Trainer
from shared import optimizers
from shared.batching import DEFAULT_BUCKETS
from shared.params import ParamFile, load_params
from shared.snli import SAMPLE_PATH, Pair, read_snli, with_parse


HYPER = {"momentum": "sgd: momentum [default: 0]", "beta1": "adam [default: 0.9]", "beta2": "adam [default: 0.999]",
         "rho": "rmsprop: decay of the squared-gradient mean [0.9]", "eps": "adam, rmsprop [default: 1e-8]",
         "weight_decay": "L2 term added to the gradient, g + wd * w [default: 0]"}


def register(sub) -> None:
    p = sub.add_parser("train", help="train the SNLI classifier in one framework (checkpoints, metrics, resume)",
                       description=__doc__.splitlines()[0])
    add_framework_argument(p)
    add_data_arguments(p)
    group = p.add_argument_group("dev data")
    group.add_argument("--dev", default="auto",
                       help="dev pairs for the accuracy at each epoch end: 'auto' (the dev split of an SNLI folder, "
                            "fresh pairs for synthetic and arithmetic, none otherwise), 'none', 'sample', "
                            "'synthetic', 'arithmetic', or a path [default: %(default)s]")
    group.add_argument("--dev-pairs", type=int, default=None,
                       help="synthetic dev: how many pairs [default: 1000]; a path: read at most this many")
    group.add_argument("--dev-rows", type=row_range, default=None, metavar="START:END",
                       help="sample or a path: only its data rows START to END-1, as --rows (the rest of a file "
                            "whose first rows train: --rows :1000 --dev sample --dev-rows 1000:)")
    reinforce.add_arguments(p)
    group = p.add_argument_group("model")
    add_size_arguments(p)
    group.add_argument("--init", default=None,
                       help="start from this canonical parameter file (its sizes and vocabulary) "
                            "instead of fresh weights")
    group.add_argument("--glove", default=None, help="GloVe text file to fill the embedding from")
    group.add_argument("--freeze-embeddings", action="store_true",
                       help="do not train the embedding (the 2016 paper kept GloVe fixed)")
    group.add_argument("--min-freq", type=int, default=1, help="vocabulary: drop rarer words [default: %(default)s]")
    group.add_argument("--max-vocab", type=int, default=None, help="vocabulary: keep at most this many words")
    group.add_argument("--vocab-with-dev", action="store_true",
                       help="vocabulary: also the words of the dev pairs (sensible with frozen GloVe vectors)")
    group.add_argument("--init-seed", type=int, default=None, help="weight initialisation seed [default: --seed]")
    group = p.add_argument_group("optimization")
    group.add_argument("--optimizer", default="adam", choices=optimizers.OPTIMIZERS, help="[default: %(default)s]")
    group.add_argument("--lr", type=float, default=1e-3, help="learning rate at step 0 [default: %(default)s]")
    group.add_argument("--lr-decay", type=float, default=1.0,
                       help="lr(step) = lr * DECAY ** (step / --lr-decay-steps), the 2016 schedule "
                            "(0.75 every 10,000 steps) [default: %(default)s: constant]")
    group.add_argument("--lr-decay-steps", type=int, default=10000, help="[default: %(default)s]")
    for flag, what in HYPER.items():  # the optimizers' hyperparameters: None is the optimizer's default
        group.add_argument(f"--{flag.replace('_', '-')}", type=float, default=None, help=what)
    group.add_argument("--batch-size", type=int, default=32, help="pairs per step [default: %(default)s]")
    group.add_argument("--epochs", type=int, default=1, help="[default: %(default)s]")
    group.add_argument("--steps", type=int, default=None, help="stop after this many steps in all (even mid-epoch)")
    group.add_argument("--dropout", type=float, default=0.0,
                       help="dropout rate on the projected leaves and classifier inputs [default: %(default)s]")
    group.add_argument("--seed", type=int, default=0, help="batch order, dropout, init [default: %(default)s]")
    group.add_argument("--transition-weight", type=float, default=0.0,
                       help="weight of the supervised transition loss (docs/spec.md §7, teacher forcing); "
                            "> 0 needs a transition head [default: %(default)s]")
    group.add_argument("--drop-last", action="store_true", help="drop each bucket's short last batch")
    group.add_argument("--buckets", default=",".join(map(str, DEFAULT_BUCKETS)),
                       help="token-count buckets, comma-separated [default: %(default)s]")
    group = p.add_argument_group("run")
    group.add_argument("--out", required=True, help="run folder: metrics, checkpoints, model.npz, best.npz")
    group.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    add_device_argument(group)
    add_dtype_argument(group)
    group.add_argument("--eval-batch-size", type=int, default=128, help="[default: %(default)s]")
    group.add_argument("--train-eval-pairs", type=int, default=2000,
                       help="training pairs whose accuracy is measured at each epoch end [default: %(default)s]")
    group.add_argument("--log-every", type=int, default=10, help="steps per metrics record [default: %(default)s]")
    group.add_argument("--keep-checkpoints", type=int, default=2, help="[default: %(default)s]")
    group.add_argument("--checkpoint-every", type=int, default=1000, metavar="STEPS",
                       help="a checkpoint every STEPS steps inside an epoch too (0: at epoch ends only); one is "
                            "also written when the run is interrupted (Ctrl-C, SIGTERM) [default: %(default)s]")
    group.add_argument("--replicas", type=int, default=1,
                       help="data-parallel replicas on the framework's own engine, each taking BATCH_SIZE / K "
                            "pairs of every batch: the same steps as one replica (docs/training.md: Training "
                            "past one device) [default: %(default)s]")
    group.add_argument("--processes", type=int, default=None,
                       help="JAX and TensorFlow: run the K replicas as P processes of one job, K / P devices each "
                            "(jax.distributed; MultiWorkerMirroredStrategy): on one host bench starts them over the "
                            "loopback address; on several, start one per host with the environment of "
                            "docs/training.md: Training past one device [default: 1; PyTorch: K, always]")
    group.add_argument("--quiet", action="store_true", help="no progress on the terminal")
    p.set_defaults(func=cmd_train)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    hyper = {key: getattr(args, key) for key in HYPER if getattr(args, key) is not None}
    try:
        buckets = tuple(int(v) for v in args.buckets.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--buckets: expected comma-separated token counts, got {args.buckets!r}") from None
    if not buckets:
        raise ValueError("--buckets: give at least one token count")
    unknown = sorted(set(hyper) - set(optimizers.DEFAULTS[args.optimizer]))
    if unknown:
        flags = ", ".join("--" + key.replace("_", "-") for key in unknown)
        raise ValueError(f"--optimizer {args.optimizer} takes no {flags}")
    # Every other field of TrainConfig is the flag of its name.
    computed = {"hyper": hyper, "buckets": buckets, "dtype": args.dtype or default_dtype(args.framework)}
    return TrainConfig(**{f.name: computed[f.name] if f.name in computed else getattr(args, f.name)
                          for f in dataclasses.fields(TrainConfig)})


def load_dev(args: argparse.Namespace) -> tuple[str, list[Pair]]:
    """The dev pairs that ``--dev`` names (see its help), with the trees of ``--parse`` (done by the caller)."""
    dev, n, seed = args.dev, args.dev_pairs or 1000, args.data_seed + 1  # generated: fresh pairs of another seed
    if dev == "auto":
        folder = args.data not in ("sample", "shaped", "synthetic", "arithmetic") and Path(args.data).is_dir()
        dev = args.data if args.data in ("synthetic", "arithmetic") or folder else "none"
    if dev == "none":
        return "none", []
    if dev in ("synthetic", "arithmetic"):
        dataset = generated(dev, n, seed, args)  # the synthetic dev set's name says its seed too
        return dataset.name + (f"-seed{seed}" if dev == "synthetic" else ""), dataset.pairs
    path = SAMPLE_PATH if dev == "sample" else Path(dev)
    with stage("read dev", enabled=shows_progress(args)) as progress:
        pairs, report = read_snli(path, split="dev", limit=args.dev_pairs, rows=args.dev_rows, progress=progress.update)
    name = "snli-dev-sample" if dev == "sample" else str(report.path)
    return name + rows_label(args.dev_rows), pairs


def check_processes(platform, replicas: int, processes: int | None) -> int:
    """The processes K replicas run in (``--processes``), checked against the engine and the job's environment."""
    if platform.data_parallel == "processes":  # one process per replica, always
        if processes not in (None, replicas):
            raise ValueError(f"--processes {processes}: {platform.name} runs one process per replica "
                             f"(--replicas {replicas})")
        return replicas
    if processes is None:
        processes = platform.job_processes()
    if processes < 1 or replicas % processes:
        raise ValueError(f"--processes {processes} does not split --replicas {replicas}: each process drives "
                         "K / P devices")
    if processes > 1 and not platform.multi_process:
        raise ValueError(f"--processes {processes}: {platform.name} runs its replicas in one process")
    job = platform.job_processes()
    if job > 1 and job != processes:
        raise ValueError(f"--processes {processes}, but the environment describes a job of {job} processes")
    return processes


def cmd_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    rank = None
    if cfg.replicas > 1:
        platform = frameworks.platform(cfg.framework)
        if not platform.data_parallel:
            raise NotImplementedError(f"--replicas: {platform.data_parallel_missing}")
        processes = check_processes(platform, cfg.replicas, args.processes)
        rank = platform.replica_rank()
    elif args.processes not in (None, 1):
        raise ValueError(f"--processes {args.processes} needs --replicas K > 1 (the processes share K replicas)")
    # checked before any data is read or lock taken, so a refused run leaves nothing (again under the lock)
    if not rank or args.resume:
        check_folder(args.out, args.resume)
    if cfg.replicas > 1:
        if platform.data_parallel == "processes" and rank is None:
            quiet_frameworks(cfg.dtype, [cfg.framework])
            return platform.launch(cfg.replicas, args.argv)
        if processes > 1 and rank is None:  # one host: bench starts the job's processes itself
            return launch_processes(platform, processes, args.argv)
        os.environ.update(platform.replica_env(cfg.replicas))  # before the framework is imported
    quiet_frameworks(cfg.dtype, [cfg.framework])  # before the framework is imported (float64 may need a switch)
    if args.init and args.glove:
        raise ValueError("--init and --glove exclude each other (the file already holds its embedding)")
    loaded = load_params(args.init) if args.init and not args.resume else None  # read first: a damaged one fails now
    dataset = load_dataset(args)
    if dataset.report is not None:
        print(dataset.report, file=sys.stderr)
    dev_name, dev_pairs = load_dev(args)
    dev_pairs = with_parse(dev_pairs, args.parse)  # the trees of --parse, as in training
    data_info = {"data": args.data, "name": dataset.name, "split": args.split, "num_pairs": args.num_pairs,
                 "data_seed": args.data_seed, "dev": dev_name,
                 **({"shape": args.shape, "length": args.length} if args.data == "shaped" else {}),
                 **({"numbers": args.numbers} if args.data == "arithmetic" else {}),
                 **({"parse": args.parse} if args.parse != "gold" else {})}
    seed = args.seed if args.init_seed is None else args.init_seed

    def init() -> ParamFile:  # the file of --init, or fresh weights: the flags' sizes, a vocabulary of the data
        if args.init:
            return loaded if loaded is not None else load_params(args.init)
        return fresh_params(args, list(dataset.pairs) + (list(dev_pairs) if args.vocab_with_dev else []), seed)

    writer = not rank  # with replicas started by a launcher, rank 0 alone writes, evaluates and reports
    options = dict(dev_pairs=dev_pairs, resume=args.resume, data_info=data_info, progress=not args.quiet and writer,
                   writer=writer, stop_on_signal=rank is None)  # a job of processes stops together, by a launcher
    settings = reinforce.settings_from_args(args)
    # a run refused under the lock says only why: the note of a lock taken from a dead holder waits for the trainer
    with FolderLock(args.out, f"bench train --out {args.out}") if writer else contextlib.nullcontext() as lock:
        if settings is None:
            trainer = Trainer(cfg, args.out, dataset.pairs, init=init, **options)
        else:  # parses learned by reward: the model needs a transition head
            trainer = reinforce.ReinforceTrainer(cfg, args.out, dataset.pairs, settings=settings,
                                                 init=lambda: reinforce.with_head(init(), seed), **options)
        if lock is not None:
            lock.announce()
        result = trainer.run()
    if not writer:
        return 0
    summary = {"steps": result.steps, "epochs": round(result.epochs, 3), "wall_s": round(result.elapsed_s, 1),
               **{f"{r['split']}_accuracy": round(r["accuracy"], 4) for r in result.evals}}  # each split's last
    print(f"trained {cfg.framework}: {json.dumps(summary)}; weights in {Path(args.out) / 'model.npz'}")
    return 0
