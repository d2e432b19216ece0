"""One Markdown document: its quotes and blocks rendered, checked against the records, and linted."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.render import blocks, lint, quotes
from bench.render.sources import Results
from bench.render.values import QuoteError

# [2.56x](results/cpu "ratio infer gold 1 jax"), the link relative to the document.
QUOTE_RE = re.compile(r'\[(?P<text>[^\]\n]*)\]\((?P<link>[\w./-]*?\bresults/[\w./-]+?)/? "(?P<query>[^"\n]+)"\)')
# <!-- render: ratio-table cpu infer gold 1,32,128 --> ... <!-- /render -->
BLOCK_RE = re.compile(r"^<!-- render: (?P<spec>[^\n]+?) -->\n(?P<body>.*?)^<!-- /render -->$", re.S | re.M)


@dataclass
class Outcome:
    """What rendering a document found: its new text, the problems, and the folders it quotes."""

    path: Path
    text: str
    problems: list[str] = field(default_factory=list)
    folders: set[str] = field(default_factory=set)
    quotes: int = 0
    blocks: int = 0


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def folder_of(link: str, doc: Path, results: Results) -> str:
    """The results folder a link names, relative to the document's folder."""
    target = (doc.parent / link).resolve()
    base = (results.root / "results").resolve()
    if not target.is_relative_to(base):
        raise QuoteError(f"{link} is not under results/")
    return target.relative_to(base).as_posix()


def link_to(folder: str, doc: Path, results: Results) -> str:
    return Path(os.path.relpath(results.root / "results" / folder, doc.parent)).as_posix()


def render(doc: Path, results: Results, text: str | None = None) -> Outcome:
    """Every quote and block of ``doc`` rendered from the records; problems name what differs or fails."""
    doc = Path(doc)
    text = doc.read_text() if text is None else text
    outcome = Outcome(doc, text)
    name = _display(doc, results)

    def block(m):
        outcome.blocks += 1
        where = f"{name}:{_line(text, m.start())}"
        try:
            words = m["spec"].split()
            if len(words) < 2:
                raise QuoteError("a block names a function and a folder")
            folder = words[1]
            results.folder(folder)
            body = blocks.render(results, words[0], folder, *words[2:]).rstrip("\n") + "\n"
        except QuoteError as err:
            outcome.problems.append(f"{where}: block {m['spec']!r}: {err}")
            return m.group(0)
        outcome.folders.add(folder)
        if body != m["body"]:
            outcome.problems.append(f"{where}: block {m['spec']!r} differs from its records:\n"
                                    + _diff(m["body"], body))
        return f"<!-- render: {m['spec']} -->\n{body}<!-- /render -->"

    def inline(m):
        outcome.quotes += 1
        where = f"{name}:{_line(rendered, m.start())}"
        try:
            folder = folder_of(m["link"], doc, results)
            written = quotes.evaluate(results, folder, m["query"])
        except QuoteError as err:
            outcome.problems.append(f"{where}: [{m['text']}] ({m['query']}): {err}")
            return m.group(0)
        outcome.folders.add(folder)
        link = link_to(folder, doc, results)
        if written != m["text"]:
            outcome.problems.append(f"{where}: quoted {m['text']!r}, its record says {written!r} "
                                    f"({m['link']} \"{m['query']}\")")
        elif link != m["link"].rstrip("/"):
            outcome.problems.append(f"{where}: the link {m['link']!r} should read {link!r}")
        return f'[{written}]({link} "{m["query"]}")'

    rendered = BLOCK_RE.sub(block, text)
    outcome.text = QUOTE_RE.sub(inline, rendered)
    for line_no, typed in lint.typed_numbers(outcome.text):
        outcome.problems.append(f"{name}:{line_no}: {typed!r} is typed, not quoted from a record "
                                "(a quote link or a render block: bench/render/__init__.py)")
    return outcome


def _display(doc: Path, results: Results) -> str:
    try:
        return doc.resolve().relative_to(results.root.resolve()).as_posix()
    except ValueError:
        return str(doc)


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "document", "records"))
