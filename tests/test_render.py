"""Numbers rendered, never typed: README.md and docs/ quote every measured value from a manifest folder through one
marker syntax (bench/render), and the check names a number or block that differs from its source, a quote of a
stale or unlisted folder, and a measured-looking number typed in the prose. Each test works on a copy: whether the
committed documents are current is CI's check (python -m bench check), not these tests'.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from bench import check, reproduce
from bench.cli import main
from bench.render import markers, query
from bench.render.sources import QuoteError, Results
from bench.render.table import table

ROOT = reproduce.ROOT


@pytest.fixture(scope="module")
def results():
    return Results()


def _quotes(text: str, folder: str = "") -> list[re.Match]:
    """The quotes of a number from a folder's tables in ``text`` (from ``folder``, ``results/cpu``, if given)."""
    return [m for m in markers.INLINE_RE.finditer(text) if any(c.isdigit() for c in m["text"])
            and m["source"].rstrip("/").endswith(folder) and "results/" in m["source"] and ".json" not in m["source"]]


def test_the_documents_quote_numbers_and_tables(results):
    outcomes = [check.document(doc, results, only=("numbers", "blocks")) for doc in check.documents()]
    readme = outcomes[0]
    assert readme.counts["quotes"] >= 15 and readme.counts["blocks"] >= 1
    assert sum(o.counts["quotes"] for o in outcomes) >= 150 and sum(o.counts["blocks"] for o in outcomes) >= 20
    assert {"cpu", "data", "training/equivalence", "today"} <= set().union(*(o.folders for o in outcomes))


def test_an_edited_number_is_named_and_rendering_writes_it_back(results):
    """On one quote of the README: the check names the number a copy edits, and rendering writes the record's."""
    m = _quotes((ROOT / "README.md").read_text())[0]
    text = m.group(0) + "\n"
    digit = next(k for k, c in enumerate(m["text"]) if c.isdigit())
    edited_number = m["text"][:digit] + str((int(m["text"][digit]) + 1) % 10) + m["text"][digit + 1:]
    edited = text.replace(f"[{m['text']}]", f"[{edited_number}]")
    assert check.document(ROOT / "README.md", results, text).problems == []
    problems = check.document(ROOT / "README.md", results, edited).problems
    assert len(problems) == 1 and f"quoted {edited_number!r}, its source says {m['text']!r}" in problems[0]
    assert check.document(ROOT / "README.md", results, edited, write=True).text == text


def test_an_edited_block_is_named_with_a_diff_and_rendered_back(results):
    readme = (ROOT / "README.md").read_text()
    m = next(m for m in markers.BLOCK_RE.finditer(readme) if "results/" in m["source"])
    block = check.document(ROOT / "README.md", results, m.group(0), write=True).text
    marker, body = block.split("\n", 1)
    edited = f"{marker}\n{body.replace(' ', '  ', 1)}"
    problems = check.document(ROOT / "README.md", results, edited).problems
    assert len(problems) == 1 and "differs from its source" in problems[0] and "\n-" in problems[0]
    assert check.document(ROOT / "README.md", results, edited, write=True).text == block


def test_a_typed_number_is_found_and_an_allowed_line_is_not():
    text = ("JAX ran 2.5x faster, in 3.2 s, at 35 %, 1,204.5 pairs/s, within 3e-7.\n"
            "A goal of 3x. <!-- not measured -->\n"
            "`1.5x` in code, [2.56x](results/cpu \"ratio infer gold 1 jax\") quoted, "
            "[29](#fig-main \"batch.num_steps\") from a figure.\n"
            "```\n10.0 s in a fence\n```\n"
            "<!-- render results/cpu \"report targets\" -->\n| 1.43x | in a block |\n<!-- /render -->\n"
            "Batch 128, E = 300, step 4, H = 32: no units.\n")
    assert check.typed_numbers(text) == [(1, "2.5x"), (1, "3.2 s"), (1, "35 %"), (1, "1,204.5 pairs/s"),
                                            (1, "3e-7")]


