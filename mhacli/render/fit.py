"""Layouts that never break a word, and the headings and notes every terminal view shares.

Rich folds a cell mid-word when the columns cannot all fit ("Querie" / "s" at 40 columns); :class:`Fitted` draws
the narrow form instead when the wide one does not fit, where text wraps only between words.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Iterable

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from mhacli.render import theme


def heading_text(text: str) -> Text:
    return Text(text, style=theme.STYLE_TITLE)


def aside(text: str | Text) -> RenderableType:
    """A dim explanatory line, indented and wrapped as a block."""
    return Padding(text if isinstance(text, Text) else Text(text, style=theme.STYLE_DIM), (0, 0, 0, 2))


def plural(n: int, word: str) -> str:
    """'1 token', '6 tokens'."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


_UNBOUNDED = 10_000  # render as if the console were endless: every word whole
_WORD = re.compile(r"\w+")


def _as_text(console: Console, cell: RenderableType) -> Text | None:
    """A cell as Text (a str is read as markup, as a table reads it); None for other renderables."""
    if isinstance(cell, Text):
        return cell.copy()
    if isinstance(cell, str):
        return console.render_str(cell)
    return None


def _shown(console: Console, options: ConsoleOptions, renderable: RenderableType) -> str:
    """What ``renderable`` shows at the width of ``options``, as plain text."""
    lines = console.render_lines(renderable, options.update(height=None), pad=False)
    return "\n".join("".join(segment.text for segment in line) for line in lines)


def _ink(text: str) -> Counter[str]:
    """Every character that carries content: no spaces, no box-drawing lines."""
    return Counter(ch for ch in text if not ch.isspace() and not "\u2500" <= ch <= "\u257f")


def breaks_words(console: Console, options: ConsoleOptions, renderable: RenderableType,
                 narrow: str | None = None) -> bool:
    """Whether ``renderable`` at this width splits a word or loses a character it shows on an endless line; only
    rendering tells (Rich may fold a column below its narrowest word, or cut a title with "…"). ``narrow``: what
    it shows at this width, when already rendered."""
    whole = _shown(console, options.update(width=_UNBOUNDED, max_width=_UNBOUNDED), renderable)
    narrow = _shown(console, options, renderable) if narrow is None else narrow
    return not set(_WORD.findall(narrow)) <= set(_WORD.findall(whole)) or _ink(narrow) != _ink(whole)


class Fitted:
    """``wide`` when it fits the console without folding a word, else ``narrow`` (built only when needed)."""

    def __init__(self, wide: RenderableType, narrow: Callable[[Console], RenderableType], need: int = 0) -> None:
        self.wide = wide
        self.narrow = narrow
        self.need = need  # a width the wide form needs beyond what its words show (a panel title)

    def _choice(self, console: Console, options: ConsoleOptions) -> RenderableType:
        if self.need > options.max_width or breaks_words(console, options, self.wide):
            return self.narrow(console)
        return self.wide

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.need > options.max_width:
            yield self.narrow(console)
            return
        drawn = list(console.render(self.wide, options))  # the wide form as it prints: checked, then printed
        lines = Segment.split_and_crop_lines(drawn, options.max_width, include_new_lines=False, pad=False)
        if breaks_words(console, options, self.wide, "\n".join("".join(s.text for s in line) for line in lines)):
            yield self.narrow(console)
        else:
            yield from drawn

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._choice(console, options))


def records(table: Table, console: Console, heading: Callable[[str], str] | None = None) -> RenderableType:
    """``table`` as one record per row: the first cell as a heading (``heading`` rewrites its text, e.g. into
    "N = 16" when that cell is a bare number), then 'column: value' lines that wrap."""
    columns = list(table.columns)
    cells = [list(c.cells) for c in columns]
    parts: list[RenderableType] = []
    if table.title:
        title = _as_text(console, table.title)
        parts.append(title if title is not None else table.title)
    for r in range(table.row_count):
        first = _as_text(console, cells[0][r]) if columns else None
        if first is not None and first.plain:
            parts.append(first if heading is None else Text(heading(first.plain), style=first.style))
        for c, column in enumerate(columns[1:], 1):
            cell = cells[c][r]
            value = _as_text(console, cell)
            if value is None:
                parts.append(Padding(cell, (0, 0, 0, 2)))
                continue
            if not value.plain.strip():
                continue
            header = _as_text(console, column.header) or Text("")
            # A header broken over lines for the table ("mult-\nadds", "GFLOP\n/s", "peak\nmemory") on one.
            name = re.sub(r"\n(?=/)|(?<=-)\n", "", header.plain).replace("\n", " ")
            line = Text.assemble((name + ": ", theme.STYLE_DIM), value) if name else value
            parts.append(Padding(line, (0, 0, 0, 2)))
    return Group(*parts)


def fitted_table(table: Table, heading: Callable[[str], str] | None = None) -> Fitted:
    """The table, or its records (each headed by ``heading``, see :func:`records`) when the console is too
    narrow for its columns."""
    return Fitted(table, lambda console: records(table, console, heading))


def titled_panel(body: Text, title: str, **panel: object) -> Fitted:
    """A rounded panel with ``title`` in its top border, or, when the title would be cut, as its first line."""
    def narrow(console: Console) -> RenderableType:
        inside = Text(title, style=theme.STYLE_TITLE)
        inside.append("\n")
        inside.append_text(body)
        return Panel(inside, box=box.ROUNDED, **panel)  # type: ignore[arg-type]

    wide = Panel(body, title=title, title_align="left", box=box.ROUNDED, **panel)  # type: ignore[arg-type]
    return Fitted(wide, narrow, need=cell_len(title) + 6)  # "╭─ " + title + " ─╮"


def fitted(parts: Iterable[RenderableType]) -> list[RenderableType]:
    """Every Table among ``parts`` wrapped by :func:`fitted_table` (other renderables as they are)."""
    return [fitted_table(p) if isinstance(p, Table) else p for p in parts]
