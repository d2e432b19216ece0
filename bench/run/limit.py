"""The products of a batch: its useful ones (counted once from the transitions actually present) and those an
implementation's algorithm computes, as lists; and their times back to back on a routine: the limit of a batch (its
useful products alone on the machine's fastest routine) and the computed time beside it (docs/spec.md §6, "Decision:
the limit" and "Decision: where the time goes"), timed by the one loop (:func:`fastest`) that also times the dense
matmul peak the limit is checked against, on NumPy's routine (:func:`numpy_matmuls`) or a framework's own.

Only the matrix products of docs/spec.md §3 count (2 FLOPs per multiply-add; training 3x: each product's two backward
products); which are useful, and which each kind computes, is docs/spec.md §6's; a kind follows from the registry
(:func:`computed_kind`), never from a framework's name.
"""

from __future__ import annotations

import importlib
import math
import time
from typing import Callable

import numpy as np

from bench import frameworks
from bench.run.padding import loop_length
from shared.batching import sentences_transitions
from shared.params import ModelConfig
from shared.platform import Platform
from shared.transitions import PAD, REDUCE, SHIFT, reduce_heights

TRAIN_FACTOR = 3
REPEATS = 3  # a batch's products are timed this many times; the fastest counts


def batch_flops(config: ModelConfig, batch, mode: str = "infer") -> int:
    """Useful FLOPs of one pair batch in ``infer`` or ``train`` mode: those of its useful products."""
    if mode not in ("infer", "train"):
        raise ValueError(f"unknown mode {mode!r}; expected 'infer' or 'train'")
    return flops(config, products(config, batch), mode)


# The product lists (computed_kind says which is whose): a levels kind names the padding of its framework's loop
# (shared.levels.PADDINGS, imported by the levels kinds only: a record names the files its measurement ran).
KINDS = ("useful", "lists", "loop", "arrays", "levels-exact", "levels-static")
SAMPLE = 5  # the timed batches a measurement's products are timed on, evenly spaced among them


def computed_kind(implementation: str, mode: str) -> str:
    """The kind of products (:data:`KINDS`) ``implementation`` computes in ``mode``, by its registry entry (a levels
    family's module is imported for its ``PADDING``: ask in the implementation's own process)."""
    impl = frameworks.implementation(implementation)
    padding = impl.padding_in(mode)
    if impl.family == frameworks.LEVELS:
        package = frameworks.framework(impl.framework).package
        return "levels-" + importlib.import_module(f"{package}.{impl.family}").PADDING
    return padding if padding != "none" else "useful" if impl.family == frameworks.AUTOBATCH else "lists"


def products(config: ModelConfig, batch, kind: str = "useful") -> list[tuple[str, int]]:
    """The forward products of a pair batch that ``kind`` (:data:`KINDS`) computes, in the order they can run, as
    (role, rows): the weight (:func:`shapes`) and the left operand's rows."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of products {kind!r}; choose from {', '.join(KINDS)}")
    transitions = sentences_transitions(batch)
    (S, T), N, tracker = transitions.shape, np.shape(batch.premise_tokens)[1], config.tracker_dim > 0
    out = [("projection", int(np.sum(transitions == SHIFT)) if kind == "useful" else S * N)]
    if kind.startswith("levels-"):
        from shared.levels import level_rows
        rows = level_rows(transitions, N, tracker, kind.removeprefix("levels-"))
    elif kind in ("loop", "arrays"):
        rows = [(S * tracker, S)] * (T if kind == "arrays" else loop_length(transitions))
    elif tracker or kind == "lists":
        rows = zip(((transitions != PAD).sum(axis=0) * tracker).tolist(), (transitions == REDUCE).sum(axis=0).tolist())
    else:  # the useful products without the tracker: one Reduce product per tree height
        heights = np.array([h for row in transitions.tolist() for h in reduce_heights(row)], dtype=int)
        rows = [(0, count) for count in np.bincount(heights, minlength=1).tolist()[1:]]
    for active, reduces in rows:
        out += [("tracker", active)] * bool(active) + [("reduce", reduces)] * bool(reduces)
    return out + [(f"mlp.{k}", batch.size) for k in range(config.mlp_layers)] + [("output", batch.size)]


def shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """Each role's weight, [in, out] (the kernels of one product side by side, docs/spec.md §3)."""
    E, H, D, M = config.embed_dim, config.hidden_dim, config.tracker_dim, config.mlp_dim
    out = {"projection": (E, 2 * H), "reduce": (2 * H + D, 5 * H), "output": (M if config.mlp_layers else 4 * H, 3)}
    if D > 0:
        out["tracker"] = (3 * H + D, 4 * D)
    out.update({f"mlp.{k}": (4 * H if k == 0 else M, M) for k in range(config.mlp_layers)})
    return out


