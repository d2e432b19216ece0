"""``python -m bench run``: the cross-framework benchmark (the suite's main job).

The parent process only plans and collects: each implementation is measured
by ``python -m bench.benchmark.worker`` in a subprocess of its own, which
appends its records to ``OUT/results.jsonl`` as it goes. At the end the
parent compares the implementations' outputs pairwise, prints a table and
the targets, and fails (exit 1) if any implementation crashed or disagreed
with the reference.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.benchmark.measure import git_commit, pairwise_agreement
from bench.benchmark.report import format_table, format_targets
from bench.benchmark.worker import WorkerSpec
from bench.config import preset, worker_env
from bench.datasets import add_data_arguments
from bench.frameworks import FRAMEWORKS, IMPLEMENTATIONS, OPT_IN, installed
from bench.records import read_records, write_json

QUICK = {"num_pairs": 64, "batch_sizes": [1, 8], "repeats": 3, "min_time": 0.2, "agreement_pairs": 8}
FULL = {"num_pairs": None, "batch_sizes": [1, 32, 128], "repeats": 10, "min_time": 1.0, "agreement_pairs": 32}


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive, got {text!r}")
    return values


def _name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def register(sub) -> None:
    p = sub.add_parser("run", help="measure every implementation: speed, compile time, memory, agreement",
                       description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", type=_name_list, default=None,
                   help=f"comma-separated, from {','.join(FRAMEWORKS)} [default: every installed one]")
    p.add_argument("--implementations", type=_name_list, default=None,
                   help=f"exact variants, from {','.join(IMPLEMENTATIONS)} [default: those of the frameworks, "
                        f"except the opt-in {','.join(sorted(OPT_IN))}]")
    p.add_argument("--batch-sizes", type=_int_list, default=None, help="[default: 1,32,128; quick: 1,8]")
    p.add_argument("--modes", type=_name_list, default=["infer", "train"], help="infer,train [default: both]")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                   help="auto: the GPU if the framework sees one, else the CPU [default: %(default)s]")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--repeats", type=int, default=None, help="timed batches at least [default: 10; quick: 3]")
    p.add_argument("--min-time", type=float, default=None,
                   help="timed seconds at least per measurement [default: 1.0; quick: 0.2]")
    p.add_argument("--size", choices=("full", "quick"), default=None,
                   help="model size: full (E=H=300, D=64, M=1024, L=2) or quick (16-wide) "
                        "[default: full; quick with --quick]")
    p.add_argument("--quick", action="store_true",
                   help="tiny model, 64 pairs, few repeats: under a minute per implementation (smoke tests, CI)")
    p.add_argument("--out", default="results/latest", help="output folder [default: %(default)s]")
    p.add_argument("--resume", action="store_true",
                   help="keep OUT/results.jsonl and measure only what it lacks")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per implementation [default: %(default)s]")
    p.add_argument("--buckets", type=_int_list, default=None,
                   help="token-count bucket boundaries of the batches, e.g. 8,12,16,24,32,64: finer buckets "
                        "mean less padding and more shapes to compile [default: 8,16,32,64]")
    p.add_argument("--jax-compilation-cache", default=None, metavar="DIR",
                   help="turn on JAX's persistent compilation cache in DIR (off by default); "
                        "a second run then loads compiled programs instead of compiling them")
    add_data_arguments(p)
    p.set_defaults(func=cmd_run)


def plan_implementations(args) -> list[str]:
    if args.implementations:
        unknown = [name for name in args.implementations if name not in IMPLEMENTATIONS]
        if unknown:
            raise ValueError(f"unknown implementation(s) {unknown}; choose from {list(IMPLEMENTATIONS)}")
        return args.implementations
    frameworks = args.frameworks
    if frameworks is None:
        # Looked up, not imported: the workers import the frameworks, the parent never does.
        frameworks = [f for f in FRAMEWORKS if installed(f)]
        missing = sorted(set(FRAMEWORKS) - set(frameworks))
        if missing:
            print(f"note: not installed, not measured: {', '.join(missing)}", file=sys.stderr)
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}; choose from {list(FRAMEWORKS)}")
    return [name for name, (framework, _) in IMPLEMENTATIONS.items()
            if framework in frameworks and name not in OPT_IN]


def worker_specs(args, names: list[str], out_dir: Path, done: set) -> list[WorkerSpec]:
    """One WorkerSpec per implementation: what the flags (and --quick) ask for."""
    defaults = QUICK if args.quick else FULL
    sizes = preset(args.size or ("quick" if args.quick else "full"))
    data = {"data": args.data, "split": args.split, "num_pairs": args.num_pairs or defaults["num_pairs"],
            "shape": args.shape, "length": args.length, "data_seed": args.data_seed}
    run_id, commit = time.strftime("%Y%m%dT%H%M%S"), git_commit()
    specs = []
    for name in names:
        framework, options = IMPLEMENTATIONS[name]
        if framework == "jax" and args.jax_compilation_cache:
            options = {**options, "compilation_cache_dir": str(Path(args.jax_compilation_cache).resolve())}
        specs.append(WorkerSpec(
            implementation=name, framework=framework, options=options, out_dir=str(out_dir),
            device=args.device, dtype=args.dtype, modes=args.modes,
            batch_sizes=args.batch_sizes or defaults["batch_sizes"], data=data, sizes=sizes,
            repeats=args.repeats or defaults["repeats"],
            min_time=args.min_time if args.min_time is not None else defaults["min_time"],
            agreement_pairs=defaults["agreement_pairs"], buckets=args.buckets,
            skip=[[m, b] for (impl, m, b) in done if impl == name], git_commit=commit, run_id=run_id))
    return specs


def run_worker(spec: WorkerSpec, out_dir: Path, timeout: float) -> int | str:
    """Measure one implementation in a process of its own; its exit code (or "timeout")."""
    spec_path = out_dir / "specs" / f"{spec.implementation}.json"
    spec_path.parent.mkdir(exist_ok=True)
    spec_path.write_text(json.dumps(dataclasses.asdict(spec), indent=1))
    try:
        return subprocess.run([sys.executable, "-m", "bench.benchmark.worker", str(spec_path)],
                              env=worker_env(spec.dtype), timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def cmd_run(args) -> int:
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.jsonl"
    if results.exists() and results.stat().st_size and not args.resume:
        raise ValueError(f"{results} already holds results: use --resume to complete it, "
                         f"or another --out (nothing is overwritten)")
    names = plan_implementations(args)
    done = {(r["implementation"], r["mode"], r["batch_size"]) for r in read_records(results)}
    failures = []
    print(f"benchmark: {', '.join(names)} -> {results}", file=sys.stderr)
    for k, spec in enumerate(worker_specs(args, names, out_dir, done), start=1):
        print(f"[{spec.implementation}] implementation {k} of {len(names)}", file=sys.stderr)
        started = time.perf_counter()
        code = run_worker(spec, out_dir, args.timeout)
        print(f"[{spec.implementation}] finished in {time.perf_counter() - started:.0f} s (exit {code})",
              file=sys.stderr)
        if code != 0:
            failures.append((spec.implementation, code))

    records = [r for r in read_records(results) if r["implementation"] in names]
    agreement = pairwise_agreement(out_dir, names)
    write_json(out_dir / "agreement.json", agreement)
    print()
    print(format_table(records))
    print()
    print(format_targets(records))
    if agreement:
        print("\nPairwise agreement (max abs difference):")
        for pair, diff in agreement.items():
            print(f"  {pair}: encodings {diff['max_abs_diff_encoding']:.1e}, "
                  f"logits {diff['max_abs_diff_logits']:.1e}")
    if failures:
        for name, code in failures:
            why = "disagrees with the float64 reference" if code == 3 else f"failed (exit {code})"
            print(f"error: {name} {why}", file=sys.stderr)
        return 1
    return 0
