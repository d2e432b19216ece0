"""The guide stays true: docs/static-vs-dynamic.md checked against the code and fresh runs.

The guide marks what it quotes:

* ``<!-- excerpt: PATH LINES -->`` before a code block: the lines of PATH
  that LINES names (``"first line anchor" .. "last line anchor"``, or a
  qualified name such as ``SPINN.forward``);
* ``<!-- figure: fig-id -->`` before a block whose first line is
  ``$ python -m bench explain ...``: that command's output;
* ``[29](#fig-main "batch.num_steps")`` in the prose: a number
  quoted from a figure's result.

``python -m bench explain --check-guide`` compares all three with the code
and fresh runs (times and versions masked) and exits 1 on drift;
``--sync-guide`` rewrites them. tests/test_guide.py runs the same check.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

from bench import ROOT
from bench.explain.arguments import COMMAND, parse_args
from bench.explain.arguments import GUIDES as GUIDE_NAMES
from bench.explain.report import format_text, run

# The guides kept true this way: the first one and its sequels (named in bench/explain/arguments.py).
GUIDES = tuple(ROOT / guide for guide in GUIDE_NAMES)
GUIDE = GUIDES[0]

# <!-- excerpt: impl_pytorch/model.py "first line anchor" .. "last line anchor" -->
# <!-- excerpt: impl_jax/model.py Reduce.__call__ -->
# followed by a fenced code block.
EXCERPT_RE = re.compile(r'<!-- excerpt: (?P<path>\S+) (?P<spec>.+?) -->\n(?P<fence>```[^\n]*)\n(?P<body>.*?)^```$',
                        re.S | re.M)
# <!-- figure: fig-id --> followed by a fenced block whose first line is "$ python -m bench explain ...".
FIGURE_RE = re.compile(r"<!-- figure: (?P<id>[\w-]+) -->\n(?P<fence>```[^\n]*)\n\$ (?P<command>[^\n]+)\n"
                       r"(?P<body>.*?)^```$", re.S | re.M)
# A number quoted in the prose: [29](#fig-main "batch.num_steps")
NUMBER_RE = re.compile(r'\[(?P<number>[\d.,]+)\]\(#(?P<id>[\w-]+) "(?P<key>[\w.-]+)"\)')
ANCHORS_RE = re.compile(r'^"(?P<start>.+)" \.\. "(?P<end>.+)"$')


class GuideError(ValueError):
    """An excerpt or figure marker that cannot be resolved."""


def extract(path: str, spec: str) -> str:
    """The source lines an excerpt marker names, dedented.

    ``spec`` is ``"start" .. "end"``: from the one line containing ``start``
    to the first line after it containing ``end``; or a qualified name
    (``SPINN.forward``): that function or class, decorators included.
    """
    source = (ROOT / path).read_text()
    lines = source.splitlines()
    anchors = ANCHORS_RE.match(spec.strip())
    if anchors:
        starts = [k for k, line in enumerate(lines) if anchors["start"] in line]
        if len(starts) != 1:
            raise GuideError(f"{path}: start anchor {anchors['start']!r} is on {len(starts)} lines, expected 1")
        ends = [k for k in range(starts[0], len(lines)) if anchors["end"] in lines[k]]
        if not ends:
            raise GuideError(f"{path}: end anchor {anchors['end']!r} not found after line {starts[0] + 1}")
        chosen = lines[starts[0]:ends[0] + 1]
    else:
        node = _find_definition(ast.parse(source), spec.strip().split("."))
        if node is None:
            raise GuideError(f"{path}: no function or class {spec.strip()!r}")
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        chosen = lines[first - 1:node.end_lineno]
    return textwrap.dedent("\n".join(chosen)) + "\n"


def _find_definition(tree, names: list[str]):
    body = tree.body
    node = None
    for name in names:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node


@dataclass
class Figure:
    id: str
    command: str
    body: str


def guide_excerpts(text: str) -> list[tuple[str, str, str]]:
    """(path, spec, body in the guide) for every excerpt marker."""
    return [(m["path"], m["spec"], m["body"]) for m in EXCERPT_RE.finditer(text)]


def guide_figures(text: str) -> list[Figure]:
    return [Figure(m["id"], m["command"], m["body"]) for m in FIGURE_RE.finditer(text)]


def guide_numbers(text: str) -> list[tuple[str, str, str]]:
    """(number as written, figure id, key) for every number the prose quotes from a figure."""
    return [(m["number"], m["id"], m["key"]) for m in NUMBER_RE.finditer(text)]


def figure_argv(command: str) -> list[str]:
    words = shlex.split(command)
    prefix = shlex.split(COMMAND)
    if words[:len(prefix)] != prefix:
        raise GuideError(f"a figure's command must start with {COMMAND!r}: {command!r}")
    return words[len(prefix):]


def run_figure(command: str, *, timing: bool = True) -> dict:
    """The result of a figure's command, run in this process."""
    args = parse_args(figure_argv(command))
    args.no_timing = args.no_timing or not timing
    return run(args)


# Lines and values that legitimately change from run to run or machine to machine.
_TIME_RE = re.compile(r"\d+\.\d+ s\b|\(not timed\)|(?<=\[)\d+\.\d+(?=\]\(#)")  # in figures; quoted in prose
_MASKED_LINES = ("versions:", "machine:")


