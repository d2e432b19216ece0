"""``python -m bench report``: report.md and its plots from results.jsonl files.

The report is put together from modules with one job each: the statistics (bench/benchmark/stats.py), the goals
(targets.py), the Markdown (markdown.py) and the plots (plots.py), all reading the typed records of record.py. ``bench
run`` ends by writing the same report with the same code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench import frameworks
from bench.benchmark.markdown import render_markdown
from bench.benchmark.record import Measurement, load


def register(sub) -> None:
    p = sub.add_parser("report", help="render a Markdown table, the targets and PNG plots from results")
    p.add_argument("results", nargs="+", help="results.jsonl files, or folders holding one")
    p.add_argument("--out", default=None, help="folder for report.md and the plots [default: beside the first]")
    p.add_argument("--no-plots", action="store_true", help="only the Markdown report")
    p.add_argument("--over", default="", metavar="IMPLS",
                   help="comma-separated implementations to take ratios over as well, round by round, beside "
                        f"the baseline {frameworks.BASELINE} (a variant over the implementation it varies, say)")
    p.set_defaults(func=cmd_report)


def write_report(records: list[Measurement], sources, out_dir: Path, plots: bool = True,
                 over: tuple[str, ...] = (), note: str = "") -> tuple[str, list[Path]]:
    """Write report.md and its plots into ``out_dir``; the Markdown and the files written.

    One writer for ``bench report`` and the end of ``bench run``, so the two cannot drift apart. Without matplotlib the
    plots are left out, said in one line, and report.md is written all the same: a run's figures are worth more than its
    pictures.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(records, sources, over)
    if note:  # a line under the title (a run's partial report says so there)
        title, _, rest = markdown.partition("\n")
        markdown = f"{title}\n\n**{note}**\n{rest}"
    written = []
    if plots:
        try:
            import matplotlib  # noqa: F401  (only: is it there?)
        except ImportError:
            print("note: matplotlib is not installed: report.md without plots", file=sys.stderr)
        else:
            from bench.benchmark.plots import plot

            written = plot(records, out_dir)
    if written:
        markdown += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in written) + "\n"
    (out_dir / "report.md").write_text(markdown)
    return markdown, [out_dir / "report.md", *written]


def cmd_report(args) -> int:
    records = load(args.results)
    if not records:
        raise ValueError("no records in the given results")
    first = Path(args.results[0])
    out_dir = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    over = tuple(name.strip() for name in args.over.split(",") if name.strip())
    measured = {r.implementation for r in records}
    for name in over:
        if name not in measured:
            raise ValueError(f"--over {name}: not measured in these results; measured: {', '.join(sorted(measured))}")
    markdown, written = write_report(records, args.results, out_dir, plots=not args.no_plots, over=over)
    print(markdown)
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0
