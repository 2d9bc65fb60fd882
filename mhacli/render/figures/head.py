"""``head-i``: one head's weights A^i, built once per run and updated for each head."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.measures import narrate
from mhacli.measures.narrate import head_caption
from mhacli.render import theme
from mhacli.render.labels import weights_note
from mhacli.render.figures.heatmap import BAR_LABEL, BAR_TICK_LABELS, colour_bar, heatmap, shown_mask
from mhacli.render.figures.layout import (BAR_WIDTH, INSET, PT, Measured, Pen, Slide, axes_at, bar_room, clamp,
                                          ordinal, readable_points, sup_index, wrap)
from mhacli.render.figures.inline import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.measures.analysis import Analysis
    from mhacli.pipeline import Window
    from mhacli.render.labels import Shown

MAX_MATRIX_INCHES = 12.0  # beyond 60 tokens cells shrink instead: the image stays a sane size
_TICK_PAD = 5.0  # points between the matrix and its token labels: half the 4-point frame, and 3 more
_GAP = 0.2  # inches between the matrix and its colour bar
_SPACE = 0.15  # inches between the texts above and below and the matrix with its labels


def describe_head(analysis: Analysis, i: int, hide_rules: bool = False) -> str:
    """Two lines under a head's title: what its per-query top key follows (narrate's caption), then how spread."""
    s = analysis.heads[i]
    caption = head_caption(analysis, i, hide_rules, stand_alone=False)
    named = "" if hide_rules or analysis.reading is None or not analysis.rules else narrate.learned_title(
        analysis.rules[i])  # a grammar model's head: its card's name, as every surface says it
    said = f"named {narrate.measured_when(analysis)}: {named}; here, " if named else ""
    return (f"{said}{caption}\n{s.describe()}: mean row entropy {s.mean_entropy:.2f} of at most "
            f"{s.max_entropy:.2f} bits")


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
    """'Head 2 of 4 · weights A⁽²⁾, 6 × 6 (queries × keys)': the index in parentheses, as textbooks write
    superscript indices, since a bare A² reads as A squared."""
    return f"Head {i + 1} of {heads} · weights A{sup_index(i + 1)}, {n} × {n} (queries × keys)"


class HeadFigure:
    """The per-head heatmap, laid out once (every head has the same tokens); :meth:`show` swaps in a head."""

    TITLE, NOTE, SUB, AXIS, CAPTION = 16.0, 12.0, 12.0, 12.0, 10.5

    def __init__(self, trace: Shown, window: Window, pen: Pen, hide_rules: bool = False) -> None:
        view, analysis = window.view, window.analysis
        self.trace, self.view, self.pen = trace, view, pen
        n = view.n
        cell, tick, value, step = head_sizes(n)
        self.step = step
        labels = [pen.shown(t) for t in trace.tokens[view.rows]]
        picked = labels[::step]
        matrix = n * cell
        fig = new_figure(figsize=(6.0, 6.0))
        self.fig = fig
        m = Measured(fig)
        keys, queries = "key (the token looked at) →", "← query (the token looking)"
        axis_h = m.tallest([keys, queries], self.AXIS)  # the query label stands on its side: its height is its width
        bar = _GAP + bar_room(m, BAR_TICK_LABELS, BAR_LABEL, 11.0)

        def frame(tick: float) -> tuple[float, float, float, bool]:
            """The matrix's left and top edge (inches), the room under it, and whether the keys stand upright."""
            label_w, label_h = m.widest(picked, tick), m.tallest(picked, tick)
            rotate = label_w > cell * step - 4 * PT
            left = axis_h + (6.0 + _TICK_PAD) * PT + label_w
            top = axis_h + (6.0 + _TICK_PAD) * PT + (label_w if rotate else label_h)
            return left, top, left + matrix + bar, rotate

        left, top, content, rotate = frame(tick)
        width = max(2 * INSET + content, 6.0)
        inner = width - 2 * INSET
        self.subtitles = [wrap(describe_head(analysis, i, hide_rules), inner, self.SUB)
                          for i in range(trace.num_heads)]
        if view.windowed:  # what the window hides, per head: the rows shown, the keys cut off
            self.subtitles = [wrap(f"{s}\n{analysis.heads[i].outside_window:.0%} of the shown rows' attention "
                                   "falls on keys outside the window", inner, self.SUB)
                              for i, s in enumerate(self.subtitles)]
        longest = max(self.subtitles, key=lambda t: t.count("\n"))
        slide = Slide(fig)
        header = slide.stack([
            (head_title(0, trace.num_heads, trace.n_tokens), {"fontsize": self.TITLE, "fontweight": "bold"}),
            (wrap(weights_note(trace, hide_rules, analysis), inner, self.NOTE),
             {"fontsize": self.NOTE, "fontstyle": "italic", "linespacing": 1.15}),
            (longest, {"fontsize": self.SUB, "linespacing": 1.15}),
            (view.note() if view.windowed else "", {"fontsize": 11.0, "color": theme.HATCH_COLOR}),
        ])
        self.title, self.note, self.subtitle = header[0], header[1], header[2]
        slide.stack([(wrap(" ".join(self._captions()), inner, self.CAPTION),
                      {"fontsize": self.CAPTION, "color": "#444444", "linespacing": 1.15})], from_bottom=True)
        above, below = slide.depth + _SPACE, slide.rise + _SPACE
        height = above + top + matrix + below
        least = readable_points(max(width, slide.right + INSET), height)
        if tick < least:  # shown fitted to a 1080p screen, the labels must stay LABEL_PX tall
            tick = least * 1.02
            left, top, content, rotate = frame(tick)
            width = max(width, 2 * INSET + content)
            height = above + top + matrix + below
        # Centred across the figure as a layout engine would, the texts above and below flush left.
        x0 = max(INSET, (width - content) / 2) + left
        y0 = above + top
        self.x_title = slide.text(keys, x0 + matrix / 2, above + axis_h, fontsize=self.AXIS, ha="center",
                                  va="bottom")[0]
        self.y_title = slide.text(queries, x0 - left + axis_h / 2, y0 + matrix / 2, fontsize=self.AXIS,
                                  ha="center", va="center", rotation=90)[0]
        width, height = slide.hang(width, height)
        ax = axes_at(fig, x0, y0, matrix, matrix)
        self.map = heatmap(ax, np.asarray(trace.weights[0])[view.rows, view.rows], labels, labels,
                           mask=shown_mask(analysis, view), color=theme.head_color(0), tick_size=tick,
                           value_size=value, label_step=step, rotate_x=rotate, frame_width=4.0)
        span = min(1.0, 4.5 / matrix) * matrix if matrix > 4.5 else matrix
        cax = axes_at(fig, x0 + matrix + _GAP, y0 + (matrix - span) / 2, BAR_WIDTH, span)
        self.colour_bar = colour_bar(fig, cax=cax)
        # What show() changes, in the order a whole draw paints it: the cells, the mask's hatch over them, the
        # frame, the numbers, then the figure's title and subtitle. PNGs draw the rest once (inline.rgba).
        fig.moving = [a for a in (self.map.image, self.map.hatch, self.map.frame, *self.map.values, self.title,
                                  self.subtitle) if a is not None]
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
        self.subtitle.set_text(self.subtitles[i])
        self.head = i
        return self.fig
