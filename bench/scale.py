"""``python -m bench scale``: what data parallelism buys, framework by
framework, measured with ``bench train --replicas K`` in rotated rounds (``OUT/results.jsonl``, ``OUT/report.md``)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import frameworks
from bench.config import SIZES, size_help
from bench.errors import WorkFailed
from bench.lock import FolderLock
from bench.provenance import loaded, provenance, timestamp
from bench.records import append_record, read_metrics, read_records


def register(sub) -> None:
    p = sub.add_parser("scale", help="data-parallel scaling: bench train --replicas K for each framework that has "
                                     "an engine, in interleaved rounds",
                       description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for results.jsonl, report.md and the runs")
    p.add_argument("--frameworks", default=None,
                   help="comma-separated [default: every framework with a data-parallel engine]")
    p.add_argument("--replicas", default="1,2", help="comma-separated K values, 1 first [default: %(default)s]")
    p.add_argument("--rounds", type=int, default=3, help="[default: %(default)s]")
    p.add_argument("--steps", type=int, default=20, help="steps per run [default: %(default)s]")
    p.add_argument("--warmup", type=int, default=4, help="first steps of each run left out [default: %(default)s]")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split over the replicas "
                                                              "[default: %(default)s]")
    p.add_argument("--size", default="full", choices=sorted(SIZES), help=f"{size_help()} [default: %(default)s]")
    p.add_argument("--data", default="sample", help="as bench train's --data [default: %(default)s]")
    p.add_argument("--report-only", action="store_true", help="write report.md from OUT/results.jsonl and stop")
    p.set_defaults(func=cmd_scale)


def check_arguments(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """The frameworks and K values to measure, or a ValueError in one line."""
    try:
        replicas = [int(v) for v in args.replicas.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--replicas: expected comma-separated whole numbers, got {args.replicas!r}") from None
    if not replicas or min(replicas) < 1:
        raise ValueError(f"--replicas: expected whole numbers >= 1, got {args.replicas!r}")
    if replicas[0] != 1:
        raise ValueError("--replicas: start with 1 (the speed-ups are over one replica)")
    engines = [name for name in frameworks.FRAMEWORKS if frameworks.platform(name).data_parallel]
    chosen = engines if args.frameworks is None else [n.strip() for n in args.frameworks.split(",") if n.strip()]
    for name in chosen:
        if name not in frameworks.FRAMEWORKS:
            raise ValueError(f"--frameworks: unknown framework {name!r}; choose from {', '.join(engines)}")
        if not frameworks.platform(name).data_parallel:
            raise ValueError(f"--frameworks: {name}: {frameworks.platform(name).data_parallel_missing}")
    for k in (k for k in replicas if args.batch_size % k):
        raise ValueError(f"--batch-size {args.batch_size} does not split into {k} replicas")
    if args.rounds < 1 or args.steps <= args.warmup or args.warmup < 0:
        raise ValueError(f"need --rounds >= 1 and --steps > --warmup >= 0, got {args.rounds}, {args.steps}, "
                         f"{args.warmup}")
    return chosen, replicas


def run_one(args, framework: str, k: int, round_: int, out: Path) -> dict:
    """One ``bench train`` run; its record, with the source files that ran (bench/provenance.py)."""
    folder = out / "runs" / f"{framework}-k{k}-r{round_}"
    argv = [sys.executable, "-m", "bench", "train", "--framework", framework, "--replicas", str(k),
            "--data", args.data, "--size", args.size, "--batch-size", str(args.batch_size), "--steps", str(args.steps),
            "--log-every", "1", "--dev", "none", "--train-eval-pairs", "0", "--quiet", "--out", str(folder)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise WorkFailed(f"bench train --framework {framework} --replicas {k} failed: {tail}")
    ran = {f for r in read_metrics(folder) if r.get("kind") == "end" for f in r["measured"]}  # as its processes say
    record = {"framework": framework, "replicas": k, "round": round_, "batch_size": args.batch_size, "size": args.size,
              "data": args.data, "wall_s": wall, "load": os.getloadavg()[0], "cpu_count": os.cpu_count(),
              **summarize(folder, args.warmup), **provenance(ran | set(loaded())), "timestamp": timestamp()}
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # the weights are not what this measures
    for name in ("model.npz", "best.npz"):
        (folder / name).unlink(missing_ok=True)
    return record


def summarize(folder: Path, warmup: int) -> dict:
    """What a run logged every step past ``warmup``: step times, median pairs/s, phases and the straggler gap."""
    steps = [r for r in read_metrics(folder) if r["kind"] == "train"][warmup:]
    record = {"steps": len(steps), "step_s": [r["pairs"] / r["pairs_per_s"] for r in steps],
              "pairs_per_s": float(np.median([r["pairs_per_s"] for r in steps]))}
    per_replica = [r["replica_s_per_step"] for r in steps if "replica_s_per_step" in r]
    if per_replica:
        for phase in per_replica[0]:
            record[f"replica_{phase}_s"] = np.mean([r[phase] for r in per_replica], axis=0).tolist()
        # the straggler gap: per step, how much longer the slowest replica computed than the fastest
        compute = np.array([r["compute"] for r in per_replica])
        gap = compute.max(axis=1) - compute.min(axis=1)
        record.update(straggler_gap_s=float(np.mean(gap)),
                      straggler_gap_share=float(np.mean(gap / compute.max(axis=1))))
    return record


def cmd_scale(args: argparse.Namespace) -> int:
    chosen, replicas = check_arguments(args)
    out = Path(args.out)
    results = out / "results.jsonl"
    if not args.report_only:
        with FolderLock(out, f"bench scale --out {out}") as lock:
            if results.exists():
                raise ValueError(f"{results} exists: choose another --out, or --report-only")
            lock.announce()  # going to run: a refused run says only why
            configs = [(f, k) for f in chosen for k in replicas]
            for round_ in range(args.rounds):
                shift = round_ % len(configs)
                for framework, k in configs[shift:] + configs[:shift]:
                    print(f"round {round_ + 1}/{args.rounds}: {framework} --replicas {k}", file=sys.stderr, flush=True)
                    append_record(results, run_one(args, framework, k, round_, out))
    text = render(read_records(results))
    (out / "report.md").write_text(text)
    print(text)
    print(f"report: {out / 'report.md'}", file=sys.stderr)
    return 0


def summary(records: list[dict]) -> list[dict]:
    """One row per (framework, K), in the records' order: the figures report.md shows (:func:`render`)."""
    by = {}
    for r in records:
        by.setdefault((r["framework"], r["replicas"]), {})[r["round"]] = r
    rows = []
    for (framework, k), rounds in by.items():
        base = by.get((framework, 1), {})
        ratios = [float(np.median(np.array(base[i]["step_s"]) / np.array(rounds[i]["step_s"])))
                  for i in rounds if i in base and len(base[i]["step_s"]) == len(rounds[i]["step_s"])]
        q1, median, q3 = (np.percentile(ratios, [25, 50, 75]).tolist() if ratios and k > 1 else (None,) * 3)
        per_round = {key: [r[name] for r in rounds.values() if name in r] for key, name in (
            ("compute_s", "replica_compute_s"), ("allreduce_wait_s", "replica_allreduce_wait_s"),
            ("straggler_gap_s", "straggler_gap_s"), ("straggler_gap_share", "straggler_gap_share"))}
        rows.append({"framework": framework, "replicas": k,
                     "pairs_per_s": float(np.median([r["pairs_per_s"] for r in rounds.values()])), "speedup": median,
                     "speedup_q1": q1, "speedup_q3": q3, "efficiency": median / k if median is not None else None,
                     **{key: np.mean(values, axis=0).tolist() if values else None  # the rounds' mean
                        for key, values in per_round.items()}})
    return rows


