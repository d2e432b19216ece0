"""The glossary keeps up with the guides, and the guides keep one reading order.

docs/glossary.md defines the words the guides use without stopping to explain them: an entry is a
paragraph led by its headword in bold (``**Host read (host sync).**``), and a headword may name
several words (``**Premise, hypothesis.**``). The rule checked here: in each guide, the first use of a
glossary word comes after the guide's first link to glossary.md, or is the place that defines it,
marked by emphasis (``*thin stack*``). A reader may open any chapter from the README, so the rule
holds in each guide, not only in the first one that uses the word. Headings, fenced code, render
blocks and HTML comments are not prose a reader meets a word in, and are left out.

Every word an entry defines is an anchor (``<a id="host-read"></a>`` above the entry), a link to a glossary
word lands on its entry, and every relative link of the README, docs/ and lessons/ opens a file that exists and,
where it names an anchor in a Markdown page, a place that page has (a heading's or an ``<a id>``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.check import GUIDES

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


# [text](target "title"), an image's too, the target up to a space or the closing parenthesis; or inline code,
# which holds examples, not links (its matches are skipped).
_TARGET_RE = re.compile(r"`[^`\n]*`|!?\[(?P<text>(?:[^\[\]\n]|\[[^\]\n]*\])*)\]\((?P<target>[^)\s\"]+)"
                        r"(?: \"[^\"\n]*\")?\)")
PAGES = [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "lessons").rglob("*.md"))]


def anchor(words: str) -> str:
    """A glossary word's anchor: lower case, each run of other characters one hyphen (``lax.scan``: lax-scan)."""
    return re.sub(r"[^a-z0-9]+", "-", words.replace("`", "").lower()).strip("-")


def anchors(page: str) -> set[str]:
    """The places a link can name in a Markdown page: its headings, as GitHub names them (lower case, punctuation
    dropped, spaces as hyphens, a repeated one numbered), and its ``<a id>`` tags, fenced code left out."""
    found, seen = set(re.findall(r'<a (?:id|name)="([^"]+)"', page)), {}
    for m in re.finditer(r"^#{1,6} (.+)$", _FENCE_RE.sub("", page), re.M):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m[1]).replace("`", "").strip().lower()
        name = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        found.add(name if name not in seen else f"{name}-{seen[name]}")
        seen[name] = seen.get(name, 0) + 1
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative links of a Markdown page that open nothing: a missing file, or an anchor the Markdown page it
    names does not have. Links in fenced code are examples, not links."""
    text = page.read_text() if text is None else text
    found = []
    for m in _TARGET_RE.finditer(_FENCE_RE.sub("", text)):
        if not m["target"] or re.match(r"[a-z][a-z0-9+.-]*:", m["target"]):  # inline code; https:, mailto:
            continue
        path, _, name = m["target"].partition("#")
        target = (page.parent / path).resolve() if path else page
        if path and not target.exists():
            found.append(f"{page.name}: {m['target']} (no such file)")
        elif name and (not path or target.suffix == ".md") and \
                name not in anchors(target.read_text() if path else text):
            found.append(f"{page.name}: {m['target']} (no such anchor in {target.name})")
    return found


GLOSSARY_TEXT = GLOSSARY.read_text()
WORDS = [term for head in headwords(GLOSSARY_TEXT) for term in terms(head)]


def test_the_reading_order_is_the_guides_order():
    """bench/check.py lists the chapters it keeps true; it lists them in reading order."""
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


def test_every_relative_link_opens_a_file_and_an_anchor_it_has():
    assert sum(1 for page in PAGES for m in _TARGET_RE.finditer(page.read_text()) if m["target"]) >= 800
    assert [problem for page in PAGES for problem in broken_links(page)] == []


def test_a_link_to_a_missing_anchor_or_file_is_found(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (page.parent / "glossary.md").write_text(GLOSSARY_TEXT)
    good = ("[thin stack](glossary.md#thin-stack), [notation](glossary.md#notation), [IQR](glossary.md#iqr "
            '"a title"), [below](#a-heading-with-code), `[code](nowhere.md)`\n\n## A heading with `code`\n')
    assert broken_links(page, good) == []
    bad = good + "[thin stack](glossary.md#thin-stacks) [gone](gone.md) [top](#nowhere)\n```\n[x](y.md)\n```\n"
    assert broken_links(page, bad) == ["page.md: glossary.md#thin-stacks (no such anchor in glossary.md)",
                                       "page.md: gone.md (no such file)",
                                       "page.md: #nowhere (no such anchor in page.md)"]
    assert {"a-heading-with-code", "notation"} <= anchors(good + GLOSSARY_TEXT)


def test_every_word_an_entry_defines_is_an_anchor_above_it():
    lines = GLOSSARY_TEXT.splitlines()
    for k, line in enumerate(lines):
        m = _ENTRY_RE.match(line)
        if m:
            wanted = "".join(f'<a id="{anchor(term)}"></a>' for term in terms(m["head"].strip()))
            assert lines[k - 1] == wanted, (m["head"], lines[k - 1])
    ids = re.findall(r'<a id="([^"]+)"></a>', GLOSSARY_TEXT)
    assert len(ids) == len(set(ids)) == len(WORDS) and "lax-scan" in ids and "host-sync" in ids


def glossary_links_without_their_anchor(page: Path, text: str) -> list[str]:
    """Links to the glossary whose text is one of its words (``[Thin stacks](glossary.md)``) but that do not land on
    that word's entry."""
    entries = [(term, [anchor(t) for t in terms(head)])
               for head in headwords(GLOSSARY_TEXT) for term in terms(head)]
    found = []
    for m in _TARGET_RE.finditer(_FENCE_RE.sub("", text)):
        path, _, name = (m["target"] or "").partition("#")
        word = m["text"].replace("`", "").strip("*_ ") if path.endswith("glossary.md") else ""
        entry = next((ids for term, ids in entries if word and term_re(term).fullmatch(word)), None)
        if entry and name not in entry:
            found.append(f"{page.name}: [{m['text']}]({m['target']}) (its entry: #{entry[0]})")
    return found


def test_a_link_to_a_glossary_word_lands_on_its_entry():
    assert [problem for page in PAGES for problem in glossary_links_without_their_anchor(page, page.read_text())] == []
    text = "[Thin stacks](glossary.md) and [host sync](glossary.md#host-read), [the glossary](glossary.md)"
    assert glossary_links_without_their_anchor(DOCS / "x.md", text) == [
        "x.md: [Thin stacks](glossary.md) (its entry: #thin-stack)"]
