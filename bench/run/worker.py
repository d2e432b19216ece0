"""One implementation's process: it stays alive for the whole run and measures on request.

``python -m bench run`` starts ``python -m bench.run.worker SPEC.json SCRATCH`` once per implementation: JSON lines,
a request (a :class:`Worker` method, or ``exit``) on stdin, a reply on a private copy of stdout (library prints go to
stderr). It dies with its parent (``PR_SET_PDEATHSIG``, or its stdin closing) and keeps its caches in SCRATCH, which the
parent removes. It reads its framework only through ``shared.platform.Platform`` (docs/benchmark.md, "The benchmark").
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import config, frameworks, provenance
from bench.config import load_dataset
from bench.run import limit
from bench.run.agreement import check_agreement
from bench.run.limit import batch_flops
from bench.run.padding import padding_share
from shared.batching import length_buckets, make_batches, make_sentence_batches, pair_length, sentence_pairs
from shared.params import ModelConfig, init_params
from shared.parsing import uniforms_for
from shared.vocab import Vocabulary


class RssSampler:
    """Peak resident memory of this process from its start to ``stop``, sampled every few ms."""

    def __init__(self, interval: float = 0.005):
        import psutil

        self._process, self._interval, self._done = psutil.Process(), interval, threading.Event()
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._done.wait(self._interval)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def warm_up(runner, batches, step) -> dict:
    """Run ``step`` on every shape among ``batches``, ``runner.warmup_calls`` times each, timing it all."""
    before = runner.compile_stats()
    seen, first_call_s = set(), 0.0
    for batch in batches:
        shape = runner.program_shape(batch)
        if shape in seen:
            continue
        seen.add(shape)
        for _ in range(runner.warmup_calls):
            t0 = time.perf_counter()
            step(batch)
            first_call_s += time.perf_counter() - t0
    warm = runner.compile_stats().since(before)
    # The parts of the warm-up (trace, lowering, XLA, first calls, cache), the same keys for every framework.
    detail = {key: value for key, value in warm.to_dict().items() if key not in ("traces", "compile_s", "shapes")}
    return {"compile_s": warm.compile_s, "traces": warm.traces, "compile_detail": detail,
            "first_call_s": first_call_s, "warmup_shapes": len(seen)}


@dataclass
class WorkerSpec:
    implementation: str  # its registry name: a framework's, or a variant's
    framework: str  # its framework's registry name (bench/frameworks.py)
    options: dict  # extra Runner options of the variant
    out_dir: str
    device: str = "cpu"  # "auto", "cpu", "gpu" or "gpu-host" (bench run's --device)
    dtype: str = "float32"
    data: dict = field(default_factory=lambda: {"data": "sample"})  # bench.config.load_dataset arguments
    sizes: dict = field(default_factory=dict)  # ModelConfig sizes
    transition_head: bool = True  # predicted/sampled modes need the head (docs/spec.md §7)
    env: dict = field(default_factory=dict)  # environment the implementation needs before its library is imported
    agreement_pairs: int = 32  # pairs checked against the float64 reference
    seed: int = 0
    buckets: list | str = field(default_factory=list)  # token-count bucket boundaries, or "auto:K" (quantiles)
    batching: str = "sentences"  # "sentences": length-sorted sentences (shared.batching.make_sentence_batches); "pairs"
    max_batches: int = 400  # length of the cyclic batch plan of a key
    compilation_cache: str | None = None  # the platform's persistent compilation cache, in this folder
    measure_cache: bool = False  # compile the train step again from a private persistent cache (timed)


def resolve_buckets(buckets: list | str, pairs) -> list[int]:
    """Token-count bucket boundaries: as given, or for "auto:K" the K quantiles of the pairs' lengths."""
    if isinstance(buckets, str):
        return list(length_buckets([pair_length(p) for p in pairs], int(buckets.partition(":")[2])))
    return list(buckets)


@dataclass
class Task:
    """A warmed-up (mode, batch size, transitions) measurement."""

    runner: object
    step: object  # batch index -> None: one step, waiting for the device
    plan: list  # the cyclic batch plan
    flops: list  # useful FLOPs of each planned batch
    rss: RssSampler
    compile_after_warmup: object  # CompileStats
    host_syncs: list = field(default_factory=list)  # define-by-run code in a model-decided mode: reads per batch
    phases: list = field(default_factory=list)  # the runner's last_phases of every timed batch (where it splits)
    graphs: list = field(default_factory=list)  # the runner's last_rows of every timed batch (where it says)
    count: object = None  # batch -> the runner's dispatches() of the step's program on it (docs/spec.md §6)


