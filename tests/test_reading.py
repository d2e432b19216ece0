"""Reading times the guides state are true: a page that says how long its prose takes to read says
"reads in about N minutes" <!-- not measured --> on one line, and N is its prose's word count at 200 words a
minute, within 25 %. Any other way of saying how long a page takes to read (a quarter of an hour, an hour)
is refused, since this test could not keep it true.

Prose is what tests/test_guide.py counts against its limit of 4000 words (fenced code, HTML comments
and link targets left out), less the render blocks: tables of measured numbers are looked up, not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import guide_prose

ROOT = Path(__file__).resolve().parent.parent
# The learner's path (tests/test_glossary.py keeps its order) and the pages that send a reader along it.
PAGES = ("README.md", "docs/overview.md", "docs/static-vs-dynamic.md", "docs/algorithm-or-framework.md",
         "docs/decided-graphs.md", "docs/autobatching.md", "docs/data-parallel.md", "docs/which-approach.md", "docs/glossary.md")
WORDS_PER_MINUTE = 200  # technical prose
TOLERANCE = 0.25
CLAIM_RE = re.compile(r"reads? in about (\d+) minutes")
# A sentence about reading that names a duration: it must be a claim of CLAIM_RE's form.
DURATION_RE = re.compile(r"\b(minutes?|hours?)\b", re.I)
READING_RE = re.compile(r"\b(read|reads|reading)\b", re.I)


def prose(text: str) -> str:
    return guide_prose(re.sub(r"<!-- render:.*?<!-- /render -->", " ", text, flags=re.S))


def words(text: str) -> int:
    return len(prose(text).split())


def problems(text: str) -> list[str]:
    """What is wrong with the reading times ``text`` states (nothing where it states none)."""
    found = []
    minutes = words(text) / WORDS_PER_MINUTE
    for sentence in re.split(r"(?<=[.;?!])\s+", prose(text)):
        if READING_RE.search(sentence) and DURATION_RE.search(sentence) and not CLAIM_RE.search(sentence):
            found.append(f"a reading time this test cannot check: {' '.join(sentence.split())!r}")
    for line in text.splitlines():
        for m in CLAIM_RE.finditer(line):
            if "<!-- not measured -->" not in line:
                found.append(f"{m[0]!r}: a number that is not a measurement is marked <!-- not measured -->")
            if abs(int(m[1]) - minutes) > TOLERANCE * minutes:
                found.append(f"{m[0]!r}, but its prose is {words(text)} words, {minutes:.1f} minutes "
                             f"at {WORDS_PER_MINUTE} words a minute")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_stated_reading_times_are_true(page):
    assert problems((ROOT / page).read_text()) == []


def test_the_first_guide_says_how_long_it_reads():
    text = (ROOT / "docs/static-vs-dynamic.md").read_text()
    assert len(CLAIM_RE.findall(text)) == 1


def test_the_check_refuses_a_wrong_or_unchecked_time():
    page = "It reads in about {} minutes <!-- not measured -->.\n\n" + "word " * 2000 + "\n"
    assert problems(page.format(10)) == []  # 2,000 words: 10 minutes
    assert len(problems(page.format(5))) == 1
    assert len(problems(page.replace(" <!-- not measured -->", "").format(10))) == 1
    assert len(problems("Its prose reads in about a quarter of an hour. " + "word " * 3000)) == 1
    # A duration that is not a reading time, in a sentence of its own, is not a claim.
    assert problems("A run takes about 5 minutes; the report is read after it.") == []
