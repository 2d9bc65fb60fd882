"""The figure options checked before any work (no matplotlib here); which tokens a figure shows is
:mod:`mhacli.measures.window`'s (``View``, a type the renderers read)."""

from __future__ import annotations

import numbers
from typing import Sequence

from mhacli.attention.errors import UsageError
from mhacli.attention.messages import literal
from mhacli.attention.tokenize import label
from mhacli.attention.numbers import whole_number
from mhacli.measures.window import View

FORMATS = ("png", "svg", "pdf")
DPI_MIN, DPI_MAX = 30, 600
#: Every figure's default dots per inch, on every surface (the command line, the API, notebooks). Each figure sizes
#: its texts to stay at least 10.5 px tall shown fitted to a 1080p screen, whatever the dpi; at 100 dpi the widest
#: (split.png, 16 in) is 1600 px, shown at 1920, and its smallest text, 9 pt, is 12.5 px in the file.
DPI = 100


def check_format(fmt: str) -> str:
    """The figure format, lower-cased; refuse anything but png, svg, pdf."""
    value = str(fmt).strip().lower().lstrip(".")
    if value not in FORMATS:
        raise UsageError(f"unknown figure format {fmt!r}; choose one of: {', '.join(FORMATS)}.")
    return value


def check_dpi(dpi: int) -> int:
    """Dots per inch for raster output, within a range that is readable and fits in memory."""
    if isinstance(dpi, bool) or not isinstance(dpi, numbers.Integral) or not DPI_MIN <= dpi <= DPI_MAX:
        got = repr(dpi).replace("{", "{{").replace("}", "}}")  # the value as typed, never read as a field
        raise UsageError(f"{{dpi:name}} must be a whole number from {DPI_MIN} to {DPI_MAX}, got {got}.", dpi=dpi)
    return int(dpi)  # np.int64(30) is 30, as everywhere a Python number is taken


def resolve_query(tokens: Sequence[str], query: int | str | None) -> int | None:
    """The query position chosen by ``--query``: a 0-based position, or a token's text (first match)."""
    if query is None:
        return None
    n = len(tokens)
    text = str(query).strip()
    number = whole_number(text)  # the one number rule: ASCII digits, bounded ('٣' is a token, not 3)
    if isinstance(query, int) or number is not None:
        pos = int(query) if isinstance(query, int) else int(number)  # type: ignore[arg-type]
        if not 0 <= pos < n:
            raise UsageError(f"{{query:name}} {pos} is outside the sentence; give a position from 0 to {n - 1} "
                             "or one of its tokens.", query=pos)
        return pos
    for wanted in (text, text.casefold()):
        for p, tok in enumerate(tokens):
            if (tok if wanted is text else tok.casefold()) == wanted:
                return p
    distinct = list(dict.fromkeys(label(t, 16) for t in tokens))
    shown = ", ".join(distinct[:12]) + (", …" if len(distinct) > 12 else "")
    raise UsageError(f"{{query:name}} {literal(repr(label(text, 24)))} is not a token of the text; give a position "
                     f"from 0 to {n - 1} or one of: {literal(shown)}.", query=text)

__all__ = ["DPI", "DPI_MAX", "DPI_MIN", "FORMATS", "View", "check_dpi", "check_format", "resolve_query"]
