"""``bench train --replicas K --processes P`` on one host (docs/training.md, "Training past one device")."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time

from shared.platform import first_cause, how_it_ended

POLL_S = 0.05  # how often the launcher looks at its processes
HOLD_S = 0.5  # how long a line of a process's stderr waits before it is shown
STOP_S = 5.0  # how long a process asked to stop (SIGTERM) has before it is killed


def free_addresses(count: int, host: str = "127.0.0.1") -> list[str]:
    """``count`` HOST:PORT addresses of ports free on ``host`` now (the OS picks them)."""
    with contextlib.ExitStack() as held:  # all open at once, so that no two get the same port
        sockets = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [f"{host}:{s.getsockname()[1]}" for s in sockets]


def _stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.terminate()  # SIGTERM; a process that has ended already is left alone (Popen polls first)
    deadline = time.monotonic() + STOP_S
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _read(rank: int, stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, b""):
        lines.put((time.monotonic(), rank, line))
    stream.close()


def _pass_on(stream, noise: tuple[bytes, ...]) -> None:
    """A process's stdout to ours, less the notices its engine's native code writes there (Gloo's)."""
    for line in iter(stream.readline, b""):
        if not any(notice in line for notice in noise):
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
    stream.close()


def launch_processes(platform, processes: int, argv: list[str]) -> int:
    """Run ``python -m bench *argv`` as ``processes`` processes of one job; 0, or the failed one's exit status."""
    addresses = free_addresses(processes)
    # Each process gets its share of the host's cores, as PyTorch's launcher gives its replicas.
    threads = {} if "OMP_NUM_THREADS" in os.environ else {
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}
    lines: queue.Queue = queue.Queue()
    started, printers = [], []
    try:
        for rank in range(processes):
            p = subprocess.Popen([sys.executable, "-m", "bench", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, **threads, **platform.process_env(rank, addresses)})
            started.append(p)
            threading.Thread(target=_read, args=(rank, p.stderr, lines), daemon=True).start()
            out = threading.Thread(target=_pass_on, args=(p.stdout, platform.native_noise), daemon=True)
            out.start()
            printers.append(out)
        held: list[tuple[float, int, bytes]] = []
        while True:
            codes = [p.poll() for p in started]
            while not lines.empty():
                held.append(lines.get())
            if any(code not in (None, 0) for code in codes):
                time.sleep(HOLD_S)  # the others' first reactions to the loss, then the cause is plain
                failed = [(rank, code) for rank, code in enumerate(p.poll() for p in started) if code not in (None, 0)]
                rank, code = first_cause(failed)
                _stop(started)
                _show([line for line in held if line[1] == rank])  # the failed one's own last words
                print(f"error: process {rank} of {processes} ({platform.name}) {how_it_ended(code)}; the others were "
                      "stopped. The run folder holds the last checkpoint: the same command with --resume goes on "
                      "from it", file=sys.stderr)
                return code if code > 0 else 1
            now = time.monotonic()
            _show([line for line in held if now - line[0] >= HOLD_S])
            held = [line for line in held if now - line[0] < HOLD_S]
            if all(code == 0 for code in codes):
                time.sleep(HOLD_S)  # the last lines
                while not lines.empty():
                    held.append(lines.get())
                _show(held)
                for printer in printers:
                    printer.join(timeout=STOP_S)
                return 0
            time.sleep(POLL_S)
    except BaseException:  # Ctrl-C or an error here: no process is left behind
        _stop(started)
        raise


def _show(lines: list[tuple[float, int, bytes]]) -> None:
    for _, _, line in lines:
        sys.stderr.buffer.write(line)
    sys.stderr.flush()
