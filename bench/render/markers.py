"""Rendering one document: every marker (syntax: bench/render/__init__.py) from its source, each difference named."""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from bench.explain.views import format_text
from bench.render import blocks, query
from bench.render.sources import QuoteError, Results

# [2.47x](results/cpu "ratio infer gold 1 jax") and <!-- render SOURCE "QUERY" --> BODY <!-- /render -->
INLINE_RE = re.compile(r'\[(?P<text>[^\]\n]*)\]\((?P<source>[^)\s"]+) "(?P<query>[^"\n]+)"\)')
BLOCK_RE = re.compile(r'^<!-- render (?P<source>\S+) "(?P<query>[^\n]*)" -->\n(?P<body>.*?)^<!-- /render -->$',
                      re.S | re.M)
MARKERS = ("numbers", "blocks", "code", "explain")  # what a document's markers render
FENCES = {".py": "python"}


@dataclass
class Outcome:
    """What rendering a document found: its new text, the problems, what it quoted and ran."""

    path: Path
    text: str
    problems: list[str] = field(default_factory=list)
    folders: set[str] = field(default_factory=set)  # the results folders quoted
    measured_at: set[str] = field(default_factory=set)  # the folders whose measured-at block it shows
    explained: dict = field(default_factory=dict)  # explain id -> (command, result, whether it was timed)
    shown: dict = field(default_factory=dict)  # explain id -> the block's body as it stands after rendering
    counts: dict = field(default_factory=lambda: dict.fromkeys(("quotes", "blocks", "excerpts", "explain blocks",
                                                                "explain quotes"), 0))


def render(doc: Path, results: Results, text: str | None = None, *, only=MARKERS, write: bool = False) -> Outcome:
    """Every marker of ``doc`` of the kinds ``only`` rendered; what differs named, or with ``write`` rewritten."""
    doc = Path(doc)
    out = Outcome(doc, doc.read_text() if text is None else text)
    name = display(doc, results)

    def marker(m, inline: bool) -> str:
        where = f"{name}:{m.string.count(chr(10), 0, m.start()) + 1}"
        link, spec = _link(m["source"], doc), m["query"]
        try:
            kind, folder, file = _source(m["source"], doc, results, inline)
            if kind == "blocks" and spec.split()[:1] == ["measured-at"]:  # shown, whatever is rendered (check.run)
                out.measured_at.add(folder)
            if kind not in only:
                return m.group(0)
            out.folders |= {folder} if kind in ("numbers", "blocks") else set()
            if link != m["source"].rstrip("/") and not write:
                out.problems.append(f"{where}: the link {m['source']!r} should read {link!r}")
            if inline:
                out.counts["explain quotes" if kind == "explain" else "quotes"] += 1
                fresh = _explained(out, folder, spec, m["text"]) if kind == "explain" else \
                    f"{code_lines(results.root, folder, spec):,}" if kind == "code" else \
                    query.evaluate(results, folder, spec, results.json(folder, file) if file else None)
                current = fresh == m["text"]
            else:
                out.counts[{"blocks": "blocks", "code": "excerpts", "explain": "explain blocks"}[kind]] += 1
                fresh, current = _block(kind, folder, spec, m["body"], results, out, write)
        except QuoteError as err:
            out.problems.append(f"{where}: {m['source']} {spec!r}: {err}")
            return m.group(0)
        if not current and not write:
            out.problems.append(f"{where}: quoted {m['text']!r}, its source says {fresh!r} ({link} \"{spec}\")"
                                if inline else f"{where}: block {link} {spec!r} differs from its source:\n"
                                + "".join(difflib.unified_diff(*[(mask if kind == "explain" else str)(t).splitlines(
                                    True) for t in (m["body"], fresh)], "document", "source")))
        if inline:
            return f'[{fresh}]({link} "{spec}")'
        return f'<!-- render {link} "{spec}" -->\n{m["body"] if current else fresh}<!-- /render -->'

    out.text = INLINE_RE.sub(lambda m: marker(m, True), BLOCK_RE.sub(lambda m: marker(m, False), out.text))
    return out


