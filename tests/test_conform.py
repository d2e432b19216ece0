"""``bench conform`` and implementations from outside the repository (bench/conform.py, bench/frameworks.py).

The plugin test installs a throwaway package with ``pip install -e`` into a virtual environment of its own
(which sees this one's packages), so no other test's process sees its framework: the package declares the
entry point ``spinn_suite.frameworks``, and the suite finds it there as it would a user's.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from bench import conform, frameworks
from tests import toy_framework
from tests.helpers import run

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("conform")

PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "spinn-toyplug"
version = "0.1"

[project.entry-points."spinn_suite.frameworks"]
toyplug = "spinn_toyplug"

[tool.setuptools]
packages = ["spinn_toyplug"]
"""

INIT = '''from bench import frameworks
from bench.frameworks import LISTS, Framework, Implementation

frameworks.register(Framework(name="toyplug", package="spinn_toyplug", library="numpy", extra="test",
                              implementations=(Implementation("toyplug", LISTS, eager=True),)))
'''


@pytest.fixture(scope="module")
def plugged(tmp_path_factory) -> Path:
    """A virtual environment where the throwaway package ``spinn-toyplug`` is installed (pip install -e):
    the toy framework's runner and platform (tests/toy_framework) under another name, in a folder of its own."""
    where = tmp_path_factory.mktemp("plugin")
    package = where / "toyplug" / "spinn_toyplug"
    package.mkdir(parents=True)
    (package.parent / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text(INIT)
    for module in ("runner.py", "platform.py"):
        text = (ROOT / "tests" / "toy_framework" / module).read_text()
        (package / module).write_text(text.replace('"toy"', '"toyplug"'))
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "suite.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    done = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                "-e", str(package.parent)])
    assert done.returncode == 0, done.stderr
    return venv / "bin" / "python"


def test_an_installed_package_declares_an_implementation_that_is_checked_and_measured(plugged, tmp_path):
    helped = run([str(plugged), "-m", "bench", "run", "--help"], cwd=tmp_path)
    assert helped.returncode == 0 and "toyplug" in helped.stdout
    conformed = run([str(plugged), "-m", "bench", "conform", "toyplug"], cwd=tmp_path)
    assert conformed.returncode == 0, conformed.stdout + conformed.stderr
    assert "| encodings (float64) |" in conformed.stdout and "| reinforce | - | - | refused by declaration |" \
        in conformed.stdout
    out = tmp_path / "run"
    measured = run([str(plugged), "-m", "bench", "run", "--quick", "--implementations", "toyplug", "--modes",
                    "infer", "--transitions", "gold", "--batch-sizes", "1", "--rounds", "1", "--out", str(out)],
                   cwd=tmp_path)
    assert measured.returncode == 0, measured.stderr[-3000:]
    assert '"implementation": "toyplug"' in (out / "results.jsonl").read_text()


def test_a_plugin_that_fails_or_takes_a_name_is_refused_in_one_line(tmp_path):
    (tmp_path / "takes_pytorch.py").write_text(
        "from bench import frameworks\nframeworks.register(frameworks.Framework('pytorch', 'x', 'numpy', 'test', "
        "(frameworks.Implementation('pytorch-x', frameworks.LISTS),)))\n")
    for plugin, said in (("no_such_module", "failed to import: ModuleNotFoundError"),
                         ("takes_pytorch", "registers framework 'pytorch', which exists")):
        done = run([sys.executable, "-m", "bench", "conform", "pytorch"], cwd=ROOT,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{tmp_path}", "SPINN_PLUGINS": plugin})
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


@pytest.fixture
def toy():
    was_registered = toy_framework.NAME in frameworks.FRAMEWORKS
    toy_framework.register()
    yield toy_framework.NAME
    if not was_registered:
        frameworks.unregister(toy_framework.NAME)


def test_every_check_passes_or_is_refused_by_declaration(toy):
    checks = conform.conform(toy)
    assert {c.result for c in checks} == {"PASS", "refused by declaration"}
    assert [c.check for c in checks if c.result != "PASS"] == ["reinforce"]
    table = conform.format_checks(toy, checks)
    assert table.count("\n") == len(checks) + 3 and "| check | worst error | tolerance | result |" in table


def test_a_wrong_gradient_fails_naming_the_check_and_its_error(toy, monkeypatch, capsys):
    from bench.cli import main
    from tests.toy_framework import runner

    def wrong(self, batch):
        loss, grads = right(self, batch)
        return loss, {**grads, "reduce.left.kernel": grads["reduce.left.kernel"] * 1.01}

    right = runner.Runner._loss_and_grads
    monkeypatch.setattr(runner.Runner, "_loss_and_grads", wrong)
    assert main(["conform", toy]) == 1
    err = capsys.readouterr().err
    assert "FAIL toy: gradients (relative, every parameter) (1.0e-02 > 1e-08)" in err
    checks = conform.conform(toy)
    (failed,) = [c for c in checks if c.result == "FAIL"]
    assert failed.note == "worst: reduce.left.kernel" and np.isclose(failed.error, 0.01, rtol=1e-6)
