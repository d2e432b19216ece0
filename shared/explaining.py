"""Framework-free helpers of ``python -m bench explain`` that each framework's
``impl_<framework>/explain.py`` uses: the clock, the batch as arrays, and the
text of rows, times and errors.

They live here, not in ``bench/explain/``, because a framework package may
import ``shared`` but never ``bench``: the harness calls the packages, not the
other way round.
"""

from __future__ import annotations

import textwrap
import time
from typing import Callable

import numpy as np

from shared.batching import PairBatch
from shared.transitions import PAD

# -- the clock --------------------------------------------------------------


def timer() -> Callable[[], float]:
    """A stopwatch: call the result for the seconds since."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """The shortest of ``repeats`` timed calls of ``fn``."""
    best = float("inf")
    for _ in range(repeats):
        elapsed = timer()
        fn()
        best = min(best, elapsed())
    return best


# -- the batch ----------------------------------------------------------------


def steps_with_work(transitions: np.ndarray) -> int:
    """The steps of <int>[S, T] transitions where some sentence is not PAD:
    the steps a define-by-run loop does work in."""
    return int(np.count_nonzero((transitions != PAD).any(axis=0)))


# -- text -----------------------------------------------------------------------


def secs(value) -> str:
    """A time of explain's small model, in milliseconds below a second (where "0.000 s" would say nothing)."""
    if value is None:
        return "(not timed)"
    return f"{value:.3f} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def row(label: str, value, note: str = "") -> str:
    """One line of a framework's block in ``explain``'s text."""
    return f"  {label:<38} {value}" + (f"   {note}" if note else "")


def compare_row(label: str, gold, predicted, note: str = "") -> str:
    """One line of ``explain --parse``: a figure in gold and in predicted mode, in columns."""
    return f"  {label:<34} {str(gold):>8} {str(predicted):>10}" + (f"   {note}" if note else "")


def listing(items: list[str], indent: int = 4, width: int = 100) -> list[str]:
    """``items`` wrapped into indented lines (an op census, a loop's state)."""
    return textwrap.wrap(" ".join(items), width=width, initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_on_hyphens=False)


def numbers(values: list) -> str:
    return ", ".join(map(str, values))


# -- errors (explain --bad-input) -------------------------------------------------


def error_text(err: BaseException, message: str | None = None) -> str:
    """``Type: message`` in one line of at most 150 characters; ``message``
    defaults to the first non-empty line of the error's text (a framework whose
    runtime errors carry more passes its own cleaned-up message)."""
    if message is None:
        message = next((line for line in str(err).splitlines() if line.strip()), "")
    text = f"{type(err).__name__}: {message}"
    return text if len(text) <= 150 else text[:147] + "..."


def finite_outcome(array) -> str:
    """The outcome of a run that raised nothing: whether the first premise's encoding is finite."""
    return f"ran; first premise encoding finite: {'yes' if np.isfinite(np.asarray(array)[0]).all() else 'no (NaN)'}"


def encode_outcome(encode: Callable[[PairBatch], tuple], bad: PairBatch,
                   where: Callable[[BaseException], str | None]) -> dict:
    """What ``encode`` (a Runner's, or the framework's own code behind it) did
    with the bad batch and, for an error, where in the project's code it came
    from (``where``, see bench/explain/views.py's ``explain_bad_input``)."""
    try:
        premise, _, _ = encode(bad)
    except Exception as err:  # noqa: BLE001 - showing the error is the point
        return {"outcome": "raised", "error": error_text(err), "where": where(err)}
    return {"outcome": finite_outcome(premise)}
