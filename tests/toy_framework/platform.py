"""The toy framework's platform: the base class's CPU-only defaults, NumPy's version."""

from __future__ import annotations

from shared.platform import Platform as PlatformBase


class Platform(PlatformBase):
    name = "toy"
    library = "numpy"
