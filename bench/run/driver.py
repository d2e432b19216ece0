"""Driving a planned run (plan.py): the workers (worker.py, and one more for the limit) through agreement, peak and
interleaved rounds, each measurement appended to ``OUT/results.jsonl`` at once, the summary and report at the end. The
parent never imports a framework; the workers' scratch folders (``OUT/.scratch``) go when the pool closes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import frameworks, provenance
from bench.config import worker_env
from bench.progress import Progress, duration
from bench.records import append_record, read_records, write_json
from bench.run import limit
from bench.run.agreement import pairwise_agreement
from bench.run.measurement import Measurement, load
from bench.run.worker import WorkerSpec


SCRATCH = ".scratch"
LIMIT = "limit"  # the limit's process: the reference's platform, NumPy's routine
# OpenBLAS's kernel pins, which the limit's process runs without (docs/spec.md §6, "The machine's fastest routine").
KERNEL_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class WorkerFailed(RuntimeError):
    """A worker answered with an error, died, or took longer than allowed."""


class WorkerHandle:
    def __init__(self, spec: WorkerSpec, out_dir: Path):
        self.name, self.spec = spec.implementation, spec
        spec_path = Path(out_dir) / "specs" / f"{spec.implementation}.json"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(dataclasses.asdict(spec), indent=1))
        self.scratch = Path(out_dir) / SCRATCH / spec.implementation
        self.scratch.mkdir(parents=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.run.worker", str(spec_path), str(self.scratch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={k: v for k, v in {**worker_env(spec.dtype, [spec.framework]), **spec.env}.items() if v is not None})
        self.ready: dict | None = None  # the worker's first reply: device, versions, workload
        self.failed: str | None = None  # why this worker is out of the run

    def send(self, command: str, **arguments) -> None:
        try:
            self.process.stdin.write(json.dumps({"cmd": command, **arguments}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerFailed(f"{self.name}: the worker has exited (code {self.process.poll()})") from None

    def receive(self, timeout: float | None) -> dict:
        """The next reply's result; WorkerFailed on an error reply, exit or timeout."""
        out = self.process.stdout
        ready, _, _ = select.select([out], [], [], timeout)
        if not ready:
            raise WorkerFailed(f"{self.name}: no answer within {timeout:.0f} s (--timeout)")
        line = out.readline()
        if not line:
            code = self.process.wait()
            raise WorkerFailed(f"{self.name}: the worker exited (code {code}) without answering")
        message = json.loads(line)
        if not message["ok"]:
            raise WorkerFailed(f"{self.name}: {message['error']}")
        return message["result"]

    def close(self, kill: bool = False) -> None:
        if self.process.poll() is None and not kill:
            try:
                self.send("exit")
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (WorkerFailed, subprocess.TimeoutExpired, OSError):
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


class WorkerPool:
    """Every implementation's worker, started together and closed together."""

    def __init__(self, specs: list[WorkerSpec], out_dir: Path, timeout: float):
        self.timeout = timeout
        self.scratch = Path(out_dir) / SCRATCH  # the workers' scratch folders, and what they share (the reference's)
        shutil.rmtree(self.scratch, ignore_errors=True)  # what a killed run left
        self.workers = [WorkerHandle(spec, out_dir) for spec in specs]
        self.limit = WorkerHandle(dataclasses.replace(
            specs[0], implementation=LIMIT, framework=frameworks.REFERENCE.name, options={}, device="cpu",
            env=dict.fromkeys(KERNEL_PINS), compilation_cache=None, measure_cache=False), out_dir)
        self.spent: dict[str, float] = {}  # seconds waited for each kind of request, and for the start-up

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, kind, *exc) -> None:
        for worker in [*self.workers, self.limit]:
            worker.close(kill=kind is KeyboardInterrupt)  # after an interrupt, nothing it holds is worth waiting for
        shutil.rmtree(self.scratch, ignore_errors=True)

    def start(self) -> list[str]:
        """Wait for every worker's first reply; the reasons of those that failed (the limit's process among them)."""
        errors, started = [], time.perf_counter()
        for worker in [*self.workers, self.limit]:
            try:
                worker.ready = worker.receive(self.timeout)
            except WorkerFailed as err:
                worker.failed = str(err)
                errors.append(str(err))
        self.spent["start-up"] = time.perf_counter() - started
        return errors

    def alive(self) -> list[WorkerHandle]:
        return [w for w in self.workers if w.failed is None]

    def ask(self, worker: WorkerHandle, command: str, **arguments) -> dict | None:
        """One request; a failure takes the worker out of the run (None)."""
        started = time.perf_counter()
        try:
            worker.send(command, **arguments)
            return worker.receive(self.timeout)
        except WorkerFailed as err:
            worker.failed = str(err)
            print(f"error: {err}", file=sys.stderr)
            if worker.process.poll() is None and "no answer" in str(err):
                worker.process.kill()
            return None
        finally:
            self.spent[command] = self.spent.get(command, 0.0) + time.perf_counter() - started


