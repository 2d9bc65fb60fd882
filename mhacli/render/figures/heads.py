"""``heads``: every head on one scale, with the average over heads that PyTorch returns by default."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mhacli.render import theme
from mhacli.render.labels import measure, pattern_words, weights_note, window_note
from mhacli.render.figures.heatmap import Heatmap, bar_width, colour_bar, heatmap, trace_mask
from mhacli.render.figures.layout import (PT, Pen, Sheet, clamp, drawing, label_pad, line, ordinal, readable_points,
                                          sentence)
from mhacli.render.figures.view import View, token_view

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    from mhacli.core.analysis import Analysis
    from mhacli.render.labels import Shown

GAP = 0.3  # inches between panels


@dataclass
class Panels:
    """A grid of small heatmaps, one per weight matrix, and where it ended (inches)."""

    maps: list[Heatmap]
    titles: list[Text]
    bottom: float
    right: float


def grid_shape(panels: int) -> tuple[int, int]:
    """Columns and rows for a slide-shaped (16:9) grid."""
    cols = min(panels, math.ceil(math.sqrt(panels * 1.8)))
    return cols, math.ceil(panels / cols)


def panel_frame(n: int) -> float:
    return 3.0 if n <= 20 else 2.0


def grid_sizes(n: int, panel: float, least: float = 7.0) -> tuple[float, int, float]:
    """Tick label size (at least ``least`` points), label step and cell value size for an N-token panel."""
    cell_pt = panel / n / PT
    tick = max(clamp(cell_pt * 0.6, 7.0, 12.0), least)
    step = max(1, math.ceil(tick * 1.25 / cell_pt))
    value = min(11.0, cell_pt * 0.85 / 2.4) if cell_pt >= 22 else 0.0
    return tick, step, value if value >= 7 else 0.0


def panels(sheet: Sheet, matrices: list[np.ndarray], names: list[str], details: list[str],
           colors: list[str], text_colors: list[str], labels: list[str], mask: np.ndarray | None, *,
           left: float, top: float, panel: float, cols: int, tick: float, step: int, value: float,
           rotate: bool, label_w: float) -> Panels:
    """Lay out ``matrices`` as a grid of heatmaps at fixed places; tokens label the outer edges only."""
    n = len(labels)
    frame = panel_frame(n)
    above = (label_w if rotate else line(tick)) + label_pad(frame)  # room for the key labels
    title_h = line(12.0) + (line(10.0) if any(details) else 0.0) + 0.06
    maps, titles = [], []
    y = bottom = top
    for k, (m, name) in enumerate(zip(matrices, names)):
        r, c = divmod(k, cols)
        if c == 0 and r > 0:
            y = bottom + GAP
        row_top = y + title_h + (above if r == 0 else 0.0)
        x = left + c * (panel + GAP)
        maps.append(heatmap(sheet.axes(x, row_top, panel, panel), m, labels, labels, mask=mask,
                            color=colors[k], tick_size=tick, value_size=value, label_step=step,
                            rotate_x=rotate, show_x=r == 0, show_y=c == 0, frame_width=frame))
        titles.append(sheet.text(x, y, name, fontsize=12.0, fontweight="bold", color=text_colors[k]))
        if details[k]:
            sheet.text(x, y + line(12.0), details[k], fontsize=10.0, color="#444444")
        bottom = max(bottom, row_top + panel)
    right = left + cols * panel + (cols - 1) * GAP
    return Panels(maps, titles, bottom, right)


def short_head(analysis: Analysis, i: int, pen: Pen, hide_rules: bool = False) -> str:
    """A few words for a small panel title: the rule, or the relation the head's per-query top key follows."""
    return pen.shown(pattern_words(analysis, i, hide_rules), 26)


