"""Command line and benchmark harness of the SPINN suite (``python -m bench``)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: what records name their files relative to