def run(args, plan, specs: list, out_dir: Path) -> int:
    """Measure what ``plan`` (plan.py's RunPlan) asks for into ``out_dir``, locked by the caller; the exit status."""
    results = out_dir / "results.jsonl"  # bench run (cmd_run) has refused a full one without --resume
    names = plan.names
    done = {(r["implementation"], r["mode"], r["batch_size"], r.get("transitions", "gold"))
            for r in read_records(results)}
    todo = [key for key in plan.keys if any((name, *key) not in done for name in names)]
    if args.resume and not todo:
        print(f"benchmark: {results} already holds every measurement asked for", file=sys.stderr)
    run = {"run_id": time.strftime("%Y%m%dT%H%M%S"), "rounds": plan.rounds, "round_time": plan.round_time,
           "cpu_count": os.cpu_count()}
    print(f"benchmark: {', '.join(names)}; {len(todo)} measurements, {run['rounds']} interleaved rounds each "
          f"-> {results}", file=sys.stderr)
    failures: dict[str, str] = {}
    started, spent = time.perf_counter(), {}
    if todo:
        try:
            with WorkerPool(specs, out_dir, args.timeout) as pool:
                spent = pool.spent
                failures = _measure(pool, todo, done, run, args, results)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(_interrupted(args, plan, names, results)) from None
    # Imported after the last record, which names the modules its processes had loaded (bench/provenance.py).
    from bench.report import (format_breakdown, format_host_syncs, format_matrix, format_ratios, format_table,
                              load_summary, variants_measured, write_report)
    from bench.run.targets import format_targets

    records = [r for r in load([results]) if r.implementation in names]
    agreement = pairwise_agreement(out_dir, names)
    write_json(out_dir / "agreement.json", agreement)
    sections = [format_table(records), format_ratios(records), format_breakdown(records), format_host_syncs(records),
                format_matrix(records) if variants_measured(records) else "", format_targets(records),
                "Pairwise agreement (max abs difference):\n" + "\n".join(
                    f"  {pair}: encodings {diff['max_abs_diff_encoding']:.1e}, logits {diff['max_abs_diff_logits']:.1e}"
                    for pair, diff in agreement.items()) if agreement else "", load_summary(records)]
    for text in filter(None, sections):  # each after an empty line
        print("\n" + text)
    if in_folder := load([args.out]):  # what ``python -m bench report OUT`` writes (the same code), and where it is
        _, written = write_report(in_folder, [args.out], Path(args.out))
        plots = f" (plots: {', '.join(p.name for p in written[1:])})" if written[1:] else ""
        print(f"\nreport: {written[0]}{plots}")
    else:
        print(f"benchmark: nothing measured, so no report in {args.out}", file=sys.stderr)
    if spent:
        print(harness_share(spent, time.perf_counter() - started))
    for name, why in failures.items():
        print(f"error: {name} {why}", file=sys.stderr)
    return 1 if failures else 0


PHASES = {"start-up": "start-up", "agreement": "agreement", "peak": "peaks", "prepare": "warm-ups", "time": "rounds",
          "products": "products", "finish": "finishing"}


def harness_share(spent: dict[str, float], wall: float) -> str:
    """One line: what the harness's own timing of products took of the run's wall time, and where the rest went."""
    products = spent.get("products", 0.0)
    parts = [f"{PHASES[k]} {duration(spent[k])}" for k in PHASES if k in spent]
    return (f"harness: the products timed for the limit and the breakdown took {duration(products)} of the run's "
            f"{duration(wall)} ({100 * products / wall:.1f} %); " + ", ".join(parts)
            + f", the rest {duration(wall - sum(spent.values()))}")


