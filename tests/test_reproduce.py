"""Results you can trust: every committed folder is in results/manifest.toml with the commands that make it, every
record names the source files that ran, and ``bench reproduce --check`` lists a folder the moment code it ran
changes, and only then (bench/reproduce.py, bench/provenance.py).

Whether the committed folders are current is not these tests' question: CI asks it after them (.ci/run), so a
user who edits an implementation sees here only what the edit broke. The checks of change run in a throwaway git
repository holding a copy of the code, so the real checkout is never touched.
"""

from __future__ import annotations

import importlib
import io
import json
import shutil
import subprocess
import sys
import tokenize
import types
from pathlib import Path

import pytest

from bench import frameworks, provenance, reproduce
from bench.cli import build_parser, main
from bench.render.sources import Results

ROOT = reproduce.ROOT


def test_every_folder_under_results_is_in_the_manifest_or_the_archive():
    listed = {e.name for e in reproduce.load_manifest()}
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")  # pragma: no cover (CI and the development machine are)
    for path in tracked:
        parts = Path(path).parts[1:]
        if len(parts) < 2 or parts[0] == reproduce.ARCHIVE:
            continue
        assert any("/".join(parts[:n]) in listed for n in (1, 2)), f"{path} is in no manifest folder"


def test_every_manifest_command_is_a_command_of_the_suite():
    parser = build_parser()
    for entry in reproduce.load_manifest():
        for command in entry.commands:
            argv = entry.argv(command)
            assert argv[:2] == [sys.executable, "-m"] and argv[2] in reproduce.MODULES
            if argv[2] != "bench":  # the lessons' probes: their own parser
                importlib.import_module(argv[2]).build_parser().parse_args(argv[3:])
                continue
            args = parser.parse_args(argv[3:])  # SystemExit on an unknown option or a bad value
            assert args.command == argv[3]


# ---------------------------------------------------------------------------
# What counts: the files that ran, normalized
# ---------------------------------------------------------------------------

def test_comments_docstrings_and_formatting_do_not_count_and_code_does():
    code = 'def f(x):\n    """Twice."""\n    return 2 * x  # doubled\n'
    same = '# a comment\ndef f(x):\n    return (2 *\n            x)\n'
    assert provenance.normalized(code.encode(), "a.py") == provenance.normalized(same.encode(), "a.py")
    other = 'def f(x):\n    """Twice."""\n    return 3 * x\n'
    assert provenance.normalized(code.encode(), "a.py") != provenance.normalized(other.encode(), "a.py")
    message = 'def f(x):\n    """Twice."""\n    raise ValueError("twice")\n'  # a string that is not a docstring
    assert provenance.normalized(message.encode(), "a.py") != provenance.normalized(
        message.replace('"twice"', '"thrice"').encode(), "a.py")
    pins = b"# the versions\ntorch==2.13.0\n\njax==0.10.2  # the CPU build\n"
    assert provenance.normalized(pins, provenance.PINS) == "torch==2.13.0\njax==0.10.2"


def test_a_process_names_the_source_files_it_loaded():
    """What ran, read from the interpreter: the modules a process imported, not the package they sit in."""
    code = ("import json, sys; import shared.batching; from bench import provenance; "
            "print(json.dumps(provenance.loaded()))")
    files = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                      check=True).stdout)
    assert {"shared/batching.py", "shared/snli.py", "shared/transitions.py", "bench/__init__.py"} <= set(files)
    assert "shared/levels.py" not in files and "bench/provenance.py" not in files  # not imported; the inventory
    assert all((ROOT / f).is_file() and f.endswith(".py") for f in files)


def _strip_comments_and_docstrings(source: str) -> str:
    """The same code, every comment gone and every docstring's words changed (the same tokens otherwise)."""
    out, previous = [], None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            token = token._replace(string="")
        elif token.type == tokenize.STRING and previous in (tokenize.INDENT, tokenize.NEWLINE, None) \
                and token.string.endswith(('"""', "'''")):
            token = token._replace(string='"""edited."""')
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
        out.append(token)
    return tokenize.untokenize(out)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A throwaway copy of the repository's tracked files (the committed results included)."""
    root = tmp_path_factory.mktemp("copy") / "repo"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout
    if not tracked:
        pytest.skip("not a git checkout")  # pragma: no cover (CI and the development machine are)
    for rel in filter(None, tracked.split("\0")):
        if (ROOT / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, root / rel)
    return root


