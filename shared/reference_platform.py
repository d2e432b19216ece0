"""The float64 NumPy reference's platform: a CPU, NumPy's version, nothing to configure."""

from __future__ import annotations

from shared.platform import Platform as PlatformBase


class Platform(PlatformBase):
    name = "reference"
    library = "numpy"
