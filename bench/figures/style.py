"""How every figure looks, and how it is saved so that two runs write the same bytes.

``--check`` compares freshly drawn files with the committed ones byte for
byte, so nothing may vary from run to run: matplotlib's defaults are reset
(a user's matplotlibrc must not leak in), the SVG element ids are salted
with a fixed string instead of a random one, the date is left out, and text
stays text (``svg.fonttype: none``: small files, no glyph paths whose
rounding depends on the font cache).

Colours follow the registry (bench/frameworks.py), not a list of names: a
framework has one hue in every figure, its first implementation the plain
hue, the next ones darker or lighter with their own marker and line style.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from bench import frameworks

RC = {
    "svg.hashsalt": "spinn-figures",  # fixed ids for clip paths and markers
    "svg.fonttype": "none",  # text as <text>, not as paths
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same metrics on every machine
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
}
MONO = "DejaVu Sans Mono"  # for traces and tables, where columns must line up
# Written into each file instead of matplotlib's version and the date, so a file changes only when its content does.
METADATA = {"Date": None, "Creator": "python -m bench figures"}

# One hue per framework, in registry order; a framework past the list gets grey.
FRAMEWORK_HUES = ("#d9541e", "#1f6fb4", "#2e9e44", "#8a5cc2", "#b8860b", "#17a2b8")
# The k-th implementation of a framework: a mix towards black or white, and its own marker and line style.
SHADES = (0.0, -0.45, 0.45, -0.25, 0.25)
MARKERS = ("o", "s", "^", "D", "v")
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))
BASELINE_GREY = "#777777"


def _position(implementation: str) -> tuple[int, int]:
    """(framework index, implementation index within it) in the registry; (-1, 0) if unknown."""
    for f, name in enumerate(frameworks.FRAMEWORKS):
        names = [impl.name for impl in frameworks.FRAMEWORKS_BY_NAME[name].implementations]
        if implementation in names:
            return f, names.index(implementation)
    return -1, 0


def _mix(hex_colour: str, amount: float) -> str:
    """The colour moved towards white (amount > 0) or black (amount < 0)."""
    rgb = [int(hex_colour[k:k + 2], 16) for k in (1, 3, 5)]
    target = 255 if amount > 0 else 0
    mixed = [round(c + (target - c) * abs(amount)) for c in rgb]
    return "#" + "".join(f"{c:02x}" for c in mixed)


def colour(implementation: str) -> str:
    f, k = _position(implementation)
    hue = FRAMEWORK_HUES[f] if 0 <= f < len(FRAMEWORK_HUES) else BASELINE_GREY
    return _mix(hue, SHADES[k % len(SHADES)])


def marker(implementation: str) -> str:
    return MARKERS[_position(implementation)[1] % len(MARKERS)]


def linestyle(implementation: str):
    return LINESTYLES[_position(implementation)[1] % len(LINESTYLES)]


def registry_order(names) -> list[str]:
    """Implementation names in the registry's order (unknown names last, sorted)."""
    order = list(frameworks.IMPLEMENTATIONS_BY_NAME)
    return sorted(set(names), key=lambda n: (order.index(n) if n in order else len(order), n))


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend; a clear error without matplotlib."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("the figures need matplotlib: pip install -e '.[plot]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def drawing():
    """pyplot with the defaults reset and RC applied; the caller's settings come back afterwards."""
    plt = pyplot()
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        yield plt


def save(fig, path: Path) -> None:
    """Write ``fig`` as SVG at ``path`` (repeatable bytes) and close it."""
    plt = pyplot()
    try:
        fig.savefig(path, format="svg", metadata=METADATA)
    finally:
        plt.close(fig)
