"""The guides (docs/static-vs-dynamic.md and the chapters after it, bench.guide_sync.GUIDES) stay true: the check
finds an excerpt that is not the code, a figure that is not what its command prints (times and versions aside)
and a number the prose quotes that is not the figure's, and the sync repairs them. Each stretch of code is quoted
once. The overview (docs/overview.md) shows every drawn figure, and no figure is shown in more than two places.

Whether the committed guides are in step with today's code is CI's check (``python -m bench explain
--check-guide`` in .ci/run), not these tests': a user who edits an implementation sees here only what the edit
broke. On a drift, ``python -m bench explain --sync-guide`` rewrites the excerpts, figures and quoted numbers
from the code and fresh runs; then reread the prose around what changed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bench import frameworks
from bench import guide_sync as gs
from bench.explain.report import format_text
from tests.helpers import guide_prose

TEXT = gs.GUIDE.read_text()
TEXTS = {path.name: path.read_text() for path in gs.GUIDES}
ALL_TEXT = "\n".join(TEXTS.values())  # the first guide first
EXCERPTS = gs.guide_excerpts(ALL_TEXT)
FIGURES = gs.guide_figures(ALL_TEXT)
NUMBERS = gs.guide_numbers(ALL_TEXT)
RESULTS: dict = {}  # figure command -> its result, run once per session (counts only, no timing)
DOCS = gs.ROOT / "docs"
OVERVIEW = DOCS / "overview.md"
README = gs.ROOT / "README.md"
# ![alt text](path/to/figure.svg): a drawn figure shown in a guide or the README.
IMAGE_RE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+\.svg)\)")
# One worker runs the whole module, so each figure's command runs once, not once per worker.
pytestmark = pytest.mark.xdist_group("guide")


def result_of(command: str) -> dict:
    if command not in RESULTS:
        RESULTS[command] = gs.run_figure(command, timing=False)
    return RESULTS[command]


def test_the_guide_has_excerpts_figures_and_quotes():
    # The guides quote every registered framework's package.
    packages = {fw.package for fw in frameworks.FRAMEWORKS_BY_NAME.values()}
    assert {path.split("/")[0] for path, _, _ in EXCERPTS} == packages
    assert len(FIGURES) >= 5 and len({f.id for f in FIGURES}) == len(FIGURES)
    assert len(NUMBERS) >= 20
    # Every figure and excerpt marker was recognised (a typo would leave it unchecked).
    assert ALL_TEXT.count("<!-- excerpt:") == len(EXCERPTS) and ALL_TEXT.count("<!-- figure:") == len(FIGURES)
    assert len(re.findall(r"\]\(#fig-", ALL_TEXT)) == len(NUMBERS)


def excerpt_lines(path: str, spec: str) -> range:
    """The source lines (1-based) an excerpt marker names, resolved as gs.extract resolves them
    (GuideError where it names none)."""
    gs.extract(path, spec)
    source = (gs.ROOT / path).read_text()
    lines = source.splitlines()
    anchors = gs.ANCHORS_RE.match(spec.strip())
    if anchors:
        start = next(k for k, line in enumerate(lines) if anchors["start"] in line)
        end = next(k for k in range(start, len(lines)) if anchors["end"] in lines[k])
        return range(start + 1, end + 2)
    node = gs._find_definition(ast.parse(source), spec.strip().split("."))
    return range(min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno + 1)


def quoted_twice(excerpts: list[tuple[str, str, str]]) -> list[str]:
    """Every pair of excerpt markers that quote a common line of the same file. A marker that names
    no lines is left to test_excerpt_matches_the_source, which says why."""
    spans = []
    for path, spec, _ in excerpts:
        try:
            spans.append((path, spec, excerpt_lines(path, spec)))
        except gs.GuideError:
            continue
    return [f"{path}: {spec} and {other} share lines {max(a[0], b[0])}-{min(a[-1], b[-1])}"
            for k, (path, spec, a) in enumerate(spans) for other_path, other, b in spans[k + 1:]
            if path == other_path and a[0] <= b[-1] and b[0] <= a[-1]]


def test_no_code_is_quoted_twice():
    """A reader meets each stretch of code once: a second mention links back
    to the first quotation instead of repeating it (across all the guides)."""
    assert quoted_twice(EXCERPTS) == []
    # The check finds a repeat: the same marker again, and a few lines from inside a quoted function.
    path, spec, body = next(e for e in EXCERPTS if not gs.ANCHORS_RE.match(e[1].strip()))
    inner = excerpt_lines(path, spec)
    lines = (gs.ROOT / path).read_text().splitlines()
    start, end = lines[inner[1] - 1].strip(), lines[inner[3] - 1].strip()
    assert len(quoted_twice(EXCERPTS + [(path, spec, body)])) == 1
    assert len(quoted_twice(EXCERPTS + [(path, f'"{start}" .. "{end}"', "")])) == 1


def test_check_finds_drift_and_sync_repairs_it(tmp_path):
    """The maintainers' commands, on a copy of the first guide synced with today's code, then with one excerpt
    line, one figure count and one quoted number broken."""
    copy = tmp_path / "guide.md"
    copy.write_text(TEXT)
    assert gs.sync_guide(copy, write=True, timing=False, results=RESULTS) == []
    synced = copy.read_text()
    path, _, body = gs.guide_excerpts(synced)[0]
    figure = gs.guide_figures(synced)[0]
    count = re.search(r"autograd nodes of the loss\s+(\d+)", figure.body)[1]
    broken = synced.replace(body, body.replace("\n", "\n# an edit\n", 1), 1)
    broken = broken.replace(figure.body, figure.body.replace(f" {count} ", " 1 ", 1), 1)
    number, fig, key = gs.guide_numbers(synced)[0]
    broken = broken.replace(f'[{number}](#{fig} "{key}")', f'[{int(number) + 1}](#{fig} "{key}")', 1)
    copy.write_text(broken)
    problems = gs.sync_guide(copy, results=RESULTS)
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"excerpt {path}") and "# an edit" in problems[0]
    assert problems[1].startswith(f"figure {figure.id}") and problems[2].startswith(f"number {int(number) + 1}")
    assert gs.sync_guide(copy, write=True, timing=False, results=RESULTS) == []
    assert gs.sync_guide(copy, results=RESULTS) == []
    assert gs.mask(copy.read_text()) == gs.mask(synced)


def test_values_quoted_as_code_come_from_a_figure():
    """Shapes and lists the prose shows as code (`float32[44,4,64]`,
    `ops = [1, 1, 1, 1]`) are copied from a figure, so they must appear in one."""
    prose = re.sub(r"```.*?```", "", ALL_TEXT, flags=re.S)
    quoted = re.findall(r"`((?:float32|int32)\[[0-9?,]*\]|ops = \[[0-9, ]*\])`", prose)
    assert len(quoted) >= 5
    figures = "\n".join(f.body for f in FIGURES)
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
    glossary = (gs.ROOT / "docs" / "glossary.md").read_text()
    entries = " ".join(line for line in glossary.splitlines() if line.startswith("**"))
    for term in ("TreeLSTM", "Tracker", "Thin stack", "tracer", "jaxpr", "carry", "TensorArray", "variant",
                 "Grappler", "lowering", "StableHLO", "Linearise", "transpose", "cotangent", "Dynamo",
                 "AOTAutograd", "Inductor", "vmap", "Autobatching", "Host read", "All-reduce", "GSPMD",
                 "MirroredStrategy", "DDP", "Straggler", "Transition head", "Kernel", "Theano", "Dispatch",
                 "Executor", "Flax", "Lockstep", "Adam", "Interleaved rounds", "IQR"):
        assert term in entries, term
    for chapter in gs.GUIDES + (OVERVIEW,):
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
    for chapter in gs.GUIDES:
        top = "\n".join(chapter.read_text().splitlines()[:8])
        assert "(overview.md)" in top, chapter.name
