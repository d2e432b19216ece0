"""What the harness needs from pytorch besides the model (shared/platform.py).

The library is imported inside the methods only: the process settings are
read before it is imported. ``launch`` starts the K processes of a
data-parallel job (``bench train --replicas K``) under PyTorch's elastic
launcher; each then trains through replicas.py.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid

from shared.platform import Platform as PlatformBase
from shared.platform import first_cause, how_it_ended


class Platform(PlatformBase):
    name = "pytorch"
    library = "torch"
    explain_module = "impl_pytorch.explain"  # what `bench explain` reads from its graphs
    # --replicas K: K processes under PyTorch's elastic launcher, DistributedDataParallel (replicas.py).
    data_parallel = "processes"

    def default_env(self) -> dict[str, str]:
        # Kineto's own switch for the profiler's C++ log (its levels: VERBOSE 0, INFO 1, WARNING 2, STAGE 3, ERROR 4,
        # USDT 5): 6 keeps off the terminal the USDT markers "profiler_start" and "profiler_stop" it writes whatever
        # the level below 6, at every profile (Runner.dispatches counts with the profiler). A failure to profile still
        # reaches Python as an exception; KINETO_LOG_LEVEL=4 in the environment shows the log's ERROR lines again.
        return {"KINETO_LOG_LEVEL": "6"}

    def replica_rank(self) -> int | None:
        # The launcher's (torchrun's) variables, in each process it starts.
        return int(os.environ["RANK"]) if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None

    def launch(self, replicas: int, argv: list[str]) -> int:
        return _launch(replicas, argv)

    def use_private_caches(self, path: str) -> None:
        # torch.compile (Inductor) keeps compiled kernels and graphs under /tmp/torchinductor_<user> between
        # processes; read at every compilation, so setting it now, before the first, is in time.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path

    def gpu_available(self) -> bool:
        import torch
        return torch.cuda.is_available()

    def gpu_missing_reason(self) -> str:
        return "torch.cuda.is_available() is False"

    def device_name(self, device: str) -> str:
        if device == "gpu":
            import torch
            return torch.cuda.get_device_name(0)
        return super().device_name(device)

    def precision_modes(self) -> dict:
        import torch
        return {**super().precision_modes(),
                "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "torch.float32_matmul_precision": torch.get_float32_matmul_precision()}

    def set_full_precision(self) -> None:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    def thread_counts(self) -> dict:
        # OpenMP threads spin at barriers unless OMP_WAIT_POLICY=PASSIVE: which
        # one was in force is recorded beside the thread counts.
        import torch
        return {**super().thread_counts(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                "torch_intra_op": torch.get_num_threads(), "torch_inter_op": torch.get_num_interop_threads()}

    def reset_device_peak(self) -> None:
        import torch
        torch.cuda.reset_peak_memory_stats()

    def device_peak_bytes(self) -> int | None:
        import torch
        return int(torch.cuda.max_memory_allocated())

    def synchronize(self, device: str) -> None:
        if device == "gpu":
            import torch
            torch.cuda.synchronize()

    def matmul(self, a, b, device):
        import torch
        target = torch.device("cuda" if device == "gpu" else "cpu")
        ta, tb = torch.from_numpy(a).to(target), torch.from_numpy(b).to(target)

        def run():
            out = ta @ tb
            self.synchronize(device)
            return out
        return run

    def matmuls(self, pairs, device):
        """PyTorch's eager products, back to back on ``device``, waiting for the last (a batch's limit)."""
        import torch
        target = torch.device("cuda" if device == "gpu" else "cpu")
        placed = [(torch.from_numpy(a).to(target), torch.from_numpy(b).to(target)) for a, b in pairs]

        def run():
            for a, b in placed:
                a @ b
            self.synchronize(device)
        return run

    def matmul_kernel(self, device: str) -> str:
        import torch
        if device == "gpu":
            return f"cuBLAS on {torch.cuda.get_device_name(0)}"
        return f"MKL ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads"


def _launch(replicas: int, argv: list[str]) -> int:
    """``python -m bench *argv`` as ``replicas`` processes under PyTorch's
    elastic launcher (what ``torchrun`` runs), with ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set in each. With no
    restarts allowed, it stops the others as soon as one fails: 0 when all
    end well, else one line on stderr and the failed replica's exit status (1
    if it was killed by a signal); ``--resume`` goes on from the last checkpoint."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its own account of a failure: ours is one line
    # K processes on a host's cores: each gets its share of threads, as torchrun does.
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // replicas))
    # DDP's once-only notice that find_unused_parameters costs a graph traversal
    # (it does, and is needed: see replicas.py) would be printed by every replica.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=replicas, run_id=f"spinn-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.2,
                          start_method="spawn")
    try:
        elastic_launch(config, sys.executable)("-m", "bench", *argv)
    except ChildFailedError as err:
        # Not err.get_first_failure(): its times are whole seconds, and of a tie it names the lowest rank. The
        # launcher lists the replicas it stopped (SIGTERM) among the failed: a cause only when nothing else ended.
        failures = err.failures
        ends = [(r, failures[r].exitcode) for r in sorted(failures, key=lambda r: (failures[r].timestamp, r))]
        rank, code = first_cause([end for end in ends if end[1] != -signal.SIGTERM] or ends)
        print(f"error: replica {rank} of {replicas} {how_it_ended(code)}; the others were stopped. The run folder "
              "holds the last checkpoint: the same command with --resume goes on from it", file=sys.stderr)
        return code if code > 0 else 1
    return 0
