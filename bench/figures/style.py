"""The suite's one plot style: one hue per framework, matplotlib defaults reset, reproducible SVGs."""

from __future__ import annotations

import contextlib
from pathlib import Path

from bench import frameworks

RC = {"svg.hashsalt": "spinn-figures", "svg.fonttype": "none", "font.family": "DejaVu Sans", "font.size": 9,
      "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8, "axes.grid": True, "grid.alpha": 0.3,
      "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100}
MONO = "DejaVu Sans Mono"  # for traces and tables, where columns must line up
METADATA = {"Date": None, "Creator": "python -m bench figures"}
FRAMEWORK_HUES = ("#d9541e", "#1f6fb4", "#2e9e44", "#8a5cc2", "#b8860b", "#17a2b8")  # registry order; then grey
SHADES = (0.0, -0.45, 0.45, -0.25, 0.25)  # the k-th implementation of a framework: towards black or white
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


def colour(implementation: str) -> str:
    f, k = _position(implementation)
    hue = FRAMEWORK_HUES[f] if 0 <= f < len(FRAMEWORK_HUES) else BASELINE_GREY
    amount = SHADES[k % len(SHADES)]
    rgb = [int(hue[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + ((255 if amount > 0 else 0) - c) * abs(amount)):02x}" for c in rgb)


def marker(implementation: str) -> str:
    return MARKERS[_position(implementation)[1] % len(MARKERS)]


def linestyle(implementation: str, k: int = 0):
    """The implementation's line style; ``k``: the k-th line of the same implementation in one plot."""
    return LINESTYLES[(_position(implementation)[1] + k) % len(LINESTYLES)]


def look(implementation: str) -> dict:
    return {"color": colour(implementation), "marker": marker(implementation), "ls": linestyle(implementation)}


def registry_order(names) -> list[str]:
    """Implementation names in the registry's order (unknown names last, sorted)."""
    order = list(frameworks.IMPLEMENTATIONS_BY_NAME)
    return sorted(set(names), key=lambda n: (order.index(n) if n in order else len(order), n))


@contextlib.contextmanager
def drawing():
    """pyplot on the file-only Agg backend, the defaults reset and RC applied, the caller's settings back after."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("plots need matplotlib: pip install -e '.[plot]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        yield plt


def save(fig, path: Path, tight: bool = False) -> Path:
    """Write ``fig`` (a .png at 110 dpi, else an SVG; ``tight``: laid out by tight_layout first) and close it."""
    import matplotlib.pyplot as plt

    try:
        if tight:
            fig.tight_layout()
        png = Path(path).suffix == ".png"
        fig.savefig(path, format="png" if png else "svg", **({"dpi": 110} if png else {"metadata": METADATA}))
    finally:
        plt.close(fig)
    return Path(path)


def looks(frameworks: list[str]) -> list[dict]:
    """Each run's line: its framework's colour, and the next line style for a framework's next run."""
    return [{"color": colour(fw), "ls": linestyle(fw, frameworks[:k].count(fw))} for k, fw in enumerate(frameworks)]