class Worker:
    def __init__(self, spec: WorkerSpec, scratch: Path):
        self.spec = spec
        self.platform = frameworks.platform(spec.framework)
        self.platform.set_full_precision()
        self.runner_cls = frameworks.runner_class(spec.framework)
        if spec.device in ("auto", "gpu-host") and not self.runner_cls.supports("gpu"):
            spec.device = "cpu"  # a framework built without a GPU runs on the host
        elif spec.device == "gpu-host":
            spec.device = "gpu"  # and one built with a GPU must see it
        spec.device = self.platform.check_device(spec.device)
        for capability in ("gpu", "float64"):  # refused in one line, before anything is built
            if capability in (spec.device, spec.dtype):
                self.runner_cls.require(capability)
        # The workload, identical in every worker: pairs, vocabulary, config and initial weights.
        self.dataset = load_dataset(argparse.Namespace(**{"split": "train", "num_pairs": None, "shape": "random",
                                                          "length": 20, "data_seed": 0, **spec.data}))
        self.vocab = Vocabulary.from_pairs(self.dataset.pairs, lowercase=True)
        self.config = ModelConfig(vocab_size=len(self.vocab), transition_head=spec.transition_head, **spec.sizes)
        self.params = init_params(self.config, seed=spec.seed)
        self.labelled = [p for p in self.dataset.pairs if p.label >= 0]
        spec.buckets = resolve_buckets(spec.buckets, self.dataset.pairs)
        self.tasks: dict[str, Task] = {}
        self.scratch = scratch
        if spec.measure_cache:  # a private cache, removed with the worker: every compilation is written to it
            self.platform.enable_compilation_cache(str(scratch / "cache"))
        elif spec.compilation_cache:
            self.platform.enable_compilation_cache(spec.compilation_cache)
        # Caches a framework keeps on disk unasked (torch.compile's) start empty: every run's warm-up compiles cold.
        (scratch / "private").mkdir()
        self.platform.use_private_caches(str(scratch / "private"))

    def new_runner(self):
        return self.runner_cls(self.params, self.config, dtype=self.spec.dtype, device=self.spec.device,
                               **self.spec.options)

    def ready(self) -> dict:
        """The first reply: the device, the workload, the software and hardware (recorded with every measurement)."""
        spec, platform = self.spec, self.platform
        return {"device": spec.device, "data": self.dataset.name, "buckets": list(spec.buckets),
                "num_pairs": len(self.dataset.pairs), "model": json.loads(self.config.to_json()), **provenance.machine(),
                "device_name": platform.device_name(spec.device), "framework_version": platform.version(),
                "threads": platform.thread_counts(), "precision_modes": platform.precision_modes()}

    def agreement(self, transitions: list) -> dict:
        """Encodings, logits, gradients and predicted parses against the float64 reference."""
        return check_agreement(self.new_runner(), self.labelled[:self.spec.agreement_pairs], self.vocab,
                               self.config, self.params, self.spec.dtype, Path(self.spec.out_dir),
                               self.spec.implementation, parse_modes=transitions,
                               shared=self.scratch.parent / "reference.npz")  # the run's workers' scratch folder

    def peak(self) -> dict:
        return limit.matmul_peak(self.platform, self.spec.device, self.spec.dtype)

    def batches(self, mode: str, batch_size: int) -> tuple[list, list, list]:
        """(the batches of a measurement, its cyclic plan of max_batches of them, the pairs they hold): the same in
        every worker of the run."""
        pairs = self.labelled if mode == "train" else self.dataset.pairs
        if self.spec.batching == "sentences":
            batches = make_sentence_batches(pairs, self.vocab, batch_size, buckets=self.spec.buckets, shuffle=True,
                                            seed=self.spec.seed)
            pairs = sentence_pairs(pairs, batch_size, seed=self.spec.seed)  # their rows (a sampled step reads them)
        else:
            batches = make_batches(pairs, self.vocab, batch_size, buckets=self.spec.buckets, shuffle=True,
                                   seed=self.spec.seed, drop_last=True)
        return batches, [batches[k % len(batches)] for k in range(self.spec.max_batches)] if batches else [], pairs

    def prepare(self, key: str, mode: str, batch_size: int, transitions: str) -> dict:
        """A runner and the batches of one measurement, warmed up on every shape, and one batch timed as an estimate."""
        batches, plan, pairs = self.batches(mode, batch_size)
        if not batches:
            return {"skipped": f"fewer pairs than one batch of {batch_size}"}
        padding = padding_share(batches)
        runner = self.new_runner()
        step, syncs, count = self._step(runner, mode, transitions, pairs)
        if self.spec.device == "gpu":
            self.platform.reset_device_peak()
        rss = RssSampler()
        warm = warm_up(runner, batches, step)
        t0 = time.perf_counter()
        step(plan[0])  # one more warm batch: caches, allocator, thread pools; and an estimate
        estimate = time.perf_counter() - t0
        # The PAD share of what this implementation computes (bench/frameworks.py, Implementation.padding).
        computed = {"arrays": padding.waste, "loop": padding.loop_waste, "none": 0.0}
        kind = frameworks.implementation(self.spec.implementation).padding_in(mode)
        reply = {**warm, "step_estimate_s": estimate, "padding_waste": computed[kind],
                 "padding_waste_arrays": padding.waste, "padding_waste_loop": padding.loop_waste,
                 "num_batches": len(batches), "computed_kind": limit.computed_kind(self.spec.implementation, mode)}
        if self.spec.measure_cache and mode == "train":  # the same programs again in a fresh runner, from the cache
            self.platform.clear_caches()
            again = self.new_runner()
            cached = warm_up(again, batches, self._step(again, mode, transitions, pairs)[0])
            reply["cached_compile"] = {"compile_s": cached["compile_s"], "shapes": cached["warmup_shapes"],
                                       **{k: cached["compile_detail"][k] for k in ("cache_hits", "cache_misses")}}
        self.tasks[key] = Task(runner, step, plan, [batch_flops(self.config, b, mode) for b in plan], rss,
                               runner.compile_stats(), syncs, count=count)
        return reply

    def time(self, key: str, start: int, count: int) -> dict:
        """Time a slice of the batch plan (every worker gets the same slices, so a round compares the same work), with
        the round's CPU share and load average (docs/spec.md §6, "Decision: load in every round")."""
        task = self.tasks[key]
        times, pairs, flops = [], 0, 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for k in range(start, start + count):
            batch = task.plan[k % len(task.plan)]
            t0 = time.perf_counter()
            task.step(batch)  # returns host values (NumPy or a float): waits for the device
            times.append(time.perf_counter() - t0)
            if task.runner.last_phases:
                task.phases.append(dict(task.runner.last_phases))
            if task.runner.last_rows:
                task.graphs.append(dict(task.runner.last_rows))
            pairs += batch.size
            flops += task.flops[k % len(task.plan)]
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        return {"times": times, "pairs": pairs, "flops": flops, "cpu_s": cpu_s, "wall_s": wall_s,
                "load_avg_1min": os.getloadavg()[0]}

    def products(self, key: str, mode: str, batch_size: int, stop: int, kinds: list[str]) -> dict:
        """Each kind's products of the timed batches (plan entries 0 .. stop - 1) on this process's routine: seconds per
        timed batch from a sample, their FLOPs and the sample's FLOP/s range; {} where the routine cannot run here."""
        device, (matmuls, kernel) = self.spec.device, limit.routine(self.platform)
        plan = self.tasks[key].plan if key in self.tasks else self.batches(mode, batch_size)[1]  # the limit's process
        if matmuls([], device) is None or not plan:
            return {}
        timed = [plan[k % len(plan)] for k in range(stop)]
        sampled = [timed[k] for k in limit.sample(stop)]
        seconds = limit.time_kinds(matmuls, device, self.config, sampled, kinds, mode, self.spec.dtype)
        out = {"kernel": kernel(device), "sampled": len(sampled)}
        for kind in kinds:
            counted = {id(batch): limit.flops(self.config, limit.products(self.config, batch, kind), mode)
                       for batch in plan[:stop]}
            total, sample_flops = sum(counted[id(b)] for b in timed), [counted[id(b)] for b in sampled]
            rates = [f / s for f, s in zip(sample_flops, seconds[kind])]
            out[kind] = {"s": sum(seconds[kind]) / sum(sample_flops) * total / stop, "flops": total,
                         "flops_per_s": [min(rates), max(rates)]}
        return out

    def finish(self, key: str) -> dict:
        """Retraces while timed, the memory peak, the files that ran; the runner is dropped."""
        task = self.tasks.pop(key)
        task.rss.stop()
        after = task.runner.compile_stats()
        counted = task.count(task.plan[0])  # after the timed rounds, on the first batch they timed
        out = {"traces_total": after.traces, "retraces_while_timed": after.traces - task.compile_after_warmup.traces,
               "peak_rss_bytes": task.rss.peak,
               "peak_mem_bytes": self.platform.device_peak_bytes() if self.spec.device == "gpu" else task.rss.peak,
               "sources": provenance.loaded()}  # what this process ran, as the measurement ends
        if counted is not None:
            out["dispatches_per_batch"] = float(counted["count"])
        if task.host_syncs:
            out["host_syncs_per_batch"] = float(np.mean(task.host_syncs))
        for field_name, rows in (("phase_s_per_batch", task.phases), ("graph_per_batch", task.graphs)):
            if rows:  # per timed batch, the mean of each phase's seconds, or of each count, the runner reports
                out[field_name] = {k: float(np.mean([row[k] for row in rows if k in row])) for k in rows[0]}
        return out

    def _step(self, runner, mode: str, transitions: str, pairs):
        """The function one timed batch calls, the list it logs host reads in, and the function that counts what
        the framework dispatches for the same program on a batch (Runner.dispatches)."""
        syncs: list[int] = []
        if mode == "infer" and transitions == "gold":
            return runner.encode, syncs, lambda batch: runner.dispatches("encode", batch)
        if mode == "infer" and transitions == "predicted":
            def parse(batch):
                runner.parse(batch, "predicted")
                if runner.reads_decisions_on_host:
                    syncs.append(runner.last_host_syncs)
            return parse, syncs, lambda batch: runner.dispatches("parse:predicted", batch)
        if mode == "train" and transitions == "gold":
            runner.set_optimizer("adam", lr=1e-3)
            return runner.train_step, syncs, lambda batch: runner.dispatches("train_step", batch)
        if mode == "train" and transitions == "sampled":
            runner.require("reinforce")
            runner.set_optimizer("adam", lr=1e-3)
            rows = {p.pair_id: p.row for p in pairs}

            def uniforms(batch):
                return uniforms_for(batch, rows=[rows[i] for i in batch.pair_ids], seed=self.spec.seed)

            def reinforce(batch):
                runner.reinforce_step(batch, uniforms(batch), 0.0)
            return reinforce, syncs, lambda batch: runner.dispatches("reinforce_step", batch, uniforms(batch), 0.0)
        raise ValueError(f"no benchmark step for mode {mode!r} with {transitions!r} transitions")