def mask(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith(_MASKED_LINES):
            line = line.split(":")[0] + ": ..."
        lines.append(_TIME_RE.sub("<time>", line).rstrip())
    return "\n".join(lines).strip() + "\n"


def lookup(result: dict, key: str):
    value = result
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def number_matches(written: str, value, key: str) -> bool:
    """A quoted count must equal the figure's; a time (a key ending in _s) is
    an example, so any measured or unmeasured time will do."""
    if key.endswith("_s"):
        return value is None or isinstance(value, float)
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return written.replace(",", "") == str(value)


def sync_guide(path: str | os.PathLike = GUIDE, *, write: bool = False, timing: bool = True,
               results: dict | None = None) -> list[str]:
    """Check (or, with ``write``, rewrite) the guide's excerpts and figures.

    Returns the problems found: an excerpt that differs from its source, a
    figure whose counts differ from a fresh run of its command (times and
    versions masked), a quoted number that differs from its figure. With
    ``write``, excerpts, figures and quoted numbers are regenerated (fresh
    times included), and only what cannot be fixed (a quote of a figure or
    key that does not exist) is returned.
    ``results`` caches figure results by command across calls.
    """
    path = Path(path)
    text = path.read_text()
    results = {} if results is None else results
    problems: list[str] = []

    def excerpt(m):
        fresh = extract(m["path"], m["spec"])
        if fresh != m["body"] and not write:
            problems.append(f"excerpt {m['path']} {m['spec']} differs from the source:\n" + _diff(m["body"], fresh))
        return f"<!-- excerpt: {m['path']} {m['spec']} -->\n{m['fence']}\n{fresh}```" if write else m.group(0)

    def figure(m):
        command = m["command"]
        if command not in results:
            results[command] = run_figure(command, timing=write and timing)
        fresh = format_text(results[command]) + "\n"
        if mask(fresh) != mask(m["body"]) and not write:
            problems.append(f"figure {m['id']} ({command}) differs from a fresh run:\n"
                            + _diff(mask(m["body"]), mask(fresh)))
        return f"<!-- figure: {m['id']} -->\n{m['fence']}\n$ {command}\n{fresh}```" if write else m.group(0)

    text = EXCERPT_RE.sub(excerpt, text)
    text = FIGURE_RE.sub(figure, text)
    by_id = {f.id: f.command for f in guide_figures(text)}

    def number(m):
        written, fig, key = m["number"], m["id"], m["key"]
        if fig not in by_id:
            problems.append(f"number {written} quotes figure {fig!r}, which the guide does not have")
            return m.group(0)
        try:
            value = lookup(results[by_id[fig]], key)
        except (KeyError, IndexError, ValueError, TypeError):
            problems.append(f"number {written}: figure {fig} has no {key!r}")
            return m.group(0)
        if not number_matches(written, value, key):
            if write and isinstance(value, int) and not isinstance(value, bool):
                return m.group(0).replace(f"[{written}]", f"[{value}]", 1)
            problems.append(f"number {written} quoted from {fig} {key} is {value!r} in a fresh run")
        if write and isinstance(value, float):  # a time: quote the figure's fresh example
            return m.group(0).replace(f"[{written}]", f"[{value:.3f}]", 1)
        return m.group(0)

    text = NUMBER_RE.sub(number, text)
    if write:
        path.write_text(text)
    return problems


# The structured results of every explain block of the guides, by figure id: what `bench figures` draws
# from (it starts no framework), kept by --sync-guide and checked by --check-guide like the blocks' text.
EXPLAIN_JSON = ROOT / "docs" / "figures" / "explain.json"


def _comparable(value):
    """A result with what changes from run to run or machine to machine left out: times (keys ending in _s)
    and whether they were taken, versions, the machine."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()
                if not k.endswith("_s") and k not in ("framework_version", "machine", "timed")}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def figure_results(results: dict, guides=GUIDES) -> dict:
    """{figure id: {"guide", "command", "result"}} of every explain block of ``guides``, in guide order;
    ``results`` caches the commands' results (run here where a command has none yet)."""
    found = {}
    for guide in guides:
        for fig in guide_figures(Path(guide).read_text()):
            if fig.command not in results:
                results[fig.command] = run_figure(fig.command, timing=False)
            found[fig.id] = {"guide": str(Path(guide).resolve().relative_to(ROOT)), "command": fig.command,
                             "result": results[fig.command]}
    return found


def sync_explain_json(results: dict, *, write: bool, guides=GUIDES, path: Path = EXPLAIN_JSON) -> list[str]:
    """Write (or check) the guides' explain results as JSON: problems where the file's counts differ from a
    fresh run of the blocks' commands (times and versions left out)."""
    fresh = figure_results(results, guides)
    if write:
        path.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
        return []
    try:
        committed = json.loads(path.read_text())
    except (OSError, ValueError):
        return [f"{path.relative_to(ROOT)} is missing or unreadable: python -m bench explain --sync-guide writes it"]
    problems = [f"{path.relative_to(ROOT)}: {fig} is not a block of the guides" for fig in committed if fig not in fresh]
    for fig, entry in fresh.items():
        old = committed.get(fig)
        if old is None or old["command"] != entry["command"] or _comparable(old["result"]) != _comparable(
                json.loads(json.dumps(entry["result"]))):
            problems.append(f"{path.relative_to(ROOT)}: {fig} ({entry['command']}) differs from a fresh run "
                            "(python -m bench explain --sync-guide rewrites it)")
    return problems


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "guide", "fresh"))
