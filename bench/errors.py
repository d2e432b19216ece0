"""The exceptions bench/cli.py turns into exit codes besides Python's own (docs/spec.md §5, "Exit codes")."""

from __future__ import annotations


class WorkFailed(RuntimeError):
    """The work itself failed (a child command, a worker): one line on stderr, exit code 1."""
