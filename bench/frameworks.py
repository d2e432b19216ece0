"""The registry of implementations: which Runner class each name means.

Each ``impl_<framework>/runner.py`` defines a class ``Runner``, a subclass of
``shared.runner.Runner`` with the same constructor and methods (documented in
``docs/runner-interface.md``); the benchmark, the ``encode``/``train``
commands and the equivalence tests drive all implementations through it.
Frameworks are imported lazily, only when asked for, so a user with one
framework installed can use that one.
"""

from __future__ import annotations

import importlib
import importlib.util

FRAMEWORKS = ("pytorch", "tensorflow", "jax")
ALL = ("reference",) + FRAMEWORKS

_MODULES = {
    "reference": "shared.reference_runner",
    "pytorch": "impl_pytorch.runner",
    "tensorflow": "impl_tensorflow.runner",
    "jax": "impl_jax.runner",
}

# The library each framework's runner imports first.
PACKAGES = {"reference": "numpy", "pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}


def runner_class(framework: str):
    """The Runner class of ``framework`` (importing the framework on first use)."""
    if framework not in _MODULES:
        raise ValueError(f"unknown framework {framework!r}; choose from {', '.join(ALL)}")
    try:
        module = importlib.import_module(_MODULES[framework])
    except ImportError as err:
        raise ImportError(
            f"framework {framework!r} is not usable here ({err}); "
            f"install it with: pip install -e '.[{framework}]'"
        ) from err
    return module.Runner


def available(framework: str) -> bool:
    """The framework imports and its Runner loads (this imports the framework)."""
    try:
        runner_class(framework)
    except ImportError:
        return False
    return True


def installed(framework: str) -> bool:
    """The framework's library is installed (looked up, not imported: cheap, and silent)."""
    return importlib.util.find_spec(PACKAGES[framework]) is not None


# Implementations the benchmark measures: a framework plus Runner options.
# A variant of a framework carries a suffix (docs/spec.md §6).
IMPLEMENTATIONS = {
    "pytorch": ("pytorch", {}),
    "tensorflow": ("tensorflow", {}),
    "tensorflow-xla": ("tensorflow", {"xla": True}),
    "jax": ("jax", {}),
    "jax-padded": ("jax", {"layout": "padded"}),
    # The algorithm apart from the framework: JAX's algorithm (padded arrays,
    # pointers, masks) in PyTorch, eager and under torch.compile; define-by-run
    # SPINN in TensorFlow eager; SPINN for one sentence batched by jax.vmap.
    "pytorch-masked": ("pytorch", {"algorithm": "masked"}),
    "pytorch-compiled": ("pytorch", {"algorithm": "masked", "compile": True}),
    "tensorflow-eager": ("tensorflow", {"algorithm": "eager"}),
    "jax-vmap": ("jax", {"algorithm": "vmap"}),
}

# Variants measured only when named with --implementations (not by default).
OPT_IN = {"jax-padded", "pytorch-masked", "pytorch-compiled", "tensorflow-eager", "jax-vmap"}

# Every name a command takes: the reference, the frameworks and their variants.
NAMES = tuple(dict.fromkeys(ALL + tuple(IMPLEMENTATIONS)))


def resolve(name: str) -> tuple[str, dict]:
    """(framework, Runner options) of a framework or implementation name."""
    if name in IMPLEMENTATIONS:
        framework, options = IMPLEMENTATIONS[name]
        return framework, dict(options)
    if name in _MODULES:
        return name, {}
    raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(NAMES)}")


def make_runner(name: str, params, config, **kwargs):
    """A Runner of the framework or implementation ``name`` (e.g. "tensorflow-xla"):
    the variant's options, then ``kwargs`` (dtype, device, dropout, seed, ...)."""
    framework, options = resolve(name)
    return runner_class(framework)(params, config, **options, **kwargs)
