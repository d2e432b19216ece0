"""Four mirrors that diff: every ``impl_*`` package has the public surface docs/surface.md writes down, with the
argument lists it writes down, and nothing else public in those modules (the frameworks' own entry points aside);
where a package differs, the page says how and why.

Read with ``ast``, so no framework is imported: the test checks the packages as a reader sees them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bench import frameworks

ROOT = Path(__file__).resolve().parents[1]
SURFACE_DOC = ROOT / "docs" / "surface.md"
# Methods each framework names itself: a module's forward, a Flax module's setup and __call__...
ENTRY_POINTS = {"forward", "setup", "__call__", "call", "build"}
# Classes whose surface is a shared base class's (shared/runner.py, shared/platform.py).
BASED = {"Runner": ("shared.runner", "Runner"), "Platform": ("shared.platform", "Platform")}
PACKAGES = [frameworks.framework(name).package for name in ("pytorch", "tensorflow", "jax", "dynet")]


def _section(heading: str) -> list[str]:
    """The lines of docs/surface.md under ``## heading``, to the next heading."""
    lines = SURFACE_DOC.read_text().splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((k for k in range(start, len(lines)) if lines[k].startswith("## ")), len(lines))
    return lines[start:end]


def _rows(heading: str) -> list[list[str]]:
    """The rows of the (one) table of a section, each cell without its backticks."""
    table = [line for line in _section(heading) if line.startswith("|")][2:]
    return [[re.sub(r"`", "", cell).strip() for cell in line.strip("|").split("|")] for line in table]


def _surface(heading: str) -> dict[str, dict[str, str]]:
    """module -> name -> its argument list as written ("" for a class)."""
    out: dict[str, dict[str, str]] = {}
    for module, name, arguments, _ in _rows(heading):
        out.setdefault(module.removesuffix(".py"), {})[name] = arguments
    return out


ROLES = _surface("The roles: every package")
FAMILIES = _surface("The families: every package that implements one")
MISSING = {(package, module.removesuffix(".py")): why for package, module, why in _rows("Where a package has no such "
                                                                                          "module")}
DIFFERENCES = {(package, module.removesuffix(".py"), name): (arguments, why)
               for package, module, name, arguments, why in _rows("Where a package differs, and why")}


def arguments(node: ast.FunctionDef) -> str:
    """A definition's argument list as the page writes it: ``(self, a, b, *, c, **d)``."""
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        names.append("*")
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return "(" + ", ".join(names) + ")"


