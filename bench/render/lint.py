"""Numbers that look measured but are typed: what ``bench render --check`` refuses in the prose.

A measured figure in the documents is a quote or sits in a render block; the
lint finds the ones that are neither. It reads the prose only: fenced code,
inline code, HTML comments, render blocks, quote links and the guides' links
to their ``explain`` blocks are left out, and so is a line marked
``<!-- not measured -->`` (a goal, a published figure, a setting). What
looks measured: a ratio (``2.5x``), a percentage, a duration (``3.2 s``,
``40 ms``, ``2 min 3 s``), a throughput (``pairs/s``, ``GFLOP/s``), an
amount of memory, and a number in scientific notation (``3.2e-7``).
"""

from __future__ import annotations

import re

ALLOW = "<!-- not measured -->"
_FENCE_RE = re.compile(r"^(```|~~~)")
_SKIP_RES = (
    re.compile(r"<!-- render: .*?<!-- /render -->", re.S),  # blocks, as a whole
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r'\[[^\]\n]*\]\([^)\n]*? "[^"\n]*"\)'),  # quotes and the guides' quoted figures
    re.compile(r"`[^`\n]*`"),
)
MEASURED_RE = re.compile(
    r"(?<![\w.-])(?:"
    r"\d+(?:[.,]\d+)*\s?(?:x|×)(?![\w])"  # 2.56x
    r"|\d+(?:[.,]\d+)*\s?%"  # 35.1 %
    r"|\d+(?:\.\d+)?\s?(?:s|ms|µs|us|min|h)(?![\w/])"  # 3.2 s, 40 ms
    r"|\d+(?:[.,]\d+)*\s?(?:pairs/s|sentences/s|GFLOP/s|TFLOP/s|FLOP/s|MiB|GiB|MB|GB|kB)"  # throughput, memory
    r"|\d(?:\.\d+)?e[-+]?\d+"  # 3.2e-7
    r")")


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every measured-looking number outside quotes, blocks and code."""
    lines, fenced = [], False
    for line in text.splitlines():  # fenced code first: its backticks are no inline code
        if _FENCE_RE.match(line.lstrip()):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    text = "\n".join(lines)
    for k, pattern in enumerate(_SKIP_RES):
        text = _keep_allow(pattern, text) if k == 1 else pattern.sub(_blank, text)
    found = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if ALLOW not in line:
            found += [(line_no, m.group(0)) for m in MEASURED_RE.finditer(line)]
    return found


def _keep_allow(pattern: re.Pattern, text: str) -> str:
    """HTML comments blanked, except the marker that allows a line."""
    return pattern.sub(lambda m: m.group(0) if m.group(0) == ALLOW else _blank(m), text)
