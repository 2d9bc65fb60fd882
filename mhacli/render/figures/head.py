"""``head-i``: one head's weights A^i, built once per run and updated for each head."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.core.narrate import head_caption
from mhacli.render import theme
from mhacli.render.labels import weights_note
from mhacli.render.figures.heatmap import colour_bar, heatmap, shown_mask
from mhacli.render.figures.layout import (INSET, PT, Pen, Slide, clamp, finish, label_inches, ordinal,
                                          readable_points, settle, sup_index, wrap)

from mhacli.render.figures.inline import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.core.analysis import Analysis
    from mhacli.pipeline import Window
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
    bar and texts are made and placed once; :meth:`show` swaps in another head's
    weights, frame colour and title.
    """

    TITLE, NOTE, SUB, AXIS, CAPTION = 16.0, 12.0, 12.0, 12.0, 10.5

    def __init__(self, trace: Shown, window: Window, pen: Pen, hide_rules: bool = False) -> None:
        view, analysis = window.view, window.analysis
        self.trace, self.view, self.pen = trace, view, pen
        n = view.n
        cell, tick, value, step = head_sizes(n)
        self.step = step
        labels = [pen.shown(t) for t in trace.tokens[view.rows]]
        label_w = label_inches(labels[::step], tick)
        rotate = label_w > cell * step - 4 * PT
        matrix = n * cell
        bar = 1.3  # the colour bar, its ticks and its label
        width = max(2 * INSET + (self.AXIS * 1.5 + 7) * PT + label_w + matrix + bar, 6.0)
        body = (self.AXIS * 1.5 + 7) * PT + (label_w if rotate else tick * 1.4 * PT) + matrix + 0.1
        inner = width - 2 * INSET
        self.subtitles = [wrap(describe_head(analysis, i, hide_rules), inner, self.SUB)
                          for i in range(trace.num_heads)]
        if view.windowed:  # what the window hides, per head: the rows shown, the keys cut off
            self.subtitles = [wrap(f"{s}\n{analysis.heads[i].outside_window:.0%} of the shown rows' attention "
                                   "falls on keys outside the window", inner, self.SUB)
                              for i, s in enumerate(self.subtitles)]

        fig = new_figure(figsize=(width, body), layout="compressed")
        self.fig = fig
        ax = fig.add_subplot()
        self.map = heatmap(ax, np.asarray(trace.weights[0])[view.rows, view.rows], labels, labels,
                           mask=shown_mask(analysis, view), color=theme.head_color(0), tick_size=tick,
                           value_size=value, label_step=step, rotate_x=rotate, frame_width=4.0)
        ax.set_xlabel("key (the token looked at) →", fontsize=self.AXIS, labelpad=6)
        ax.xaxis.set_label_position("top")
        ax.set_ylabel("← query (the token looking)", fontsize=self.AXIS, labelpad=6)
        self.x_title, self.y_title = ax.xaxis.label, ax.yaxis.label
        self.colour_bar = colour_bar(fig, ax, shrink=min(1.0, 4.5 / matrix) if matrix > 4.5 else 1.0)
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
        caption = slide.stack([(wrap(" ".join(self._captions()), inner, self.CAPTION),
                                {"fontsize": self.CAPTION, "color": "#444444", "linespacing": 1.15})], from_bottom=True)
        size = finish(fig, width, body, slide, header, caption)
        least = readable_points(*size)
        if tick < least:  # shown fitted to a 1080p screen, the labels must stay LABEL_PX tall
            ax.tick_params(labelsize=least * 1.02)
        settle(fig)  # every head has the same tokens, labels and colour bar: one layout serves them all
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
