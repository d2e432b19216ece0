"""``python -m bench run``: the cross-framework benchmark (the suite's main job).

The parent process only plans, drives and collects. Every implementation is
measured by a worker process of its own (bench/benchmark/worker.py), all
started at once and kept alive for the whole run. For each measurement (mode,
batch size, transitions) the parent first has each worker warm up in turn
(tracing and compiling, counted and timed alone), then times in interleaved
rounds: each round visits every implementation, in an order rotated from
round to round, and each times the same slice of the same batch plan. Load
that comes and goes on the machine then lands on every implementation alike,
and a ratio between two implementations is taken round by round (its median
and spread are in the report). Records go to ``OUT/results.jsonl`` as each
measurement completes; the run holds a lock on OUT while it runs. Arguments
that would measure nothing are refused before anything starts (``plan_run``),
each round also records the machine's load and the CPU time the timed worker
got, and the run ends by writing ``OUT/report.md`` and its plots, as
``python -m bench report OUT`` would.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import frameworks
from bench.benchmark.measure import pairwise_agreement
from bench.benchmark.pool import WorkerPool
from bench.benchmark.report import (format_host_syncs, format_matrix, format_phases, format_ratios, format_table,
                                    format_targets, is_busy, load_summary, other_work_limit, variants_measured, write_report)
from bench.benchmark.report import load as load_results  # results.jsonl as `bench report` reads it
from bench.benchmark.worker import WorkerSpec
from bench.config import preset
from bench.datasets import add_data_arguments, load_dataset
from bench.lock import lock_output
from bench.provenance import provenance
from bench.progress import Progress
from bench.records import append_record, read_records, write_json
from shared.batching import DEFAULT_BUCKETS, length_buckets, pair_length, plan_batches

QUICK = {"num_pairs": 64, "batch_sizes": [1, 8], "decided_batch_sizes": [1, 8], "rounds": 3,
         "round_time": 0.05, "agreement_pairs": 8}
FULL = {"num_pairs": None, "batch_sizes": [1, 32, 128], "decided_batch_sizes": [1, 128], "rounds": 7,
        "round_time": 0.4, "agreement_pairs": 32}

# Which transitions each mode can follow (docs/spec.md §7): inference reads
# the data's parse or predicts its own; training follows the data's parse
# (supervised) or samples one (REINFORCE).
TRANSITIONS = {"infer": ("gold", "predicted"), "train": ("gold", "sampled")}


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
    p.add_argument("--modes", type=_name_list, default=["infer", "train"], help="infer,train [default: both]")
    p.add_argument("--transitions", type=_name_list, default=["gold", "predicted"],
                   help="gold (the data's parse), predicted (inference follows the model's own parse), "
                        "sampled (the REINFORCE training step) [default: gold,predicted]")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                   help="auto: the GPU if the framework sees one, else the CPU [default: %(default)s]")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved timing rounds per measurement [default: 7; quick: 3]")
    p.add_argument("--round-time", type=float, default=None,
                   help="seconds the slowest implementation spends per round, roughly [default: 0.4; quick: 0.05]")
    p.add_argument("--size", choices=("full", "quick"), default=None,
                   help="model size: full (E=H=300, D=64, M=1024, L=2) or quick (16-wide) "
                        "[default: full; quick with --quick]")
    p.add_argument("--quick", action="store_true",
                   help="tiny model, 64 pairs, 3 short rounds: the harness end to end in about a minute")
    p.add_argument("--out", default="results/latest", help="output folder [default: %(default)s]")
    p.add_argument("--resume", action="store_true",
                   help="keep OUT/results.jsonl and measure only what it lacks")
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
                   help="turn on the persistent compilation cache of the frameworks that have one, in DIR "
                        f"({', '.join(_cached_frameworks()) or 'none registered'}; off by default): a second run "
                        "then loads compiled programs instead of compiling them")
    add_data_arguments(p)
    p.set_defaults(func=cmd_run)


def _cached_frameworks() -> list[str]:
    """The frameworks whose platform has a persistent compilation cache."""
    return [name for name in frameworks.FRAMEWORKS if frameworks.platform(name).has_compilation_cache]


def plan_implementations(args) -> list[str]:
    implementations = frameworks.IMPLEMENTATIONS
    if args.implementations:
        unknown = [name for name in args.implementations if name not in implementations]
        if unknown:
            raise ValueError(f"unknown implementation(s) {unknown}; choose from {list(implementations)}")
        return list(dict.fromkeys(args.implementations))
    chosen = args.frameworks
    if chosen is None:
        # Looked up, not imported: the workers import the frameworks, the parent never does.
        chosen = [f for f in frameworks.FRAMEWORKS if frameworks.installed(f)]
        missing = sorted(set(frameworks.FRAMEWORKS) - set(chosen))
        if missing:
            print(f"note: not installed, not measured: {', '.join(missing)}", file=sys.stderr)
    unknown = [f for f in chosen if f not in frameworks.FRAMEWORKS]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}; choose from {list(frameworks.FRAMEWORKS)}")
    return [name for name, (framework, _) in implementations.items()
            if framework in chosen and name not in frameworks.OPT_IN]


def plan_keys(args, defaults: dict) -> list[tuple[str, int, str]]:
    """The measurements, (mode, batch size, transitions), in the order they are made."""
    if not args.modes or not args.transitions:
        raise ValueError("nothing to measure: --modes and --transitions need at least one value each")
    for mode in args.modes:
        if mode not in TRANSITIONS:
            raise ValueError(f"unknown mode {mode!r}; choose from infer, train")
    known = {t for ts in TRANSITIONS.values() for t in ts}
    for transitions in args.transitions:
        if transitions not in known:
            raise ValueError(f"unknown transitions {transitions!r}; choose from gold, predicted, sampled")
    keys = []
    for transitions in ("gold", "predicted", "sampled"):
        if transitions not in args.transitions:
            continue
        for mode in args.modes:
            if transitions not in TRANSITIONS[mode]:
                continue
            sizes = args.batch_sizes or defaults["batch_sizes" if transitions == "gold" else "decided_batch_sizes"]
            keys += [(mode, b, transitions) for b in sizes]
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


def plan_run(args) -> RunPlan:
    """The run the arguments ask for, or a one-line refusal (ValueError) of any
    argument that would measure nothing. It comes before the output folder is
    locked and before any worker starts: a run refused after minutes of start-up
    and warm-up, or one that measures nothing and exits 0, wastes the user's time."""
    defaults = QUICK if args.quick else FULL
    plan = RunPlan(plan_implementations(args), plan_keys(args, defaults), defaults,
                   rounds=defaults["rounds"] if args.rounds is None else args.rounds,  # an explicit value wins
                   round_time=defaults["round_time"] if args.round_time is None else args.round_time)
    _check_numbers(args, plan)
    if not plan.names:
        installed = [f for f in frameworks.FRAMEWORKS if frameworks.installed(f)]
        raise ValueError(f"nothing to measure: no implementation left after --frameworks/--implementations "
                         f"(installed frameworks: {', '.join(installed) or 'none'})")
    _check_batches(args, plan)
    return plan