def test_values_are_written_one_way():
    assert query.write(2.5612, "ratio") == "2.56x" and query.write(1234.56, "number", 0) == "1,235"
    assert query.write((2.3412, 2.9421), "number", 2) == "2.34-2.94"
    assert query.write((0.26, 0.531), "seconds") == "0.26-0.53 s" and query.write((0.5, 0.5), "seconds") == "0.50 s"
    assert query.write(0.3512, "percent") == "35.1 %" and query.write(0.0123, "ms") == "12.3 ms"
    assert query.write(1.54e-7, "relative") == "1.5e-7" and query.write((1.5e-7, 3.2e-7), "relative") == \
        "1.5e-7 to 3.2e-7"
    assert query.write(296.4, "wall") == "4 min 56 s" and query.write(42.4, "wall") == "42 s"
    assert query.write(True, "verdict") == "PASS" and query.write(False, "yesno") == "no"
    assert table(["a", "b"], [[1, ""]]) == "| a | b |\n|---|---|\n| 1 |  |"


@pytest.fixture
def probes(tmp_path):
    """A manifest of one folder holding a JSON record (the lessons' probes' shape) and a JSON-lines file."""
    (tmp_path / "results" / "today").mkdir(parents=True)
    (tmp_path / "results" / "manifest.toml").write_text(
        '[[folder]]\nname = "today"\nabout = "probes"\ncommands = ["python -m lessons.today --out {out}"]\n')
    record = {"jax": {"while_loop": {"reverse": False, "reverse_error": "ValueError", "grad": None}},
              "torch": {"batches": [{"graph_breaks": 6}, {"graph_breaks": 9}], "inductor": {"seconds": 29.71},
                        "eager": {"seconds": 1.65}}, "tensorflow": {"trace_s": 0.2916}}
    (tmp_path / "results" / "today" / "today.json").write_text(json.dumps(record))
    return Results(tmp_path), record


def test_a_json_file_is_quoted_by_its_keys_and_the_kind_of_their_values(probes):
    """A boolean reads yes or no, an int a count, seconds seconds, a string itself; a quotient of two keys is a
    ratio; a list's items aggregate; a null, a missing key or several values without an aggregate are refused."""
    results, record = probes

    def quote(text):
        return query.evaluate(results, "today", text, record)

    assert quote("jax.while_loop.reverse") == "no" and quote("jax.while_loop.reverse_error") == "ValueError"
    assert quote("torch.batches.0.graph_breaks") == "6" and quote("torch.batches:len") == "2"
    assert quote("torch.inductor.seconds:1") == "29.7 s" and quote("tensorflow.trace_s") == "0.29 s"
    assert quote("torch.inductor.seconds:0 / torch.eager.seconds") == "18x"
    assert quote("torch.inductor.seconds:ms:0") == "29,710 ms"
    for text in ("jax.while_loop.grad", "jax.cond.reverse", "torch.batches", "torch.inductor.seconds:bogus",
                 "torch.inductor.seconds / jax.while_loop.reverse_error"):
        with pytest.raises(QuoteError) as err:
            quote(text)
        assert "\n" not in str(err.value)


def test_a_folder_is_quoted_through_its_tables(results):
    """field, ratio and the aggregates read the records as the report does (bench/run/measurement.py)."""
    from bench.run import measurement as stats

    records = results.measurements("cpu")
    row = next(r for r in stats.round_ratios(records) if r["implementation"] != "pytorch")
    args = f"{row['mode']} {row['transitions']} {row['batch_size']} {row['implementation']}"
    assert query.evaluate(results, "cpu", f"ratio {args}") == query.write(row["median"], "ratio")
    assert query.evaluate(results, "cpu", f"ratio {args} q1..q3") == query.write((row["q1"], row["q3"]), "number", 2)
    compile_s = [r.compile_s for r in records if r.implementation == row["implementation"]]
    assert query.evaluate(results, "cpu", f"field:max {row['implementation']} * * * compile_s") == \
        query.write(max(compile_s), "seconds")
    assert query.evaluate(results, "cpu", f"field:len {row['implementation']} * * * compile_s") == str(len(compile_s))
    with pytest.raises(QuoteError, match="name an aggregate"):
        query.evaluate(results, "cpu", f"field {row['implementation']} * * * compile_s")
    with pytest.raises(QuoteError, match="unknown table"):
        query.evaluate(results, "cpu", "speed infer gold 1 jax")


