"""Progress on the terminal: a tqdm bar, or plain lines where there is no terminal.

On a terminal (stderr is a TTY) the bar is redrawn in place with a status text after it. Into a file or a pipe (CI logs,
tests) a bar would be a smear of carriage returns, so the same information goes out as a plain line every ``interval``
seconds and once at the end. Messages (``write``) go above the bar without breaking it.
"""

from __future__ import annotations

import math
import os
import sys
import time

from tqdm import tqdm

# Whether stderr is a terminal, where ``python -m bench`` has put a pipe in
# front of it (bench.config.filter_native_noise); None: no pipe, ask stderr.
STDERR_IS_TERMINAL: bool | None = None


def duration(seconds: float) -> str:
    """The suite's one way to write a duration: 3 s, 2 min 5 s, 1 h 2 min (progress, bench reproduce's stamps and
    the documents' quotes of them)."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


# An ETA extrapolates a rate to the rest of the work, so none is shown until that rate rests on enough: ETA_MIN_SECONDS
# of work timed from the first update on (what came before it, such as opening a file, sorting or a compilation, counted
# nothing) and ETA_MIN_FRACTION of the total done since. A first line timed over one update and a setup of 20 s would
# otherwise promise hours for a stage of seconds. Once the work is done, its ETA (0s) is no extrapolation and is shown.
ETA_MIN_SECONDS = 5.0
ETA_MIN_FRACTION = 0.01


class Progress:
    """``total`` units of work (steps, pairs, measurements), done a few at a time: ``update(n, status)``. The ETA of the
    plain lines uses the rate since the previous line only, so one slow stretch (a compilation) does not distort it for
    long; the bar's, the rate since the first update."""

    def __init__(self, label: str, total: int | None, *, unit: str = "it", stream=None, enabled: bool = True,
                 interval: float = 15.0, delay: float | None = None):
        self.label = label
        self.total = total  # None: not known in advance (rows of a file being read)
        self.unit = unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.tty = enabled and (bool(STDERR_IS_TERMINAL) if self.stream is sys.stderr and STDERR_IS_TERMINAL
                                is not None else hasattr(self.stream, "isatty") and self.stream.isatty())
        self.interval = interval
        # delay (plain lines only): the first line once this many seconds have passed, then every interval, and a last
        # one at the end only if an earlier one went out; work done sooner says nothing.
        self.delay = delay
        self._lines = 0
        self._start = time.perf_counter()
        self._first: tuple[float, int] | None = None  # (time, count) at the first update: where rates start
        self._bar = None
        if self.tty:
            # A terminal that reports no size (some pseudo-terminals) would get no bar at all: tqdm asks the
            # terminal itself, not $COLUMNS (which pytest-xdist sets, for one), so this asks it too.
            try:
                sized = os.get_terminal_size(self.stream.fileno()).columns > 0
            except (AttributeError, OSError, ValueError):
                sized = False
            self._bar = _Bar(total=total, desc=f"[{label}]", unit=f" {unit}", file=self.stream, leave=False,
                             smoothing=0.1, dynamic_ncols=sized, ncols=None if sized else 100,
                             nrows=None if sized else 24, bar_format=None if total is None else _BAR_FORMAT)
        self._last_line = time.perf_counter()
        self._last_done = 0

    def update(self, n: int = 1, status: str = "") -> None:
        self.done += n
        now = time.perf_counter()
        if self._first is None:
            self._first = (now, self.done)
        if self._bar is not None:
            if status:
                self._bar.set_postfix_str(status, refresh=False)
            eta = self.eta(now, since=self._first)
            self._bar.eta = "" if eta is None else "<" + self._bar.format_interval(eta)
            self._bar.update(n)
            return
        if not self.enabled:
            return
        finished = self.total is not None and self.done >= self.total
        if self.delay is not None and self._lines == 0:
            due = now - self._start >= self.delay
        else:
            due = now - self._last_line >= self.interval or finished
        if due:
            self._line(now, status)

    def _line(self, now: float, status: str = "", end: bool = False) -> None:
        """One plain line: the count, the rate since the previous line (at the end: overall), and the ETA."""
        since = self._start if end else self._last_line
        rate = (self.done - (0 if end else self._last_done)) / max(now - since, 1e-9)
        count = f"{self.done:,}" + (f"/{self.total:,}" if self.total is not None else "")
        text = f"[{self.label}] {self.unit} {count}" + (f" {status}" if status else "")
        if self.delay is not None:
            text += f", {rate:,.0f} {self.unit}/s"
        if end:
            text += f", done in {duration(now - self._start)}"
        else:
            eta = self.eta(now, since=(self._last_line, self._last_done))
            if eta is not None:
                text += f" ETA {duration(eta)}"
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_line, self._last_done = now, self.done
        self._lines += 1

    def eta(self, now: float, since: tuple[float, int]) -> float | None:
        """Seconds left at the rate since ``since`` (time, count), never from before the first update; None where the
        total is unknown, and until the rate rests on enough (ETA_MIN_SECONDS, ETA_MIN_FRACTION)."""
        if self.total is None:
            return None
        if self.done >= self.total:
            return 0.0
        if self._first is None:
            return None
        first_time, first_done = self._first
        if now - first_time < ETA_MIN_SECONDS or self.done - first_done < ETA_MIN_FRACTION * self.total:
            return None
        start, start_done = max(since, self._first)
        if self.done <= start_done or now <= start:
            return None
        return (self.total - self.done) * (now - start) / (self.done - start_done)

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
        elif self.enabled and self.delay is not None and self._lines and self._last_done != self.done:
            self._line(time.perf_counter(), end=True)  # how it ended, for lines that said how it went

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The bar tqdm draws by default, with the ETA of ``Progress.eta`` where tqdm puts its own.
_BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{eta}, {rate_fmt}{postfix}]"


class _Bar(tqdm):
    eta = ""  # "<02:05" (tqdm's own clock), or nothing until Progress.eta gives one

    @property
    def format_dict(self):
        return {**super().format_dict, "eta": self.eta}


STAGE_DELAY_S = 2.0  # loading stages quicker than this say nothing (off a terminal)
STAGE_INTERVAL_S = 5.0


def stage(label: str, total: int | None = None, *, unit: str = "rows", enabled: bool = True, stream=None) -> Progress:
    """Progress of one loading stage (reading rows, the vocabulary, GloVe, batching, statistics): a bar on a terminal;
    elsewhere plain lines, the first after STAGE_DELAY_S, then every STAGE_INTERVAL_S, so a small file says nothing."""
    return Progress(label, total, unit=unit, stream=stream, enabled=enabled, interval=STAGE_INTERVAL_S,
                    delay=STAGE_DELAY_S)