def serve(spec: WorkerSpec, scratch: Path, requests, reply) -> int:
    """Answer requests until ``exit`` or the end of ``requests``."""
    try:
        worker = Worker(spec, scratch)
        reply({"ok": True, "result": worker.ready()})
    except Exception as err:  # reported to the parent as one line, then this worker ends
        reply({"ok": False, "error": f"{type(err).__name__}: {err}"})
        return 1
    for line in requests:
        request = json.loads(line)
        command = request.pop("cmd")
        if command == "exit":
            break
        try:
            reply({"ok": True, "result": getattr(worker, command)(**request)})
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            reply({"ok": False, "error": f"{type(err).__name__}: {err}"})
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m bench.run.worker SPEC.json SCRATCH", file=sys.stderr)
        return 2
    parent = os.getppid()  # Linux SIGKILLs this process when its parent dies (PR_SET_PDEATHSIG, 1); elsewhere a no-op
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)
    except (OSError, AttributeError, TypeError):  # not Linux
        pass
    # Ctrl-C reaches the terminal's whole group: the parent keeps what finished and ends the workers silently.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = os.fdopen(os.dup(1), "w", buffering=1)  # line-buffered: each reply goes out whole, at once
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    config.quiet_frameworks(spec.dtype, [spec.framework])  # before the framework is imported
    return serve(spec, Path(argv[1]), sys.stdin, lambda message: channel.write(json.dumps(message) + "\n"))


if __name__ == "__main__":
    raise SystemExit(main())
