"""A throwaway framework: proof that a new framework is one package and one registry entry.

``runner.py`` (a shared.runner.Runner in float64 NumPy, results in the
runner's dtype), ``platform.py`` (a shared.platform.Platform that overrides
nothing but its name), the registry entry below (:func:`register`) and
``plugin.py``, whose import registers it. Nothing in
``bench/`` or ``shared/`` knows it: a process sees it when its environment
names the plugin (``SPINN_PLUGINS=tests.toy_framework.plugin``), and
tests/test_toy_framework.py drives it through ``encode``, the contract tests
and a benchmark round.
"""

from __future__ import annotations

from bench import frameworks
from bench.frameworks import LISTS, MASKED, VMAP, Framework, Implementation

NAME = "toy"
PLUGIN = "tests.toy_framework.plugin"  # the module to name in SPINN_PLUGINS


def register() -> Framework:
    """Add the toy framework to this process's registry (again, if it was removed)."""
    return frameworks.register(Framework(
        name=NAME, package="tests.toy_framework", library="numpy", extra="test",
        # The reference's arithmetic, one sentence at a time: no graph to build.
        implementations=(Implementation(NAME, LISTS, eager=True),),
        not_built={MASKED: "not built: a toy", VMAP: "not built: a toy"},
    ))
