"""``single-vs-multi`` (``mha compare``): one head of size d beside h heads of size d/h, and two numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.render import theme
from mhacli.render.labels import weights_note
from mhacli.render.figures.heads import grid_sizes, panel_title, panels, sentence
from mhacli.render.figures.heatmap import colour_bar, heatmap, shown_mask
from mhacli.render.figures.inline import new_figure
from mhacli.render.figures.layout import INSET, PT, Pen, Slide, clamp, finish, label_inches, settle, wrap

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.core.compare import Comparison
    from mhacli.core.trace import Trace
    from mhacli.pipeline import Window


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
    title_h = 12.0 * 1.3 * PT + 0.06
    small = max((big - (rows - 1) * (0.3 + title_h)) / rows, 1.0)
    tick_s, step_s, value_s = grid_sizes(n, small)
    lw_big = label_inches(labels[::step_big], tick_big)
    lw_small = label_inches(labels[::step_s], tick_s)
    rot_big = lw_big > big / n * step_big - 3 * PT
    rot_small = lw_small > small / n * step_s - 3 * PT
    above = max(lw_big if rot_big else tick_big * 1.4 * PT, lw_small if rot_small else tick_s * 1.4 * PT)

    grid_w = cols * small + (cols - 1) * 0.3
    width = max(2 * INSET + lw_big + big + 0.5 + lw_small + grid_w + 1.3, 9.0)
    inner = width - 2 * INSET
    block_h = max(big, rows * small + (rows - 1) * (0.3 + title_h)) + title_h + above + 0.2
    one_name = "1 head alone" if cmp.apart is not None else "1 head"
    names = [f"{one_name} (d={trace.d_model})"] + [f"head {i + 1} (d/h={trace.d_k})" for i in range(h)]
    chart_h = 0.32 * (h + 1) + 0.2 + (13.0 + 11.0) * 1.4 * PT + 0.3
    body = block_h + 0.3 + chart_h

    fig = new_figure(figsize=(width, body), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(block_h, chart_h))
    grid = top.add_gridspec(1, 2, width_ratios=(big + lw_big, grid_w + lw_small))
    big_ax = top.add_subplot(grid[0, 0])
    small_grid = grid[0, 1].subgridspec(rows, cols)
    small_axes = [top.add_subplot(small_grid[k // cols, k % cols]) for k in range(h)]

    # The single head, large.
    heatmap(big_ax, np.asarray(single.weights[0])[view.rows, view.rows], labels, labels, mask=mask,
            color=theme.SINGLE_HEAD_COLOR, tick_size=tick_big, value_size=value_big, label_step=step_big,
            rotate_x=rot_big, frame_width=4.0)
    panel_title(big_ax, f"{one_name} (d = {trace.d_model})", "", theme.SINGLE_HEAD_COLOR)

    # The h heads, small, on the same scale.
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]
    panels(top, [weights[i] for i in range(h)], [f"Head {i + 1}" for i in range(h)], [""] * h,
           [theme.head_color(i) for i in range(h)], [theme.head_text_color(i) for i in range(h)], labels, mask,
           cols=cols, tick=tick_s, step=step_s, value=value_s, rotate=rot_small, grid=small_axes)
    colour_bar(top, small_axes, shrink=min(1.0, 4.5 / big))

    # How spread each head is: mean row entropy against the uniform maximum.
    chart = bottom.add_subplot()
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
    chart.tick_params(labelsize=10.0, length=3)
    for side in ("top", "right"):
        chart.spines[side].set_visible(False)
    chart.set_title("How spread is each magnifier? Mean row entropy in bits (lower = sharper)", loc="left",
                    fontsize=13.0, fontweight="bold", pad=8)

    apart = cmp.apart
    if apart is None:
        sub = (f"one head of size d = {trace.d_model} and {h} heads of size d/h = {trace.d_k}: same text, "
               "embedding, seed and weight matrices; one colour scale; rows are queries, columns keys")
    else:  # each model has its own trained embedding and weights: say what they share and what each reached
        size = (f"each with {apart.single_parameters:,} parameters"
                if apart.single_parameters == apart.heads_parameters else
                f"with {apart.single_parameters:,} and {apart.heads_parameters:,} parameters")
        sub = (f"one head of size d = {trace.d_model} trained alone, and {h} heads of size d/h = {trace.d_k} "
               f"trained together, on the same task ({apart.task}), {size}: held-out accuracy "
               f"{apart.single_accuracy:.1%} against {apart.heads_accuracy:.1%}; one colour scale; rows are "
               "queries, columns keys")
    slide = Slide(fig)
    header = slide.stack([
        (f"One magnifier against {h}", {"fontsize": 17.0, "fontweight": "bold"}),
        (wrap(weights_note(trace, hide_rules, cmp.analysis), inner, 12.0),
         {"fontsize": 12.0, "fontstyle": "italic", "linespacing": 1.15}),
        (wrap(sub, inner, 12.0), {"fontsize": 12.0, "color": "#444444", "linespacing": 1.15}),
        (sentence(trace, view, pen, inner, 12.0), {"fontsize": 12.0}),
        (view.note() if view.windowed else "", {"fontsize": 11.0, "color": theme.HATCH_COLOR}),
    ])
    # How different the heads are.
    notes = slide.stack([
        (f"How different are the {h} heads? Mean pairwise Jensen–Shannon divergence: {cmp.mean_pairwise_js:.3f} "
         "bits", {"fontsize": 13.0, "fontweight": "bold"}),
        (wrap("0 = the heads look at exactly the same places, 1 bit = they never look at the same token. "
              "Entropy: how spread a head's attention is, mean over queries; the dashed line is the uniform "
              "maximum (every visible key equal).", inner, 11.0),
         {"fontsize": 11.0, "color": "#444444", "linespacing": 1.15}),
    ], from_bottom=True)
    finish(fig, width, body, slide, header, notes)
    return settle(fig)
