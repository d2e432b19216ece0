"""Quoted values and how they are written: each kind of number has one way to look in the documents."""

from __future__ import annotations

import math
from dataclasses import dataclass


class QuoteError(ValueError):
    """A quote or block that cannot be rendered: unknown function, folder, record or key."""


# kind -> (default digits, writer(value, digits))
def _ratio(v, d):
    return f"{v:.{d}f}x"


def _seconds(v, d):
    return f"{v:,.{d}f} s"


def _ms(v, d):
    return f"{v * 1e3:,.{d}f} ms"


def _us(v, d):
    return f"{v * 1e6:,.{d}f} µs"


def _percent(v, d):  # a fraction written as a percentage
    return f"{100 * v:.{d}f} %"


def _number(v, d):
    return f"{v:,.{d}f}"


def _count(v, d):
    return f"{int(v):,}"


def _plain(v, d):
    return f"{int(v)}"


def _relative(v, d):  # a small relative difference: 1.5e-7, as the guides write it
    if v == 0:
        return "0"
    mantissa, exponent = f"{v:.{d}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _wall(v, d):
    minutes, seconds = divmod(int(round(v)), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def _gflops(v, d):
    return f"{v / 1e9:,.{d}f} GFLOP/s"


def _mib(v, d):
    return f"{v / 2**20:,.{d}f} MiB"


def _text(v, d):
    return str(v)


KINDS = {
    "ratio": (2, _ratio), "seconds": (2, _seconds), "ms": (1, _ms), "us": (0, _us), "percent": (1, _percent),
    "number": (1, _number), "count": (0, _count), "plain": (0, _plain), "relative": (1, _relative),
    "wall": (0, _wall), "gflops": (1, _gflops), "mib": (0, _mib), "text": (0, _text),
}


@dataclass(frozen=True)
class Value:
    """A quoted value: a number (or a pair of numbers, a range) and its kind."""

    value: object
    kind: str
    digits: int | None = None  # the function's own default precision, where it differs from its kind's
    separator: str = "-"  # between the two ends of a range

    def write(self, digits: int | None = None) -> str:
        if self.kind not in KINDS:
            raise QuoteError(f"unknown kind of value {self.kind!r}")
        default, writer = KINDS[self.kind]
        d = digits if digits is not None else self.digits if self.digits is not None else default
        if isinstance(self.value, tuple) and self.value[0] == self.value[1]:  # a range of one value
            return Value(self.value[0], self.kind, self.digits).write(digits)
        if isinstance(self.value, tuple):
            low, high = self.value
            if self.kind in ("ratio", "seconds", "ms", "us", "percent", "gflops", "mib"):  # the unit once, after the range
                unit = writer(high, d)
                number = unit.split(" ")[0].rstrip("x")
                suffix = unit[len(number):]
                return f"{_bare(low, self.kind, d)}{self.separator}{_bare(high, self.kind, d)}{suffix}"
            return f"{writer(low, d)}{self.separator}{writer(high, d)}"
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise QuoteError(f"the value is {self.value}")
        return writer(self.value, d)


def _bare(v, kind: str, d: int) -> str:
    scale = {"ms": 1e3, "us": 1e6, "percent": 100, "gflops": 1e-9, "mib": 2**-20}.get(kind, 1)
    return f"{v * scale:,.{d}f}"
