"""``single-vs-multi`` (``mha compare``): one head of size d beside h heads of size d/h, and two numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mhacli.render import theme
from mhacli.render.labels import weights_note
from mhacli.render.figures.heads import grid_sizes, panel_frame, panels
from mhacli.render.figures.heatmap import bar_width, colour_bar, heatmap, trace_mask
from mhacli.render.figures.layout import PT, Pen, Sheet, clamp, drawing, label_pad, line, sentence
from mhacli.render.figures.view import View, token_view

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.core.compare import Comparison
    from mhacli.core.trace import Trace


def compare_figure(trace: Trace, single: Trace, comparison: Comparison | None = None, *,
                   max_tokens: int = 40, pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """One head of size d beside h heads of size d/h, and how spread and how different they are."""
    from mhacli.core.compare import compare

    comparison = comparison or compare(trace, single)
    with drawing(pen) as p:
        return build_compare(trace, single, comparison,
                             token_view(trace.n_tokens, max_tokens, None), p, hide_rules=hide_rules)


def build_compare(trace: Trace, single: Trace, cmp: Comparison, view: View, pen: Pen,
                  hide_rules: bool = False) -> Figure:
    h, n = trace.num_heads, view.n
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    mask = trace_mask(trace, view)
    big = clamp(n * 0.42, 3.6, 6.0)
    tick_big, step_big, value_big = grid_sizes(n, big)
    cols = math.ceil(math.sqrt(h))
    rows = math.ceil(h / cols)
    title_h = line(12.0) + 0.06
    small = max((big - (rows - 1) * (0.3 + title_h)) / rows, 1.0)
    tick_s, step_s, value_s = grid_sizes(n, small)
    lw_big = pen.widest(labels[::step_big], tick_big)
    lw_small = pen.widest(labels[::step_s], tick_s)
    rot_big = lw_big > big / n * step_big - 3 * PT
    rot_small = lw_small > small / n * step_s - 3 * PT
    pad_big, pad_small = label_pad(4.0), label_pad(panel_frame(n))
    above_big = (lw_big if rot_big else line(tick_big)) + pad_big
    above_small = (lw_small if rot_small else line(tick_s)) + pad_small

    bar = bar_width(pen, 11.0)
    left = 0.25 + lw_big + pad_big
    heads_left = left + big + 0.5 + lw_small + pad_small
    grid_w = cols * small + (cols - 1) * 0.3
    width = max(heads_left + grid_w + bar, 9.0)
    inner = width - 0.5
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
    one_name = "1 head alone" if apart is not None else "1 head"
    sub_lines = pen.wrap(sub, inner, 12.0)
    label_lines = pen.wrap(weights_note(trace, hide_rules), inner, 12.0)
    top = 0.2 + line(17.0) + len(label_lines) * line(12.0) + len(sub_lines) * line(12.0) + line(12.0)
    top += (line(11.0) if view.windowed else 0.0) + 0.2
    block_top = top + title_h + max(above_big, above_small)
    block_h = max(big, rows * small + (rows - 1) * (0.3 + title_h))
    spread_head = block_top + block_h + 0.35
    chart_top = spread_head + line(13.0) + 0.15
    chart_h = 0.32 * (h + 1) + 0.2
    js_top = chart_top + chart_h + 0.65
    js_note = pen.wrap("0 = the heads look at exactly the same places, 1 bit = they never look at "
                       "the same token. Entropy: how spread a head's attention is, mean over queries; "
                       "the dashed line is the uniform maximum (every visible key equal).",
                       inner, 11.0)
    height = js_top + line(13.0) + len(js_note) * line(11.0) + 0.25

    sheet = Sheet(width, height)
    x_shift = (width - (heads_left + grid_w + bar)) / 2
    left += x_shift
    heads_left += x_shift
    sheet.text(0.25, 0.2, f"One magnifier against {h}", fontsize=17.0, fontweight="bold")
    y = 0.2 + line(17.0)
    sheet.text(0.25, y, "\n".join(label_lines), fontsize=12.0, fontstyle="italic", linespacing=1.15)
    y += len(label_lines) * line(12.0)
    sheet.text(0.25, y, "\n".join(sub_lines), fontsize=12.0, color="#444444", linespacing=1.15)
    y += len(sub_lines) * line(12.0)
    sheet.text(0.25, y, sentence(trace, view, pen, inner, 12.0), fontsize=12.0)
    if view.windowed:
        sheet.text(0.25, y + line(12.0), view.note(), fontsize=11.0, color=theme.HATCH_COLOR)

    # The single head, large.
    heatmap(sheet.axes(left, block_top, big, big), np.asarray(single.weights[0])[view.rows, view.rows],
                  labels, labels, mask=mask, color=theme.SINGLE_HEAD_COLOR,
                  tick_size=tick_big, value_size=value_big, label_step=step_big, rotate_x=rot_big,
                  frame_width=4.0)
    sheet.text(left, block_top - above_big - title_h, f"{one_name} (d = {trace.d_model})",
               fontsize=12.0, fontweight="bold", color=theme.SINGLE_HEAD_COLOR)

    # The h heads, small, on the same scale.
    weights = np.asarray(trace.weights)[:, view.rows, view.rows]
    grid = panels(sheet, [weights[i] for i in range(h)], [f"Head {i + 1}" for i in range(h)],
                   [""] * h, [theme.head_color(i) for i in range(h)],
                   [theme.head_text_color(i) for i in range(h)], labels, mask,
                   left=heads_left, top=block_top - title_h - above_small, panel=small,
                   cols=cols, tick=tick_s, step=step_s, value=value_s, rotate=rot_small,
                   label_w=lw_small)
    colour_bar(sheet, grid.right + 0.25, block_top, min(block_h, 4.5))

    # How spread each head is: mean row entropy against the uniform maximum.
    sheet.text(0.25, spread_head, "How spread is each magnifier? Mean row entropy in bits "
               "(lower = sharper)", fontsize=13.0, fontweight="bold")
    names = [f"{one_name} (d={trace.d_model})"] + [f"head {i + 1} (d/h={trace.d_k})" for i in range(h)]
    name_w = pen.widest(names, 10.5)
    chart_left = 0.25 + name_w + 0.15
    chart = sheet.axes(chart_left, chart_top, width - chart_left - 1.3, chart_h)
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

    # How different the heads are.
    sheet.text(0.25, js_top, f"How different are the {h} heads? Mean pairwise Jensen–Shannon "
                    f"divergence: {cmp.mean_pairwise_js:.3f} bits", fontsize=13.0, fontweight="bold")
    sheet.text(0.25, js_top + line(13.0), "\n".join(js_note), fontsize=11.0, color="#444444",
               linespacing=1.15)
    return sheet.fig