def _record_digests(root: Path) -> dict[tuple, str]:
    """(folder, file, record index) -> today's digest of each committed record's files, in ``root``."""
    out = {}
    for e in reproduce.load_manifest(root):
        for path, records in reproduce.folder_records(e.folder(root)).items():
            for k, record in enumerate(records):
                if isinstance(record.get("measured"), list):
                    out[e.name, path.name, k] = provenance.digest(record["measured"], root)
    return out


def test_in_a_copy_only_a_change_to_code_that_ran_stales_a_record(copy):
    """Comments and docstrings edited in every .py file stale nothing; a line of code added to the benchmark's
    report module stales nothing; one added to shared/levels.py stales exactly the records whose processes loaded
    it: those of the folders where the levels family ran (its runners and the limit's process, which counts the
    levels' products with it), and none of the others, though the limit (bench/run/limit.py) runs in every
    benchmark: it imports the module for a levels kind only."""
    before = _record_digests(copy)
    assert before, "no committed record names the files it ran"
    originals = {}
    for path in copy.rglob("*.py"):
        if "results" in path.relative_to(copy).parts:
            continue
        originals[path] = path.read_text()
        path.write_text(_strip_comments_and_docstrings(originals[path]))
    assert _record_digests(copy) == before
    for path, text in originals.items():
        path.write_text(text)
    with open(copy / "bench" / "report.py", "a") as f:
        f.write("\nREPORTED = True\n")
    assert _record_digests(copy) == before
    with open(copy / "shared" / "levels.py", "a") as f:
        f.write("\nSCHEDULED = True\n")
    after = _record_digests(copy)
    changed = {key for key in before if after[key] != before[key]}
    assert changed, "no committed record ran shared/levels.py: records name the files they ran"
    levels = {name for name, impl in frameworks.IMPLEMENTATIONS_BY_NAME.items() if impl.family == frameworks.LEVELS}
    levels_ran = {folder for folder, _, _ in before if any(
        {record.get("implementation"), record.get("framework")} & levels
        for records in reproduce.folder_records(copy / "results" / folder).values() for record in records)}
    assert {folder for folder, _, _ in changed} <= levels_ran
    assert {folder for folder, _, _ in before} - levels_ran, "every folder ran the levels"
    for folder, file, k in changed:
        assert "shared/levels.py" in reproduce.folder_records(copy / "results" / folder)[
            copy / "results" / folder / file][k]["measured"]


# ---------------------------------------------------------------------------
# A stale folder listed the moment code it ran changes
# ---------------------------------------------------------------------------

def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


# The files two runs ran (as a real run's processes name them, much shortened): each its framework's and shared/.
RAN = {"jax-run": ["bench/frameworks.py", "impl_jax/masked.py", "impl_jax/runner.py", "shared/batching.py"],
       "torch-run": ["bench/frameworks.py", "impl_pytorch/lists.py", "impl_pytorch/runner.py", "shared/batching.py"]}