def test_best_names_the_fastest_static_implementation_and_its_ratio(results):
    from bench import frameworks
    from bench.run import measurement as stats

    rows = [r for r in stats.round_ratios(results.measurements("cpu")) if (r["mode"], r["transitions"],
            r["batch_size"]) == ("infer", "gold", 1) and r["implementation"] not in frameworks.EAGER]
    top = max(rows, key=lambda r: r["median"])
    assert query.evaluate(results, "cpu", "best infer gold 1") == top["implementation"]
    assert query.evaluate(results, "cpu", "best infer gold 1 median") == query.write(top["median"], "ratio")


def test_a_source_file_is_quoted_by_its_lines_of_code(tmp_path):
    """``lines`` counts the lines that hold code: no blank line, comment or docstring; ``lines NAME`` one
    definition's; a quote of a source file in a block is an excerpt, inline it is its size."""
    (tmp_path / "m.py").write_text('"""A module\n\ndocstring."""\n\n# a comment\nimport os\n\n\ndef f(x):\n'
                                   '    """One line."""\n    y = x  # kept\n    return y\n')
    assert markers.code_lines(tmp_path, "m.py", "lines") == 4
    assert markers.code_lines(tmp_path, "m.py", "lines f") == 3
    with pytest.raises(QuoteError, match="lines"):
        markers.code_lines(tmp_path, "m.py", "size")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "manifest.toml").write_text('[[folder]]\nname = "x"\nabout = "x"\ncommands = ["python -m bench data --out {out}"]\n')
    doc = tmp_path / "d.md"
    doc.write_text('[9](m.py "lines")\n')
    assert check.document(doc, Results(tmp_path), write=True).text == '[4](m.py "lines")\n'


def test_only_manifest_folders_can_be_quoted(results):
    with pytest.raises(QuoteError, match="history"):
        results.folder("archive/cpu-seam")
    with pytest.raises(QuoteError, match="not in results/manifest.toml"):
        results.folder("mine")
    text = '[1.00x](results/archive/cpu-seam "ratio infer gold 1 jax")\n'
    problems = check.document(ROOT / "README.md", results, text).problems
    assert len(problems) == 1 and "history" in problems[0]


def test_a_quote_of_a_stale_folder_fails_the_check(tmp_path):
    """A copy of one manifest folder whose measured files changed since: its quotes fail."""
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
    doc.write_text(_quotes((ROOT / "README.md").read_text(), "results/cpu")[0].group(0) + "\n")
    with open(root / "shared" / "batching.py", "a") as f:  # the records' measured files differ from the copy's
        f.write("\nCHANGED_AFTER_THE_RUN = True\n")
    problems, _ = check.run([doc], root=root)
    assert any("results/cpu is quoted but stale" in p for p in problems), problems


def test_render_writes_the_records_numbers_and_a_link_from_the_document(tmp_path):
    m = _quotes((ROOT / "README.md").read_text())[0]
    doc = tmp_path / "x.md"
    folder = markers._source(m["source"], ROOT / "README.md", Results(), True)[1]
    link = markers._link(str(ROOT / "results" / folder), doc)
    doc.write_text(f'Typed [9.99x]({link} "{m["query"]}") here.\n')
    problems, counts = check.run([doc], write=True, only=("numbers",))
    assert all("is quoted but stale" in p for p in problems) and counts["quotes"] == 1
    assert doc.read_text() == f'Typed [{m["text"]}]({link} "{m["query"]}") here.\n'


