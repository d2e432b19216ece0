"""``python -m bench check``: every quote of README.md and docs/, explain.json and the figures against its source."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench import ROOT, reproduce
from bench.figures import index
from bench.render.markers import BLOCK_RE, INLINE_RE, MARKERS, Outcome, comparable, display, explain_text, render
from bench.render.sources import EXPLAIN_JSON, FIGURES_DIR, Results
from shared.files import written_aside

KINDS = MARKERS + ("figures",)  # what bench check checks
# The guides, whose excerpts, explain blocks and figures the check keeps true with the rest, in reading order.
GUIDES = ("docs/static-vs-dynamic.md", "docs/algorithm-or-framework.md", "docs/decided-graphs.md",
          "docs/autobatching.md", "docs/data-parallel.md", "docs/which-approach.md")


def add_arguments(p: argparse.ArgumentParser, write: bool) -> None:
    """The flags of check and of render, which writes (and takes ``--check``)."""
    p.add_argument("paths", nargs="*", help="Markdown files [README.md and docs/*.md, explain.json, the figures]")
    p.add_argument("--only", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)} [all]")
    p.add_argument("--check", action="store_true", help="the same as python -m bench check" if write else
                   argparse.SUPPRESS)
    p.set_defaults(func=cmd_check, write=write, redraw=False)


def register(sub) -> None:
    text = ("change nothing; exit 1 naming every quoted value, block, excerpt, explain output or figure that differs "
            "from its source, and every quote of a stale folder")
    add_arguments(sub.add_parser("check", help=text, description=text), write=False)


def cmd_check(args) -> int:
    write = args.write and not args.check
    problems, counts = run(args.paths or None, write=write, only=tuple(k for k in args.only.split(",") if k),
                           redraw=args.redraw and write)
    for problem in problems:  # then what was covered; exit 1 where a problem is left
        print(problem)
    covered = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing"
    print(f"{len(problems)} problem(s); covered {covered}" if problems else
          f"{'rendered' if write else 'checked'} {covered}: each one from its source", file=sys.stderr)
    return 1 if problems else 0


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def document(doc: Path, results: Results, text: str | None = None, *, only=MARKERS, write: bool = False) -> Outcome:
    """One document rendered, and with ``numbers`` its prose checked for typed numbers and sweeping rules."""
    out = render(doc, results, text, only=only, write=write)
    if "numbers" in only:
        name = display(Path(doc), results)
        out.problems += [f"{name}:{line}: {typed!r} is typed, not quoted from a record (a quote or a render block: "
                         "bench/render/__init__.py)" for line, typed in typed_numbers(out.text)]
        out.problems += [f"{name}:{line}: {words!r} states a rule over measured results beside a rendered number: "
                         "render it from a query that computes it, spread included (best ... lead, ratio ... "
                         "standing, standing-at: bench/render/query.py), or say less"
                         for line, words in sweeping_claims(out.text)]
    return out


def run(paths=None, *, write: bool = False, only=KINDS, root: Path = ROOT, redraw: bool = False):
    """(problems, counts) over ``paths`` (default: all); with ``write`` what differs is rewritten."""
    if set(only) - set(KINDS) or not only:
        raise ValueError(f"--only: a comma list of {', '.join(KINDS)}, not {','.join(only)!r}")
    results, outcomes = Results(root), []
    for path in paths or documents(root):
        outcomes.append(document(Path(path), results, only=only, write=write))
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
        # a GPU folder this machine cannot make stays quotable where a document shows its measured-at block
        if reasons and (name not in shown or reproduce.can_make(results.entries[name])):
            problems.append(f"results/{name} is quoted but stale ({reasons[0]}; python -m bench reproduce {name} "
                            "re-runs it)")
    if not paths and "explain" in only:
        problems += explain_json(results, outcomes, write)
    if not paths and "figures" in only:
        problems += index.figures(results, write, redraw)
        counts["figures"] = len(index.FIGURES)
    return problems, counts


def explain_json(results: Results, outcomes, write: bool) -> list[str]:
    """docs/figures/explain.json against fresh runs of the documents' explain blocks (or with ``write`` rewritten)."""
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
                    and explain_text(old[f]["command"], old[f]["result"]) != shown[f][1])
    return [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} differs from a fresh run of the documents' explain blocks"
            for f in differ] + [f"{FIGURES_DIR / EXPLAIN_JSON}: {f} is not the run "
                                f"{display(shown[f][0].path, results)}'s block shows (its times); python -m bench "
                                "render writes both from one run" for f in unlike]


ALLOW = "<!-- not measured -->"  # a line that states a goal, a published figure or a setting
_SKIP_RES = (re.compile(r"<!-- render .*?<!-- /render -->", re.S), re.compile(r"<!--.*?-->", re.S),
             re.compile(r'\[[^\]\n]*\]\([^)\n]*? "[^"\n]*"\)'), re.compile(r"`[^`\n]*`"))
MEASURED_RE = re.compile(
    r"(?<![\w.-])(?:\d+(?:[.,]\d+)*\s?(?:x|×)(?![\w])|\d+(?:[.,]\d+)*\s?%"
    r"|\d+(?:\.\d+)?\s?(?:s|ms|µs|us|min|h)(?![\w/])"
    r"|\d+(?:[.,]\d+)*\s?(?:pairs/s|sentences/s|GFLOP/s|TFLOP/s|FLOP/s|MiB|GiB|MB|GB|kB)|\d(?:\.\d+)?e[-+]?\d+)")


def _prose(text: str, skip: bool = True) -> str:
    """The text with what is not prose blanked, lines kept (with ``skip``: blocks, comments but ALLOW, quotes, code)."""
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
    """(line, text) of each measured-looking number typed in the prose, on a line without ALLOW."""
    return [(n, m.group(0)) for n, line in enumerate(_prose(text).splitlines(), 1) if ALLOW not in line
            for m in MEASURED_RE.finditer(line)]


# Words that state a rule over measured rows: next to a rendered number only a query's text (sweeping_claims).
SWEEPING_RE = re.compile(
    r"\b(?:fastest|slowest|narrow(?:s|ed|er)?|widen(?:s|ed)?|shrinks?|(?:is|are|about|stays?)\s+level|level\s+with"
    r"|level(?=\s*\()|never|always|(?:every|all|any)\s+(?:leads?|batch\s+sizes?)|any\s+batch|(?:at|for)\s+both\s+sizes)"
    r"\b", re.I)
# Phrases of those words that state no rule over measured results, each with why it may stand.
SWEEPING_ALLOWED = (re.compile(r"(?<![*\w])\*[^*\n]+\*(?![*\w])"),  # italics: a definition (README), not a claim
                    re.compile(r"fastest\s+matrix\s+multiply", re.I))  # the limit's definition (docs/benchmark.md)
_UNIT_RE = re.compile(r"^\s*(?:[*-]\s|\d+\.\s|\|)")  # a line that starts a list item or a table row


def sweeping_claims(text: str) -> list[tuple[int, str]]:
    """(line, words) of each word of SWEEPING_RE next to a rendered number that no query rendered."""
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
