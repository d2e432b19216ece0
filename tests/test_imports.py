"""No import circles in the project: shared/, bench/, impl_*/.

Every module's imports are read from its source with ``ast`` (imports inside
functions included, since they hide circles rather than remove them), turned
into a graph of project modules, and searched for a cycle. Importing
``a.b.c`` runs ``a`` and ``a.b`` first, so those count as imported too: as
what importing them runs, their ``:top`` nodes (the imports outside their
functions; a command package's ``__init__`` imports its modules inside its
command), and not at all from a module of ``a.b`` itself, which runs only once
``a.b`` has.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench import frameworks

ROOT = Path(__file__).resolve().parent.parent
# The framework-free packages and every registered framework's package.
PACKAGES = ("shared", "bench", *(fw.package for fw in frameworks.FRAMEWORKS_BY_NAME.values()))


def project_modules(root: Path, packages) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of the packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _with_parents(name: str) -> list[str]:
    """a.b.c -> [a, a.b, a.b.c]: what importing a.b.c runs."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _statements(tree: ast.AST, top: bool):
    """Every node of ``tree``; with ``top``, only those its import runs (not the bodies of its functions)."""
    for node in ast.iter_child_nodes(tree):
        yield node
        if not (top and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            yield from _statements(node, top)


def imports_of(name: str, path: Path, modules: dict[str, Path], top: bool = False) -> set[str]:
    """The project modules that module ``name`` imports, anywhere in its source (``top``: outside its functions),
    each with the ``:top`` node of every package its import runs first (none of ``name``'s own)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _statements(ast.parse(path.read_text(), filename=str(path)), top):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # `from pkg import name`: the submodule pkg.name if there is one, else pkg itself.
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        for target in (t for t in targets if t in modules):
            found.add(target)
            found.update(f"{m}:top" for m in _with_parents(target)[:-1] if m in modules and m != name
                         and not name.startswith(m + "."))
    found.discard(name)
    return found


def import_graph(root: Path, packages) -> dict[str, set[str]]:
    """Module -> what it imports, and ``module:top`` -> what importing it runs."""
    modules = project_modules(root, packages)
    return {**{name: imports_of(name, path, modules) for name, path in modules.items()},
            **{f"{name}:top": imports_of(name, path, modules, top=True) for name, path in modules.items()}}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" afterwards
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return path[path.index(child):] + [child]
            if child not in state:
                cycle = visit(child)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_project_has_no_import_circle():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 40 and "bench.cli" in graph and "impl_jax.runner" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_framework_free_code_imports_no_implementation_or_tool():
    """shared/ is the bottom layer: it imports neither impl_* nor bench."""
    graph = import_graph(ROOT, PACKAGES)
    upward = {name: sorted(m for m in imported if not m.startswith("shared"))
              for name, imported in graph.items() if name.startswith("shared")}
    assert {name: found for name, found in upward.items() if found} == {}


def test_the_walk_sees_function_level_and_relative_imports():
    graph = import_graph(ROOT, PACKAGES)
    assert "impl_jax.convert" in graph["impl_jax.runner"]  # from .convert import ...
    assert "impl_pytorch.train" in graph["impl_pytorch.runner"]  # from . import convert, train
    assert "shared.glove" in graph["bench.init"]  # imported inside fresh_params


@pytest.fixture
def circular_package(tmp_path):
    """pkg.a imports pkg.b at the top; pkg.b imports pkg.a inside a function."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def late():\n    from .a import thing\n    return thing\n")
    (package / "c.py").write_text("import pkg.a\n")
    return tmp_path


def test_a_circle_hidden_in_a_function_is_found_and_named(circular_package):
    graph = import_graph(circular_package, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"},
                     "pkg:top": set(), "pkg.a:top": {"pkg.b"}, "pkg.b:top": set(), "pkg.c:top": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    del graph["pkg.b"]
    assert find_cycle(graph) is None


def test_a_package_s_command_reaches_its_modules_and_a_module_of_it_runs_only_its_top(tmp_path):
    """A command package whose command (in its ``__init__``) imports a module that uses another module of the
    package is no circle: importing that module runs the package's top, not its command; the same import at the
    package's top is one."""
    for package, files in {"cmd": {"__init__.py": "def run():\n    from cmd import work\n",
                                   "work.py": "import lib.use\n", "part.py": "X = 1\n"},
                           "lib": {"__init__.py": "", "use.py": "from cmd import part\n"}}.items():
        (tmp_path / package).mkdir()
        for file, text in files.items():
            (tmp_path / package / file).write_text(text)
    graph = import_graph(tmp_path, ("cmd", "lib"))
    assert graph["cmd"] == {"cmd.work"} and graph["lib.use"] == {"cmd.part", "cmd:top"} and graph["cmd:top"] == set()
    assert find_cycle(graph) is None
    (tmp_path / "cmd" / "__init__.py").write_text("from cmd import work\n")
    assert find_cycle(import_graph(tmp_path, ("cmd", "lib"))) == ["cmd.work", "lib.use", "cmd:top", "cmd.work"]


# ---------------------------------------------------------------------------
# What a module shares is public; what a family needs loads where it runs
# ---------------------------------------------------------------------------

LAYERS = PACKAGES + ("lessons",)


def underscore_imports(root: Path, packages) -> list[str]:
    """Every use of another project module's underscore name: ``from m import _x``, or ``m._x`` where ``m`` is
    an imported project module (a leading underscore says "this module's own"; what two modules share is
    public, in the module it belongs to or one named for it)."""
    modules = project_modules(root, packages)
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                if source.split(".")[0] not in packages:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: from {source} import {alias.name}")
                    if f"{source}.{alias.name}" in modules:
                        aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                aliases.update((a.asname or a.name).split(".")[0] for a in node.names
                               if a.name.split(".")[0] in packages)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id in aliases:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_module_s_underscore_names():
    """In the suite's code (shared/, bench/, the implementations, the lessons); a test may reach into the module
    it tests."""
    assert underscore_imports(ROOT, LAYERS) == []


def test_the_underscore_check_finds_both_forms(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_hidden = 1\n")
    (package / "b.py").write_text("from .a import _hidden\nfrom . import a\nx = a._hidden + self._own\n")
    assert underscore_imports(tmp_path, ("pkg",)) == ["pkg/b.py:1: from pkg.a import _hidden", "pkg/b.py:3: a._hidden"]