def _base_methods(module: str, name: str) -> dict[str, str]:
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.name: arguments(n) for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def definitions(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(the module's public functions, classes and ``Class.method``s with their argument lists, "" for a class;
    the methods a Runner or Platform overrides from its base, with theirs)."""
    public, overrides = {}, {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            public[node.name] = arguments(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            public[node.name] = ""
            declared = _base_methods(*BASED[node.name]) if node.name in BASED else {}
            for item in node.body:
                if not isinstance(item, ast.FunctionDef) or item.name.startswith("_") or item.name in ENTRY_POINTS:
                    continue
                if item.name in declared:
                    overrides[f"{node.name}.{item.name}"] = arguments(item)
                else:
                    public[f"{node.name}.{item.name}"] = arguments(item)
    return public, overrides


def family_modules(package: str) -> set[str]:
    """The family modules a package has: those of the families the registry gives its framework."""
    fw = next(f for f in frameworks.FRAMEWORKS_BY_NAME.values() if f.package == package)
    return {frameworks.FAMILY_MODULES[impl.algorithm] for impl in fw.implementations}


def test_the_surface_is_written_down():
    assert {"cells", "classifier", "convert", "train", "reinforce", "replicas", "runner", "platform",
            "explain"} <= set(ROLES)
    assert set(FAMILIES) == set(frameworks.FAMILY_MODULES.values())
    for table in (ROLES, FAMILIES):
        for module, names in table.items():
            for name, written in names.items():
                assert "." not in name or name.split(".")[0] in names, f"{module}: {name} without its class"
                assert ("." in name or name[0].islower()) == bool(written) or name.isupper(), (module, name)
    for (package, module, name), (_, why) in DIFFERENCES.items():
        assert package in PACKAGES and why, (package, module, name)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_the_surface_its_argument_lists_and_no_other(package):
    families = family_modules(package)
    wanted = {**ROLES, **{module: names for module, names in FAMILIES.items() if module in families}}
    problems = [f"{package}/{module}.py exists, yet the registry gives {package} no such family"
                for module in set(FAMILIES) - families if (ROOT / package / f"{module}.py").exists()]
    for module, rows in sorted(wanted.items()):
        path = ROOT / package / f"{module}.py"
        if (package, module) in MISSING:
            assert not path.exists(), f"{package}/{module}.py exists, yet docs/surface.md says why it cannot"
            continue
        if not path.exists():
            problems.append(f"{package}/{module}.py is missing")
            continue
        expected = dict(rows)
        for (p, m, name), (written, _) in DIFFERENCES.items():
            if (p, m) == (package, module):
                expected[name] = written
        have, overrides = definitions(path)
        problems += [f"{package}/{module}.py lacks {name}" for name in sorted(set(expected) - set(have))]
        problems += [f"{package}/{module}.py has {name} public, which docs/surface.md does not list (make it "
                     "private, move it to a module named for it, or add it to the surface)"
                     for name in sorted(set(have) - set(expected))]
        problems += [f"{package}/{module}.py: {name}{have[name]}, where docs/surface.md says {name}{written} (or "
                     "list the difference and why)" for name, written in expected.items()
                     if name in have and have[name] != written]
        for name, written in overrides.items():
            cls, method = name.split(".")
            base = _base_methods(*BASED[cls])[method]
            if written != base:
                problems.append(f"{package}/{module}.py: {name}{written} overrides the base's {method}{base}")
    assert not problems, "\n".join(problems)


def test_most_functions_of_all_four_take_one_argument_list():
    """The issue's measure: of the public functions and methods that every package defines under the same module
    and name, the share whose argument list is the same in all four (today every one but the listed ones)."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            public, overrides = definitions(path)
            for name, written in {**public, **overrides}.items():
                if written:
                    seen.setdefault((path.stem, name), {})[package] = written
    shared = {key: found for key, found in seen.items() if len(found) == len(PACKAGES)}
    alike = [key for key, found in shared.items() if len(set(found.values())) == 1]
    assert len(shared) >= 35 and len(alike) / len(shared) >= 0.85, sorted(set(shared) - set(alike))


# --------------------------------------------------------------------------
# Private names stay private: a private name is used by its module alone
# --------------------------------------------------------------------------

# The production code (tests aside): the framework-free packages, every framework's package, the lessons.
PRODUCTION = ("bench", "shared", "lessons", *PACKAGES)
# A library's names with a leading underscore that are its documented way to do something, and why each is used.
# (The test fails on an entry nothing uses any more, so the list stays as short as the code needs.)
LIBRARY_NAMES = {
    ("os", "_exit"): "the standard library's exit without cleanup handlers, for a child whose parent died "
                     "(bench/benchmark/worker.py); the underscore says 'no cleanup', not 'private'",
    ("torch", "_dynamo"): "torch.compile's settings (config.recompile_limit, config.capture_scalar_outputs) and "
                          "torch._dynamo.explain and reset, as PyTorch documents them: torch.compiler has no public "
                          "alias for the settings and explain (impl_pytorch/compiled.py, the lessons)",
    ("torch", "_logging"): "set_logs, PyTorch's documented switch of its compile logs, lives there alone (the lessons)",
}
# namedtuple's own methods and attributes: public, the underscore keeps them from clashing with field names.
NAMEDTUPLE = {"_replace", "_fields", "_asdict", "_make"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a module binds itself: its functions and classes at any depth, what it assigns (names
    and attributes, ``self._x = ...`` included). Any object may use these inside the module (a Flax module's lifted
    copy of itself, ``module._step``): a name is private to its module, not to an instance."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return {name for name in own if _private(name)}


def foreign_private_uses(source: str) -> list[tuple[int, str]]:
    """(line, use) of every private name of another module or object that ``source`` uses: ``x._name`` where x is
    not self, cls or super() and the module does not bind ``_name`` itself, and ``from m import _name``; a
    library's documented underscore names (LIBRARY_NAMES) and namedtuple's methods aside."""
    tree = ast.parse(source)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own | NAMEDTUPLE:
            base = node.value
            if (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                    isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"):
                continue
            if (ast.unparse(base), node.attr) not in LIBRARY_NAMES:
                found.append((node.lineno, ast.unparse(node)))
    return found


def _production_files() -> list[Path]:
    return [path for top in PRODUCTION for path in sorted((ROOT / top).rglob("*.py"))]


def test_no_module_uses_another_modules_private_names():
    """docs/surface.md: a private name is used by its module alone. What one module needs of another (explain of a
    runner, say) is public there, and documented."""
    problems = [f"{path.relative_to(ROOT)}:{line}: {use}" for path in _production_files()
                for line, use in foreign_private_uses(path.read_text())]
    assert not problems, "\n".join(problems)
    sources = "\n".join(path.read_text() for path in _production_files())
    unused = [f"{base}.{name}" for base, name in LIBRARY_NAMES if f"{base}.{name}" not in sources]
    assert not unused, f"LIBRARY_NAMES lists names nothing uses any more: {unused}"


def test_the_private_name_check_finds_what_it_should():
    source = '''
from shared.runner import _EAGER
import torch


class Runner:
    def _own(self):
        return self._own_too

    def hook(self, other, module):
        other._own()  # this module's own name: allowed
        super()._need_optimizer()
        torch._dynamo.config.recompile_limit = 1
        row = other._replace(a=1)
        return other._trace("encode"), module.sub._encode, torch._inductor
'''
    found = sorted(use for _, use in foreign_private_uses(source))
    assert found == ["from shared.runner import _EAGER", "module.sub._encode", "other._trace", "torch._inductor"]

