"""Each head's weights as a coloured grid in the terminal, and the ``mha compare`` table.

Cells hold the weight in percent on the figures' colour map, so terminal and PNGs read alike; without colour
(``NO_COLOR``, a pipe) the numbers alone carry everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from mhacli.render import theme
from mhacli.attention.tokenize import graphemes, label, labels
from mhacli.render.labels import pattern_words, weights_note

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis
    from mhacli.measures.window import View
    from mhacli.render.labels import Shown

CELL = 4  # cells are " 38" plus one space: room for "100"
ROW_LABEL = 8  # terminal cells for a query token's label
GAP = 3  # between grids placed side by side


def fit(text: str, cells: int) -> str:
    """``text`` cut (with …) or padded to exactly ``cells`` terminal cells; wide characters count 2."""
    if cell_len(text) <= cells:
        return text + " " * (cells - cell_len(text))
    out, used = "", 0
    for cluster in graphemes(text):
        w = cell_len(cluster)
        if used + w > cells - 1:
            break
        out += cluster
        used += w
    return out + "…" + " " * (cells - used - 1)


def grid_width(n_tokens: int) -> int:
    """Terminal cells one head's grid needs for ``n_tokens`` tokens."""
    return len(str(max(n_tokens - 1, 0))) + 1 + ROW_LABEL + 1 + n_tokens * CELL


def head_grid(weights: np.ndarray, tokens: Sequence[str], *, start: int = 0,
              mask: np.ndarray | None = None, query: int | None = None,
              title: Text | None = None, names: tuple[list[str], list[str]] | None = None) -> Text:
    """One weight matrix (n, n) as text: keys across the top, queries down the side, weights in %.

    ``names``: the tokens' column and row labels (:func:`grid_labels`), when several grids share them."""
    n = weights.shape[0]
    columns, rows = names or grid_labels(tokens)
    cells = theme.heat_cells(weights.tolist())  # (n, n) of (background, ink)
    pos_w = len(str(start + n - 1))
    lead = " " * (pos_w + 1 + ROW_LABEL + 1)
    out = Text()
    if title is not None:
        out.append_text(title)
        out.append("\n")
    out.append(lead)
    for j in range(n):
        out.append(" " + fit(columns[j], CELL - 1), style=theme.STYLE_DIM)
    out.append("\n" + lead)
    for j in range(n):
        out.append(f"{start + j:>{CELL}}", style=theme.STYLE_DIM)
    for r in range(n):
        is_query = query is not None and start + r == query
        out.append("\n")
        out.append(f"{start + r:>{pos_w}} ", style=theme.STYLE_DIM)
        out.append(fit(rows[r], ROW_LABEL), style="bold" if is_query else "")
        out.append("▶" if is_query else " ")
        for c in range(n):
            out.append(" ")
            if mask is not None and mask[r, c]:
                out.append("  ·", style=theme.STYLE_DIM)
                continue
            bg, ink = cells[r][c]
            out.append(f"{round(float(weights[r, c]) * 100):>3d}", style=Style(color=ink, bgcolor=bg))
    return out


def grid_labels(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """The tokens as a grid labels them: across the top (6 characters) and down the side (16)."""
    return labels(tokens, 6), labels(tokens, 16)


def legend() -> Text:
    """The colour scale and how to read a grid, in one line."""
    text = Text("0% ", style=theme.STYLE_DIM)
    ramp = "▁▂▃▄▅▆▇█"  # rises even where there is no colour (NO_COLOR, a pipe)
    shades = theme.heat_cells([[k / (len(ramp) - 1) for k in range(len(ramp))]])[0]
    for block, (color, _) in zip(ramp, shades):
        text.append(block, style=Style(color=color))
    text.append(" 100%", style=theme.STYLE_DIM)
    text.append("  row = query, column = key; rows sum to 100", style=theme.STYLE_DIM)
    return text


def fits(trace: Shown, width: int, max_tokens: int = 40) -> bool:
    """Whether one head's grid fits ``width`` terminal cells."""
    return grid_width(min(trace.n_tokens, max_tokens)) <= width


def head_grids(trace: Shown, analysis: Analysis, *, width: int, view: View, figures_at: str | None = None,
               title: str = "Each head's weights", single: bool = False, hide_rules: bool = False) -> RenderableType:
    """Every head of a run or a view as a coloured grid titled with its relation (or rule), side by side when
    they fit, else one line saying where; a line above says which weights made them."""
    heading = Text(title, style=theme.STYLE_TITLE)
    start, stop, n, query = view.start, view.stop, view.n, view.query
    if grid_width(n) > width:
        where = (f"the heatmaps are in {figures_at}" if figures_at else
                 "run without --no-plots to save them as figures")
        return Group(Text(weights_note(trace, hide_rules, analysis), style="italic"),
                     Text(f"The weight grids of {n} tokens need {grid_width(n)} columns and this terminal "
                          f"has {width}; {where} (or widen the terminal, or lower --max-tokens).",
                          style=theme.STYLE_DIM))
    mask = analysis.mask[start:stop, start:stop] if analysis.mask is not None else None
    tokens = trace.tokens[start:stop]
    names = grid_labels(tokens)  # every head's grid has the same labels
    grids = []
    for i in range(trace.num_heads):
        head_title = (Text("● 1 head", style=f"bold {theme.SINGLE_HEAD_COLOR}") if single
                      else Text(f"● head {i + 1}", style=theme.head_style(i)))
        words = pattern_words(analysis, i, hide_rules)
        room = grid_width(n) - cell_len(head_title.plain) - 2  # the title stays as wide as its grid
        head_title.append(f"  {fit(words, room).rstrip() if room > 1 else ''}", style=theme.STYLE_DIM)
        grids.append(head_grid(np.asarray(trace.weights[i])[start:stop, start:stop], tokens,
                               start=start, mask=mask, query=query, title=head_title, names=names))
    per_row = max(1, (width + GAP) // (grid_width(n) + GAP))
    layout = Table.grid(padding=(0, GAP, 0, 0))
    columns = min(per_row, len(grids))
    for _ in range(columns):
        layout.add_column()
    for k in range(0, len(grids), per_row):
        if k:
            layout.add_row(*([""] * columns))  # a blank line between rows of grids
        row = grids[k : k + per_row]
        layout.add_row(*row, *([""] * (columns - len(row))))
    note = Text(weights_note(trace, hide_rules, analysis), style="italic")
    parts: list[RenderableType] = [heading, note, layout, legend()]
    if stop - start < trace.n_tokens:
        parts.append(Text(f"Showing tokens {start}–{stop - 1} of {trace.n_tokens} (--max-tokens {n}).",
                          style=theme.STYLE_DIM))
    if query is not None:
        parts.append(Text(f"▶ marks the query “{label(trace.tokens[query], 16)}” (position {query}).",
                          style=theme.STYLE_DIM))
    return Group(*parts)
