"""``heads``: every head on one scale, with the average over heads that PyTorch returns by default."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mhacli.render import theme
from mhacli.render.labels import pattern_words, weights_note, window_note
from mhacli.render.figures.heatmap import BAR_LABEL, BAR_TICK_LABELS, colour_bar, row_tops, shown_mask
from mhacli.render.figures.heatmap import panel as panel_at
from mhacli.render.figures.inline import new_figure
from mhacli.render.figures.layout import (BAR_WIDTH, INSET, PT, Measured, Pen, Slide, axes_at, bar_room, clamp, cut,
                                          label_inches, ordinal, readable_points, wrap)
from mhacli.render.figures.view import View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.measures.analysis import Analysis
    from mhacli.pipeline import Window
    from mhacli.render.labels import Shown

GAP = 0.3  # inches between panels
# A head's name whole: a report card's longest title ('partly place adj → place (74% trained)') is 38 characters.
NAME_CHARS = 40


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


def short_head(analysis: Analysis, i: int, pen: Pen, hide_rules: bool = False) -> str:
    """A few words for a small panel title: the rule, or the relation the head's per-query top key follows."""
    return pen.shown(pattern_words(analysis, i, hide_rules), NAME_CHARS)


def sentence(trace: Shown, view: View, pen: Pen, width_in: float, size: float) -> str:
    """The shown tokens as a quoted sentence on one line, cut with … when it does not fit (or is windowed)."""
    words = [pen.shown(t, 16) for t in trace.tokens[view.rows]]
    text = cut(words, width_in - 0.3, size)
    if view.windowed and not text.endswith("…"):
        text += " …"
    return f"“{text}”"


def build_heads(trace: Shown, window: Window, pen: Pen, hide_rules: bool = False) -> Figure:
    """All heads of a run or a view on one scale, with the average over heads beside them (``heads.png``)."""
    view, analysis = window.view, window.analysis
    h, n = trace.num_heads, view.n
    count = h + 1 if h > 1 else 1  # one head is its own average
    cols, rows = grid_shape(count)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]

    # Panel size: fill a 13.3 × 7.5 in slide, but never so small that the tokens cannot be read.
    est_label = min(label_inches(labels, 10.0), 1.4)
    fit_w = (13.3 - 0.6 - est_label - 1.3 - (cols - 1) * GAP) / cols
    fit_h = (7.5 - 1.6 - est_label - rows * 0.5 - (rows - 1) * GAP) / rows
    panel = max(min(fit_w, fit_h), min(n * 0.16, 3.2), 1.4)
    texts = _texts(trace, view, pen, analysis, hide_rules, count > 1)
    least = 7.0
    for _ in range(4):  # bigger labels make a bigger figure, shown smaller: settle the size by arithmetic
        sizes = Sizes.of(n, labels, panel, cols, rows, least)
        shown = readable_points(sizes.width, sizes.body + texts.about(sizes.width - 2 * INSET))
        if sizes.tick >= shown - 1e-9:
            break
        least = shown * 1.02
    return _draw(trace, view, pen, analysis, hide_rules, labels, panel, cols, rows, sizes, texts)


@dataclass(frozen=True)
class Sizes:
    """The sizes of a heads figure with panels of ``panel`` inches and labels of at least ``least`` points."""

    tick: float  # token label size, points
    step: int  # every step-th token labelled
    value: float  # cell number size, points (0: none)
    label_w: float  # inches of the longest label
    rotate: bool  # key labels turned upright
    width: float  # the figure's width, inches
    body: float  # the inches the panels and their labels need

    @classmethod
    def of(cls, n: int, labels: list[str], panel: float, cols: int, rows: int, least: float) -> Sizes:
        tick, step, value = grid_sizes(n, panel, least)
        label_w = label_inches(labels[::step], tick)
        rotate = label_w > panel / n * step - 3 * PT
        x_labels = label_w if rotate else tick * 1.4 * PT
        title_h = (12.0 + 10.0) * 1.3 * PT + 0.1
        width = max(2 * INSET + 0.35 + label_w + cols * panel + (cols - 1) * GAP + 1.3, 8.0)
        body = 0.3 + x_labels + rows * (title_h + panel) + (rows - 1) * GAP
        return cls(tick, step, value, label_w, rotate, width, body)


@dataclass(frozen=True)
class Texts:
    """What a heads figure says above and below its panels, before it is wrapped to the figure's width."""

    title: str
    weights: str
    window: str
    notes: list[str]

    def about(self, inner: float) -> float:
        """About how many inches the texts take, wrapped to ``inner`` inches: to size the labels before drawing."""
        lines = [(1, 16.0, 1.0), (wrap(self.weights, inner, 12.0).count("\n") + 1, 12.0, 1.15), (1, 12.0, 1.0),
                 (1 if self.window else 0, 11.0, 1.0), (1, 12.0, 1.0),
                 (wrap(" ".join(self.notes), inner, 10.5).count("\n") + 1, 10.5, 1.15)]
        return sum(k * size * 1.2 * spacing * PT for k, size, spacing in lines) + 0.3 + 2 * INSET