def render(records: list[dict]) -> str:
    """report.md: pairs/s, speed-up, efficiency and each replica's time per framework and K."""
    from bench.render.table import table  # imported after the runs: no record counts it as measured

    if not records:
        raise ValueError("no scaling records to report")
    first = records[0]
    rows = [[row["framework"], row["replicas"], f"{row['pairs_per_s']:,.1f}",
             f"{row['speedup']:.2f} ({row['speedup_q1']:.2f}-{row['speedup_q3']:.2f})x" if row["speedup"] is not None
             else "1x" if row["replicas"] == 1 else "-",
             "-" if row["efficiency"] is None else f"{row['efficiency']:.0%}",
             per_replica(row, "compute_s"), per_replica(row, "allreduce_wait_s"),
             "-" if row["straggler_gap_s"] is None else
             f"{row['straggler_gap_s']:.3f} s ({row['straggler_gap_share']:.0%})"] for row in summary(records)]
    lines = ["# Data-parallel scaling (`bench scale`)", "",
             f"Global batch {first['batch_size']} pairs, model `{first['size']}`, data `{first['data']}`; "
             f"{max(r['round'] for r in records) + 1} rounds; {first['steps']} measured steps a run; "
             f"{first['cpu_count']} cores; load average at the end of the runs "
             f"{min(r['load'] for r in records):.1f}-{max(r['load'] for r in records):.1f}.", "",
             table(["framework", "replicas", "pairs/s (median of steps; rounds' median)",
                    "speed-up over 1 (IQR over rounds)", "efficiency", "compute s/step per replica",
                    "all-reduce wait s/step per replica", "straggler gap"], rows)]
    lines += ["", "Speed-up: per step, one replica's time over K replicas' time for the same batch, median over "
              "steps, then over rounds. All-reduce wait: from a replica's last gradient bucket being ready to the "
              "averaged gradients coming back (the slower replicas' remaining compute, then the transfer). "
              "Straggler gap: per step, the slowest replica's compute less the fastest's, in seconds and as a "
              "share of the slowest's. A dash in the replica columns: the engine runs the replicas inside one "
              "program and shows no per-replica time (or K = 1)."]
    return "\n".join(lines) + "\n"


def per_replica(row: dict, key: str) -> str:
    """A summary row's per-replica seconds (compute_s, allreduce_wait_s) as a report cell: "0.123 / 0.130", or "-"."""
    return " / ".join(f"{v:.3f}" for v in row[key]) if row[key] else "-"