def _check_numbers(args, plan: RunPlan) -> None:
    """Counts and durations that would time nothing (or never stop) are refused, never replaced by a default."""
    if plan.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {plan.rounds}")
    if not (plan.round_time > 0 and math.isfinite(plan.round_time)):
        raise ValueError(f"--round-time must be a positive number of seconds, got {plan.round_time}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.num_pairs is not None and args.num_pairs < 1:
        raise ValueError(f"--num-pairs must be at least 1, got {args.num_pairs}")


def _check_batches(args, plan: RunPlan) -> None:
    """Refuse a batch size that no batch of the data can fill: its worker would
    skip it and the run would measure nothing there. The data are loaded as a
    worker loads them (no framework needed) and the batches planned as it plans
    them: whole batches within each length bucket."""
    dataset = load_dataset(argparse.Namespace(**_data(args, plan.defaults)))
    pairs = {"infer": dataset.pairs, "train": [p for p in dataset.pairs if p.label >= 0]}
    buckets = args.buckets or list(DEFAULT_BUCKETS)
    if isinstance(buckets, str):  # "auto:K": the worker's quantiles of the same data
        buckets = list(length_buckets([pair_length(p) for p in dataset.pairs], int(buckets.partition(":")[2])))
    for mode, batch_size in dict.fromkeys((mode, b) for mode, b, _ in plan.keys):
        lengths = [pair_length(p) for p in pairs[mode]]
        what = f"the {len(lengths)} {'labelled ' if mode == 'train' else ''}pairs of {dataset.name}"
        if batch_size > len(lengths):
            raise ValueError(f"batch size {batch_size} is larger than {what} ({mode}): it would measure nothing "
                             f"(a smaller --batch-sizes, or more --num-pairs)")
        if args.batching == "pairs" and not plan_batches(lengths, batch_size, buckets=buckets,
                                                         drop_last=True).batches:
            raise ValueError(f"no length bucket of {what} ({mode}) holds {batch_size} of them (buckets "
                             f"{','.join(map(str, buckets))}): batch size {batch_size} would measure nothing "
                             f"(fewer --buckets, or a smaller batch)")


def _data(args, defaults: dict) -> dict:
    """The bench.datasets arguments every worker loads its data with."""
    return {"data": args.data, "split": args.split,
            "num_pairs": defaults["num_pairs"] if args.num_pairs is None else args.num_pairs,
            "shape": args.shape, "length": args.length, "data_seed": args.data_seed}


def busy_note() -> str:
    """A line for the start of a run when other work already keeps the machine
    busy (the run's own processes come on top): its ratios may not hold on a
    quiet machine, and the user may prefer to wait. Empty when the machine is not busy."""
    load_now, cores = os.getloadavg()[0], os.cpu_count() or 1
    if not is_busy(load_now, cores):
        return ""
    return (f"note: the machine is busy: 1-minute load average {load_now:.2f} on {cores} cores before the run "
            f"starts (more than {other_work_limit(cores):g} of other work); the report marks the rounds timed while "
            "it stays so")


def worker_specs(args, names: list[str], out_dir: Path, defaults: dict) -> list[WorkerSpec]:
    """One WorkerSpec per implementation: what the flags (and --quick) ask for."""
    sizes = preset(args.size or ("quick" if args.quick else "full"))
    data = _data(args, defaults)
    cache = str(Path(args.compilation_cache).resolve()) if args.compilation_cache else None
    specs = []
    for name in names:
        framework, options = frameworks.IMPLEMENTATIONS[name]
        cached = frameworks.platform(framework).has_compilation_cache
        specs.append(WorkerSpec(
            implementation=name, framework=framework, options=options, out_dir=str(out_dir),
            device=args.device, dtype=args.dtype, data=data, sizes=sizes,
            agreement_pairs=defaults["agreement_pairs"],
            buckets=args.buckets if isinstance(args.buckets, str) else list(args.buckets or DEFAULT_BUCKETS),
            batching=args.batching,
            compilation_cache=cache if cached else None,
            # Without a cache of the user's, a private one times a compilation loaded from it (a report target).
            measure_cache=cached and not cache and "train" in args.modes and "gold" in args.transitions))
    return specs


def cmd_run(args) -> int:
    plan = plan_run(args)  # refused here, before the folder is locked or a worker starts
    out_dir = Path(args.out)
    lock = lock_output(out_dir, f"bench run --out {args.out}")
    try:
        return _run(args, plan, out_dir)
    finally:
        lock.release()


def _run(args, plan: RunPlan, out_dir: Path) -> int:
    results = out_dir / "results.jsonl"
    if results.exists() and results.stat().st_size and not args.resume:
        raise ValueError(f"{results} already holds results: use --resume to complete it, "
                         f"or another --out (nothing is overwritten)")
    names = plan.names
    done = {(r["implementation"], r["mode"], r["batch_size"], r.get("transitions", "gold"))
            for r in read_records(results)}
    todo = [key for key in plan.keys if any((name, *key) not in done for name in names)]
    if args.resume and not todo:
        print(f"benchmark: {results} already holds every measurement asked for", file=sys.stderr)
    run = {"run_id": time.strftime("%Y%m%dT%H%M%S"), "rounds": plan.rounds, "round_time": plan.round_time,
           "cpu_count": os.cpu_count(),
           # What each implementation's records measured (bench/provenance.py), taken as the run starts.
           "provenance": {name: provenance("benchmark", [frameworks.framework(frameworks.resolve(name)[0]).package])
                          for name in names}}
    note = busy_note()
    if note:
        print(note, file=sys.stderr)
    print(f"benchmark: {', '.join(names)}; {len(todo)} measurements, {run['rounds']} interleaved rounds each "
          f"-> {results}", file=sys.stderr)
    failures: dict[str, str] = {}
    if todo:
        with WorkerPool(worker_specs(args, names, out_dir, plan.defaults), out_dir, args.timeout) as pool:
            failures = _measure(pool, todo, done, run, args, results)
    records = [r for r in read_records(results) if r["implementation"] in names]
    agreement = pairwise_agreement(out_dir, names)
    write_json(out_dir / "agreement.json", agreement)
    print()
    print(format_table(records))
    print()
    print(format_ratios(records))
    host_syncs = format_host_syncs(records)
    if host_syncs:
        print("\n" + host_syncs)
    phases = format_phases(records)
    if phases:
        print("\n" + phases)
    if variants_measured(records):
        print("\n" + format_matrix(records))
    print()
    print(format_targets(records))
    if agreement:
        print("\nPairwise agreement (max abs difference):")
        for pair, diff in agreement.items():
            print(f"  {pair}: encodings {diff['max_abs_diff_encoding']:.1e}, "
                  f"logits {diff['max_abs_diff_logits']:.1e}")
    summary = load_summary(records)
    if summary:
        print("\n" + summary)
    _report(args.out)
    for name, why in failures.items():
        print(f"error: {name} {why}", file=sys.stderr)
    return 1 if failures else 0


def _report(out: str) -> None:
    """What ``python -m bench report OUT`` writes (the same code: report.md and
    its plots in OUT), so a run ends with its report; and where it is."""
    records = load_results([out])
    if not records:
        print(f"benchmark: nothing measured, so no report in {out}", file=sys.stderr)
        return
    _, written = write_report(records, [out], Path(out))
    print(f"\nreport: {written[0]}" + (f" (plots: {', '.join(p.name for p in written[1:])})" if written[1:] else ""))


def _measure(pool: WorkerPool, keys, done, run: dict, args, results: Path) -> dict[str, str]:
    """Start-up, agreement, peaks, then every key in interleaved rounds."""
    failures = {}
    errors = pool.start()
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        if args.device == "gpu":  # asked for a GPU that some framework lacks: measure nothing
            raise ValueError(f"--device gpu: {len(errors)} of {len(pool.workers)} implementations cannot run")
        failures.update({w.name: "failed to start" for w in pool.workers if w.failed})
    progress = Progress("bench run", len(keys) * (1 + run["rounds"]), unit="steps", interval=20.0)
    agreement, peaks = {}, {}
    for worker in pool.alive():
        progress.status(f"{worker.name}: agreement with the float64 reference")
        result = pool.ask(worker, "agreement", transitions=args.transitions)
        if result is None:
            continue
        agreement[worker.name] = result
        verdict = "ok" if result["agreement_ok"] else "DISAGREES WITH THE REFERENCE"
        parse = (f", predicted parses {100 * result['parse_agreement']:.1f} % equal"
                 if "parse_agreement" in result else "")
        progress.write(f"{worker.name}: agreement encodings {result['max_abs_err_encoding']:.1e}, logits "
                       f"{result['max_abs_err_logits']:.1e}, grads {result['max_rel_err_grads']:.1e} (rel)"
                       f"{parse}: {verdict}")
        if not result["agreement_ok"]:
            failures[worker.name] = "disagrees with the float64 reference"
    for worker in pool.alive():
        progress.status(f"{worker.name}: dense matmul peak")
        peak = pool.ask(worker, "peak")
        if peak is not None:
            peaks[worker.name] = peak
            progress.write(f"{worker.name}: dense matmul peak {peak['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s")
    if not peaks:
        progress.close()
        return {**failures, **{w.name: w.failed for w in pool.workers if w.failed}}
    device_peak = max(peaks.items(), key=lambda item: item[1]["matmul_peak_flops_per_s"])
    for key in keys:
        mode, batch_size, transitions = key
        workers = [w for w in pool.alive() if (w.name, *key) not in done and w.name in agreement]
        label = f"{mode} B={batch_size} {transitions}"
        measured = _measure_key(pool, workers, key, run, progress, label)
        load = os.getloadavg()[0]
        for worker, numbers in measured.items():
            record = _record(worker, key, numbers, run, agreement[worker.name], peaks[worker.name], device_peak,
                             [w.name for w in measured], args)
            record["load_avg_1min"] = [numbers["load_before"], load]
            append_record(results, record)
        progress.write(_summary(label, measured))
    progress.close()
    failures.update({w.name: f"failed: {w.failed}" for w in pool.workers if w.failed and w.name not in failures})
    return failures


def _measure_key(pool: WorkerPool, workers, key, run: dict, progress: Progress, label: str) -> dict:
    """Warm-up one worker at a time, then the interleaved rounds; numbers per worker."""
    mode, batch_size, transitions = key
    name = f"{mode}-{batch_size}-{transitions}"
    prepared = {}
    for worker in workers:
        progress.status(f"{label}: {worker.name} warm-up (tracing, compiling)")
        load_before = os.getloadavg()[0]
        reply = pool.ask(worker, "prepare", key=name, mode=mode, batch_size=batch_size, transitions=transitions)
        if reply is None:
            continue
        if "skipped" in reply:
            progress.write(f"{label}: {worker.name} skipped: {reply['skipped']}")
            continue
        prepared[worker] = {**reply, "load_before": load_before, "times": [], "round_pairs_per_s": [],
                            "round_step_s": [], "round_load": [], "round_cpu_share": [], "pairs": 0, "flops": 0}
    progress.update(1)
    if not prepared:
        return {}
    # Every implementation times the same batches in a round: as many as the
    # slowest needs for about round_time seconds.
    slowest = max(numbers["step_estimate_s"] for numbers in prepared.values())
    per_round = max(1, int(run["round_time"] / max(slowest, 1e-9)))
    order = list(prepared)
    for r in range(run["rounds"]):
        progress.status(f"{label}: round {r + 1} of {run['rounds']}")
        shift = r % len(order)
        for worker in order[shift:] + order[:shift]:
            if worker not in prepared:
                continue
            reply = pool.ask(worker, "time", key=name, start=r * per_round, count=per_round)
            if reply is None:
                del prepared[worker]
                continue
            numbers = prepared[worker]
            numbers["times"] += reply["times"]
            numbers["pairs"] += reply["pairs"]
            numbers["flops"] += reply["flops"]
            numbers["round_pairs_per_s"].append(reply["pairs"] / sum(reply["times"]))
            numbers["round_step_s"].append(float(np.median(reply["times"])))
            numbers["round_load"].append(reply["load_avg_1min"])
            numbers["round_cpu_share"].append(reply["cpu_s"] / reply["wall_s"])
        progress.update(1)
    for worker in list(prepared):
        reply = pool.ask(worker, "finish", key=name)
        if reply is None:
            del prepared[worker]
            continue
        prepared[worker].update(reply, batches_per_round=per_round)
    return prepared


def _record(worker, key, n: dict, run: dict, agreement: dict, peak: dict, device_peak, interleaved, args) -> dict:
    """One results.jsonl record (docs/spec.md §6 keys and more)."""
    mode, batch_size, transitions = key
    ready, spec = worker.ready, worker.spec
    total = float(np.sum(n["times"]))
    useful = n["flops"] / total
    record = {
        "implementation": worker.name, "framework": spec.framework, "framework_version": ready["framework_version"],
        "mode": mode, "transitions": transitions, "device": ready["device"], "device_name": ready["device_name"],
        "dtype": spec.dtype, "batch_size": batch_size,
        "pairs_per_s": n["pairs"] / total,
        "step_s_median": float(np.median(n["times"])),
        "step_s_p10": float(np.percentile(n["times"], 10)),
        "step_s_p90": float(np.percentile(n["times"], 90)),
        "rounds": len(n["round_pairs_per_s"]), "batches_per_round": n["batches_per_round"],
        "round_pairs_per_s": n["round_pairs_per_s"], "round_step_s": n["round_step_s"],
        "round_load": n["round_load"], "round_cpu_share": n["round_cpu_share"], "cpu_count": run["cpu_count"],
        "interleaved_with": interleaved,
        "timed_batches": len(n["times"]), "timed_pairs": n["pairs"],
        "compile_s": n["compile_s"], "traces": n["traces"], "compile_detail": n["compile_detail"],
        "first_call_s": n["first_call_s"], "warmup_shapes": n["warmup_shapes"],
        "traces_total": n["traces_total"], "retraces_while_timed": n["retraces_while_timed"],
        "useful_flops": n["flops"], "useful_flops_per_s": useful,
        "matmul_peak_flops_per_s": peak["matmul_peak_flops_per_s"], "matmul_peak_n": peak["matmul_peak_n"],
        "flops_fraction_of_peak": useful / peak["matmul_peak_flops_per_s"],
        "device_peak_flops_per_s": device_peak[1]["matmul_peak_flops_per_s"],
        "device_peak_implementation": device_peak[0],
        "useful_fraction_of_device_peak": useful / device_peak[1]["matmul_peak_flops_per_s"],
        "peak_mem_bytes": n["peak_mem_bytes"], "peak_rss_bytes": n["peak_rss_bytes"],
        "padding_waste": n["padding_waste"], "padding_waste_arrays": n["padding_waste_arrays"],
        "padding_waste_loop": n["padding_waste_loop"], "batching": spec.batching, "buckets": ready["buckets"],
        "data": ready["data"], "model": ready["model"],
        "optimizer": "adam" if mode == "train" else None, "options": spec.options,
        "compilation_cache": spec.compilation_cache,
        **{k: v for k, v in agreement.items()},
        **{k: ready[k] for k in ("python", "numpy", "platform", "cpu", "threads", "precision_modes")},
        **run["provenance"][worker.name], "run_id": run["run_id"],
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for optional in ("host_syncs_per_batch", "cached_compile", "phase_s_per_batch", "graph_per_batch"):
        if optional in n:
            record[optional] = n[optional]
    return record


def _summary(label: str, measured: dict) -> str:
    parts = [f"{w.name} {n['pairs'] / sum(n['times']):,.1f} pairs/s (compile {n['compile_s']:.1f} s)"
             for w, n in measured.items()]
    return f"{label}: " + "; ".join(parts) if parts else f"{label}: nothing measured"
