"""The registry: every framework and implementation, and everything the harness knows of them; nothing else in bench/
or shared/ names a framework (docs/runner-interface.md, "Adding a framework"). Frameworks are imported lazily, when
asked for, so a user with one framework installed can use it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from dataclasses import dataclass, field

# The algorithm families of the report's matrix (docs/spec.md §6), in its row order, each named by its module in
# every package that implements it (impl_<framework>/<family>.py, its SPINN) and by the runner option that picks it
# (family=<module>): diff two of them to see what a framework forces. TITLES: the words the matrix shows for each.
LISTS = "lists"  # Python lists as stacks, a Python loop: the graph follows the trees
MASKED = "masked"  # padded arrays, pointers and masks: one graph for every tree
VMAP = "vmap"  # the model for one sentence, batched at trace time
AUTOBATCH = "autobatch"  # the model for one sentence, batched at run time
LEVELS = "levels"  # the trees scheduled on the host into levels (shared/levels.py): a Reduce per level, gold only
FAMILIES = (LISTS, MASKED, VMAP, AUTOBATCH, LEVELS)
TITLES = {LISTS: "per-example lists", MASKED: "masked arrays", VMAP: "per-sentence code + vmap",
          AUTOBATCH: "per-sentence code + autobatching", LEVELS: "host-scheduled levels"}
PADDING = ("arrays", "loop", "none")  # Implementation.padding


@dataclass(frozen=True)
class Implementation:
    """One measurable implementation: a framework's Runner with options."""

    name: str  # "tensorflow-xla": a framework's name, or the name with a suffix (a variant)
    family: str  # one of FAMILIES
    options: dict = field(default_factory=dict)  # Runner keyword options, wherever it runs
    # Options only the benchmark's timed step adds: how the framework's users run it (DyNet's trainers, in C++).
    timed_options: dict = field(default_factory=dict)
    eager: bool = False  # builds no graph ahead of time: never a candidate for "best static"
    opt_in: bool = False  # measured only when named with --implementations
    explained: bool = False  # an opt-in variant that `explain` shows when named
    one_trace: bool = False  # traces each function once whatever the batch's lengths (a report target checks it)
    padding: str = "arrays"  # which PAD slots it computes: docs/spec.md §6, "Decision: the padding share"
    train_padding: str = ""  # the same for the training step, where it differs ("": as padding)
    env: dict = field(default_factory=dict)  # set in its benchmark worker before the framework is imported
    framework: str = ""  # filled in by register()

    def padding_in(self, mode: str) -> str:
        """Which PAD slots it computes in ``mode`` ("infer" or "train")."""
        return (self.train_padding or self.padding) if mode == "train" else self.padding


@dataclass(frozen=True)
class Framework:
    """One framework: its package, its library, its implementations."""

    name: str  # "pytorch"
    package: str  # "impl_pytorch": holds runner.py and platform.py
    library: str  # the module its runner imports first ("torch"), looked up to tell whether it is installed
    extra: str  # the pip extra that installs it: pip install -e '.[EXTRA]'
    implementations: tuple[Implementation, ...]
    not_built: dict = field(default_factory=dict)  # family -> why this framework has no such implementation
    modules: dict = field(default_factory=dict)  # "runner"/"platform" -> module, where not PACKAGE.runner/.platform

    def module(self, kind: str) -> str:
        """The module of ``kind`` ("runner" or "platform")."""
        return self.modules.get(kind, f"{self.package}.{kind}")


FRAMEWORKS_BY_NAME: dict[str, Framework] = {}
IMPLEMENTATIONS_BY_NAME: dict[str, Implementation] = {}

# The float64 NumPy oracle: a runner and a platform, but never benchmarked.
REFERENCE = Framework("reference", "shared", "numpy", "test", (),
                      modules={"runner": "shared.reference.runner", "platform": "shared.reference.runner"})


def register(framework: Framework) -> Framework:
    """Add ``framework`` and its implementations (re-registering a name replaces it)."""
    for old in FRAMEWORKS_BY_NAME.get(framework.name, Framework("", "", "", "", ())).implementations:
        IMPLEMENTATIONS_BY_NAME.pop(old.name, None)
    implementations = tuple(dataclasses.replace(i, framework=framework.name) for i in framework.implementations)
    for impl in implementations:
        if impl.family not in FAMILIES:
            raise ValueError(f"{impl.name}: unknown family {impl.family!r}; choose from {FAMILIES}")
        for padding in (impl.padding_in("infer"), impl.padding_in("train")):
            if padding not in PADDING:
                raise ValueError(f"{impl.name}: unknown padding {padding!r}; choose from {PADDING}")
        if impl.name in IMPLEMENTATIONS_BY_NAME and IMPLEMENTATIONS_BY_NAME[impl.name].framework != framework.name:
            raise ValueError(f"implementation {impl.name!r} is already registered by another framework")
    framework = dataclasses.replace(framework, implementations=implementations)
    FRAMEWORKS_BY_NAME[framework.name] = framework
    IMPLEMENTATIONS_BY_NAME.update({impl.name: impl for impl in implementations})
    _refresh()
    return framework