def flops(config: ModelConfig, listed: list[tuple[str, int]], mode: str) -> int:
    """The matmul FLOPs of products (:func:`products`) in ``mode``."""
    weights = shapes(config)
    forward = sum(2 * rows * weights[role][0] * weights[role][1] for role, rows in listed)
    return TRAIN_FACTOR * forward if mode == "train" else forward


def arrays(config: ModelConfig, lists: list[list[tuple[str, int]]], dtype: str) -> dict[str, tuple]:
    """role -> (weight, inputs, output gradients) for every list of products (:func:`products`) timed with them: the
    weight random, the others as many rows as the longest list's (their values do not change a product's time)."""
    rng, rows = np.random.default_rng(0), {}
    for role, m in (product for listed in lists for product in listed):
        rows[role] = max(rows.get(role, 0), m)
    return {role: (rng.standard_normal((n_in, n_out)).astype(dtype), np.full((rows.get(role, 0), n_in), 0.5, dtype),
                   np.full((rows.get(role, 0), n_out), 0.5, dtype)) for role, (n_in, n_out) in shapes(config).items()}


def operands(listed: list[tuple[str, int]], mode: str, made: dict[str, tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (left, right) arrays of products (:func:`products`) in ``mode`` (in training each one's two backward
    products after it), from :func:`arrays`: the weights shared between steps as a model's are."""
    out = []
    for role, m in listed:
        w, x, dy = made[role][0], made[role][1][:m], made[role][2][:m]
        out.append((x, w))
        if mode == "train":
            out += [(dy, w.T), (x.T, dy)]  # dX = dY W^T, dW = X^T dY
    return out


def sample(count: int, size: int = SAMPLE) -> list[int]:
    """``size`` positions evenly spaced among ``count`` (all of them where there are no more)."""
    return list(range(count)) if count <= size else [int((k + 0.5) * count / size) for k in range(size)]


def time_kinds(matmuls, device: str, config: ModelConfig, batches: list, kinds: list[str], mode: str, dtype: str,
               repeats: int = REPEATS) -> dict[str, list[float]]:
    """kind -> each batch's fastest time of its products back to back on ``matmuls`` (:func:`routine`), a batch's
    kinds timed in turn so that noise lands on every kind alike."""
    lists = [[products(config, batch, kind) for kind in kinds] for batch in batches]
    made, best = arrays(config, [listed for batch in lists for listed in batch], dtype), {kind: [] for kind in kinds}
    for batch in lists:
        runs = [matmuls(operands(listed, mode, made), device) for listed in batch]
        for kind, seconds in zip(kinds, fastest(runs, repeats)):
            best[kind].append(seconds)
    return best


def fastest(calls: list[Callable[[], object]], repeats: int = REPEATS, min_time: float = 0.0,
            most: int = 200) -> list[float]:
    """Each call's fastest time, the calls timed in turn ``repeats`` times over and again while less than
    ``min_time`` seconds have passed (``most`` times at most): the one timing loop of the products, the dense peak
    and NumPy's choice of form."""
    best, started, count = [math.inf] * len(calls), time.perf_counter(), 0
    while count < repeats or (time.perf_counter() - started < min_time and count < most):
        for k, call in enumerate(calls):
            start = time.perf_counter()
            call()
            best[k] = min(best[k], time.perf_counter() - start)
        count += 1
    return best


def matmul_peak(platform: Platform, device: str, dtype: str = "float32", min_time: float = 0.5) -> dict:
    """Best FLOP/s of a square matmul on ``platform``'s framework (after a warm-up), and the size used: the dense peak
    a run's limit is checked against."""
    n, rng = 8192 if device == "gpu" else 1024, np.random.default_rng(0)
    run = platform.matmul(rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype), device)
    run()  # warm-up: allocation, compilation, thread start-up
    return {"matmul_peak_flops_per_s": 2.0 * n**3 / fastest([run], 3, min_time)[0], "matmul_peak_n": n}


def own_routine(platform_class: type) -> bool:
    """Whether a framework times products on its own eager routine: its Platform has ``matmuls``."""
    return platform_class.matmuls is not Platform.matmuls


def routine(platform: Platform) -> tuple[Callable, Callable[[str], str]]:
    """The routine the products are timed on in ``platform``'s process and what names it: its framework's own where
    it has one, else NumPy's (the limit's process's)."""
    return (platform.matmuls, platform.matmul_kernel) if own_routine(type(platform)) else (numpy_matmuls, numpy_kernel)


def numpy_matmuls(pairs: list[tuple[np.ndarray, np.ndarray]], device: str) -> Callable[[], object] | None:
    """NumPy's routine, on the host only: every ``a @ b`` of ``pairs`` in order, each in its faster form."""
    if device != "cpu":
        return None
    transposed: dict = {}  # each weight laid out once
    calls = [_fastest_form(a, b, transposed) for a, b in pairs]

    def run():
        for call in calls:
            call()
    return run


def numpy_kernel(device: str) -> str:
    """NumPy's BLAS, its version, kernel and threads, as threadpoolctl reads them."""
    from threadpoolctl import threadpool_info

    return "; ".join(f"{i['internal_api']} {i['version']} {i.get('architecture') or ''}, {i['num_threads']} threads"
                     for i in threadpool_info() if i["user_api"] == "blas") or "NumPy's BLAS (not found)"


GEMV_ROWS = 8  # a product of at most this many rows may also run as one matrix-vector product per row
_FORMS: dict[tuple, bool] = {}  # (a's shape, b's shape and layout) -> whether the rows' form was the faster


def _gemv_rows(a: np.ndarray, b: np.ndarray, transposed: dict) -> Callable[[], object]:
    """``a @ b`` as one matrix-vector product per row of ``a`` against ``b`` transposed once (kept in ``transposed``),
    faster than a GEMM, which repacks ``b`` on every call, for a row or two (docs/spec.md §6, "the limit")."""
    key = (b.ctypes.data, b.shape, b.strides)
    if key not in transposed:
        transposed[key] = np.ascontiguousarray(b.T)
    bt, rows = transposed[key], list(a)
    return lambda: [bt @ row for row in rows]


def _fastest_form(a: np.ndarray, b: np.ndarray, transposed: dict) -> Callable[[], object]:
    """``a @ b`` in NumPy's faster form for its shape (GEMM or :func:`_gemv_rows`), timed once per shape a process."""
    gemm = lambda: a @ b  # noqa: E731
    if a.shape[0] > GEMV_ROWS:
        return gemm
    rows = _gemv_rows(a, b, transposed)
    key = (a.shape, b.shape, b.flags.c_contiguous)
    if key not in _FORMS:
        rows(), gemm()
        by_rows, by_gemm = fastest([rows, gemm], 5)
        _FORMS[key] = by_rows < by_gemm
    return rows if _FORMS[key] else gemm