def _interrupted(args, plan, names: list[str], results: Path) -> str:
    """After an interrupt: the report of what finished, marked partial, and the words that say how to finish."""
    from bench.report import write_report

    measured = results.exists() and results.stat().st_size
    records = [r for r in load([results]) if r.implementation in names] if measured else []
    words = getattr(args, "argv", None) or ["run", "--out", str(args.out)]  # bench/cli.py's list; read, not changed
    again = "python -m bench " + shlex.join(words + ([] if "--resume" in words else ["--resume"]))
    said = (f"{len(records)} of {len(plan.keys) * len(names)} measurements finished and are kept in {results}; "
            f"`{again}` measures the rest")
    if records:
        _, written = write_report(records, [args.out], Path(args.out), note=f"Partial: interrupted. {said}.")
        said += f"; partial report: {written[0]}"
    return said


def _measure(pool: WorkerPool, keys, done, run: dict, args, results: Path) -> dict[str, str]:
    """Start-up, agreement, peaks, then every key in interleaved rounds."""
    errors = pool.start()
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors and args.device in ("gpu", "gpu-host"):  # asked for a GPU that some framework lacks or cannot see
        raise ValueError(f"--device {args.device}: {len(errors)} of {len(pool.workers)} implementations cannot run")
    failures = {w.name: "failed to start" for w in pool.workers if w.failed}
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
        said = "; ".join(f"{w.name} {n['pairs'] / sum(n['times']):,.1f} pairs/s (compile {n['compile_s']:.1f} s)"
                         for w, n in measured.items())
        progress.write(f"{label}: {said or 'nothing measured'}")
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
    # Every implementation times the same batches in a round: as many as the slowest needs for about round_time seconds.
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
            for total in ("times", "pairs", "flops"):
                numbers[total] += reply[total]
            numbers["round_pairs_per_s"].append(reply["pairs"] / sum(reply["times"]))
            numbers["round_step_s"].append(float(np.median(reply["times"])))
            numbers["round_load"].append(reply["load_avg_1min"])
            numbers["round_cpu_share"].append(reply["cpu_s"] / reply["wall_s"])
        progress.update(1)
    _products(pool, prepared, key, name, run["rounds"] * per_round, progress, label)
    for worker in list(prepared):
        reply = pool.ask(worker, "finish", key=name)
        if reply is None:
            del prepared[worker]
            continue
        prepared[worker].update(reply, batches_per_round=per_round)
    return prepared


def _products(pool: WorkerPool, prepared: dict, key, name: str, stop: int, progress: Progress, label: str) -> None:
    """Per timed batch, the useful products and each prepared worker's computed kind, timed on the limit's process
    and on each framework's own routine where it has one: of each kind the fastest, its routine, and the own one's."""
    mode, batch_size, _ = key
    kinds = {worker: n["computed_kind"] for worker, n in prepared.items()}  # asked of each worker: it knows its loop
    devices: dict[str, list] = {}
    for worker in prepared:
        devices.setdefault(worker.ready["device"], []).append(worker)
    asked = [(pool.limit, "numpy", "cpu", [kinds[w] for w in devices["cpu"]])] \
        if "cpu" in devices and pool.limit.failed is None else []
    for device, workers in devices.items():
        own = {w.spec.framework: w for w in reversed(workers)
               if limit.own_routine(type(frameworks.platform(w.spec.framework)))}  # each one's first
        asked += [(first, framework, device, [kinds[w] for w in workers if device != "cpu" or w.spec.framework ==
                                              framework]) for framework, first in own.items()]
    replies = []
    for worker, routine, device, wanted in asked:
        progress.status(f"{label}: the batches' products on {routine}'s routine")
        reply = pool.ask(worker, "products", key=name, mode=mode, batch_size=batch_size, stop=stop,
                         kinds=list(dict.fromkeys(["useful", *wanted])))
        replies += [(routine, device, reply)] if reply else []
    for worker, n in prepared.items():  # None where none was timed: the record then has no limit
        on_device = [(routine, reply) for routine, device, reply in replies if device == worker.ready["device"]]
        n["products"] = fastest(kinds[worker], worker.spec.framework, on_device)


