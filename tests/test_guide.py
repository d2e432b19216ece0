"""The guides (docs/static-vs-dynamic.md and the chapters after it, bench.check.GUIDES) stay true:
the check finds an excerpt that is not the code, an explain block that is not what its command prints (times and
versions aside) and a count the prose quotes that is not the block's, and rendering repairs them. Each stretch of
code is quoted once. The overview (docs/overview.md) shows every drawn figure, and no figure is shown in more than
two places.

Whether the committed guides are in step with today's code is CI's check (``python -m bench check`` in .ci/run),
not these tests': a user who edits an implementation sees here only what the edit broke. On a drift,
``python -m bench render`` rewrites the excerpts, explain blocks and quoted counts from the code and fresh runs;
then reread the prose around what changed.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from bench import ROOT, check, frameworks
from bench.check import GUIDES as GUIDE_NAMES
from bench.render import markers
from bench.render.sources import QuoteError, Results
from tests.helpers import guide_prose

GUIDES = tuple(ROOT / guide for guide in GUIDE_NAMES)
TEXT = GUIDES[0].read_text()
TEXTS = {path.name: path.read_text() for path in GUIDES}
ALL_TEXT = "\n".join(TEXTS.values())  # the first guide first
DOCS = ROOT / "docs"
# (repository path, query, body) of every code excerpt; (id, command, body) of every explain block; the counts quoted.
EXCERPTS = [((DOCS / m["source"]).resolve().relative_to(ROOT).as_posix(), m["query"], m["body"])
            for m in markers.BLOCK_RE.finditer(ALL_TEXT) if m["source"].endswith(".py")]
FIGURES = [(m["source"][1:], f"python -m bench {m['query']}", m["body"]) for m in markers.BLOCK_RE.finditer(ALL_TEXT)
           if m["source"].startswith("#")]
NUMBERS = [m for m in markers.INLINE_RE.finditer(ALL_TEXT) if m["source"].startswith("#")]
OVERVIEW = DOCS / "overview.md"
README = ROOT / "README.md"
# ![alt text](path/to/figure.svg): a drawn figure shown in a guide or the README.
IMAGE_RE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+\.svg)\)")
# One worker runs the whole module, so each explain command runs once, not once per worker.
pytestmark = pytest.mark.xdist_group("guide")


def test_the_guide_has_excerpts_figures_and_quotes():
    # The guides quote every registered framework's package, and besides them only the framework-free one.
    packages = {fw.package for fw in frameworks.FRAMEWORKS_BY_NAME.values()}
    assert {path.split("/")[0] for path, _, _ in EXCERPTS} == packages | {"shared"}
    assert len(FIGURES) >= 5 and len({fig for fig, _, _ in FIGURES}) == len(FIGURES)
    assert len(NUMBERS) >= 20
    # Every marker was recognised (a typo would leave it unchecked).
    assert ALL_TEXT.count("<!-- render ") == len(list(markers.BLOCK_RE.finditer(ALL_TEXT)))
    assert len(re.findall(r"\]\(#fig-", ALL_TEXT)) == len(NUMBERS)


def excerpt_lines(path: str, spec: str) -> range:
    """The source lines (1-based) an excerpt names, resolved as markers.extract resolves them (QuoteError where
    it names none)."""
    markers.extract(ROOT, path, spec)
    source = (ROOT / path).read_text()
    lines = source.splitlines()
    first, dots, last = spec.partition(" .. ")
    if dots:
        start = next(k for k, line in enumerate(lines) if first in line)
        return range(start + 1, next(k for k in range(start, len(lines)) if last in lines[k]) + 2)
    node, body = None, ast.parse(source).body
    for part in spec.split("."):
        node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        body = node.body
    return range(min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno + 1)


def quoted_twice(excerpts: list[tuple[str, str, str]]) -> list[str]:
    """Every pair of excerpts that quote a common line of the same file. One that names no lines is left to
    the check (bench check), which says why."""
    spans = []
    for path, spec, _ in excerpts:
        try:
            spans.append((path, spec, excerpt_lines(path, spec)))
        except QuoteError:
            continue
    return [f"{path}: {spec} and {other} share lines {max(a[0], b[0])}-{min(a[-1], b[-1])}"
            for k, (path, spec, a) in enumerate(spans) for other_path, other, b in spans[k + 1:]
            if path == other_path and a[0] <= b[-1] and b[0] <= a[-1]]


def test_no_code_is_quoted_twice():
    """A reader meets each stretch of code once: a second mention links back to the first quotation instead of
    repeating it (across all the guides). The check finds a repeat: a function, and a few lines from inside it."""
    assert quoted_twice(EXCERPTS) == []
    path, spec = "impl_jax/masked.py", "SPINN._write"
    inner = excerpt_lines(path, spec)
    lines = (ROOT / path).read_text().splitlines()
    start, end = lines[inner[1] - 1].strip(), lines[inner[3] - 1].strip()
    assert quoted_twice([(path, spec, ""), (path, spec, "")]) != []
    assert len(quoted_twice([(path, spec, ""), (path, f"{start} .. {end}", "")])) == 1


@pytest.fixture(scope="module")
def results():
    """One reader for the module: each explain command runs once (untimed, and timed where a block is written)."""
    return Results()


def test_check_finds_drift_and_render_repairs_it(tmp_path, results):
    """The maintainers' commands on a guide of one excerpt, one explain block and two quotes of it (a count and a
    time), first rendered, then with an excerpt line, a count of the block and the quoted count broken."""
    code = Path(os.path.relpath(ROOT / "impl_jax" / "masked.py", tmp_path)).as_posix()
    guide = tmp_path / "guide.md"
    guide.write_text(f'<!-- render {code} "SPINN._write" -->\n```python\n```\n<!-- /render -->\n\n'
                     '<a id="fig-x"></a>\n<!-- render #fig-x "explain --framework pytorch" -->\n```text\n```\n'
                     '<!-- /render -->\n\nIts [1](#fig-x "batch.num_steps") steps took [0.1 s](#fig-x '
                     '"pytorch.forward_s").\n')
    rendered = check.document(guide, results, write=True)
    assert rendered.problems == [] and rendered.counts["excerpts"] == rendered.counts["explain blocks"] == 1
    guide.write_text(rendered.text)
    assert check.document(guide, results).problems == []
    body = next(m["body"] for m in markers.BLOCK_RE.finditer(rendered.text) if m["source"] == "#fig-x")
    count = re.search(r"autograd nodes of the loss\s+(\d+)", body)[1]
    steps = re.search(r'\[(\d+)\]\(#fig-x "batch.num_steps"\)', rendered.text)[1]
    broken = rendered.text.replace("    write_slot", "    # an edit\n    write_slot", 1).replace(
        body, body.replace(f" {count} ", " 1 ", 1)).replace(f"[{steps}](#fig-x", f"[{int(steps) + 1}](#fig-x")
    problems = check.document(guide, results, broken).problems
    assert len(problems) == 3, problems
    assert "impl_jax/masked.py" in problems[0] and "+    # an edit" not in problems[0] and "-    # an edit" in problems[0]
    assert "#fig-x" in problems[1] and f"quoted '{int(steps) + 1}'" in problems[2]
    repaired = check.document(guide, results, broken, write=True).text
    assert check.document(guide, results, repaired).problems == []
    assert markers.mask(repaired) == markers.mask(rendered.text)


GUIDE_WITH_A_TIME = ('<a id="fig-x"></a>\n<!-- render #fig-x "explain --framework pytorch" -->\n```text\n```\n'
                     '<!-- /render -->\n\nRecording took [1 s](#fig-x "pytorch.forward_s").\n')


def test_a_quoted_time_is_the_one_its_block_shows(tmp_path, results):
    """#61: a time the prose quotes beside an explain block is the block's, in any unit and rounded to the quote's
    digits (3.07 ms may be quoted 0.003 s); another fails the check, and rendering writes it as the block shows it."""
    guide = tmp_path / "guide.md"
    guide.write_text(GUIDE_WITH_A_TIME)
    rendered = check.document(guide, results, write=True).text
    shown = re.search(r"forward \(records\) / backward\s+(\d+(?:\.\d+)? m?s) ", rendered)[1]
    assert f'[{shown}](#fig-x "pytorch.forward_s")' in rendered  # written as the block writes it
    number, unit = shown.split()
    seconds = float(number) * {"s": 1, "ms": 1e-3}[unit]
    same, wrong = f"{seconds:.3f} s", f"{seconds + 0.002:.3f} s"
    for quoted in (shown, same, wrong, number):
        text = rendered.replace(f"[{shown}](#fig-x", f"[{quoted}](#fig-x")
        problems = check.document(guide, results, text).problems
        assert problems == ([] if quoted in (shown, same) else [problems[0]]), (quoted, problems)
        if quoted not in (shown, same):
            assert f"quoted {quoted!r}, its source says {shown!r}" in problems[0]
    assert check.document(guide, results, rendered.replace(f"[{shown}]", f"[{wrong}]"), write=True).text == rendered
    bogus = check.document(guide, results, rendered.replace('"pytorch.forward_s"', '"pytorch.bogus_s"')).problems
    assert len(bogus) == 1 and "no 'pytorch.bogus_s'" in bogus[0]
    assert markers.same_time("0.003 s", "3.07 ms") and markers.same_time("3.1 ms", "3.07 ms")
    assert not markers.same_time("0.006 s", "3.07 ms") and not markers.same_time("0.003", "3.07 ms")


def test_explain_json_keeps_the_run_its_block_shows(tmp_path, results):
    """docs/figures/explain.json holds the run each block shows, times included: render writes both from one run,
    and the check names an entry whose times are not its block's."""
    guide, root = tmp_path / "guide.md", tmp_path / "root"
    guide.write_text(GUIDE_WITH_A_TIME)
    (root / "results").mkdir(parents=True)
    (root / "results" / "manifest.toml").write_text('[[folder]]\nname = "x"\nabout = "x"\ncommands = ["python -m '
                                                    'bench data --out {out}"]\n')
    (root / "docs" / "figures").mkdir(parents=True)
    mine = Results(root)
    written = check.document(guide, results, write=True)
    assert written.explained["fig-x"][2] and check.explain_json(mine, [written], write=True) == []
    checked = check.document(guide, results, written.text)
    assert checked.problems == [] and check.explain_json(mine, [checked], write=False) == []
    path = root / "docs" / "figures" / "explain.json"
    kept = json.loads(path.read_text())
    kept["fig-x"]["result"]["pytorch"]["forward_s"] *= 3
    path.write_text(json.dumps(kept))
    problems = check.explain_json(Results(root), [checked], write=False)
    assert len(problems) == 1 and "fig-x is not the run" in problems[0] and "block shows" in problems[0]


