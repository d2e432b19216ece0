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
