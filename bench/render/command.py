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
    """docs/figures/explain.json, the results of the documents' explain blocks that the figures read, each the run
    its block shows: an entry whose counts differ from a fresh run (times and versions aside), or that does not
    print as its block reads (times included), is a problem, or, with ``write``, the run its re-rendered block
    shows."""
    path = results.root / FIGURES_DIR / EXPLAIN_JSON
    fresh = {fig: {"guide": display(o.path, results), "command": command, "result": result}
             for o in outcomes for fig, (command, result, _) in o.explained.items()}
    timed = {fig for o in outcomes for fig, (_, _, was_timed) in o.explained.items() if was_timed}
    shown = {fig: (o, body) for o in outcomes for fig, body in o.shown.items()}
    old = json.loads(path.read_text()) if path.exists() else {}
    masked = lambda entry: {**entry, "result": comparable(entry["result"])}  # noqa: E731
    differ = sorted(f for f in fresh.keys() | old.keys() if f not in fresh or f not in old
                    or masked(old[f]) != masked(fresh[f]) or f in timed)
    if write:
        if differ:
            with written_aside(path) as tmp:  # each result in its own order: it prints as its block reads
                tmp.write_text(json.dumps({f: fresh[f] if f in differ else old[f] for f in sorted(fresh)},
                                          indent=1) + "\n")
            results.forget_explained()
        return []
    unlike = sorted(f for f in fresh.keys() & old.keys() if f not in differ
                    and _explain_text(old[f]["command"], old[f]["result"]) != shown[f][1])
    return [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} differs from a fresh run of the documents' explain blocks"
            for f in differ] + [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} is not the run "
                                f"{display(shown[f][0].path, results)}'s block shows (its times); python -m bench "
                                "render writes both from one run" for f in unlike]


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
    explained: dict = field(default_factory=dict)  # explain id -> (command, result, whether it was timed)
    shown: dict = field(default_factory=dict)  # explain id -> the block's body as it stands after rendering
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
        out.problems += [f"{name}:{line}: {words!r} states a rule over measured results beside a rendered number: "
                         "render it from a query that computes it, spread included (best ... lead, ratio ... "
                         "standing, standing-at: bench/render/query.py), or say less"
                         for line, words in sweeping_claims(out.text)]
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
    fresh = _explain_text(command, untimed)
    kept = results.explained_entry(folder)
    # explain.json keeps the run the block shows, times included: the figures read it, a reader may open it.
    in_step = kept is not None and (kept["guide"], kept["command"]) == (display(out.path, results), command) \
        and comparable(kept["result"]) == comparable(untimed) and _explain_text(command, kept["result"]) == body
    if write and (mask(fresh) != mask(body) or not in_step):  # written with the times a reader expects
        timed = results.explain(command, timing=True)
        out.explained[folder], out.shown[folder] = (command, timed, True), _explain_text(command, timed)
        return out.shown[folder], False
    out.explained[folder], out.shown[folder] = (command, untimed, False), body
    return fresh, mask(fresh) == mask(body)


def _explain_text(command: str, result: dict) -> str:
    """An explain block's body: the command, then what it prints."""
    from bench.explain.views import format_text

    return f"```text\n$ {command}\n{format_text(result)}\n```\n"


TIME_RE = re.compile(r"(\d+(?:\.\d+)?) (s|ms|µs)\b|\(not timed\)")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}
_PROBE = 4321.0  # a time no explain block shows, set at a key to find where the block prints it


def _explained(out: Outcome, fig: str, key: str, written: str) -> str:
    """A count or a time quoted from the document's explain block ``fig``: a count is its result's; a time (a key
    ending in _s) is the one the block shows, and a quote of it stands if it is that value written in the quote's
    unit and rounded to its digits (3.07 ms may be quoted 0.003 s), else it is written as the block writes it."""
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
    """The time an explain block's body shows for ``key`` of its result (``3.07 ms``): the key is set to a probe
    value and the one time that changes in the printed text is where the block prints it."""
    from bench.explain.views import format_text

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
    return "\n".join(TIME_RE.sub("<time>", line).rstrip() for line in lines).strip() + "\n"


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