def test_values_quoted_as_code_come_from_a_figure():
    """Shapes and lists the prose shows as code (`float32[44,4,64]`,
    `ops = [1, 1, 1, 1]`) are copied from a figure, so they must appear in one."""
    prose = re.sub(r"```.*?```", "", ALL_TEXT, flags=re.S)
    quoted = re.findall(r"`((?:float32|int32)\[[0-9?,]*\]|ops = \[[0-9, ]*\])`", prose)
    assert len(quoted) >= 5
    figures = "\n".join(body for _, _, body in FIGURES)
    assert [q for q in quoted if q not in figures] == []


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_each_guide_reads_in_about_fifteen_minutes(name):
    assert len(guide_prose(TEXTS[name]).split()) < 4000  # ~230 words a minute, code and figures skimmed


def test_the_first_guide_opens_with_the_side_by_side_table():
    first_table = TEXT.index("| --- |")
    assert TEXT[:first_table].count("\n## ") <= 1  # the side-by-side table comes first


def test_the_glossary_defines_the_words_the_chapters_lean_on():
    """Every term below is used in a chapter without being explained there;
    docs/glossary.md must define it (an entry starts with the term in bold),
    and every chapter must point to the glossary."""
    glossary = (DOCS / "glossary.md").read_text()
    entries = " ".join(line for line in glossary.splitlines() if line.startswith("**"))
    for term in ("TreeLSTM", "Tracker", "Thin stack", "tracer", "jaxpr", "carry", "TensorArray", "variant",
                 "Grappler", "lowering", "StableHLO", "Linearise", "transpose", "cotangent", "Dynamo",
                 "AOTAutograd", "Inductor", "vmap", "Autobatching", "Host read", "All-reduce", "GSPMD",
                 "MirroredStrategy", "DDP", "Straggler", "Transition head", "Kernel", "Theano", "Dispatch",
                 "Executor", "Flax", "Lockstep", "Adam", "Interleaved rounds", "IQR"):
        assert term in entries, term
    for chapter in GUIDES + (OVERVIEW,):
        assert "(glossary.md)" in chapter.read_text(), chapter.name


