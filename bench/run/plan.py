"""The plan of a run: the arguments checked (a run that would measure nothing is refused before anything starts,
``plan_run``), the measurements and the workers' specs; bench/run/driver.py drives the workers and writes the records.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench import frameworks
from bench.config import load_dataset, preset
from bench.run.measurement import is_busy, other_work_limit
from bench.run.worker import WorkerSpec, resolve_buckets
from shared.batching import DEFAULT_BUCKETS, make_batches, make_sentence_batches, pair_length, plan_batches

QUICK = {"num_pairs": 64, "batch_sizes": [1, 8], "decided_batch_sizes": [1, 8], "rounds": 3,
         "round_time": 0.05, "agreement_pairs": 8}
FULL = {"num_pairs": None, "batch_sizes": [1, 32, 128], "decided_batch_sizes": [1, 128], "rounds": 7,
        "round_time": 0.4, "agreement_pairs": 32}

# The flags' own defaults, where a preset may set them (None elsewhere marks "not given").
FLAG_DEFAULTS = {"modes": ["infer", "train"], "transitions": ["gold", "predicted"], "device": "auto",
                 "model": "spinn"}

# Which transitions each mode can follow (docs/spec.md §7).
TRANSITIONS = {"infer": ("gold", "predicted"), "train": ("gold", "sampled")}


def apply_preset(args) -> None:
    """Fill the flags not given from ``--preset`` (if any), then from the flags' own defaults."""
    # --frameworks overrides the preset's implementations; --quick its batches, rounds and size (64 pairs hold no 1024).
    chosen = frameworks.PRESETS[args.preset] if getattr(args, "preset", None) else {}
    preset = {key: value for key, value in chosen.items()
              if not (key == "implementations" and getattr(args, "frameworks", None))
              and not (key in ("batch_sizes", "rounds", "size") and getattr(args, "quick", False))}
    for key, value in {**FLAG_DEFAULTS, **preset}.items():  # the flags not given: the preset's, else their defaults
        if getattr(args, key) is None:
            setattr(args, key, list(value) if isinstance(value, list) else value)


def plan_implementations(args) -> list[str]:
    implementations, missing = frameworks.IMPLEMENTATIONS, []
    if args.implementations:
        unknown = ", ".join(name for name in args.implementations if name not in implementations)
        if unknown:
            raise ValueError(f"unknown implementation(s) {unknown}; choose from {', '.join(implementations)}")
        chosen = list(dict.fromkeys(args.implementations))
        if args.preset and args.implementations == frameworks.PRESETS[args.preset].get("implementations"):
            # A preset's list is what to measure where it can be: the frameworks not installed drop out, said once.
            missing = [n for n in chosen if not frameworks.installed(implementations[n][0])]
            chosen = [n for n in chosen if n not in missing]
    else:
        named = args.frameworks
        if named is None:
            # Looked up, not imported: the workers import the frameworks, the parent never does.
            named = [f for f in frameworks.FRAMEWORKS if frameworks.installed(f)]
            missing = sorted(set(frameworks.FRAMEWORKS) - set(named))
        unknown = [f for f in named if f not in frameworks.FRAMEWORKS]
        if unknown:
            raise ValueError(f"unknown framework(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(frameworks.FRAMEWORKS)}")
        chosen = [name for name, (framework, _) in implementations.items()
                  if framework in named and name not in frameworks.OPT_IN]
    if missing:
        print(f"note: not installed, not measured: {', '.join(missing)}", file=sys.stderr)
    return chosen


def plan_keys(args, defaults: dict) -> list[tuple[str, int, str]]:
    """The measurements, (mode, batch size, transitions), in the order they are made."""
    if not args.modes or not args.transitions:
        raise ValueError("nothing to measure: --modes and --transitions need at least one value each")
    for mode in (m for m in args.modes if m not in TRANSITIONS):
        raise ValueError(f"unknown mode {mode!r}; choose from infer, train")
    for transitions in (t for t in args.transitions if t not in ("gold", "predicted", "sampled")):
        raise ValueError(f"unknown transitions {transitions!r}; choose from gold, predicted, sampled")
    keys = [(mode, b, t) for t in ("gold", "predicted", "sampled") if t in args.transitions
            for mode in args.modes if t in TRANSITIONS[mode]
            for b in args.batch_sizes or defaults["batch_sizes" if t == "gold" else "decided_batch_sizes"]]
    if not keys:
        raise ValueError(f"nothing to measure: --transitions {','.join(args.transitions)} does not apply to "
                         f"--modes {','.join(args.modes)} (predicted is for infer, sampled for train)")
    return keys


@dataclass
class RunPlan:
    """What a run measures, every argument checked (see plan_run)."""

    names: list[str]  # the implementations
    keys: list[tuple[str, int, str]]  # the measurements: (mode, batch size, transitions)
    defaults: dict  # QUICK or FULL
    rounds: int
    round_time: float
    pairs: dict = field(default_factory=dict)  # mode -> the pairs its workers batch (read by plan_run)
    buckets: list = field(default_factory=list)  # their token-count bucket boundaries


