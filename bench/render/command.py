"""The commands ``render``, ``check`` and ``figures`` (bench/render/__init__.py says what they do; ``render --check``
is ``check``, ``figures`` and ``figures --check`` are ``render`` and ``check --only figures``), and :func:`render`,
which renders one document: every marker from its source, each difference named, typed numbers found."""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from bench import ROOT, reproduce
from bench.render import blocks, query
from bench.render.sources import EXPLAIN_JSON, FIGURES_DIR, QuoteError, Results
from shared.files import written_aside

# [2.47x](results/cpu "ratio infer gold 1 jax") and <!-- render SOURCE "QUERY" --> BODY <!-- /render -->
INLINE_RE = re.compile(r'\[(?P<text>[^\]\n]*)\]\((?P<source>[^)\s"]+) "(?P<query>[^"\n]+)"\)')
BLOCK_RE = re.compile(r'^<!-- render (?P<source>\S+) "(?P<query>[^\n]*)" -->\n(?P<body>.*?)^<!-- /render -->$',
                      re.S | re.M)
MARKERS = ("numbers", "blocks", "code", "explain")  # what a document's markers render
KINDS = MARKERS + ("figures",)  # what bench check checks
FENCES = {".py": "python"}
# name -> (module of bench/figures, builder(results, pyplot) -> (figure, figures.json entry)); NAME.svg is drawn.
FIGURES = {"headline": ("runs", "headline"), "shift-reduce": ("parsing", "shift_reduce"),
           "thin-stack": ("parsing", "thin_stack_figure"), "graph-size": ("runs", "graph_size"),
           "host-reads": ("runs", "host_reads"), "padding": ("runs", "padding"),
           "compile-shapes": ("runs", "compile_shapes"), "levels": ("parsing", "levels_figure")}
INDEX = "figures.json"


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def run(paths=None, *, write: bool = False, only=KINDS, root: Path = ROOT, redraw: bool = False):
    """(problems, counts) over ``paths`` (by default every document, explain.json and the figures). With ``write``,
    what differs from its source is rewritten and only what cannot be rendered is a problem. A quote of a stale
    folder (bench reproduce --check) is a problem either way."""
    if set(only) - set(KINDS) or not only:
        raise ValueError(f"--only: a comma list of {', '.join(KINDS)}, not {','.join(only)!r}")
    results, outcomes = Results(root), []
    for path in paths or documents(root):
        outcomes.append(render(Path(path), results, only=only, write=write))
        if write and outcomes[-1].text != Path(path).read_text():
            with written_aside(path) as tmp:
                tmp.write_text(outcomes[-1].text)
            print(f"render: wrote {path}", file=sys.stderr)
    problems = [p for o in outcomes for p in o.problems]
    counts = {k: sum(o.counts[k] for o in outcomes) for k in outcomes[0].counts} if outcomes else {}
    shown = set().union(*(o.measured_at for o in outcomes))
    digests: dict = {}
    for name in sorted(set().union(*(o.folders for o in outcomes))):
        reasons = reproduce.stale_reasons(results.entries[name], results.root, digests)
        # A folder this machine cannot make (a GPU run) stays quotable after its code changed where a document
        # shows its measured-at block, which names the commit it measured and says it is stale.
        if reasons and (name not in shown or reproduce.can_make(results.entries[name])):
            problems.append(f"results/{name} is quoted but stale ({reasons[0]}; python -m bench reproduce {name} "
                            "re-runs it)")
    if not paths and "explain" in only:
        problems += explain_json(results, outcomes, write)
    if not paths and "figures" in only:
        problems += figures(results, write, redraw)
        counts["figures"] = len(FIGURES)
    return problems, counts


def explain_json(results: Results, outcomes, write: bool) -> list[str]:
    """docs/figures/explain.json, the results of the documents' explain blocks that the figures read: an entry
    whose counts differ from a fresh run (times and versions aside) is a problem, or, with ``write``, rewritten."""
    path = results.root / FIGURES_DIR / EXPLAIN_JSON
    fresh = {fig: {"guide": display(o.path, results), "command": command, "result": result}
             for o in outcomes for fig, (command, result) in o.explained.items()}
    old = json.loads(path.read_text()) if path.exists() else {}
    masked = lambda entry: {**entry, "result": comparable(entry["result"])}  # noqa: E731
    differ = sorted(f for f in fresh.keys() | old.keys() if f not in fresh or f not in old
                    or masked(old[f]) != masked(fresh[f]))
    if write and differ:
        with written_aside(path) as tmp:
            tmp.write_text(json.dumps({f: fresh[f] if f in differ else old[f] for f in fresh}, indent=1,
                                      sort_keys=True) + "\n")
    return [] if write else [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} differs from a fresh run of the documents' explain "
                             "blocks" for f in differ]