def heads_figure(trace: Shown, *, max_tokens: int = 40, query: int | None = None,
                 pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """All heads of a run or a view on one scale, with the average over heads beside them (``heads.png``)."""
    with drawing(pen) as p:
        return build_heads(trace, token_view(trace.n_tokens, max_tokens, query), p, hide_rules=hide_rules)


def build_heads(trace: Shown, view: View, pen: Pen, analysis: Analysis | None = None,
                hide_rules: bool = False) -> Figure:
    analysis = analysis or measure(trace)
    h, n = trace.num_heads, view.n
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]  # (h, n, n)
    average = weights.mean(axis=0)  # (h, n, n) -> (n, n): what PyTorch returns by default
    count = h + 1 if h > 1 else 1  # one head is its own average
    cols, rows = grid_shape(count)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]

    # Panel size: fill a 13.3 × 7.5 in slide, but never so small that the tokens cannot be read.
    bar = bar_width(pen, 11.0)
    est_label = min(pen.widest(labels, 10.0), 1.4)
    fit_w = (13.3 - 0.2 - line(12) - est_label - bar - (cols - 1) * GAP) / cols
    fit_h = (7.5 - 1.6 - est_label - rows * 0.5 - (rows - 1) * GAP) / rows
    panel = max(min(fit_w, fit_h), min(n * 0.16, 3.2), 1.4)
    least = 7.0
    for _ in range(3):  # bigger labels make a bigger figure, shown smaller: settle the size in a few rounds
        tick, step, value = grid_sizes(n, panel, least)
        label_w = pen.widest(labels[::step], tick)
        rotate = label_w > panel / n * step - 3 * PT

        details = ([short_head(analysis, i, pen, hide_rules) for i in range(h)]
                   + ["what PyTorch returns by default"])[:count]
        names = ([f"Head {i + 1}" for i in range(h)] + [f"Average of the {h} heads"])[:count]
        pad = label_pad(panel_frame(n))
        left = 0.2 + line(12.0) + 0.08 + label_w + pad
        grid_w = cols * panel + (cols - 1) * GAP
        width = max(left + grid_w + bar, 8.0)
        inner = width - 0.4
        notes = [
            "Last panel: the mean over heads, which is what PyTorch's nn.MultiheadAttention returns "
            "unless average_attn_weights=False." if h > 1 else
            "With one head, the head is its own average: what PyTorch's nn.MultiheadAttention "
            "returns either way.",
        ]
        if trace.causal:
            notes.append("Grey hatched cells are masked (causal): a token never looks at later tokens.")
        if step > 1:
            notes.append(f"Labels show every {ordinal(step)} token.")
        outside = window_note(analysis, np.asarray(trace.weights), view.start, view.stop)
        if outside:
            notes.append(outside)
        note_lines = pen.wrap(" ".join(notes), inner, 10.5)
        title = f"{h} head{'s' if h != 1 else ''} on one scale: each row is a query, each column a key"
        label_lines = pen.wrap(weights_note(trace, hide_rules), inner, 12.0)
        top = (0.2 + line(16.0) + len(label_lines) * line(12.0) + line(12.0) + (line(11.0) if view.windowed else 0.0)
               + 0.2)
        top_axis = top
        top += line(12.0) + 0.04
        title_h = line(12.0) + line(10.0) + 0.06
        x_label_h = label_w if rotate else line(tick)
        height = (top + rows * (title_h + panel) + (rows - 1) * GAP + x_label_h + pad + 0.25
                  + len(note_lines) * line(10.5) + 0.2)

        if tick >= readable_points(width, height) - 1e-9:
            break
        least = readable_points(width, height) * 1.02

    sheet = Sheet(width, height)
    x0 = left + (width - (left + grid_w + bar)) / 2
    sheet.text(0.2, 0.2, title, fontsize=16.0, fontweight="bold")
    y = 0.2 + line(16.0)
    sheet.text(0.2, y, "\n".join(label_lines), fontsize=12.0, fontstyle="italic", linespacing=1.15)
    y += len(label_lines) * line(12.0)
    sheet.text(0.2, y, sentence(trace, view, pen, inner, 12.0), fontsize=12.0)
    if view.windowed:
        sheet.text(0.2, y + line(12.0), view.note(), fontsize=11.0, color=theme.HATCH_COLOR)
    sheet.text(x0 + grid_w / 2, top_axis, "key (the token looked at) →", fontsize=12.0, ha="center")
    matrices = ([weights[i] for i in range(h)] + [average])[:count]
    colors = ([theme.head_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:count]
    text_colors = ([theme.head_text_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:count]
    grid = panels(sheet, matrices, names, details, colors, text_colors, labels, trace_mask(trace, view),
                  left=x0, top=top, panel=panel, cols=cols, tick=tick, step=step, value=value,
                  rotate=rotate, label_w=label_w)
    first_row_top = top + title_h + x_label_h + pad
    sheet.text(x0 - pad - label_w - 0.08, (first_row_top + grid.bottom) / 2,
               "← query (the token looking)", fontsize=12.0, rotation=90, va="center", ha="right")
    colour_bar(sheet, grid.right + 0.25, first_row_top, min(grid.bottom - first_row_top, 4.5))
    sheet.text(0.2, grid.bottom + 0.25, "\n".join(note_lines), fontsize=10.5, color="#444444",
               linespacing=1.15)
    return sheet.fig
