"""docs/static-vs-dynamic.md and its sequel docs/decided-graphs.md stay true: its code excerpts are the code, its
figures are what their commands print (times and versions aside), and every
number its prose quotes is the figure's.

On a failure: ``python -m bench explain --sync-guide`` rewrites the excerpts,
figures and quoted numbers from the code and fresh runs; then reread the
prose around what changed.
"""

from __future__ import annotations

import re

import pytest

from bench import frameworks
from bench import guide_sync as gs
from bench.explain.report import format_text

TEXT = gs.GUIDE.read_text()
TEXTS = {path.name: path.read_text() for path in gs.GUIDES}
ALL_TEXT = "\n".join(TEXTS.values())  # the first guide first
EXCERPTS = gs.guide_excerpts(ALL_TEXT)
FIGURES = gs.guide_figures(ALL_TEXT)
NUMBERS = gs.guide_numbers(ALL_TEXT)
RESULTS: dict = {}  # figure command -> its result, run once per session (counts only, no timing)
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


@pytest.mark.parametrize("path, spec, body", EXCERPTS, ids=[f"{p} {s[:40]}" for p, s, _ in EXCERPTS])
def test_excerpt_matches_the_source(path, spec, body):
    fresh = gs.extract(path, spec)
    assert body == fresh, f"the guide's excerpt of {path} drifted (python -m bench explain --sync-guide):\n" \
                          + gs._diff(body, fresh)


@pytest.mark.parametrize("figure", FIGURES, ids=[f.id for f in FIGURES])
def test_figure_matches_a_fresh_run(figure):
    assert figure.command.startswith(gs.COMMAND + " ") or figure.command == gs.COMMAND
    fresh = format_text(result_of(figure.command)) + "\n"
    assert gs.mask(figure.body) == gs.mask(fresh), \
        f"{figure.id} ({figure.command}) drifted:\n" + gs._diff(gs.mask(figure.body), gs.mask(fresh))


@pytest.mark.parametrize("number, figure_id, key", NUMBERS, ids=[f"{f}:{k}" for _, f, k in NUMBERS])
def test_quoted_number_is_the_figures(number, figure_id, key):
    commands = {f.id: f.command for f in FIGURES}
    assert figure_id in commands, f"{number} quotes {figure_id}, which the guide does not have"
    value = gs.lookup(result_of(commands[figure_id]), key)
    assert gs.number_matches(number, value, key), f"the guide says {number} for {figure_id} {key}, a fresh run {value}"


def test_check_finds_drift_and_sync_repairs_it(tmp_path):
    """The maintainers' commands, on a copy of the guide with one excerpt
    line, one figure count and one quoted number broken."""
    path, _, body = EXCERPTS[0]
    figure = FIGURES[0]
    count = re.search(r"autograd nodes of the loss\s+(\d+)", figure.body)[1]
    broken = TEXT.replace(body, body.replace("\n", "\n# an edit\n", 1), 1)
    broken = broken.replace(figure.body, figure.body.replace(f" {count} ", " 1 ", 1), 1)
    number, fig, key = NUMBERS[0]
    broken = broken.replace(f'[{number}](#{fig} "{key}")', f'[{int(number) + 1}](#{fig} "{key}")', 1)
    copy = tmp_path / "guide.md"
    copy.write_text(broken)
    problems = gs.sync_guide(copy, results=RESULTS)
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"excerpt {path}") and "# an edit" in problems[0]
    assert problems[1].startswith(f"figure {figure.id}") and problems[2].startswith(f"number {int(number) + 1}")
    assert gs.sync_guide(copy, write=True, timing=False, results=RESULTS) == []
    assert gs.sync_guide(copy, results=RESULTS) == []
    assert gs.mask(copy.read_text()) == gs.mask(TEXT)


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
    prose = re.sub(r"```.*?```", "", TEXTS[name], flags=re.S)
    assert len(prose.split()) < 4000  # ~230 words a minute, code and figures skimmed


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
                 "MirroredStrategy", "DDP", "Straggler"):
        assert term in entries, term
    for chapter in gs.GUIDES:
        assert "(glossary.md)" in chapter.read_text(), chapter.name