def unregister(name: str) -> None:
    """Remove a framework registered with :func:`register` (for tests)."""
    framework = FRAMEWORKS_BY_NAME.pop(name)
    for impl in framework.implementations:
        IMPLEMENTATIONS_BY_NAME.pop(impl.name, None)
    _refresh()


# Views of the registry (recomputed whenever it changes)
FRAMEWORKS: tuple[str, ...] = ()  # the registered frameworks, in registration order
ALL: tuple[str, ...] = ()  # "reference" and the frameworks
NAMES: tuple[str, ...] = ()  # every name a command takes
IMPLEMENTATIONS: dict[str, tuple[str, dict]] = {}  # name -> (framework, Runner options)
OPT_IN: frozenset[str] = frozenset()
EAGER: frozenset[str] = frozenset()
BASELINE = ""  # the first framework's first implementation: what the static ones are compared with


def _refresh() -> None:
    global FRAMEWORKS, ALL, NAMES, IMPLEMENTATIONS, OPT_IN, EAGER, BASELINE
    FRAMEWORKS = tuple(FRAMEWORKS_BY_NAME)
    ALL = (REFERENCE.name,) + FRAMEWORKS
    IMPLEMENTATIONS = {i.name: (i.framework, dict(i.options)) for i in IMPLEMENTATIONS_BY_NAME.values()}
    NAMES = tuple(dict.fromkeys(ALL + tuple(IMPLEMENTATIONS)))
    OPT_IN = frozenset(i.name for i in IMPLEMENTATIONS_BY_NAME.values() if i.opt_in)
    EAGER = frozenset(i.name for i in IMPLEMENTATIONS_BY_NAME.values() if i.eager)
    BASELINE = FRAMEWORKS_BY_NAME[FRAMEWORKS[0]].implementations[0].name if FRAMEWORKS else ""


_refresh()


# The entries: one per framework (what each variant is: docs/benchmark.md, "The benchmark")
register(Framework(
    name="pytorch", package="impl_pytorch", library="torch", extra="pytorch",
    implementations=(
        # Bradbury's 2017 algorithm: the baseline every ratio is taken against; each step runs on its active rows.
        Implementation("pytorch", LISTS, eager=True, padding="none"),
        Implementation("pytorch-masked", MASKED, {"family": "masked"}, eager=True, opt_in=True),
        Implementation("pytorch-compiled", MASKED, {"family": "masked", "compile": True}, opt_in=True),
        # Inductor's CUDA graphs: each compiled step one graph replay on a GPU (on a CPU, as pytorch-compiled).
        Implementation("pytorch-cudagraphs", MASKED,
                       {"family": "masked", "compile": True, "compile_mode": "reduce-overhead"}, opt_in=True),
        # Eager: one batched Reduce per level, gathers and appends (what TorchFold and DGL's Tree-LSTM do).
        Implementation("pytorch-levels", LEVELS, {"family": "levels"}, eager=True, opt_in=True, padding="none"),
    ),
    not_built={VMAP: "not built: torch.func.vmap could batch a per-sentence loop only if it branched by masks, "
                     "never by a Python if on the data"},
))

register(Framework(
    name="tensorflow", package="impl_tensorflow", library="tensorflow", extra="tensorflow",
    implementations=(
        # Input signatures of unknown sizes: one graph. Its while loop stops after the batch's last real step.
        Implementation("tensorflow", MASKED, one_trace=True, padding="loop"),
        Implementation("tensorflow-xla", MASKED, {"xla": True}, padding="loop"),
        Implementation("tensorflow-eager", LISTS, {"family": "lists"}, eager=True, opt_in=True, padding="none"),
        # One tf.while_loop over the levels. No PAD step is computed; its own padding is rows of a level.
        Implementation("tensorflow-levels", LEVELS, {"family": "levels"}, opt_in=True, one_trace=True,
                       padding="none"),
    ),
    not_built={VMAP: "not built: tf.vectorized_map would have to convert a tf.while_loop over per-sentence "
                     "stacks"},
))