def _source(source: str, doc: Path, results: Results, inline: bool) -> tuple[str, str, str | None]:
    """(kind, results folder or file or explain id, file in the folder) of a marker's source."""
    if source.startswith("#"):
        return "explain", source[1:], None
    target, root = (doc.parent / source).resolve(), results.root.resolve()
    if target.is_relative_to((root / "results").resolve()):
        return ("numbers" if inline else "blocks", *results.locate(target))
    if target.suffix in FENCES and target.is_relative_to(root):
        return "code", target.relative_to(root).as_posix(), None
    raise QuoteError(f"a {'quote' if inline else 'block'}'s source is a results folder, "
                     f"{'a JSON file of one, a source file' if inline else 'a source file'} or #ID")


def _block(kind, folder, spec, body, results: Results, out: Outcome, write: bool) -> tuple[str, bool]:
    """(the block's fresh body, whether the document's is current)."""
    if kind in ("blocks", "code"):
        fresh = blocks.render(results, folder, spec).rstrip("\n") + "\n" if kind == "blocks" else \
            f"```{FENCES[Path(folder).suffix]}\n{extract(results.root, folder, spec)}```\n"
        return fresh, fresh == body
    command = f"python -m bench {spec}"
    untimed = results.explain(command, timing=False)
    fresh = explain_text(command, untimed)
    kept = results.explained_entry(folder)
    # explain.json keeps the run the block shows, times included: the figures read it, a reader may open it.
    in_step = kept is not None and (kept["guide"], kept["command"]) == (display(out.path, results), command) \
        and comparable(kept["result"]) == comparable(untimed) and explain_text(command, kept["result"]) == body
    if write and (mask(fresh) != mask(body) or not in_step):  # written with the times a reader expects
        timed = results.explain(command, timing=True)
        out.explained[folder], out.shown[folder] = (command, timed, True), explain_text(command, timed)
        return out.shown[folder], False
    out.explained[folder], out.shown[folder] = (command, untimed, False), body
    return fresh, mask(fresh) == mask(body)


def explain_text(command: str, result: dict) -> str:
    """An explain block's body: the command, then what it prints."""
    return f"```text\n$ {command}\n{format_text(result)}\n```\n"


TIME_RE = re.compile(r"(\d+(?:\.\d+)?) (s|ms|µs)\b|\(not timed\)")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}
_PROBE = 4321.0  # a time no explain block shows, set at a key to find where the block prints it