def _texts(trace: Shown, view: View, pen: Pen, analysis: Analysis, hide_rules: bool, several: bool) -> Texts:
    """The heads figure's title, weights line, window note and notes (the label step's note is added when drawn)."""
    h = trace.num_heads
    notes = [
        "Last panel: the mean over heads, which is what PyTorch's nn.MultiheadAttention returns "
        "unless average_attn_weights=False." if several else
        "With one head, the head is its own average: what PyTorch's nn.MultiheadAttention "
        "returns either way.",
    ]
    if trace.causal:
        notes.append("Grey hatched cells are masked (causal): a token never looks at later tokens.")
    outside = window_note(analysis)
    if outside:
        notes.append(outside)
    return Texts(f"{h} head{'s' if h != 1 else ''} on one scale: each row is a query, each column a key",
                 weights_note(trace, hide_rules, analysis), view.note() if view.windowed else "", notes)


_GAP_X = 0.14  # inches between two panels side by side (their frames straddle the edges)
_GAP_Y = 0.16  # inches between a panel and the titles of the panel below it
_TITLE_PAD = 4.0  # points between a panel's title and its key labels (or its frame)
_AXIS_PAD = 6.0  # points between the token labels and the axis label
_BAR_GAP = 0.25  # inches between the grid and the colour bar
_SPACE = 0.15  # inches between the texts above and below and the panels