def figures(results: Results, write: bool, redraw: bool = False) -> list[str]:
    """The figures, each drawn afresh and checked through its figures.json entry (what it drew and from where), never
    its SVG bytes, which change with matplotlib's version. With ``write`` a figure whose entry differs, or is missing,
    or every one (``redraw``) is saved."""
    from bench.figures import style

    folder = results.root / FIGURES_DIR
    index = json.loads((folder / INDEX).read_text()) if (folder / INDEX).exists() else {}
    problems = []
    with style.drawing() as plt:
        for name, (module, builder) in FIGURES.items():
            fig, entry = getattr(importlib.import_module(f"bench.figures.{module}"), builder)(results, plt)
            entry = {"file": f"{name}.svg", **json.loads(json.dumps(entry))}
            differs = entry != index.get(name) or not (folder / entry["file"]).exists()
            if write and (differs or redraw):
                with written_aside(folder / entry["file"]) as tmp:
                    style.save(fig, tmp)
                index[name] = entry
                print(f"render: drew {FIGURES_DIR / entry['file']}", file=sys.stderr)
            elif differs:
                problems.append(f"{FIGURES_DIR / entry['file']}: missing, or its numbers differ from {INDEX}'s")
            plt.close(fig)
    if write:
        with written_aside(folder / INDEX) as tmp:
            tmp.write_text(to_json({n: index[n] for n in FIGURES}) + "\n")
    return problems


