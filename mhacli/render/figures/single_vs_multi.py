"""``single-vs-multi`` (``mha compare``): one head of size d beside h heads of size d/h, and two numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.render import theme
from mhacli.render.labels import weights_note
from mhacli.render.figures.heads import grid_sizes, panel_frame, sentence
from mhacli.render.figures.heatmap import BAR_LABEL, BAR_TICK_LABELS, colour_bar, heatmap, shown_mask
from mhacli.render.figures.inline import new_figure
from mhacli.render.figures.layout import (BAR_WIDTH, INSET, PT, TICK, Measured, Pen, Slide, axes_at, bar_room,
                                          clamp, wrap)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mhacli.measures.compare import Comparison
    from mhacli.attention.trace import Trace
    from mhacli.pipeline import Window


_BLOCK_GAP = 0.5  # inches between the big panel and the small heads' labels
_GAP_X = 0.14  # inches between two small panels side by side
_GAP_Y = 0.3  # inches between a small panel and the title of the one below
_TITLE_PAD = 4.0  # points between a panel's title and its key labels
_BAR_GAP = 0.25  # inches between the small heads and the colour bar
_CHART_GAP = 0.3  # inches between the panels and the chart's title
_CHART_PAD = 8.0  # points between the chart's title and the chart
_SPACE = 0.15  # inches between the texts above and below and the body


def build_compare(trace: Trace, single: Trace, cmp: Comparison, window: Window, pen: Pen,
                  hide_rules: bool = False) -> Figure:
    """One head of size d beside h heads of size d/h, and how spread and how different they are."""
    view = window.view
    h, n = trace.num_heads, view.n
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    mask = shown_mask(cmp.analysis or window.analysis, view)
    big = clamp(n * 0.42, 3.6, 6.0)
    tick_big, step_big, value_big = grid_sizes(n, big)
    cols = math.ceil(math.sqrt(h))
    rows = math.ceil(h / cols)
    fig = new_figure(figsize=(9.0, 9.0))  # sized below, once everything is measured
    m = Measured(fig)
    one_name = "1 head alone" if cmp.apart is not None else "1 head"
    big_title = f"{one_name} (d = {trace.d_model})"
    small_names = [f"Head {i + 1}" for i in range(h)]
    title_h = m.tallest([big_title, *small_names], 12.0) + _TITLE_PAD * PT
    small = max((big - (rows - 1) * (_GAP_Y + title_h)) / rows, 1.0)
    tick_s, step_s, value_s = grid_sizes(n, small)
    frame_s = panel_frame(n)
    pad_big, pad_s = (4.0 / 2 + 3) * PT, (frame_s / 2 + 3) * PT  # the heatmap's label pads: half its frame, 3 pt
    lw_big, lh_big = m.widest(labels[::step_big], tick_big), m.tallest(labels[::step_big], tick_big)
    lw_s, lh_s = m.widest(labels[::step_s], tick_s), m.tallest(labels[::step_s], tick_s)
    rot_big = lw_big > big / n * step_big - 3 * PT
    rot_small = lw_s > small / n * step_s - 3 * PT
    top = title_h + max((lw_big if rot_big else lh_big) + pad_big, (lw_s if rot_small else lh_s) + pad_s)
    pitch = max(small, m.widest(small_names, 12.0)) + _GAP_X
    grid_w = (cols - 1) * pitch + small
    grid_h = rows * small + (rows - 1) * (_GAP_Y + title_h)
    bar = _BAR_GAP + bar_room(m, BAR_TICK_LABELS, BAR_LABEL, 11.0)
    width = max(2 * INSET + lw_big + pad_big + big + _BLOCK_GAP + lw_s + pad_s + grid_w + bar, 9.0)
    inner = width - 2 * INSET

    names = [f"{one_name} (d={trace.d_model})"] + [f"head {i + 1} (d/h={trace.d_k})" for i in range(h)]
    chart_title = "How spread is each magnifier? Mean row entropy in bits (lower = sharper)"
    chart_left = m.widest(names, 10.5) + 2 * TICK * PT
    chart_h = 0.32 * (h + 1) + 0.2
    below_chart = m.tallest(["0.5"], 10.0) + 2 * TICK * PT + m.tallest(["bits"], 11.0) + TICK * PT

    slide = Slide(fig)
    header = slide.stack([
        (f"One magnifier against {h}", {"fontsize": 17.0, "fontweight": "bold"}),
        (wrap(weights_note(trace, hide_rules, cmp.analysis), inner, 12.0),
         {"fontsize": 12.0, "fontstyle": "italic", "linespacing": 1.15}),
        (wrap(_subtitle(trace, cmp), inner, 12.0), {"fontsize": 12.0, "color": "#444444", "linespacing": 1.15}),
        (sentence(trace, view, pen, inner, 12.0), {"fontsize": 12.0}),
        (view.note() if view.windowed else "", {"fontsize": 11.0, "color": theme.HATCH_COLOR}),
    ])
    # How different the heads are.
    slide.stack([
        (f"How different are the {h} heads? Mean pairwise Jensen–Shannon divergence: {cmp.mean_pairwise_js:.3f} "
         "bits" if h > 1 else "How different are the heads? With one head there is no pair: mean pairwise "
         f"Jensen–Shannon divergence {cmp.mean_pairwise_js:.3f} bits",
         {"fontsize": 13.0, "fontweight": "bold"}),
        (wrap("0 = the heads look at exactly the same places, 1 bit = they never look at the same token. "
              "Entropy: how spread a head's attention is, mean over queries; the dashed line is the uniform "
              "maximum (every visible key equal).", inner, 11.0),
         {"fontsize": 11.0, "color": "#444444", "linespacing": 1.15}),
    ], from_bottom=True)
    above = slide.depth + _SPACE if header else INSET
    y0 = above + top  # the panels' top edge
    chart_top = y0 + max(big, grid_h) + _CHART_GAP + m.tallest([chart_title], 13.0) + _CHART_PAD * PT
    height = chart_top + chart_h + below_chart + slide.rise + _SPACE

    x_big = INSET + lw_big + pad_big
    x_small = x_big + big + _BLOCK_GAP + lw_s + pad_s
    slide.text(big_title, x_big, y0 - top + title_h - _TITLE_PAD * PT, fontsize=12.0, fontweight="bold",
               color=theme.SINGLE_HEAD_COLOR, va="bottom")
    corners = []
    for k in range(h):
        r, c = divmod(k, cols)
        x, y = x_small + c * pitch, y0 + r * (small + _GAP_Y + title_h)
        corners.append((x, y))
        over = (y0 - top + title_h if r == 0 else y - 0.0) - _TITLE_PAD * PT
        slide.text(small_names[k], x, over, fontsize=12.0, fontweight="bold", color=theme.head_text_color(k),
                   va="bottom")
    width, height = slide.hang(width, height)

    # The single head, large.
    heatmap(axes_at(fig, x_big, y0, big, big), np.asarray(single.weights[0])[view.rows, view.rows], labels, labels,
            mask=mask, color=theme.SINGLE_HEAD_COLOR, tick_size=tick_big, value_size=value_big, label_step=step_big,
            rotate_x=rot_big, frame_width=4.0)
    # The h heads, small, on the same scale.
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]
    for k, (x, y) in enumerate(corners):
        r, c = divmod(k, cols)
        heatmap(axes_at(fig, x, y, small, small), weights[k], labels, labels, mask=mask, color=theme.head_color(k),
                tick_size=tick_s, value_size=value_s, label_step=step_s, rotate_x=rot_small, show_x=r == 0,
                show_y=c == 0, frame_width=frame_s)
    span = min(1.0, 4.5 / big) * grid_h
    colour_bar(fig, cax=axes_at(fig, x_small + grid_w + _BAR_GAP, y0 + (grid_h - span) / 2, BAR_WIDTH, span))

    # How spread each head is: mean row entropy against the uniform maximum.
    chart = axes_at(fig, INSET + chart_left, chart_top, width - 2 * INSET - chart_left, chart_h)
    _spread_chart(chart, cmp, names, h, chart_title)
    return fig


def _subtitle(trace: Trace, cmp: Comparison) -> str:
    """What the two models share, and what each reached when they were trained apart."""
    h, apart = trace.num_heads, cmp.apart
    if apart is None:
        return (f"one head of size d = {trace.d_model} and {h} heads of size d/h = {trace.d_k}: same text, "
                "embedding, seed and weight matrices; one colour scale; rows are queries, columns keys")
    # each model has its own trained embedding and weights: say what they share and what each reached
    size = (f"each with {apart.single_parameters:,} parameters"
            if apart.single_parameters == apart.heads_parameters else
            f"with {apart.single_parameters:,} and {apart.heads_parameters:,} parameters")
    return (f"one head of size d = {trace.d_model} trained alone, and {h} heads of size d/h = {trace.d_k} "
            f"trained together, on the same task ({apart.task}), {size}: held-out accuracy "
            f"{apart.single_accuracy:.1%} against {apart.heads_accuracy:.1%}; one colour scale; rows are "
            "queries, columns keys")


def _spread_chart(chart: Axes, cmp: Comparison, names: list[str], h: int, title: str) -> None:
    """Each magnifier's mean row entropy as a bar, the uniform maximum dashed."""
    spreads = [cmp.single, *cmp.heads]
    ys = np.arange(len(spreads))
    colors = [theme.SINGLE_HEAD_COLOR] + [theme.head_color(i) for i in range(h)]
    chart.barh(ys, [s.mean_entropy for s in spreads], color=colors, height=0.7)
    chart.axvline(cmp.single.max_entropy, color=theme.LABEL_COLOR, linestyle="--", linewidth=1.2)
    chart.set_yticks(ys, names, fontsize=10.5)
    for tick_label, c in zip(chart.get_yticklabels(), [theme.SINGLE_HEAD_COLOR] +
                             [theme.head_text_color(i) for i in range(h)]):
        tick_label.set_color(c)
    chart.set_ylim(len(spreads) - 0.5, -0.5)
    top_x = max(cmp.single.max_entropy, 1e-9) * 1.3
    chart.set_xlim(0, top_x)
    # Only ticks inside the limits: a tick label past the end would hang over the figure's edge.
    chart.set_xticks([v for v in chart.xaxis.get_major_locator().tick_values(0, top_x) if 0 <= v <= top_x])
    for yv, s in zip(ys, spreads):
        chart.text(s.mean_entropy + top_x * 0.01, float(yv), f"{s.mean_entropy:.2f}", va="center",
                   fontsize=10.0)
    chart.text(cmp.single.max_entropy + top_x * 0.01, len(spreads) - 0.5,
               f"uniform: {cmp.single.max_entropy:.2f}", va="bottom", fontsize=10.0)
    chart.set_xlabel("bits", fontsize=11.0)
    chart.tick_params(labelsize=10.0, length=TICK)
    for side in ("top", "right"):
        chart.spines[side].set_visible(False)
    chart.set_title(title, loc="left", fontsize=13.0, fontweight="bold", pad=_CHART_PAD, y=1.0)  # not moved at draw