register(Framework(
    name="jax", package="impl_jax", library="jax", extra="jax",
    implementations=(
        # Inference skips the scan's iterations past the last real step (a cond); training runs all T (skip_tail).
        Implementation("jax", MASKED, padding="loop", train_padding="arrays"),
        Implementation("jax-tail-cond", MASKED, {"train_skip_tail": True}, opt_in=True, padding="loop"),
        Implementation("jax-padded", MASKED, {"layout": "padded"}, opt_in=True, padding="loop",
                       train_padding="arrays"),
        Implementation("jax-vmap", VMAP, {"family": "vmap"}, opt_in=True, explained=True),
        # One lax.scan over the levels; as tensorflow-levels, its own padding is rows of a level.
        Implementation("jax-levels", LEVELS, {"family": "levels"}, opt_in=True, padding="none"),
    ),
    not_built={LISTS: "not built: JAX would run such a loop op by op (no jit), or jit would unroll it into one "
                      "program per batch of trees"},
))

register(Framework(
    name="dynet", package="impl_dynet", library="dynet", extra="dynet",
    implementations=(
        # A Python loop into one graph, batched by DyNet as it evaluates it; timed with DyNet's own C++ trainer.
        Implementation("dynet", AUTOBATCH, {"autobatch": True}, {"trainer": "native"}, eager=True, padding="none"),
        Implementation("dynet-unbatched", AUTOBATCH, {"autobatch": False}, {"trainer": "native"}, eager=True,
                       opt_in=True, padding="none"),
        # By depth: a process-wide setting read when DyNet is imported (impl_dynet/library.py).
        Implementation("dynet-depth", AUTOBATCH, {"autobatch": True}, {"trainer": "native"}, eager=True, opt_in=True,
                       padding="none", env={"SPINN_DYNET_AUTOBATCH": "depth"}),
    ),
    not_built={LISTS: "not built: DyNet batches a per-sentence loop itself; batching by hand is PyTorch's row",
               MASKED: "not built: padded arrays and masks are what automatic batching exists to avoid",
               VMAP: "not built: DyNet has no trace-time vectorizing map",
               LEVELS: "not built: autobatching by depth (dynet-depth) finds such levels at run time"},
))


# The benchmark's presets: what a kind of run measures, as defaults of bench run's flags (a flag given wins).
PRESETS = {
    # One 10-minute call on a lent GPU machine (check: bench run --preset gpu --estimate results/gpu-h100): batch 1
    # (launch-bound) and 1024, two length buckets. DyNet's wheel has no CUDA: measured here only when named.
    "gpu": {
        "implementations": ["pytorch", "pytorch-masked", "pytorch-compiled", "pytorch-cudagraphs", "pytorch-levels",
                            "tensorflow", "tensorflow-xla", "tensorflow-levels", "jax", "jax-levels"],
        "device": "gpu-host", "batch_sizes": [1, 1024], "buckets": [16, 64], "modes": ["infer", "train"],
        "transitions": ["gold"], "rounds": 5,
    },
    # The protocol of Table 2 of Neubig, Goldberg and Dyer (2017) (docs/autobatching.md §6; results/cpu-table2).
    "dynet-table2": {
        "implementations": ["dynet-unbatched", "dynet", "dynet-depth", "pytorch", "pytorch-masked", "tensorflow",
                            "tensorflow-xla", "jax"],
        "model": "treelstm", "size": "table2", "batch_sizes": [64], "modes": ["train"], "transitions": ["gold"],
    },
    # Host-scheduled levels against the baseline, static graphs and autobatching (docs/algorithm-or-framework.md §4).
    "levels": {
        "implementations": ["pytorch", "pytorch-levels", "tensorflow", "tensorflow-xla", "tensorflow-levels", "jax",
                            "jax-levels", "dynet", "dynet-depth"],
        "batch_sizes": [1, 128], "modes": ["infer", "train"], "transitions": ["gold"],
    },
}
# The implementations that stand for Table 2's DyNet without autobatching and with it (by agenda, its default).
TABLE2 = {"unbatched": "dynet-unbatched", "autobatched": "dynet"}


def framework(name: str) -> Framework:
    """The entry of a framework name, "reference" included."""
    if name == REFERENCE.name:
        return REFERENCE
    if name not in FRAMEWORKS_BY_NAME:
        raise ValueError(f"unknown framework {name!r}; choose from {', '.join(ALL)}")
    return FRAMEWORKS_BY_NAME[name]


def implementation(name: str) -> Implementation:
    """The entry of an implementation name."""
    if name not in IMPLEMENTATIONS_BY_NAME:
        raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS_BY_NAME[name]


