"""Progress drawn by tqdm: its bar on a terminal; into a file or a pipe, the same counts as a plain line every
``interval`` seconds (tqdm's ``mininterval``) and once done. ``write`` puts messages above the bar.
"""

from __future__ import annotations

import math
import os
import sys
import time

from tqdm import tqdm


def duration(seconds: float) -> str:
    """The suite's one way to write a duration: 3 s, 2 min 5 s, 1 h 2 min."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


# No ETA until its rate rests on ETA_MIN_SECONDS of work timed from the first update on (setup counts nothing) and
# ETA_MIN_FRACTION of the total done since: a rate over one update would promise hours for a stage of seconds.
ETA_MIN_SECONDS = 5.0
ETA_MIN_FRACTION = 0.01

# tqdm's default bar, with ``Progress.eta`` for its ETA.
_BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{eta}, {rate_fmt}{postfix}]"


class Progress(tqdm):
    """``total`` units of work, done a few at a time: ``update(n, status)``. Plain lines' ETA uses the rate since the
    previous line (the bar's, since the first update). ``delay`` (plain lines): the first line after it, and a last one
    at the end only if an earlier one went out."""

    def __init__(self, label: str, total: int | None, *, unit: str = "it", stream=None, enabled: bool = True,
                 interval: float = 15.0, delay: float | None = None):
        stream = stream or sys.stderr
        self.label, self.interval, self.stage = label, interval, delay is not None
        self.plain = not stream.isatty()
        self._first: tuple[float, int] | None = None  # (time, count) at the first update: where rates start
        self._status = ""  # a plain line's: the update's own
        if self.plain:
            drawing = dict(mininterval=interval if delay is None else delay, miniters=0)
        else:
            # A terminal that reports no size would get no bar from tqdm (which asks it, not $COLUMNS): a fixed one.
            try:
                sized = os.get_terminal_size(stream.fileno()).columns > 0
            except (AttributeError, OSError, ValueError):
                sized = False
            drawing = dict(smoothing=0.1, dynamic_ncols=sized, ncols=None if sized else 100,
                           nrows=None if sized else 24, bar_format=None if total is None else _BAR_FORMAT)
        super().__init__(total=total, desc=f"[{label}]", unit=f" {unit}", file=stream, disable=not enabled,
                         leave=False, **drawing)
        if not self.disable:
            self._time = time.perf_counter  # monotonic, where tqdm's clock is the time of day
            self.start_t = self.last_print_t = self._time()

    def update(self, n: int = 1, status: str = "") -> None:
        if self.disable:
            return
        if self._first is None:
            self._first = (self._time(), self.n + n)
        if self.plain:
            self._status = status
        elif status:
            self.set_postfix_str(status, refresh=False)
        if not super().update(n) and self.plain and self.total is not None and self.n >= self.total \
                and (self.last_print_n or not self.stage):  # done: said at once (a stage once it has said anything)
            self.refresh()
            self.last_print_n, self.last_print_t = self.n, self._time()

    def display(self, msg=None, pos=None):
        if not self.plain:
            return super().display(msg, pos)
        if msg is None and self.n != self.last_print_n:  # a plain line where there is something new, never a bar
            self._line()
            self.mininterval = self.interval  # a stage's first line came after its delay
        return False

    def _line(self, end: bool = False) -> None:
        """One plain line: the count, the rate since the previous line (at the end: overall), and the ETA."""
        now, unit = self._time(), self.unit.strip()
        since = (self.start_t, 0) if end else (self.last_print_t, self.last_print_n)
        count = f"{self.n:,}" + (f"/{self.total:,}" if self.total is not None else "")
        text = f"[{self.label}] {unit} {count}" + (f" {self._status}" if self._status and not end else "")
        if self.stage:
            text += f", {(self.n - since[1]) / max(now - since[0], 1e-9):,.0f} {unit}/s"
        if end:
            text += f", done in {duration(now - self.start_t)}"
        elif (eta := self.eta(now, since)) is not None:
            text += f" ETA {duration(eta)}"
        self.fp.write(text + "\n")
        self.fp.flush()

    def eta(self, now: float, since: tuple[float, int]) -> float | None:
        """Seconds left at the rate since ``since`` and the first update; None until it rests on enough."""
        if self.total is not None and self.n >= self.total:
            return 0.0
        if self.total is None or self._first is None:
            return None
        (first_time, first_done), (start, start_done) = self._first, max(since, self._first)
        if now - first_time < ETA_MIN_SECONDS or self.n - first_done < ETA_MIN_FRACTION * self.total \
                or self.n <= start_done or now <= start:
            return None
        return (self.total - self.n) * (now - start) / (self.n - start_done)

    @property
    def format_dict(self):
        """tqdm's fields for the bar, its ETA ``Progress.eta``'s."""
        fields = super().format_dict
        eta = None if self.disable else self.eta(self._time(), since=self._first or (0.0, 0))
        return {**fields, "eta": "" if eta is None else "<" + self.format_interval(eta)}

    def status(self, text: str) -> None:
        """What is happening now (shown on the bar; plain lines wait for the next update)."""
        if not (self.disable or self.plain):
            self.set_postfix_str(text)

    def write(self, text: str) -> None:
        """A message line, above the bar."""
        if self.disable:
            return
        if self.plain:
            self.fp.write(f"[{self.label}] {text}\n")
            self.fp.flush()
        else:
            tqdm.write(f"[{self.label}] {text}", file=self.fp)

    def close(self) -> None:
        if self.plain and self.stage and not self.disable and 0 < self.last_print_n != self.n:
            self._line(end=True)  # how it ended, for lines that said how it went
        super().close()


STAGE_DELAY_S = 2.0  # loading stages quicker than this say nothing (off a terminal)
STAGE_INTERVAL_S = 5.0


def stage(label: str, total: int | None = None, *, unit: str = "rows", enabled: bool = True, stream=None) -> Progress:
    """One loading stage: off a terminal, the first line after STAGE_DELAY_S, then every STAGE_INTERVAL_S."""
    return Progress(label, total, unit=unit, stream=stream, enabled=enabled, interval=STAGE_INTERVAL_S,
                    delay=STAGE_DELAY_S)