def fastest(kind: str, framework: str, replies: list[tuple[str, dict]]) -> dict | None:
    """Of the ``(routine, products reply)`` timed on one device: the useful products' fastest time and routine, the
    ``kind``'s fastest (never below the useful: it includes them) and ``framework``'s own; None where none timed it."""
    timed = [(routine, reply) for routine, reply in replies if kind in reply]
    if not timed:
        return None
    routine, useful = min(replies, key=lambda found: found[1]["useful"]["s"])
    own = [reply[kind]["s"] for by, reply in timed if by == framework]
    fastest_useful = useful["useful"]["s"]
    return {"useful": fastest_useful, "computed": max(min(r[kind]["s"] for _, r in timed), fastest_useful),
            "own": own[0] if own else None, "matmul": routine, "kernel": useful["kernel"], "flops": timed[0][1][kind]
            ["flops"], "sample": {"batches": useful["sampled"], "useful_flops_per_s": useful["useful"]["flops_per_s"]}}


def _record(worker, key, n: dict, run: dict, agreement: dict, peak: dict, device_peak, interleaved, args) -> dict:
    """One results.jsonl record (docs/spec.md §6): a Measurement, as the dict the file keeps."""
    mode, batch_size, transitions = key
    ready, spec = worker.ready, worker.spec
    total, p, batches = float(np.sum(n["times"])), n.get("products"), len(n["times"])
    useful = n["flops"] / total
    # The limit and where the time goes (docs/spec.md §6), per timed batch, where the products were timed.
    limit_fields = {} if not p else {
        "limit_pairs_per_s": n["pairs"] / (p["useful"] * batches), "limit_matmul": p["matmul"],
        "limit_kernel": p["kernel"], "limit_flops_per_s": n["flops"] / (p["useful"] * batches),
        "limit_sample": {**p["sample"], "of": batches}, "fraction_of_limit": p["useful"] * batches / total,
        "useful_s": p["useful"], "computed_s": p["computed"], "own_computed_s": p["own"], "step_s": total / batches,
        "computed_flops": p["flops"], "computed_kind": n["computed_kind"]}
    return Measurement(
        implementation=worker.name, framework=spec.framework, mode=mode, transitions=transitions, dtype=spec.dtype,
        batch_size=batch_size, pairs_per_s=n["pairs"] / total, step_s_median=float(np.median(n["times"])),
        step_s_p10=float(np.percentile(n["times"], 10)), step_s_p90=float(np.percentile(n["times"], 90)),
        rounds=len(n["round_pairs_per_s"]), cpu_count=run["cpu_count"], interleaved_with=interleaved,
        timed_batches=len(n["times"]), timed_pairs=n["pairs"], useful_flops=n["flops"], useful_flops_per_s=useful,
        **peak, flops_fraction_of_peak=useful / peak["matmul_peak_flops_per_s"],
        device_peak_flops_per_s=device_peak[1]["matmul_peak_flops_per_s"], device_peak_implementation=device_peak[0],
        useful_fraction_of_device_peak=useful / device_peak[1]["matmul_peak_flops_per_s"], **limit_fields,
        batching=spec.batching, optimizer="adam" if mode == "train" else None, options=spec.options,
        compilation_cache=spec.compilation_cache, **agreement,
        **{k: n[k] for k in ("batches_per_round", "round_pairs_per_s", "round_step_s", "round_load", "round_cpu_share",
                             "compile_s", "traces", "compile_detail", "first_call_s", "warmup_shapes", "traces_total",
                             "retraces_while_timed", "peak_mem_bytes", "peak_rss_bytes", "padding_waste",
                             "padding_waste_arrays", "padding_waste_loop")},
        **{k: ready[k] for k in ("framework_version", "device", "device_name", "buckets", "data", "model", "python",
                                 "numpy", "platform", "cpu", "threads", "precision_modes")},
        # The source files that ran: the worker's, and this process's (it planned the batches and computes the record).
        **provenance.provenance(set(n["sources"]) | set(provenance.loaded())), run_id=run["run_id"],
        timestamp=provenance.timestamp(),
        **{k: n[k] for k in ("host_syncs_per_batch", "cached_compile", "phase_s_per_batch", "graph_per_batch",
                             "dispatches_per_batch") if k in n}).to_dict()

