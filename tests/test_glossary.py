"""The glossary keeps up with the guides, and the guides keep one reading order.

docs/glossary.md defines the words the guides use without stopping to explain them: an entry is a
paragraph led by its headword in bold (``**Host read (host sync).**``), and a headword may name
several words (``**Premise, hypothesis.**``). The rule checked here: in each guide, the first use of a
glossary word comes after the guide's first link to glossary.md, or is the place that defines it,
marked by emphasis (``*thin stack*``). A reader may open any chapter from the README, so the rule
holds in each guide, not only in the first one that uses the word. Headings, fenced code, render
blocks and HTML comments are not prose a reader meets a word in, and are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.explain.report import GUIDES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GLOSSARY = DOCS / "glossary.md"
README = ROOT / "README.md"
# The learner's path: the overview first, then the chapters.
READING_ORDER = ("overview.md", "static-vs-dynamic.md", "algorithm-or-framework.md", "decided-graphs.md",
                 "autobatching.md", "data-parallel.md", "which-approach.md")
LINK_MARK = "\0glossary\0"  # where a guide links the glossary, in its prose

_RENDER_RE = re.compile(r"<!-- render .*?<!-- /render -->", re.S)
_FENCE_RE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.S | re.M)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_HEADING_RE = re.compile(r"^#.*$", re.M)
_LINK_RE = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)[^)]*\)")
_ENTRY_RE = re.compile(r"^\*\*(?P<head>[^*]+?)\.?\*\*", re.M)


def prose(text: str) -> str:
    """What a reader reads of a page: links become their text (a link to the glossary also leaves
    LINK_MARK after it), backticks go, headings, fenced code, render blocks and comments are dropped."""
    for pattern in (_RENDER_RE, _FENCE_RE, _COMMENT_RE, _HEADING_RE):
        text = pattern.sub(" ", text)
    text = _LINK_RE.sub(lambda m: " " if m[0].startswith("!") else  # a figure's alt text is not read in order
                        m[1] + (LINK_MARK if m[2].split("#")[0].split("/")[-1] == "glossary.md" else ""), text)
    return text.replace("`", "")


def headwords(glossary: str) -> list[str]:
    return [m["head"].strip() for m in _ENTRY_RE.finditer(glossary)]


def terms(headword: str) -> list[str]:
    """The words an entry defines: its headword split at commas and "and", with what its parentheses
    hold as other names (``Host read (host sync)``: "Host read", "host sync")."""
    head = headword.replace("`", "")
    pieces = [re.sub(r"\s*\([^)]*\)", "", head)] + re.findall(r"\(([^)]*)\)", head)
    found = []
    for piece in pieces:
        for part in re.split(r",\s*|\s+and\s+", piece):
            part = re.sub(r"^(its|the)\s+", "", part.strip())
            if part:
                found.append(part)
    return found


def term_re(term: str) -> re.Pattern:
    # A file name is not a use of the word: autobatching.md.
    return re.compile(r"(?<![\w-])" + re.escape(term) + r"(?:e?s)?(?![\w-])(?!\.md)", re.I)


def undefined_first_uses(text: str, words: list[str]) -> list[str]:
    """The words whose first use in the page ``text`` comes before its first link to the glossary and
    is not emphasised (the emphasis that marks a definition in place)."""
    page = prose(text)
    link = page.find(LINK_MARK)
    link = len(page) if link < 0 else link
    found = []
    for word in words:
        m = term_re(word).search(page)
        if m and m.start() < link and page[m.start() - 1:m.start()] not in ("*", "_") and \
                not page.startswith(LINK_MARK, m.end()):  # the use is itself the link
            found.append(f"{word!r} at {page[max(0, m.start() - 40):m.end() + 20]!r}")
    return found


GLOSSARY_TEXT = GLOSSARY.read_text()
WORDS = [term for head in headwords(GLOSSARY_TEXT) for term in terms(head)]


def test_the_reading_order_is_the_guides_order():
    """bench/explain/report.py lists the chapters bench check keeps true; it lists them in reading order."""
    assert tuple(Path(guide).name for guide in GUIDES) == READING_ORDER[1:]


def chapters_linked(paragraph: str) -> list[str]:
    names = re.findall(r"\]\((?:docs/)?([\w-]+\.md)\)", paragraph) or re.findall(r"`([\w-]+\.md)`", paragraph)
    return [name for name in names if name in READING_ORDER]


def paragraph_with(text: str, phrase: str) -> str:
    start = text.index(phrase)
    end = text.find("\n\n", start)
    bullet = text.find("\n* ", start)
    return text[start:min(k for k in (end, bullet, len(text)) if k >= 0)]


@pytest.mark.parametrize("page, phrase", [
    ("docs/overview.md", "The chapters, in reading order:"),
    ("README.md", "**To read them side by side**"),
    ("docs/glossary.md", "The words the guides"),
])
def test_every_list_of_the_chapters_keeps_the_reading_order(page, phrase):
    listed = chapters_linked(paragraph_with((ROOT / page).read_text(), phrase))
    assert listed == [name for name in READING_ORDER if name in listed] and len(listed) >= 5, listed


def test_the_glossary_has_the_entries_the_guides_need():
    heads = " ".join(headwords(GLOSSARY_TEXT))
    for word in ("SNLI", "Premise", "hypothesis", "Pair", "Pairs/s", "Shape letters", "AutoGraph", "lax.cond",
                 "lax.while_loop", "lax.scan", "Teacher forcing", "Residuals", "Useful FLOP/s", "Device peak",
                 "Host", "Select", "Unroll", "Logits", "Busy round", "Implementation", "Reference"):
        assert word in heads, word
    # The notation box: every letter of docs/spec.md §2-§3 the guides use, and the item.
    box = GLOSSARY_TEXT[GLOSSARY_TEXT.index("## Notation"):GLOSSARY_TEXT.index("\n## ", GLOSSARY_TEXT.index("## Notation") + 1)]
    rows = [line.split("|")[1].strip() for line in box.splitlines() if line.startswith("| ") and "---" not in line]
    for letter in ("B", "S = 2B", "N", "T", "E", "H", "D", "M, L", "[h; c]"):
        assert letter in rows, letter
    assert "2H" in box


def test_the_entries_are_found_and_split():
    assert len(WORDS) >= 80
    assert terms("Host read (host sync)") == ["Host read", "host sync"]
    assert terms("`lax.scan` and its carry") == ["lax.scan", "carry"]
    assert terms("Premise, hypothesis") == ["Premise", "hypothesis"]


@pytest.mark.parametrize("name", READING_ORDER)
def test_each_guide_opens_with_a_link_to_the_glossary(name):
    text = (DOCS / name).read_text()
    opening = text[:text.index("\n## ")]
    assert "(glossary.md)" in opening or "(glossary.md#" in opening, name


@pytest.mark.parametrize("name", READING_ORDER)
def test_a_glossary_word_is_defined_or_the_glossary_linked_before_its_first_use(name):
    assert undefined_first_uses((DOCS / name).read_text(), WORDS) == []


def test_the_readme_defines_or_links_a_glossary_word_before_its_first_use():
    """The README is the first page a reader opens: its words come in order too."""
    assert undefined_first_uses(README.read_text(), WORDS) == []


def test_the_rule_finds_a_word_used_before_the_glossary_is_linked():
    before = "# Title\n\nSPINN uses a thin stack.\n\nWords: [glossary](glossary.md). A tracer."
    assert [f.split(" at ")[0] for f in undefined_first_uses(before, WORDS)] == ["'SPINN'", "'Thin stack'"]
    # Defined in place (emphasised), named in a heading, or only in code: no finding.
    defined = "# SPINN\n\nThe *thin stack* keeps rows.\n\n```\ntracer\n```\n\n[glossary](glossary.md#notation)"
    assert undefined_first_uses(defined, WORDS) == []
    assert undefined_first_uses("No link at all, and no word of it.", WORDS) == []