def plan_run(args) -> RunPlan:
    """The run the arguments ask for (the flags not given filled in first), or a one-line ValueError for any argument
    that would measure nothing, before the folder is locked or a worker starts."""
    apply_preset(args)
    defaults = QUICK if args.quick else FULL
    plan = RunPlan(plan_implementations(args), plan_keys(args, defaults), defaults,
                   rounds=defaults["rounds"] if args.rounds is None else args.rounds,  # an explicit value wins
                   round_time=defaults["round_time"] if args.round_time is None else args.round_time)
    # Counts and durations that would time nothing (or never stop) are refused, never replaced by a default.
    if plan.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {plan.rounds}")
    if not (plan.round_time > 0 and math.isfinite(plan.round_time)):
        raise ValueError(f"--round-time must be a positive number of seconds, got {plan.round_time}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.num_pairs is not None and args.num_pairs < 1:
        raise ValueError(f"--num-pairs must be at least 1, got {args.num_pairs}")
    if args.model == "treelstm" and set(args.transitions) - {"gold"}:
        raise ValueError("--model treelstm has no tracker, so no transition head to decide a parse: "
                         "use --transitions gold")
    if not plan.names:
        installed = [f for f in frameworks.FRAMEWORKS if frameworks.installed(f)]
        raise ValueError(f"nothing to measure: no implementation left after --frameworks/--implementations "
                         f"(installed frameworks: {', '.join(installed) or 'none'})")
    _check_batches(args, plan)
    return plan


def _check_batches(args, plan: RunPlan) -> None:
    """Refuse a batch size that no batch of the data can fill (its worker would measure nothing), the data loaded and
    the batches planned as a worker does."""
    dataset = load_dataset(argparse.Namespace(**_data(args, plan.defaults)))
    plan.pairs = {"infer": dataset.pairs, "train": [p for p in dataset.pairs if p.label >= 0]}
    plan.buckets = buckets = resolve_buckets(args.buckets or DEFAULT_BUCKETS, dataset.pairs)
    for mode, batch_size in dict.fromkeys((mode, b) for mode, b, _ in plan.keys):
        lengths = [pair_length(p) for p in plan.pairs[mode]]
        what = f"the {len(lengths)} {'labelled ' if mode == 'train' else ''}pairs of {dataset.name}"
        if batch_size > len(lengths):
            raise ValueError(f"batch size {batch_size} is larger than {what} ({mode}): it would measure nothing "
                             f"(a smaller --batch-sizes, or more --num-pairs)")
        if args.batching == "pairs" and not plan_batches(lengths, batch_size, buckets=buckets, drop_last=True).batches:
            raise ValueError(f"no length bucket of {what} ({mode}) holds {batch_size} of them (buckets "
                             f"{','.join(map(str, buckets))}): batch size {batch_size} would measure nothing "
                             f"(fewer --buckets, or a smaller batch)")


def planned_shapes(args, plan: RunPlan) -> dict[tuple[str, int], int]:
    """(mode, batch size) -> the batch shapes (N, T) its workers will warm up on, planned as theirs."""
    from shared.vocab import Vocabulary

    vocab = Vocabulary.from_pairs(plan.pairs["infer"], lowercase=True)
    batches = {(mode, b): make_sentence_batches(plan.pairs[mode], vocab, b, buckets=plan.buckets)
               if args.batching == "sentences" else
               make_batches(plan.pairs[mode], vocab, b, buckets=plan.buckets, drop_last=True)
               for mode, b, _ in plan.keys}
    return {key: len({(b.num_tokens, b.num_steps) for b in planned}) for key, planned in batches.items()}


def _data(args, defaults: dict) -> dict:
    """The load_dataset arguments every worker loads its data with."""
    return {"data": args.data, "split": args.split,
            "num_pairs": defaults["num_pairs"] if args.num_pairs is None else args.num_pairs,
            "shape": args.shape, "length": args.length, "data_seed": args.data_seed}


def busy_note() -> None:
    """Say at the start of a run when other work already keeps the machine busy."""
    load_now, cores = os.getloadavg()[0], os.cpu_count() or 1
    if is_busy(load_now, cores):
        print(f"note: the machine is busy: 1-minute load average {load_now:.2f} on {cores} cores before the run "
              f"starts (more than {other_work_limit(cores):g} of other work); the report marks the rounds timed while "
              "it stays so", file=sys.stderr)


def worker_specs(args, names: list[str], out_dir: Path, defaults: dict) -> list[WorkerSpec]:
    """One WorkerSpec per implementation: what the flags (and --quick) ask for."""
    sizes = preset(args.size or ("quick" if args.quick else "full"))
    if args.model == "treelstm":
        sizes["tracker_dim"] = 0
    data = _data(args, defaults)
    cache = str(Path(args.compilation_cache).resolve()) if args.compilation_cache else None
    specs = []
    for name in names:
        framework, options = frameworks.IMPLEMENTATIONS[name]
        cached = frameworks.platform(framework).has_compilation_cache
        specs.append(WorkerSpec(
            implementation=name, framework=framework, out_dir=str(out_dir),
            options={**options, **frameworks.implementation(name).timed_options},  # as the framework's users run it
            device=args.device, dtype=args.dtype, data=data, sizes=sizes,
            agreement_pairs=defaults["agreement_pairs"],
            buckets=args.buckets if isinstance(args.buckets, str) else list(args.buckets or DEFAULT_BUCKETS),
            batching=args.batching, transition_head=args.model != "treelstm",
            env=dict(frameworks.implementation(name).env),
            compilation_cache=cache if cached else None,
            # Without a cache of the user's, a private one times a compilation loaded from it (a report target).
            measure_cache=cached and not cache and "train" in args.modes and "gold" in args.transitions))
    return specs
