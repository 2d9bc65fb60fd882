"""``head-i``: one head's weights A^i, built once per run and updated for each head."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.core.analysis import outside_window
from mhacli.core.narrate import head_caption
from mhacli.render import theme
from mhacli.render.labels import measure, weights_note
from mhacli.render.figures.heatmap import bar_width, colour_bar, heatmap, trace_mask
from mhacli.render.figures.layout import PT, Pen, Sheet, clamp, drawing, label_pad, line, ordinal, sup_index
from mhacli.render.figures.view import View, token_view

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.core.analysis import Analysis
    from mhacli.render.labels import Shown

MAX_MATRIX_INCHES = 12.0  # beyond 60 tokens cells shrink instead: the image stays a sane size


def describe_head(analysis: Analysis, i: int, hide_rules: bool = False) -> str:
    """Two lines under a head's title: what its per-query top key follows (narrate's caption), then how spread.

    The caption leaves out the random-weights remark: the figure's weights line says it just above.
    """
    s = analysis.heads[i]
    caption = head_caption(analysis, i, hide_rules, stand_alone=False)
    return f"{caption}\n{s.describe()}: mean row entropy {s.mean_entropy:.2f} of at most {s.max_entropy:.2f} bits"


def head_sizes(n: int) -> tuple[float, float, float, int]:
    """Cell size (inches), tick label size, cell value size (points; 0 = none) and label step for N tokens."""
    cell = clamp(6.4 / n, 0.2, 0.8)
    cell = max(cell, 2.6 / n)  # one to three tokens still make a square you can read
    cell = min(cell, MAX_MATRIX_INCHES / n)
    tick = clamp(cell / PT * 0.55, 7.5, 14.0)
    step = max(1, math.ceil(tick * 1.25 * PT / cell))  # label every token up to 40, then thin
    value = min(13.0, cell / PT * 0.85 / 2.4) if n <= 14 else 0.0
    return cell, tick, value if value >= 8 else 0.0, step


def head_title(i: int, heads: int, n: int) -> str:
    """'Head 2 of 4 · weights A⁽²⁾, 6 × 6 (queries × keys)'.

    The article writes the head's index as a superscript (Wq¹ … Wqʰ); a bare A² reads as A squared,
    so the index stands in parentheses, as superscript indices do in textbooks.
    """
    return f"Head {i + 1} of {heads} · weights A{sup_index(i + 1)}, {n} × {n} (queries × keys)"


class HeadFigure:
    """The per-head heatmap, built once and updated for each head.

    Every head of a run has the same tokens, so the layout, tick labels, colour
    bar and texts are made once; :meth:`show` swaps in another head's weights,
    frame colour and title. Measured on the cat sentence at 150 dpi: the four
    head-i PNGs from one updated figure take 0.26 s, from four new figures 0.40 s
    (a new figure also lays out all of its text again on its first draw).
    """

    TITLE, NOTE, SUB, AXIS, CAPTION = 16.0, 12.0, 12.0, 12.0, 10.5

    def __init__(self, trace: Shown, view: View, pen: Pen, analysis: Analysis | None = None,
                 hide_rules: bool = False) -> None:
        self.trace, self.view, self.pen = trace, view, pen
        analysis = analysis or measure(trace)
        n = view.n
        cell, tick, value, step = head_sizes(n)
        self.step = step
        labels = [pen.shown(t) for t in trace.tokens[view.rows]]
        label_w = pen.widest(labels[::step], tick)
        rotate = label_w > cell * step - 4 * PT
        x_label_h = label_w if rotate else line(tick)
        matrix = n * cell
        self.subtitles = [describe_head(analysis, i, hide_rules) for i in range(trace.num_heads)]
        if view.windowed:  # what the window hides, per head: the rows shown, the keys cut off
            outside = outside_window(np.asarray(trace.weights), view.start, view.stop)  # (h,)
            self.subtitles = [f"{s}\n{outside[i]:.0%} of the shown rows' attention falls on keys outside the window"
                              for i, s in enumerate(self.subtitles)]

        pad = label_pad(4.0)
        left = 0.2 + line(self.AXIS) + 0.08 + label_w + pad
        right = bar_width(pen, 11.0)
        width = max(left + matrix + right, 6.0)
        inner = width - 0.4
        sub_lines = max(len(pen.wrap(s, inner, self.SUB)) for s in self.subtitles)
        note_lines = pen.wrap(weights_note(trace, hide_rules), inner, self.NOTE)
        caption_lines = pen.wrap(" ".join(self._captions()), inner, self.CAPTION)

        top = 0.2 + line(self.TITLE) + len(note_lines) * line(self.NOTE) + sub_lines * line(self.SUB)
        top += line(11.0) if view.windowed else 0.0
        top += 0.15 + line(self.AXIS) + 0.08 + x_label_h + pad
        height = top + matrix + 0.2 + len(caption_lines) * line(self.CAPTION) + 0.2
        height = max(height, top + max(matrix, 2.6) + 0.4)

        sheet = Sheet(width, height)
        self.sheet, self.fig = sheet, sheet.fig
        x0 = left + (width - (left + matrix + right)) / 2  # centre the block when the title is wider
        self.map = heatmap(sheet.axes(x0, top, matrix, matrix),
                           np.asarray(trace.weights[0])[view.rows, view.rows], labels, labels,
                           mask=trace_mask(trace, view), color=theme.head_color(0), tick_size=tick,
                           value_size=value, label_step=step, rotate_x=rotate, frame_width=4.0)
        self.colour_bar = colour_bar(sheet, x0 + matrix + 0.25, top, matrix)
        self.x_title = sheet.text(x0 + matrix / 2, top - pad - x_label_h - 0.08,
                                  "key (the token looked at) →", fontsize=self.AXIS, ha="center",
                                  va="bottom")
        self.y_title = sheet.text(x0 - pad - label_w - 0.08, top + matrix / 2,
                                  "← query (the token looking)", fontsize=self.AXIS, ha="right",
                                  va="center", rotation=90)
        self.title = sheet.text(0.2, 0.2, "", fontsize=self.TITLE, fontweight="bold")
        y = 0.2 + line(self.TITLE)
        self.note = sheet.text(0.2, y, "\n".join(note_lines), fontsize=self.NOTE, fontstyle="italic",
                               linespacing=1.15)
        y += len(note_lines) * line(self.NOTE)
        self.subtitle = sheet.text(0.2, y, "", fontsize=self.SUB, linespacing=1.15)
        if view.windowed:
            sheet.text(0.2, y + sub_lines * line(self.SUB), view.note(), fontsize=11.0, color=theme.HATCH_COLOR)
        sheet.text(0.2, top + matrix + 0.25, "\n".join(caption_lines), fontsize=self.CAPTION,
                   color="#444444", linespacing=1.15)
        self._inner = inner
        self.head = -1
        self.show(0)

    def _captions(self) -> list[str]:
        out = ["Each row is one query token: where it looks among the keys. "
               + ("Its weights sum to 1." if not self.view.windowed else
                  "Keys outside the window are not shown, so a row may sum to less than 1.")]
        if self.trace.causal:
            out.append("Grey hatched cells are masked (causal): a token may not look at later "
                       "tokens, so their weight is exactly 0.")
        if self.step > 1:
            out.append(f"Labels show every {ordinal(self.step)} token.")
        return out

    def show(self, i: int) -> Figure:
        """Update the figure to head ``i`` (0-based) and return it."""
        t, v = self.trace, self.view
        self.map.update(np.asarray(t.weights[i])[v.rows, v.rows], theme.head_color(i))
        self.title.set_text(head_title(i, t.num_heads, t.n_tokens))
        self.title.set_color(theme.head_text_color(i))
        self.subtitle.set_text("\n".join(self.pen.wrap(self.subtitles[i], self._inner, self.SUB)))
        self.head = i
        return self.fig


def head_figure(trace: Shown, head: int, *, max_tokens: int = 40, query: int | None = None,
                pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """The heatmap of one head (0-based) of a run or an attention view, as a Figure (``head-{head+1}.png``)."""
    with drawing(pen) as p:
        return HeadFigure(trace, token_view(trace.n_tokens, max_tokens, query), p,
                          hide_rules=hide_rules).show(head)