def _record(name: str, root: Path) -> dict:
    return {"implementation": name.split("-")[0], **provenance.provenance(RAN[name], root)}


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git repository with a copy of the code, a README and a manifest of two folders, one whose record ran
    impl_jax's files and one impl_pytorch's, both made at its only commit."""
    root = tmp_path / "repo"
    for rel in ("shared", "bench", "impl_jax", "impl_pytorch"):
        shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "constraints.txt", root)
    (root / "README.md").write_text("# a checkout\n")
    (root / "results").mkdir()
    (root / "results" / "manifest.toml").write_text(
        '[[folder]]\nname = "jax-run"\nabout = "a run of jax"\ncommands = ["python -m bench run --out {out}"]\n\n'
        '[[folder]]\nname = "torch-run"\nabout = "a run of pytorch"\ncommands = ["python -m bench run --out {out}"]\n')
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    for name in RAN:
        folder = root / "results" / name
        folder.mkdir()
        (folder / "results.jsonl").write_text(json.dumps(_record(name, root)) + "\n")
        (folder / reproduce.STAMP).write_text(json.dumps({"commands": ["python -m bench run --out {out}"]}))
    return root


def test_a_record_made_at_a_commit_is_current(checkout):
    record = json.loads((checkout / "results" / "jax-run" / "results.jsonl").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    assert record["git_commit"] == head and record["measured_clean"] is True
    assert record["measured"] == sorted(RAN["jax-run"] + [provenance.PINS])
    assert reproduce.check(checkout) == {}


def test_a_change_to_code_that_ran_lists_its_folder_and_names_the_file(checkout):
    (checkout / "README.md").write_text("# edited: no source file\n")
    (checkout / "impl_jax" / "explain.py").write_text("X = 1\n")  # code, but no record's process ran it
    (checkout / "shared" / "new_module.py").write_text("X = 1\n")  # untracked, and nothing ran it
    with open(checkout / "impl_jax" / "masked.py", "a") as f:
        f.write("\n# a comment\n")
    assert reproduce.check(checkout) == {}
    with open(checkout / "impl_jax" / "masked.py", "a") as f:
        f.write("\nTOUCHED = 1\n")
    stale = reproduce.check(checkout)
    assert list(stale) == ["jax-run"]  # the PyTorch run ran none of impl_jax
    assert "changed since commit" in stale["jax-run"][0] and stale["jax-run"][0].endswith(": impl_jax/masked.py")


def test_a_shared_change_lists_every_folder_and_a_record_made_dirty_stays_stale(checkout):
    with open(checkout / "shared" / "batching.py", "a") as f:
        f.write("\nTOUCHED = 1\n")
    assert sorted(reproduce.check(checkout)) == ["jax-run", "torch-run"]
    dirty = _record("jax-run", checkout)
    assert dirty["measured_clean"] is False
    (checkout / "results" / "jax-run" / "results.jsonl").write_text(json.dumps(dirty) + "\n")
    _git(checkout, "checkout", "shared/batching.py")
    assert list(reproduce.check(checkout)) == ["jax-run"]  # the digest is today's again, the run was still dirty
    assert "differed from commit" in reproduce.check(checkout)["jax-run"][0]
    with open(checkout / "shared" / "batching.py", "a") as f:
        f.write("\n# only a comment: a record made now is clean\n")
    assert _record("jax-run", checkout)["measured_clean"] is True


def test_records_without_provenance_or_stamp_are_stale(checkout):
    folder = checkout / "results" / "torch-run"
    (folder / "results.jsonl").write_text(json.dumps({"implementation": "pytorch", "git_commit": "abc"}) + "\n")
    (folder / reproduce.STAMP).unlink()
    reasons = reproduce.check(checkout)["torch-run"]
    assert any("not made by python -m bench reproduce" in r for r in reasons)
    assert any("recorded before provenance was" in r for r in reasons)
    old = {**_record("torch-run", checkout), "measured": "benchmark impl_pytorch"}  # a set named by folders
    (folder / "results.jsonl").write_text(json.dumps(old) + "\n")
    assert any("not the files that ran" in r for r in reproduce.check(checkout)["torch-run"])
    (checkout / "impl_jax" / "runner.py").unlink()
    assert reproduce.check(checkout)["jax-run"][0].endswith("gone since commit " +
                                                            _record("torch-run", checkout)["git_commit"][:12] +
                                                            ": impl_jax/runner.py")
    shutil.rmtree(checkout / "results" / "jax-run")
    assert reproduce.check(checkout)["jax-run"] == ["missing (never reproduced)"]


def test_a_training_run_names_what_it_ran_at_its_end(checkout):
    """A training run's metrics say what ran in "end" records, one per part; a part killed before its end
    leaves its folder stale."""
    folder = checkout / "results" / "torch-run"
    (folder / "results.jsonl").unlink()
    end = {"kind": "end", "step": 8, **_record("torch-run", checkout)}
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"kind": "run", "step": 0}, {"kind": "train", "step": 4}, end)))
    assert reproduce.check(checkout) == {}
    with open(folder / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "resume", "step": 8}) + "\n")
    assert "wrote no \"end\" record" in reproduce.check(checkout)["torch-run"][0]


# ---------------------------------------------------------------------------
# Reproducing a folder
# ---------------------------------------------------------------------------

def test_a_failed_reproduction_puts_the_old_folder_back(checkout, capsys):
    entry = reproduce.entry("jax-run", checkout)
    folder = entry.folder(checkout)
    before = (folder / "results.jsonl").read_text()
    calls = []

    def failing(argv, cwd):
        calls.append(argv)
        (folder / "results.jsonl").write_text("half a run\n")
        return types.SimpleNamespace(returncode=3)

    with pytest.raises(RuntimeError, match="exited with status 3"):
        reproduce.reproduce(entry, checkout, runner=failing)
    assert calls and calls[0][:3] == [sys.executable, "-m", "bench"] and calls[0][-1] == "results/jax-run"
    assert (folder / "results.jsonl").read_text() == before
    assert not (checkout / reproduce.WORK / "jax-run.old").exists()

    def interrupted(argv, cwd):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reproduce.reproduce(entry, checkout, runner=interrupted)
    assert (folder / "results.jsonl").read_text() == before


def test_a_reproduction_replaces_the_folder_and_says_how_it_was_made(checkout):
    entry = reproduce.entry("torch-run", checkout)
    folder = entry.folder(checkout)

    def succeeding(argv, cwd):
        out = Path(cwd) / argv[-1]
        record = _record("torch-run", Path(cwd))
        (out / "results.jsonl").write_text(json.dumps(record) + "\n")
        return types.SimpleNamespace(returncode=0)

    (folder / "old-file").write_text("from the last run")
    reproduce.reproduce(entry, checkout, runner=succeeding)
    assert not (folder / "old-file").exists()
    stamp = json.loads((folder / reproduce.STAMP).read_text())
    assert stamp["commands"] == list(entry.commands) and stamp["wall_s"] >= 0 and len(stamp["git_commit"]) == 40
    readme = (folder / "README.md").read_text()
    assert "python -m bench reproduce torch-run" in readme and "python -m bench run --out results/torch-run" in readme
    assert reproduce.check(checkout) == {}


def test_the_manifest_refuses_what_it_cannot_run(tmp_path):
    (tmp_path / "results").mkdir()
    manifest = tmp_path / "results" / "manifest.toml"
    for body, message in [
        ('[[folder]]\nname = "x"\nabout = "a"\ncommands = ["bash -c ls {out}"]\n', "must start with 'python -m bench'"),
        ('[[folder]]\nname = "x"\nabout = "a"\ncommands = ["python -m lessons.jax_scan {out}"]\n', "must start with"),
        ('[[folder]]\nname = "x"\nabout = "a"\ncommands = ["python -m bench run"]\n', "no command writes"),
        ('[[folder]]\nname = "archive/x"\nabout = "a"\ncommands = ["python -m bench run --out {out}"]\n', "history"),
        ('[[folder]]\nname = "../x"\nabout = "a"\ncommands = ["python -m bench run --out {out}"]\n', "a path under"),
        ('[[folder]]\nname = "x"\ncommands = ["python -m bench run --out {out}"]\n', "what it measures"),
    ]:
        manifest.write_text(body)
        with pytest.raises(ValueError, match=message):
            reproduce.load_manifest(tmp_path)


def test_figures_read_the_manifest_folders_only(tmp_path):
    results = tmp_path / "results"
    (results / "cpu").mkdir(parents=True)
    shutil.copy(ROOT / "results" / "cpu" / "results.jsonl", results / "cpu")
    (results / "mine").mkdir()  # the README's first command writes results/mine
    shutil.copy(ROOT / "results" / "cpu" / "results.jsonl", results / "mine")
    (results / "manifest.toml").write_text(
        '[[folder]]\nname = "cpu"\nabout = "the default run"\ncommands = ["python -m bench run --out {out}"]\n')
    assert Results(tmp_path).runs() == ["cpu"]


def test_bench_data_writes_its_figures_with_their_provenance(tmp_path, capsys):
    out = tmp_path / "data" / "batch-32.json"
    assert main(["data", "--batch-size", "32", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert "bench/data.py" in record["measured"] and len(record["git_commit"]) == 40
    assert record["pairs"]["source"] == "data/snli_1.0_dev_sample.jsonl"  # relative: a record names no machine path
    assert 0 < record["sentences"]["padding"]["loop_waste"] < record["sentences"]["padding"]["waste"] < 1
    assert record["cpu_count"] >= 1 and "load_avg_1min" in record


# ---------------------------------------------------------------------------
# A folder made elsewhere: resumed, attested, and kept when only a GPU can re-make it
# ---------------------------------------------------------------------------

def test_an_interrupted_reproduction_resumes_in_place(checkout):
    entry = reproduce.entry("jax-run", checkout)
    folder = entry.folder(checkout)
    kept = (folder / "results.jsonl").read_text()
    calls = []

    def resuming(argv, cwd):
        calls.append(argv)
        with open(Path(cwd) / argv[argv.index("--out") + 1] / "results.jsonl", "a") as f:
            f.write(json.dumps(_record("jax-run", Path(cwd))) + "\n")
        return types.SimpleNamespace(returncode=0)

    reproduce.resume(entry, checkout, runner=resuming)
    assert calls[0][-1] == "--resume" and "results/jax-run" in calls[0]
    assert (folder / "results.jsonl").read_text().startswith(kept)  # what it held is kept, the rest appended
    assert json.loads((folder / reproduce.STAMP).read_text())["resumed"] is True
    assert "completed by `python -m bench reproduce --resume`" in (folder / "README.md").read_text()
    assert reproduce.check(checkout) == {}


def test_attest_names_the_commit_whose_files_a_record_measured_and_refuses_others(checkout):
    """A record whose machine had a stale .git (measured_clean False, another commit) but whose digest is
    this commit's measured files: --attest names the commit; a record of other files is refused, nothing written."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    path = checkout / "results" / "jax-run" / "results.jsonl"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "git_commit": "0" * 40, "measured_clean": False}) + "\n")
    assert "differed from commit" in reproduce.check(checkout)["jax-run"][0]
    entry = reproduce.entry("jax-run", checkout)
    assert reproduce.attest(entry, "HEAD", checkout) == 1
    attested = json.loads(path.read_text())
    assert attested["git_commit"] == head and attested["measured_clean"] is True
    assert attested["attested"]["git_commit"] == "0" * 40 and attested["attested"]["measured_clean"] is False
    assert reproduce.check(checkout) == {}
    other = {**record, "git_commit": "0" * 40, "measured_clean": False, "measured_digest": "f" * 64}
    path.write_text(json.dumps(other) + "\n")
    with pytest.raises(ValueError, match="measured other files"):
        reproduce.attest(entry, "HEAD", checkout)
    assert json.loads(path.read_text()) == other


