"""What the harness needs from DyNet besides the model (shared/platform.py).

DyNet is configured when it is first imported (memory, random seed,
autobatching, profiling: ``dynet_config``, read by ``import dynet``), so this
module never imports it; the runner picks autobatching per graph instead of
per process. The published wheel (``dyNET38``) is CPU-only.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np

from shared.platform import Platform as PlatformBase

DISTRIBUTION = "dyNET38"  # the wheel on PyPI that provides the module ``dynet`` (DyNet 2.1)


class Platform(PlatformBase):
    name = "dynet"
    library = "dynet"
    explain_module = "impl_dynet.explain"  # what `bench explain` reads from its graphs
    data_parallel_missing = ("DyNet has no data-parallel engine: its Python API has no all-reduce across processes "
                             "or devices (the C++ multi-process training of dynet/mp.h updates one shared model "
                             "asynchronously, which is not the synchronous step --replicas takes)")

    def version(self) -> str:
        """DyNet's own version (``dynet.__version__``, read from the installed
        module's source rather than by importing it), with the wheel's."""
        wheel = importlib.metadata.version(DISTRIBUTION)
        library = _module_version()
        return f"{library} ({DISTRIBUTION} {wheel})" if library else f"{DISTRIBUTION} {wheel}"

    def default_env(self) -> dict[str, str]:
        # DyNet's memory pools, in MB (forward, backward, parameters, scratch),
        # preallocated on import: with autobatching they cannot grow, so they
        # must hold a training step's graph of 128 long pairs at full size
        # (impl_dynet/library.py). Read by impl_dynet.library.
        return {"SPINN_DYNET_MEM": "640,640,256,64"}

    def gpu_missing_reason(self) -> str:
        return f"the {DISTRIBUTION} wheel is built without CUDA (DyNet runs on the CPU here)"

    def thread_counts(self) -> dict:
        # DyNet's CPU device runs Eigen on one thread, whatever the machine has.
        return {**super().thread_counts(), "dynet_threads": 1}

    def matmul(self, a: np.ndarray, b: np.ndarray, device: str):
        """DyNet's own product (Eigen, one thread) of two constant parameters:
        each call is a fresh graph and one forward pass; the result stays in
        DyNet (reading it back copies element by element, not the matmul)."""
        from impl_dynet.library import dy

        collection = dy.ParameterCollection()
        left = collection.parameters_from_numpy(np.asarray(a, dtype=np.float32))
        right = collection.parameters_from_numpy(np.asarray(b, dtype=np.float32))

        def run():
            dy.renew_cg()
            product = dy.const_parameter(left) * dy.const_parameter(right)
            product.forward()
            return product
        return run


def _module_version() -> str | None:
    """``__version__`` as dynet.py assigns it, found without importing the module
    (importing would initialise DyNet with this process's settings)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("dynet")
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, encoding="utf-8") as source:
        found = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', source.read(), re.MULTILINE)
    return found.group(1) if found else None