def explained() -> tuple[str, ...]:
    """What ``explain`` shows: every framework, then the variants it explains when named."""
    return FRAMEWORKS + tuple(i.name for i in IMPLEMENTATIONS_BY_NAME.values() if i.explained)


def matrix() -> dict[tuple[str, str], list[str] | str]:
    """The report's algorithm × framework matrix: (family, framework) -> the implementations, or why none."""
    cells: dict[tuple[str, str], list[str] | str] = {}
    for fw in FRAMEWORKS_BY_NAME.values():
        for family in FAMILIES:
            names = [i.name for i in fw.implementations if i.family == family]
            cells[family, fw.name] = names or fw.not_built.get(family, "not built")
    return cells


def runner_class(framework_name: str):
    """The Runner class of ``framework_name`` (importing the framework on first use)."""
    fw = framework(framework_name)
    try:
        return importlib.import_module(fw.module("runner")).Runner
    except ImportError as err:
        raise ImportError(f"framework {fw.name!r} is not usable here ({err}); "
                          f"install it with: pip install -e '.[{fw.extra}]'") from err


def platform(name: str):
    """The Platform of a framework or implementation name (does not import the framework's library)."""
    framework_name = resolve(name)[0] if name in IMPLEMENTATIONS_BY_NAME else name
    fw = framework(framework_name)
    return importlib.import_module(fw.module("platform")).Platform()


def installed(framework_name: str) -> bool:
    """The framework's library is installed (looked up, not imported: cheap, and silent)."""
    return importlib.util.find_spec(framework(framework_name).library) is not None


def resolve(name: str) -> tuple[str, dict]:
    """(framework, Runner options) of a framework or implementation name."""
    if name in IMPLEMENTATIONS_BY_NAME:
        impl = IMPLEMENTATIONS_BY_NAME[name]
        return impl.framework, dict(impl.options)
    if name in ALL:
        return name, {}
    raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(NAMES)}")


def make_runner(name: str, params, config, **kwargs):
    """A Runner of the framework or implementation ``name`` (e.g. "tensorflow-xla"): the variant's options, then
    ``kwargs`` (dtype, device, dropout, seed, ...), which override an option of the same name."""
    framework_name, options = resolve(name)
    return runner_class(framework_name)(params, config, **{**options, **kwargs})


def platforms(names=None) -> list:
    """The platforms of the frameworks of ``names``, each once, or of every framework and the reference."""
    chosen = ALL if names is None else dict.fromkeys(resolve(n)[0] for n in names)
    return [platform(name) for name in chosen]


def configure_process(names=None, dtype: str = "float32") -> dict[str, dict[str, str]]:
    """The environment the frameworks of ``names`` (every one without) ask for before their libraries are imported:
    "defaults" the caller's environment may override, "forced" it may not."""
    chosen = platforms(names)
    return {"defaults": {key: value for p in chosen for key, value in p.default_env().items()},
            "forced": {key: value for p in chosen for key, value in p.forced_env(dtype).items()}}


# Frameworks from other packages
ENTRY_POINTS = "spinn_suite.frameworks"  # the entry-point group a package declares its framework's module in


class PluginError(ImportError):
    """A plugin failed to import, or registered a name that exists (the message says which, in one line)."""


def _load_plugins() -> None:
    """Import every plugin module (each calls :func:`register`): ``SPINN_PLUGINS``'s, then the ENTRY_POINTS group's."""
    from importlib import metadata

    named = [(f"SPINN_PLUGINS module {m!r}", m) for m in os.environ.get("SPINN_PLUGINS", "").split(",") if m.strip()]
    declared = [(f"entry point {e.name!r} of {ENTRY_POINTS} ({e.value})", e.value.partition(":")[0])
                for e in metadata.entry_points(group=ENTRY_POINTS)]
    for where, module in named + declared:
        before = dict(FRAMEWORKS_BY_NAME)
        try:
            importlib.import_module(module.strip())
        except Exception as err:  # whatever a plugin raises, said in one line
            raise PluginError(f"plugin {where} failed to import: {type(err).__name__}: {err}") from None
        replaced = [name for name, entry in before.items() if FRAMEWORKS_BY_NAME.get(name) is not entry]
        if replaced:
            FRAMEWORKS_BY_NAME.update(before)
            for old in before.values():
                IMPLEMENTATIONS_BY_NAME.update({impl.name: impl for impl in old.implementations})
            _refresh()
            raise PluginError(f"plugin {where} registers framework {replaced[0]!r}, which exists: choose another "
                              "name")


_load_plugins()