def shown_figures() -> dict[Path, list[str]]:
    """Each figure file -> the README and docs pages that show it (once per time shown)."""
    shown: dict[Path, list[str]] = {}
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for m in IMAGE_RE.finditer(page.read_text()):
            assert m["alt"].strip(), f"{page.name}: {m['path']} has no alt text"
            shown.setdefault((page.parent / m["path"]).resolve(), []).append(page.name)
    return shown


def test_the_overview_shows_every_figure_and_no_figure_is_shown_more_than_twice():
    drawn = {path.resolve() for path in (DOCS / "figures").glob("*.svg")}
    assert len(drawn) >= 7  # the seven the overview's points rest on
    shown = shown_figures()
    assert [str(path) for path in shown if path not in drawn] == []  # every link opens a drawn figure
    overview = {(OVERVIEW.parent / m["path"]).resolve() for m in IMAGE_RE.finditer(OVERVIEW.read_text())}
    assert drawn <= overview, sorted(str(path) for path in drawn - overview)
    assert {str(path): pages for path, pages in shown.items() if len(pages) > 2} == {}
    assert 60 <= len(OVERVIEW.read_text().splitlines()) <= 110  # one page


def test_the_readme_opens_with_the_headline_and_leads_to_the_overview():
    lines = [line for line in README.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# ") and IMAGE_RE.fullmatch(lines[1])["path"] == "docs/figures/headline.svg"
    docs_row = next(line for line in lines if line.startswith("| `docs/` |"))
    assert re.search(r"\]\(([^)]+)\)", docs_row)[1] == "docs/overview.md"  # the first link of the docs row
    for chapter in GUIDES:
        top = "\n".join(chapter.read_text().splitlines()[:8])
        assert "(overview.md)" in top, chapter.name
