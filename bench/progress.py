"""Progress on the terminal: a tqdm bar, or plain lines where there is no terminal.

On a terminal (stderr is a TTY) the bar is redrawn in place with a status
text after it. Into a file or a pipe (CI logs, tests) a bar would be a smear
of carriage returns, so the same information goes out as a plain line every
``interval`` seconds and once at the end. Messages (``write``) go above the
bar without breaking it. ``interval=None``: no plain lines at all, for
callers whose own messages already say how far they are.
"""

from __future__ import annotations

import math
import shutil
import sys
import time

from tqdm import tqdm


def duration(seconds: float) -> str:
    """3s, 2m05s, 1h02m."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """``total`` units of work (steps, pairs, measurements), done a few at a time.

    ``update(n, status)`` counts n more done; ``status`` is shown after the
    bar (or in the plain line). The ETA of the plain lines uses the rate
    since the previous line only, so one slow stretch (a compilation) does
    not distort it for long.
    """

    def __init__(self, label: str, total: int, *, unit: str = "it", stream=None, enabled: bool = True,
                 interval: float | None = 15.0):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
        self._bar = None
        if self.tty:
            # A terminal that reports no width (some pseudo-terminals) would get no bar at all.
            width = shutil.get_terminal_size(fallback=(0, 0)).columns
            self._bar = tqdm(total=total, desc=f"[{label}]", unit=f" {unit}", file=self.stream, leave=False,
                             smoothing=0.1, dynamic_ncols=width > 0, ncols=None if width > 0 else 100)
        self._last_line = time.perf_counter()
        self._last_done = 0

    def update(self, n: int = 1, status: str = "") -> None:
        self.done += n
        if self._bar is not None:
            if status:
                self._bar.set_postfix_str(status, refresh=False)
            self._bar.update(n)
            return
        now = time.perf_counter()
        if not self.enabled or self.interval is None or (now - self._last_line < self.interval
                                                         and self.done < self.total):
            return
        per_unit = (now - self._last_line) / max(self.done - self._last_done, 1)
        eta = duration((self.total - self.done) * per_unit)
        text = f"[{self.label}] {self.unit} {self.done:,}/{self.total:,}" + (f" {status}" if status else "")
        self.stream.write(f"{text} ETA {eta}\n")
        self.stream.flush()
        self._last_line, self._last_done = now, self.done

    def status(self, text: str) -> None:
        """What is happening now (shown on the bar; plain lines wait for the next update)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def write(self, text: str) -> None:
        """A message line, above the bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(f"[{self.label}] {text}", file=self.stream)
        else:
            self.stream.write(f"[{self.label}] {text}\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
