"""The parent's side of the workers (bench/benchmark/worker.py): start them, ask, wait, and end them.

The parent never imports a framework; it only talks to the workers. Every worker is ended when the pool closes. Each has
a scratch folder for its caches, ``SCRATCH/<implementation>`` in the output folder: removed when the worker is closed,
and, if a killed run left it behind, when the next run on the folder starts one.
"""

from __future__ import annotations

import dataclasses
import json
import select
import shutil
import subprocess
import sys
from pathlib import Path

from bench.benchmark.worker import WorkerSpec
from bench.config import worker_env


SCRATCH = ".scratch"


class WorkerFailed(RuntimeError):
    """A worker answered with an error, died, or took longer than allowed."""


class WorkerHandle:
    def __init__(self, spec: WorkerSpec, out_dir: Path):
        self.name = spec.implementation
        self.spec = spec
        spec_path = Path(out_dir) / "specs" / f"{spec.implementation}.json"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(dataclasses.asdict(spec), indent=1))
        self.scratch = Path(out_dir) / SCRATCH / spec.implementation
        shutil.rmtree(self.scratch, ignore_errors=True)  # what a killed run left
        self.scratch.mkdir(parents=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.benchmark.worker", str(spec_path), str(self.scratch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={**worker_env(spec.dtype, [spec.framework]), **spec.env})
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

    def close(self) -> None:
        if self.process.poll() is None:
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
        try:
            self.scratch.parent.rmdir()  # the last worker's
        except OSError:
            pass


class WorkerPool:
    """Every implementation's worker, started together and closed together."""

    def __init__(self, specs: list[WorkerSpec], out_dir: Path, timeout: float):
        self.timeout = timeout
        self.workers = [WorkerHandle(spec, out_dir) for spec in specs]

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is KeyboardInterrupt:  # nothing a worker holds is worth waiting for
            for worker in self.workers:
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
        self.close()

    def start(self) -> list[str]:
        """Wait for every worker's first reply; the reasons of those that failed."""
        errors = []
        for worker in self.workers:
            try:
                worker.ready = worker.receive(self.timeout)
            except WorkerFailed as err:
                worker.failed = str(err)
                errors.append(str(err))
        return errors

    def alive(self) -> list[WorkerHandle]:
        return [w for w in self.workers if w.failed is None]

    def ask(self, worker: WorkerHandle, command: str, **arguments) -> dict | None:
        """One request; a failure takes the worker out of the run (None)."""
        try:
            worker.send(command, **arguments)
            return worker.receive(self.timeout)
        except WorkerFailed as err:
            worker.failed = str(err)
            print(f"error: {err}", file=sys.stderr)
            if worker.process.poll() is None and "no answer" in str(err):
                worker.process.kill()
            return None

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