def _explained(out: Outcome, fig: str, key: str, written: str) -> str:
    """A count quoted from explain block ``fig``'s result, or a time (key ``*_s``) as the block shows it (same_time)."""
    if fig not in out.explained:
        raise QuoteError(f"the document has no explain block #{fig}")
    result = out.explained[fig][1]
    if key.endswith("_s"):
        shown = shown_time(out.shown[fig], result, key)
        return written if same_time(written, shown) else shown
    value = query.lookup(result, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise QuoteError(f"{key} is {value!r}, not a count")
    return str(value)


def shown_time(body: str, result: dict, key: str) -> str:
    """The time the block's body shows for ``key`` (``3.07 ms``): where a probe value set at ``key`` prints."""
    probe, (*parents, last) = json.loads(json.dumps(result)), key.split(".")
    node = probe
    try:
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = int(last) if isinstance(node, list) else last
        if not isinstance(node, (list, dict)) or last not in (range(len(node)) if isinstance(node, list) else node):
            raise KeyError(last)  # a key the result lacks is named, not added
    except (KeyError, IndexError, ValueError, TypeError):
        raise QuoteError(f"no {key!r} in the explain result") from None
    node[last] = _PROBE
    plain, probed, lines = (format_text(result).splitlines(), format_text(probe).splitlines(),
                            body.splitlines()[2:-1])
    spots = [(k, i) for k, (a, b) in enumerate(zip(plain, probed)) if a != b
             for i, (x, y) in enumerate(zip(TIME_RE.finditer(a), TIME_RE.finditer(b))) if x[0] != y[0]]
    if len(spots) != 1 or len(plain) != len(probed):
        raise QuoteError(f"{key} is not one time the block prints")
    (k, i), = spots
    times = list(TIME_RE.finditer(lines[k])) if len(lines) == len(plain) else []
    if len(times) <= i or times[i][0] == "(not timed)":
        raise QuoteError(f"the block shows no time for {key} (python -m bench render writes it)")
    return times[i][0]


def same_time(quoted: str, shown: str) -> bool:
    """Whether a quoted time is the shown one written in the quote's unit and rounded to the quote's digits."""
    q, s = TIME_RE.fullmatch(quoted.strip()), TIME_RE.fullmatch(shown)
    if not q or not q[1] or not s or not s[1]:
        return False
    digits = len(q[1].partition(".")[2])
    return f"{float(s[1]) * TIME_UNITS[s[2]] / TIME_UNITS[q[2]]:.{digits}f}" == q[1]


def _link(source: str, doc: Path) -> str:
    """The marker's source as a path from the document (a link that opens it)."""
    return source if source.startswith("#") else \
        Path(os.path.relpath((doc.parent / source).resolve(), doc.parent.resolve())).as_posix()


def display(doc: Path, results: Results) -> str:
    path = doc.resolve()
    return path.relative_to(results.root.resolve()).as_posix() if path.is_relative_to(results.root.resolve()) \
        else str(doc)


def extract(root: Path, rel: str, spec: str) -> str:
    """The dedented lines a block names: ``first .. last`` anchors, or a qualified function or class name."""
    if not (root / rel).is_file():
        raise QuoteError(f"no file {rel}")
    source = (root / rel).read_text()
    lines, (first, dots, last) = source.splitlines(), spec.partition(" .. ")
    if dots:
        starts = [k for k, line in enumerate(lines) if first in line]
        if len(starts) != 1:
            raise QuoteError(f"the first anchor {first!r} is on {len(starts)} lines, not one")
        end = next((k for k in range(starts[0], len(lines)) if last in lines[k]), None)
        if end is None:
            raise QuoteError(f"the last anchor {last!r} is not after line {starts[0] + 1}")
        return textwrap.dedent("\n".join(lines[starts[0]:end + 1])) + "\n"
    node, body = None, ast.parse(source).body
    for part in spec.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise QuoteError(f"no function or class {spec!r} in {rel}")
        body = node.body
    return textwrap.dedent("\n".join(lines[min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1:
                                           node.end_lineno])) + "\n"


def code_lines(root: Path, rel: str, spec: str) -> int:
    """A file's size, ``lines`` or ``lines NAME``: its code lines (no blanks, comments, docstrings)."""
    words = spec.split()
    if words[:1] != ["lines"] or len(words) > 2:
        raise QuoteError(f"a quote of a source file is `lines` or `lines NAME`, not {spec!r}")
    text = extract(root, rel, words[1]) if len(words) == 2 else (root / rel).read_text()
    docstrings = {line for node in ast.walk(ast.parse(text))
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and ast.get_docstring(node) for line in range(node.body[0].lineno, node.body[0].end_lineno + 1)}
    return sum(1 for k, line in enumerate(text.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and k not in docstrings)


def mask(text: str) -> str:
    """explain's output without what changes from run to run or machine to machine: times, versions, machine."""
    lines = [(line.split(":")[0] + ": ..." if line.startswith(("versions:", "machine:")) else line)
             for line in text.splitlines()]
    return "\n".join(TIME_RE.sub("<time>", line).rstrip() for line in lines).strip() + "\n"


def comparable(value):
    """An explain result without what changes from run to run (times, versions, the machine)."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()
                if not k.endswith("_s") and k not in ("framework_version", "machine", "timed")}
    return [comparable(v) for v in value] if isinstance(value, list) else value