def test_a_stale_gpu_folder_is_kept_and_quoted_with_its_commit_where_no_gpu_can_remake_it(checkout, monkeypatch):
    from bench.render import blocks
    from bench.render.sources import Results

    manifest = checkout / "results" / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('name = "jax-run"', 'name = "jax-run"\nneeds = "gpu"'))
    stamp = checkout / "results" / "jax-run" / reproduce.STAMP
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    stamp.write_text(json.dumps({"commands": ["python -m bench run --out {out}"], "git_commit": head,
                                 "started": "2026-11-26T14:11:48+0000", "gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"],
                                 "cpu_count": 16, "cpu": "x"}))
    fresh = blocks.measured_at(Results(checkout), "jax-run")
    assert fresh == (f"Measured on 2026-11-26 on one NVIDIA H100 80GB HBM3 (81559 MiB) by `python -m bench reproduce "
                     f"jax-run`, with the code of commit `{head[:12]}`.")
    with open(checkout / "impl_jax" / "masked.py", "a") as f:
        f.write("\nTOUCHED = 1\n")
    monkeypatch.setattr(provenance, "gpus", lambda: [])  # this machine: no GPU
    here, elsewhere = reproduce.check_here(checkout)
    assert here == {} and list(elsewhere) == ["jax-run"]
    stale = blocks.measured_at(Results(checkout), "jax-run")
    assert stale.startswith(fresh) and "cannot be shown to measure today's code" in stale
    assert "on a machine with a GPU measures today's" in stale and "masked.py" in stale
    monkeypatch.setattr(provenance, "gpus", lambda: ["NVIDIA H100 80GB HBM3, 81559 MiB"])  # one that has a GPU
    here, elsewhere = reproduce.check_here(checkout)
    assert list(here) == ["jax-run"] and elsewhere == {}