def _prose(text: str, skip: bool = True) -> str:
    """The text with what is not prose blanked, lines kept: fenced code, and with ``skip`` render blocks, comments
    (but ALLOW), quotes and inline code."""
    lines, fenced = [], False
    for line in text.splitlines():  # fenced code first: its backticks are no inline code
        fence = line.lstrip().startswith(("```", "~~~"))
        fenced ^= fence
        lines.append("" if fenced or fence else line)
    text = "\n".join(lines)
    for k, pattern in enumerate(_SKIP_RES if skip else ()):
        text = pattern.sub(lambda m: m.group(0) if k == 1 and m.group(0) == ALLOW else
                           re.sub(r"[^\n]", " ", m.group(0)), text)
    return text


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """(line, text) of each ratio, percentage, duration, throughput, amount of memory or number in scientific
    notation typed in the prose: outside markers, code and comments, on a line without ALLOW."""
    return [(n, m.group(0)) for n, line in enumerate(_prose(text).splitlines(), 1) if ALLOW not in line
            for m in MEASURED_RE.finditer(line)]


# Words that state a rule over the rows of a table or over several runs. Next to a rendered number (in a paragraph,
# list item or table row that quotes a results folder, or in one after a results block in the same section) they may
# only be the rendered text of a query that computes them, spread included: ``best ... lead`` (the fastest, or level
# with), ``ratio ... standing`` (leads, trails, is level), ``standing-at`` (leads at every batch size, ...).
SWEEPING_RE = re.compile(
    r"\b(?:fastest|slowest|narrow(?:s|ed|er)?|widen(?:s|ed)?|shrinks?|(?:is|are|about|stays?)\s+level|level\s+with"
    r"|level(?=\s*\()|never|always|(?:every|all|any)\s+(?:leads?|batch\s+sizes?)|any\s+batch|(?:at|for)\s+both\s+sizes)"
    r"\b", re.I)
# Phrases of those words that state no rule over measured results, each with why it may stand.
SWEEPING_ALLOWED = (
    # a word in italics is defined where it stands (the README's convention): a definition, not a claim
    re.compile(r"(?<![*\w])\*[^*\n]+\*(?![*\w])"),
    # the limit's definition (docs/benchmark.md): the best of the run's own matrix-multiply timings, a maximum taken
    # by the code, not a ranking of implementations
    re.compile(r"fastest\s+matrix\s+multiply", re.I),
)
_UNIT_RE = re.compile(r"^\s*(?:[*-]\s|\d+\.\s|\|)")  # a line that starts a list item or a table row


def sweeping_claims(text: str) -> list[tuple[int, str]]:
    """(line, words) of each word of SWEEPING_RE in prose next to a rendered number that no query rendered: a rule
    over measured rows typed in the prose, which the next results may break."""
    quoted = {text.count("\n", 0, m.start()) + 1 for m in INLINE_RE.finditer(text) if "results/" in m["source"]}
    after = {text.count("\n", 0, m.end()) + 2 for m in BLOCK_RE.finditer(text)
             if "results/" in m["source"] and not m["query"].startswith("measured-at")}
    lines, units = _prose(text).splitlines(), []  # units: each one's line numbers
    shape = _prose(BLOCK_RE.sub(lambda m: re.sub(r"[^\n]", "", m.group(0)), text), skip=False).splitlines()
    for n, line in enumerate(shape, 1):  # a unit ends at a blank line, fenced code or a block; not at inline code
        if not line.strip():
            units.append([])
        elif _UNIT_RE.match(line) or not units or not units[-1]:
            units.append([n])
        else:
            units[-1].append(n)
    units = [unit for unit in units if unit]
    headings = [n for n, line in enumerate(shape, 1) if line.startswith("#")]
    found = []
    for unit in units:  # one that quotes a results folder, or follows a results block in the same section
        if not (quoted & set(unit) or any(a <= unit[0] and not any(a <= h < unit[0] for h in headings)
                                          for a in after)):
            continue
        body = "\n".join(lines[n - 1] if ALLOW not in lines[n - 1] else "" for n in unit)
        allowed = [m.span() for pattern in SWEEPING_ALLOWED for m in pattern.finditer(body)]
        found += [(unit[0] + body.count("\n", 0, m.start()), " ".join(m.group(0).split()))
                  for m in SWEEPING_RE.finditer(body) if not any(a <= m.start() < b for a, b in allowed)]
    return found
