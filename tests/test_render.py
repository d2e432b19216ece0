"""Numbers rendered, never typed: README.md and docs/ quote every measured figure from a record of a manifest
folder (bench/render), and the check fails on a number that differs from its record, a quote of a stale or
unlisted folder, and a measured-looking number typed in the prose.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from bench import provenance, reproduce
from bench.cli import main
from bench.render import command, document, lint, quotes
from bench.render.sources import Results
from bench.render.values import QuoteError, Value

ROOT = reproduce.ROOT


def test_the_documents_quote_numbers_and_tables():
    _, outcomes = command.run()
    by_name = {o.path.name: o for o in outcomes}
    assert by_name["README.md"].quotes >= 15 and by_name["README.md"].blocks >= 1
    assert sum(o.quotes for o in outcomes) >= 150
    assert {"cpu", "data", "training/equivalence"} <= set().union(*(o.folders for o in outcomes))


def _first_quote(text: str, folder: str = "") -> re.Match:
    """The first quote of a number in ``text``; with ``folder`` (``results/cpu``), the first from that folder."""
    return next(m for m in document.QUOTE_RE.finditer(text)
                if any(c.isdigit() for c in m["text"]) and m["link"].rstrip("/").endswith(folder))


def test_an_edited_number_fails_the_check():
    """A quote whose number differs from its record is named, and rendering writes the record's number back (on
    one quote of the README: whether the committed documents are current is CI's check, not the tests')."""
    readme = ROOT / "README.md"
    text = _first_quote(readme.read_text()).group(0) + "\n"
    m = _first_quote(text)
    digit = next(k for k, c in enumerate(m["text"]) if c.isdigit())
    edited_number = m["text"][:digit] + str((int(m["text"][digit]) + 1) % 10) + m["text"][digit + 1:]
    edited = text[:m.start("text")] + edited_number + text[m.end("text"):]
    results = Results()
    assert document.render(readme, results, text).problems == []
    problems = document.render(readme, results, edited).problems
    assert len(problems) == 1 and f"quoted {edited_number!r}" in problems[0] and f"says {m['text']!r}" in problems[0]
    # Rendering writes the record's number back.
    assert document.render(readme, results, edited).text == text


def test_a_typed_number_is_found_and_an_allowed_line_is_not():
    text = ("JAX ran 2.5x faster, in 3.2 s, at 35 %, 1,204.5 pairs/s, within 3e-7.\n"
            "A goal of 3x. <!-- not measured -->\n"
            "`1.5x` in code, [2.56x](results/cpu \"ratio infer gold 1 jax\") quoted, "
            "[29](#fig-main \"batch.num_steps\") from a figure.\n"
            "```\n10.0 s in a fence\n```\n"
            "<!-- render: targets cpu -->\n| 1.43x | in a block |\n<!-- /render -->\n"
            "Batch 128, E = 300, step 4, H = 32: no units.\n")
    assert lint.typed_numbers(text) == [(1, "2.5x"), (1, "3.2 s"), (1, "35 %"), (1, "1,204.5 pairs/s"),
                                        (1, "3e-7")]


def test_values_are_written_one_way():
    assert Value(2.5612, "ratio").write() == "2.56x"
    assert Value((2.3412, 2.9421), "number", digits=2).write() == "2.34-2.94"
    assert Value((0.26, 0.531), "seconds").write() == "0.26-0.53 s"
    assert Value(0.3512, "percent").write() == "35.1 %"
    assert Value(1.54e-7, "relative").write() == "1.5e-7"
    assert Value((1.5e-7, 3.2e-7), "relative", separator=" to ").write() == "1.5e-7 to 3.2e-7"
    assert Value(296.4, "wall").write() == "4 min 56 s" and Value(42.4, "wall").write() == "42 s"
    assert Value(1234.56, "number").write(0) == "1,235"


def test_the_lessons_probes_are_quoted_by_the_kind_of_their_value(tmp_path):
    """results/today's record (python -m lessons.today): a boolean reads yes or no, an int a count, seconds
    seconds, a string itself; today-ratio divides two entries; a null or a missing key cannot be quoted."""
    (tmp_path / "results" / "today").mkdir(parents=True)
    (tmp_path / "results" / "manifest.toml").write_text(
        '[[folder]]\nname = "today"\nabout = "probes"\ncommands = ["python -m lessons.today --out {out}"]\n')
    record = {"jax": {"while_loop": {"reverse": False, "reverse_error": "ValueError", "grad": None}},
              "torch": {"batches": [{"graph_breaks": 6}], "inductor": {"seconds": 29.71}, "eager": {"seconds": 1.65}},
              "tensorflow": {"trace_s": 0.2916}}
    (tmp_path / "results" / "today" / "today.json").write_text(json.dumps(record))
    results = Results(tmp_path)
    assert quotes.evaluate(results, "today", "today jax.while_loop.reverse") == "no"
    assert quotes.evaluate(results, "today", "today jax.while_loop.reverse_error") == "ValueError"
    assert quotes.evaluate(results, "today", "today torch.batches.0.graph_breaks") == "6"
    assert quotes.evaluate(results, "today", "today:1 torch.inductor.seconds") == "29.7 s"
    assert quotes.evaluate(results, "today", "today tensorflow.trace_s") == "0.29 s"
    assert quotes.evaluate(results, "today", "today-ratio torch.inductor.seconds torch.eager.seconds") == "18x"
    for query in ("today jax.while_loop.grad", "today jax.cond.reverse", "today torch.batches"):
        with pytest.raises(QuoteError):
            quotes.evaluate(results, "today", query)


def test_only_manifest_folders_can_be_quoted():
    results = Results()
    with pytest.raises(QuoteError, match="history"):
        quotes.evaluate(results, "archive/cpu-seam", "ratio infer gold 1 jax")
    with pytest.raises(QuoteError, match="not in results/manifest.toml"):
        quotes.evaluate(results, "mine", "ratio infer gold 1 jax")
    with pytest.raises(QuoteError, match="unknown quote function"):
        quotes.evaluate(results, "cpu", "speed infer gold 1 jax")
    text = '[1.00x](results/archive/cpu-seam "ratio infer gold 1 jax")\n'
    problems = document.render(ROOT / "README.md", results, text).problems
    assert len(problems) == 1 and "history" in problems[0]


def test_a_quote_of_a_stale_folder_fails_the_check(tmp_path):
    """A copy of one manifest folder whose records say they measured other files: its quotes fail."""
    root = tmp_path / "repo"
    for rel in ("shared", "bench", "impl_pytorch", "impl_jax", "impl_tensorflow", "impl_dynet"):
        shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "constraints.txt", root)
    (root / "results").mkdir()
    entry = reproduce.entry("cpu")
    (root / "results" / "manifest.toml").write_text(
        f'[[folder]]\nname = "cpu"\nabout = "{entry.about}"\ncommands = {json.dumps(list(entry.commands))}\n')
    shutil.copytree(ROOT / "results" / "cpu", root / "results" / "cpu",
                    ignore=shutil.ignore_patterns("*.png", "*.npz", "agreement"))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    doc = root / "README.md"
    readme = (ROOT / "README.md").read_text()
    m = _first_quote(readme, "results/cpu")  # the folder this copy's manifest holds
    doc.write_text(m.group(0) + "\n")
    # The records' digests are the real checkout's; the copy's measured files differ only if the real ones
    # are committed differently, so change one file here to make the copy's folder stale for certain.
    with open(root / "shared" / "batching.py", "a") as f:
        f.write("\nCHANGED_AFTER_THE_RUN = True\n")
    problems, _ = command.run([doc], root=root)
    assert any("results/cpu is quoted but stale" in p for p in problems), problems


def test_render_writes_the_records_numbers(tmp_path):
    doc = tmp_path / "x.md"
    readme = (ROOT / "README.md").read_text()
    m = _first_quote(readme)
    link = document.link_to(document.folder_of(m["link"], ROOT / "README.md", Results()), doc, Results())
    doc.write_text(f'Typed [9.99x]({link} "{m["query"]}") here.\n')
    problems, _ = command.run([doc], write=True)
    assert all("is quoted but stale" in p for p in problems)  # stale or not, the number is the record's
    assert doc.read_text() == f'Typed [{m["text"]}]({link} "{m["query"]}") here.\n'
