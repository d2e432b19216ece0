"""Four mirrors that diff: every ``impl_*`` package has the public surface docs/surface.md writes down, and
nothing else public in those modules (the frameworks' own entry points aside).

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


def _table(title_cells: tuple[str, ...]) -> list[list[str]]:
    """The rows of the table of docs/surface.md whose header is ``title_cells``."""
    lines = SURFACE_DOC.read_text().splitlines()
    header = "| " + " | ".join(title_cells) + " |"
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([re.sub(r"`", "", cell).strip() for cell in line.strip("|").split("|")])
    return rows


def surface() -> dict[str, set[str]]:
    """module -> the names it must define: functions, classes and ``Class.method``."""
    wanted: dict[str, set[str]] = {}
    for module, name, _ in _table(("module", "name", "the job")):
        wanted.setdefault(module.removesuffix(".py"), set()).add(name)
    return wanted


def missing_modules() -> dict[tuple[str, str], str]:
    return {(package, module.removesuffix(".py")): why for package, module, why in _table(("package", "module", "why"))}


def _base_methods(module: str, name: str) -> set[str]:
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not n.name.startswith("_")}


def public_names(path: Path) -> set[str]:
    """The module's public functions and classes, and each public class's public methods ("Class.method"); a
    subclass of a shared base class (Runner, Platform) counts the methods the base class does not declare."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            names.add(node.name)
            declared = _base_methods(*BASED[node.name]) if node.name in BASED else set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_") \
                        and item.name not in ENTRY_POINTS and item.name not in declared:
                    names.add(f"{node.name}.{item.name}")
    return names


def test_the_surface_is_written_down():
    wanted = surface()
    assert {"cells", "model", "classifier", "convert", "train", "reinforce", "replicas", "runner", "platform",
            "explain"} <= set(wanted)
    for module, names in wanted.items():
        for name in names:
            cls = name.split(".")[0]
            assert "." not in name or cls in names, f"{module}: {name} without its class"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_the_surface_and_no_other(package):
    wanted, exempt = surface(), missing_modules()
    problems = []
    for module, names in sorted(wanted.items()):
        path = ROOT / package / f"{module}.py"
        if (package, module) in exempt:
            assert not path.exists(), f"{package}/{module}.py exists, yet docs/surface.md says why it cannot"
            continue
        if not path.exists():
            problems.append(f"{package}/{module}.py is missing")
            continue
        have = public_names(path)
        problems += [f"{package}/{module}.py lacks {name}" for name in sorted(names - have)]
        problems += [f"{package}/{module}.py has {name} public, which docs/surface.md does not list "
                     "(make it private, or add it to the surface for every package)" for name in sorted(have - names)]
    assert not problems, "\n".join(problems)


def test_most_of_the_surface_is_shared_by_all_four():
    """The issue's measure: of the public names of the surface modules, how many every package defines."""
    per_package = {}
    for package in PACKAGES:
        names = set()
        for module in surface():
            path = ROOT / package / f"{module}.py"
            if path.exists():
                names |= {f"{module}:{name}" for name in public_names(path)}
        per_package[package] = names
    union = set().union(*per_package.values())
    shared = set.intersection(*per_package.values())
    assert len(shared) / len(union) >= 0.7, sorted(union - shared)