def to_json(value, level: int = 0) -> str:
    """figures.json's layout: nested levels indented, each row of numbers on one line (a diff shows which)."""
    members = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    if not value or all(not isinstance(v, (dict, list)) or isinstance(v, list) and
                        all(not isinstance(x, (dict, list)) for x in v) for v in members):
        return json.dumps(value, ensure_ascii=False)
    pad = " " * (level + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {to_json(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    return "[\n" + ",\n".join(pad + to_json(v, level + 1) for v in value) + "\n" + " " * level + "]"


def register(sub) -> None:
    for name, text in (("render", "write every quoted value, block, excerpt and explain output of README.md and "
                                  "docs/, explain.json and the figures from their sources (--check: bench check)"),
                       ("check", "change nothing; exit 1 naming every quoted value, block, excerpt, explain output or "
                                 "figure that differs from its source, and every quote of a stale folder")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("paths", nargs="*", help="Markdown files [README.md and docs/*.md, explain.json, the figures]")
        p.add_argument("--only", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)} [all]")
        p.add_argument("--check", action="store_true", help=argparse.SUPPRESS if name == "check" else
                       "the same as python -m bench check")
        p.set_defaults(func=cmd_render, write=name == "render", redraw=False)
    p = sub.add_parser("figures", help="redraw docs/figures/ (render --only figures; --check: check --only figures)")
    p.add_argument("--check", action="store_true", help="the same as python -m bench check --only figures")
    p.set_defaults(func=cmd_render, write=True, paths=[], only="figures", redraw=True)


def cmd_render(args) -> int:
    write = args.write and not args.check
    problems, counts = run(args.paths or None, write=write, only=tuple(k for k in args.only.split(",") if k),
                           redraw=args.redraw and write)
    return report(problems, counts, write)


def report(problems: list[str], counts: dict, write: bool) -> int:
    """Print the problems and what was covered; the exit code (1 where a problem is left)."""
    for problem in problems:
        print(problem)
    covered = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing"
    print(f"{len(problems)} problem(s); covered {covered}" if problems else
          f"{'rendered' if write else 'checked'} {covered}: each one from its source", file=sys.stderr)
    return 1 if problems else 0


@dataclass
class Outcome:
    """What rendering a document found: its new text, the problems, what it quoted and ran."""

    path: Path
    text: str
    problems: list[str] = field(default_factory=list)
    folders: set[str] = field(default_factory=set)  # the results folders quoted
    measured_at: set[str] = field(default_factory=set)  # the folders whose measured-at block it shows
    explained: dict = field(default_factory=dict)  # explain id -> (command, result)
    counts: dict = field(default_factory=lambda: dict.fromkeys(("quotes", "blocks", "excerpts", "explain blocks",
                                                                "explain quotes"), 0))


def render(doc: Path, results: Results, text: str | None = None, *, only=MARKERS, write: bool = False) -> Outcome:
    """Every marker of ``doc`` of the kinds ``only`` rendered, problems naming what differs or fails. With
    ``write`` a marker that differs takes its source's text, and only what cannot be rendered is a problem; one
    that is current is left as it is (an explain block keeps its times)."""
    doc = Path(doc)
    out = Outcome(doc, doc.read_text() if text is None else text)
    name = display(doc, results)

    def marker(m, inline: bool) -> str:
        where = f"{name}:{m.string.count(chr(10), 0, m.start()) + 1}"
        link, spec = _link(m["source"], doc), m["query"]
        try:
            kind, folder, file = _source(m["source"], doc, results, inline)
            if kind == "blocks" and spec.split()[:1] == ["measured-at"]:  # shown, whatever is rendered (command.run)
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
    if "numbers" in only:
        out.problems += [f"{name}:{line}: {typed!r} is typed, not quoted from a record (a quote or a render block: "
                         "bench/render/__init__.py)" for line, typed in typed_numbers(out.text)]
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
    from bench.explain.report import format_text

    command = f"python -m bench {spec}"
    out.explained[folder] = command, results.explain(command, timing=False)
    fresh = f"```text\n$ {command}\n{format_text(out.explained[folder][1])}\n```\n"
    if write and mask(fresh) != mask(body):  # written with the times a reader expects
        out.explained[folder] = command, results.explain(command, timing=True)
        return f"```text\n$ {command}\n{format_text(out.explained[folder][1])}\n```\n", False
    return fresh, mask(fresh) == mask(body)


def _explained(out: Outcome, fig: str, key: str, written: str) -> str:
    """A count quoted from the document's explain block ``fig``; a time (a key ending in _s) is an example."""
    if fig not in out.explained:
        raise QuoteError(f"the document has no explain block #{fig}")
    value = None if key.endswith("_s") else query.lookup(out.explained[fig][1], key)
    if not key.endswith("_s") and (isinstance(value, bool) or not isinstance(value, int)):
        raise QuoteError(f"{key} is {value!r}, not a count")
    return written if key.endswith("_s") else str(value)


def _link(source: str, doc: Path) -> str:
    """The marker's source as a path from the document (a link that opens it)."""
    return source if source.startswith("#") else \
        Path(os.path.relpath((doc.parent / source).resolve(), doc.parent.resolve())).as_posix()


def display(doc: Path, results: Results) -> str:
    path = doc.resolve()
    return path.relative_to(results.root.resolve()).as_posix() if path.is_relative_to(results.root.resolve()) \
        else str(doc)


def extract(root: Path, rel: str, spec: str) -> str:
    """The lines of a source file a block names, dedented: ``first .. last``, from the one line containing
    ``first`` to the next containing ``last``; or a qualified name, that function or class with its decorators."""
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
    """A quote of a source file's size, ``lines`` or ``lines NAME``: the lines of the file (or of that function or
    class) that hold code, not blank lines, comments or docstrings."""
    words = spec.split()
    if words[:1] != ["lines"] or len(words) > 2:
        raise QuoteError(f"a quote of a source file is `lines` or `lines NAME`, not {spec!r}")
    text = extract(root, rel, words[1]) if len(words) == 2 else (root / rel).read_text()
    tree = ast.parse(text)
    docstrings = {line for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                                       ast.AsyncFunctionDef)) and ast.get_docstring(node)
                  for line in range(node.body[0].lineno, node.body[0].end_lineno + 1)}
    return sum(1 for k, line in enumerate(text.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and k not in docstrings)


def mask(text: str) -> str:
    """explain's output without what changes from run to run or machine to machine: times, versions, machine."""
    lines = [(line.split(":")[0] + ": ..." if line.startswith(("versions:", "machine:")) else line)
             for line in text.splitlines()]
    times = re.compile(r"\d+(?:\.\d+)? m?s\b|\(not timed\)")
    return "\n".join(times.sub("<time>", line).rstrip() for line in lines).strip() + "\n"


def comparable(value):
    """An explain result without what changes from run to run (times, versions, the machine)."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()
                if not k.endswith("_s") and k not in ("framework_version", "machine", "timed")}
    return [comparable(v) for v in value] if isinstance(value, list) else value


ALLOW = "<!-- not measured -->"  # a line that states a goal, a published figure or a setting
_SKIP_RES = (re.compile(r"<!-- render .*?<!-- /render -->", re.S), re.compile(r"<!--.*?-->", re.S),
             re.compile(r'\[[^\]\n]*\]\([^)\n]*? "[^"\n]*"\)'), re.compile(r"`[^`\n]*`"))
MEASURED_RE = re.compile(
    r"(?<![\w.-])(?:\d+(?:[.,]\d+)*\s?(?:x|×)(?![\w])|\d+(?:[.,]\d+)*\s?%"
    r"|\d+(?:\.\d+)?\s?(?:s|ms|µs|us|min|h)(?![\w/])"
    r"|\d+(?:[.,]\d+)*\s?(?:pairs/s|sentences/s|GFLOP/s|TFLOP/s|FLOP/s|MiB|GiB|MB|GB|kB)|\d(?:\.\d+)?e[-+]?\d+)")


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """(line, text) of each ratio, percentage, duration, throughput, amount of memory or number in scientific
    notation typed in the prose: outside markers, code and comments, on a line without ALLOW."""
    lines, fenced = [], False
    for line in text.splitlines():  # fenced code first: its backticks are no inline code
        fence = line.lstrip().startswith(("```", "~~~"))
        fenced ^= fence
        lines.append("" if fenced or fence else line)
    text = "\n".join(lines)
    for k, pattern in enumerate(_SKIP_RES):
        text = pattern.sub(lambda m: m.group(0) if k == 1 and m.group(0) == ALLOW else
                           re.sub(r"[^\n]", " ", m.group(0)), text)
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) if ALLOW not in line
            for m in MEASURED_RE.finditer(line)]
