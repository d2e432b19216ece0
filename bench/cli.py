"""``python -m bench``: the suite's command line.
Parsing and dispatch only: only the module of the command asked for is imported (bench/provenance.py)."""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.errors import WorkFailed
from bench.lock import FolderLocked

# Each command, in --help's order: the module ``bench.<command>`` (a file, or a package's __init__) registers it.
COMMANDS = ("init", "encode", "data", "run", "report", "compare", "curves", "train", "evaluate", "scale", "explain",
            "render", "check", "figures", "reproduce", "conform")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the subcommand ``argv`` names (every one when it names none: ``--help``)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=_plain(__doc__.splitlines()[0]))
    parser.add_argument("--version", action="version", version=f"spinn-suite {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    first = next((word for word in argv or () if not word.startswith("-")), None)
    for name in [first] if first in COMMANDS else COMMANDS:
        importlib.import_module(f"bench.{name}").register(sub)
    for command in sub.choices.values():  # the modules' docstrings mark code as ``code``: a terminal shows it plain
        command.description = _plain(command.description)
    return parser


def _plain(text: str | None) -> str | None:
    return text.replace("``", "") if text else text


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("spinn-suite")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (docs/spec.md §5, "Exit codes")."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(words).parse_args(words)
    args.argv = words  # the command's words, for a launcher to repeat
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
