"""``python -m bench``: the suite's command line.

Argument parsing and dispatch only: each tool registers its subcommands and
does its work in its own module (``bench/commands.py``, ``bench/benchmark/``,
``bench/training/``, ``bench/explain/``), where the logic is tested.
"""

from __future__ import annotations

import argparse
import sys

from bench import commands, reproduce
from bench.benchmark import compare, plan, report
from bench.errors import WorkFailed
from bench.explain import cli as explain_cli
from bench.figures import command as figures_cli
from bench.render import command as render_cli
from bench.lock import FolderLocked
from bench.training import cli as training_cli
from bench.training import curves, scaling


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.register(sub)  # init, encode, data
    plan.register(sub)  # run
    report.register(sub)  # report
    compare.register(sub)  # compare
    curves.register(sub)  # curves
    training_cli.register(sub)  # train, evaluate
    scaling.register(sub)  # scale
    explain_cli.register(sub)  # explain
    figures_cli.register(sub)  # figures
    reproduce.register(sub)  # reproduce
    render_cli.register(sub)  # render
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (docs/spec.md §5, "Exit codes"): 0 done,
    1 the work failed, 2 bad input or usage, 130 interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command's words, for a launcher to repeat
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, ImportError, NotImplementedError, FolderLocked) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, WorkFailed) as err:  # a write that failed (shared/files.py names the file), a child that failed
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:
        print(f"\ninterrupted{': ' + str(err) if str(err) else ''}", file=sys.stderr)
        return 130