def _draw(trace: Shown, view: View, pen: Pen, analysis: Analysis, hide_rules: bool, labels: list[str],
          panel: float, cols: int, rows: int, sizes: Sizes, texts: Texts) -> Figure:
    """The heads figure at ``sizes``, drawn once, every Axes and text at a rectangle computed from measurements."""
    h, n = trace.num_heads, view.n
    count = h + 1 if h > 1 else 1
    tick, step, value = sizes.tick, sizes.step, sizes.value
    picked = labels[::step]
    frame_w = panel_frame(n)
    tick_pad = (frame_w / 2 + 3) * PT  # the heatmap's label pad: half the frame, and 3 points

    weights = np.asarray(trace.weights)[:, view.rows, view.rows]  # (h, n, n)
    average = np.asarray(analysis.average)[view.rows, view.rows]  # (n, n): what PyTorch returns by default
    names = ([f"Head {i + 1}" for i in range(h)] + [f"Average of the {h} heads"])[:count]
    groups = getattr(trace, "kv_heads", h)  # key/value groups: the heads of one group read the same K^j, V^j
    shared = [f"group {i // (h // groups) + 1} · " if groups != h else "" for i in range(h)]
    details = ([shared[i] + short_head(analysis, i, pen, hide_rules) for i in range(h)]
               + ["what PyTorch returns by default"])[:count]
    fig = new_figure(figsize=(sizes.width, sizes.body))
    m = Measured(fig)
    keys, queries = "key (the token looked at) →", "← query (the token looking)"
    axis_h = m.tallest([queries], 12.0)  # on its side: its height is its width
    keys_above = m.size(keys, 12.0)[0] <= panel  # above the first panel when it fits there, else said under the title
    name_h, detail_h = m.tallest(names, 12.0), m.tallest(details, 10.0)
    title_h = name_h + detail_h + _TITLE_PAD * PT
    bar = _BAR_GAP + bar_room(m, BAR_TICK_LABELS, BAR_LABEL, 11.0)
    # The panels fill the width and body the sizes were chosen for, the labels keeping their size.
    label_w, label_h = m.widest(picked, tick), m.tallest(picked, tick)
    fill_w = (sizes.width - 2 * INSET - axis_h - _AXIS_PAD * PT - label_w - tick_pad - bar) / cols - _GAP_X
    fill_h = (sizes.body - title_h - (axis_h + _AXIS_PAD * PT if keys_above else 0.0) - label_h - tick_pad
              - (rows - 1) * (_GAP_Y + title_h)) / rows
    panel = max(panel, min(fill_w, fill_h))
    pitch = max(panel, m.widest(names, 12.0), m.widest(details, 10.0)) + _GAP_X  # titles never run into the next
    grid_w = (cols - 1) * pitch + max(panel, m.widest(names[cols - 1::cols], 12.0),
                                      m.widest(details[cols - 1::cols], 10.0))

    def frame(tick: float) -> tuple[float, float, bool]:
        """The grid's left edge and the room above its first panels (inches), and whether the keys stand upright."""
        label_w, label_h = m.widest(picked, tick), m.tallest(picked, tick)
        rotate = label_w > panel / n * step - 3 * PT
        left = axis_h + _AXIS_PAD * PT + label_w + tick_pad
        top = (title_h + (axis_h + _AXIS_PAD * PT if keys_above else 0.0)
               + (label_w if rotate else label_h) + tick_pad)
        return left, top, rotate

    left, top, rotate = frame(tick)
    grid_h = top + rows * panel + (rows - 1) * (_GAP_Y + title_h)
    width = max(2 * INSET + left + grid_w + bar, 8.0)
    inner = width - 2 * INSET

    notes = list(texts.notes)
    if step > 1:
        notes.insert(2 if trace.causal else 1, f"Labels show every {ordinal(step)} token.")
    slide = Slide(fig)
    slide.stack([
        (texts.title, {"fontsize": 16.0, "fontweight": "bold"}),
        (wrap(texts.weights, inner, 12.0), {"fontsize": 12.0, "fontstyle": "italic", "linespacing": 1.15}),
        (sentence(trace, view, pen, inner, 12.0), {"fontsize": 12.0}),
        (texts.window, {"fontsize": 11.0, "color": theme.HATCH_COLOR}),
        (f"{keys} along the top; ← queries (the tokens looking) down the side" if not keys_above else "",
         {"fontsize": 12.0}),
    ])
    slide.stack([(wrap(" ".join(notes), inner, 10.5), {"fontsize": 10.5, "color": "#444444", "linespacing": 1.15})],
                from_bottom=True)
    above, below = slide.depth + _SPACE, slide.rise + _SPACE
    height = above + grid_h + below
    least = readable_points(max(width, slide.right + INSET), height)
    if tick < least:  # the texts took more room than foreseen: the labels grow, and the grid with them
        tick = least * 1.02
        left, top, rotate = frame(tick)
        grid_h = top + rows * panel + (rows - 1) * (_GAP_Y + title_h)
        width = max(width, 2 * INSET + left + grid_w + bar)
        height = above + grid_h + below

    x0 = max(INSET, (width - left - grid_w - bar) / 2) + left  # the first panel's left edge, centred as before
    y0 = above + top  # the first panel's top edge
    colors = ([theme.head_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:count]
    text_colors = ([theme.head_text_color(i) for i in range(h)] + [theme.AVERAGE_COLOR])[:count]
    corners = []
    for k in range(count):
        r, c = divmod(k, cols)
        x, y = x0 + c * pitch, y0 + r * (panel + _GAP_Y + title_h)
        corners.append((x, y))
        over = y - (top - title_h if r == 0 else 0.0) - _TITLE_PAD * PT  # the titles' bottom
        slide.text(details[k], x, over, fontsize=10.0, color="#444444", va="bottom")
        slide.text(names[k], x, over - detail_h, fontsize=12.0, fontweight="bold", color=text_colors[k],
                   va="bottom")
    if keys_above:
        slide.text(keys, x0 + panel / 2, above + title_h + axis_h, fontsize=12.0, ha="center", va="bottom")
    panels_h = rows * panel + (rows - 1) * (_GAP_Y + title_h)
    slide.text(queries, x0 - left + axis_h / 2, y0 + panel / 2, fontsize=12.0, ha="center", va="center",
               rotation=90)
    slide.hang(width, height)

    matrices = [weights[i] for i in range(h)] + [average]
    mask = shown_mask(analysis, view)
    # Every panel on one Axes over the grid, its data units inches from the grid's top-left corner.
    sheet = axes_at(fig, x0, y0, grid_w, panels_h)
    sheet.set_axis_off()
    sheet.set(xticks=[], yticks=[])  # no Axis drawn, and none to read either
    sheet.set_autoscale_on(False)
    sheet.set_xlim(0.0, grid_w)
    sheet.set_ylim(panels_h, 0.0)
    # The number a reader reads in a panel is each row's largest weight (the full grid is on head-N.png).
    tops = [row_tops(matrix) for matrix in matrices]
    for k, (x, y) in enumerate(corners):
        r, c = divmod(k, cols)
        panel_at(sheet, matrices[k], labels, labels, (x - x0, y - y0, panel), mask=mask, color=colors[k],
                 tick_size=tick, value_size=value, label_step=step, rotate_x=rotate, show_x=r == 0, show_y=c == 0,
                 frame_width=frame_w, numbered=tops[k])
    span = min(1.0, 4.5 / panels_h) * panels_h
    cax = axes_at(fig, x0 + grid_w + _BAR_GAP, y0 + (panels_h - span) / 2, BAR_WIDTH, span)
    colour_bar(fig, cax=cax)
    return fig