def test_the_check_command_and_its_aliases_refuse_bad_input_in_one_line(tmp_path, capsys):
    doc = tmp_path / "x.md"
    doc.write_text("[1](../nowhere \"field\")\n")
    for argv in (["check", str(doc)], ["render", "--check", str(doc)]):
        assert main(argv) == 1
        out = capsys.readouterr().out.strip()
        assert "neither" not in out and "source is a results folder" in out and len(out.splitlines()) == 1
    assert main(["check", "--only", "bogus", str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --only") and "\n" not in err
    assert main(["check", str(tmp_path / "missing.md")]) == 2
    assert "missing.md" in capsys.readouterr().err


def test_a_ratio_s_standing_and_the_best_s_lead_read_the_spread(results):
    """leads, trails, is level: where a ratio's interquartile range lies against 1; the best static implementation
    is the fastest only where no other static one's range reaches its own, else level with those whose ranges do."""
    from bench import frameworks
    from bench.run import measurement as stats

    for folder in ("cpu", "cpu-levels"):
        rows = stats.round_ratios(results.measurements(folder))
        for r in rows:
            args = f"{r['mode']} {r['transitions']} {r['batch_size']} {r['implementation']}"
            wanted = "leads" if r["q1"] > 1 else "trails" if r["q3"] < 1 else "is level"
            assert query.evaluate(results, folder, f"ratio {args} standing") == wanted
        for mode, transitions, batch in {(r["mode"], r["transitions"], r["batch_size"]) for r in rows}:
            static = [r for r in rows if (r["mode"], r["transitions"], r["batch_size"]) == (mode, transitions, batch)
                      and r["implementation"] not in frameworks.EAGER]
            if not static:
                continue
            top = max(static, key=lambda r: r["median"])
            level = {r["implementation"] for r in static if r is not top and r["q3"] >= top["q1"]}
            lead = query.evaluate(results, folder, f"best {mode} {transitions} {batch} lead")
            assert lead == "the fastest" if not level else lead.startswith("level with ") and \
                set(lead.removeprefix("level with ").replace(" and ", ", ").split(", ")) == level
    assert "level with" in query.evaluate(results, "cpu-levels", "best infer gold 128 lead")  # #61: not "the fastest"


def test_standing_at_names_the_batch_sizes_of_a_verdict(results):
    by = {b: query.evaluate(results, "cpu", f"ratio infer gold {b} dynet standing") for b in ("1", "32", "128")}
    for verdict in ("leads", "trails", "level"):
        hit = [b for b in by if by[b].endswith(verdict)]
        text = query.evaluate(results, "cpu", f"standing-at infer gold 1,32,128 dynet {verdict}")
        verb = "is level" if verdict == "level" else verdict
        assert text == (f"{verb} at every batch size" if len(hit) == 3 else f"{verb} at no batch size" if not hit
                        else f"{verb} at batch {' and '.join(hit) if len(hit) == 2 else hit[0]}")
    with pytest.raises(QuoteError, match="leads, trails or level"):
        query.evaluate(results, "cpu", "standing-at infer gold 1,32 dynet wins")


def test_a_rule_over_measured_rows_beside_a_rendered_number_is_found():
    """A sweeping word (the fastest, level with, narrows, every lead, at every batch size, never) typed in a paragraph,
    list item or table row that quotes a results folder, or that follows a results block in its section, is found;
    the same words rendered by a query, in italics (a definition), or away from measured numbers are not."""
    quote = f'[{query.evaluate(Results(), "cpu", "ratio infer gold 1 jax")}](results/cpu "ratio infer gold 1 jax")'
    text = (f"JAX is the fastest here, {quote}, and training narrows\nevery lead.\n\n"
            f"JAX [is level](results/cpu \"ratio train gold 128 jax standing\") at {quote}; a *level* is defined.\n\n"
            "Far from numbers JAX is always the fastest.\n\n"
            "<!-- render results/cpu \"ratios infer gold 1\" -->\n| a | b |\n<!-- /render -->\n\n"
            "`python -m bench run`\nso TensorFlow is level with JAX at every batch size.\n\n"
            f"| row | JAX, never slower, at any batch | {quote} |\n\n## Next\n\nThe fastest, past the heading.\n")
    assert check.sweeping_claims(text) == [(1, "fastest"), (1, "narrows"), (2, "every lead"),
                                             (13, "is level"), (13, "every batch size"), (15, "never"),
                                             (15, "any batch")]
    problems = check.document(ROOT / "README.md", Results(), f"JAX leads at every batch size: {quote}.\n",
                              only=("numbers",)).problems
    assert len(problems) == 1 and "'every batch size' states a rule over measured results" in problems[0]
