"""``magnifiers``: the article's analogy drawn literally, one magnifying glass per head.

The sentence once per head, led by a magnifying glass in that head's colour,
each token a box shaded by the attention it receives; above them, the same
sentence under one head of size d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.core.analysis import query_view
from mhacli.render import theme
from mhacli.render.figures.layout import PT, Pen, Sheet, clamp, drawing, line
from mhacli.render.figures.view import View, token_view

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mhacli.core.trace import Trace

def magnifier(ax: Axes, x: float, y: float, radius: float, color: str) -> list[Any]:
    """A magnifying glass centred at (x, y) in data units (inches), lens ``radius``, in ``color``."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Arc, Circle

    handle_dir = np.array([math.cos(-math.pi / 4), math.sin(-math.pi / 4)])
    start = np.array([x, y]) + handle_dir * radius * 1.05
    end = start + handle_dir * radius * 1.1
    lw = max(2.0, radius / PT * 0.18)
    handle = Line2D([start[0], end[0]], [start[1], end[1]], color=color, linewidth=lw * 1.8,
                    solid_capstyle="round")
    lens = Circle((x, y), radius, facecolor=theme.tint(color, 0.18), edgecolor=color, linewidth=lw)
    glint = Arc((x, y), radius * 1.2, radius * 1.2, theta1=110, theta2=160, color="white",
                linewidth=lw * 0.7)
    ax.add_line(handle)
    for patch in (lens, glint):
        ax.add_artist(patch)  # not add_patch: the canvas limits are fixed, no data-limit update
    return [handle, lens, glint]


@dataclass
class TokenRow:
    """One head's row of token boxes in the magnifier picture."""

    name: str
    weights: np.ndarray  # (n,) attention each shown token receives
    color: str
    text_color: str
    boxes: list[Any] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # the token drawn in each box
    texts: list[Any] = field(default_factory=list)  # the Text objects of those tokens
    percents: list[Any] = field(default_factory=list)  # the Text objects of the weights under them


def _flow(widths: Sequence[float], max_width: float, gap: float) -> list[list[int]]:
    """Token indices per line, wrapping like a paragraph."""
    lines: list[list[int]] = [[]]
    used = 0.0
    for k, w in enumerate(widths):
        if lines[-1] and used + gap + w > max_width:
            lines.append([])
            used = 0.0
        used += (gap if lines[-1] else 0.0) + w
        lines[-1].append(k)
    return lines


def magnifiers_figure(trace: Trace, single: Trace | None, *, query: int | None = None,
                      max_tokens: int = 40, pen: Pen | None = None) -> Figure:
    """The sentence under one magnifier per head, and under one big head for contrast."""
    with drawing(pen) as p:
        return build_magnifiers(trace, single, token_view(trace.n_tokens, max_tokens, query), p)


MAGNIFIER_MAX_TOKENS = 60  # a row of boxes per head stops being a picture beyond this


def build_magnifiers(trace: Trace, single: Trace | None, view: View, pen: Pen) -> Figure:
    from matplotlib.patches import FancyBboxPatch, Rectangle

    if view.n > MAGNIFIER_MAX_TOKENS:
        view = token_view(trace.n_tokens, MAGNIFIER_MAX_TOKENS, view.query)

    h, n, q = trace.num_heads, view.n, view.query
    fs = 14.0 if n <= 10 else 12.0 if n <= 20 else 10.5  # token size, points
    vs = max(8.5, fs * 0.72)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    pad = 0.45 * fs * PT
    min_box = pen.width("100%", vs) + 2 * pad * 0.6
    widths = [max(pen.width(s, fs) + 2 * pad, min_box) for s in labels]
    box_h = fs * 2.0 * PT
    gap = 0.08

    rows: list[TokenRow] = []
    if single is not None:
        rows.append(TokenRow("1 head", query_view(np.asarray(single.weights), q)[0][view.rows],
                             theme.SINGLE_HEAD_COLOR, theme.SINGLE_HEAD_COLOR))
    multi = query_view(np.asarray(trace.weights), q)[:, view.rows]  # (h, n)
    for i in range(h):
        rows.append(TokenRow(f"Head {i + 1}", multi[i], theme.head_color(i),
                             theme.head_text_color(i)))
    vmax = max(float(r.weights.max()) for r in rows) or 1.0

    name_w = pen.widest([r.name for r in rows], 13.0, bold=True)
    sub_w = pen.widest([f"d = {trace.d_model}", f"d/h = {trace.d_k}"], 10.0)
    lens_col = 2 * box_h * 0.62 + 0.25
    left_col = 0.25 + lens_col + max(name_w, sub_w) + 0.2
    area = clamp(sum(widths) + gap * (n - 1), 4.0, 11.0)
    lines = _flow(widths, area, gap)
    area = max(sum(widths[k] for k in ln) + gap * (len(ln) - 1) for ln in lines)
    line_h = box_h + 0.06 + line(vs) + 0.1
    lens_r = {True: box_h * 0.62, False: box_h * 0.5}  # the single head's lens is the big one
    row_h = max(len(lines) * line_h, 2 * lens_r[True] + 0.25) + 0.1
    width = max(left_col + area + 0.3, 7.5)
    inner = width - 0.5

    who = (f"the query “{pen.shown(trace.tokens[q])}” (position {q})" if q is not None
           else f"all {trace.n_tokens} queries, averaged")
    title = (f"One magnifier or {h}? Where attention goes, seen from {who}" if h != 1
             else f"One magnifier: where attention goes, seen from {who}")
    title_lines = pen.wrap(title, inner, 16.0, bold=True)
    sub = (f"Each box is a token, shaded by the attention it receives in that head "
           f"(white = none, full colour = {vmax:.2f}, the largest shown); the number under it is "
           "that weight. A thick outline marks the token the head looks at most"
           + ("; the dashed box is the query." if q is not None else "."))
    sub_lines = pen.wrap(sub, inner, 11.0)
    top = 0.2 + len(title_lines) * line(16.0) + len(sub_lines) * line(11.0)
    top += line(11.0) if view.windowed else 0.0
    top += 0.2
    section_h = line(12.5) + 0.08
    height = top + len(rows) * row_h + (2 if single is not None else 1) * section_h + 0.25
    if single is not None:
        height += 0.1

    sheet = Sheet(width, height)
    fig, ax = sheet.fig, sheet.ax
    sheet.text(0.25, 0.2, "\n".join(title_lines), fontsize=16.0, fontweight="bold", linespacing=1.1)
    sheet.text(0.25, 0.2 + len(title_lines) * line(16.0), "\n".join(sub_lines), fontsize=11.0,
               color="#444444", linespacing=1.15)
    if view.windowed:
        sheet.text(0.25, top - 0.2 - line(11.0), view.note(), fontsize=11.0,
                   color=theme.HATCH_COLOR)

    y = top
    for k, row in enumerate(rows):
        is_single = single is not None and k == 0
        if is_single:
            sheet.text(0.25, y, f"A single head of size d = {trace.d_model}: one magnifier over "
                       "the whole text", fontsize=12.5, fontweight="bold",
                       color=theme.SINGLE_HEAD_COLOR)
            y += section_h
        elif k == (1 if single is not None else 0):
            if single is not None:
                ax.plot([0.25, sheet.w - 0.25], [y + 0.02, y + 0.02], color="#CCCCCC", linewidth=1)
                y += 0.1
            team = (f"{h} heads of size d/h = {trace.d_k}: a team of {h} magnifiers, same parameters"
                    if h > 1 else f"1 head of size d/h = d = {trace.d_k}: the same single magnifier")
            sheet.text(0.25, y, team, fontsize=12.5, fontweight="bold")
            y += section_h
        radius = lens_r[is_single]
        cy = y + 0.05 + box_h / 2  # level with the first line of tokens
        magnifier(ax, 0.25 + lens_r[True] + 0.05, cy, radius, row.color)
        name_x = 0.25 + lens_col
        sheet.text(name_x, cy - 0.02, row.name, fontsize=13.0, fontweight="bold",
                   color=row.text_color, va="bottom")
        sheet.text(name_x, cy + 0.02, f"d = {trace.d_model}" if is_single else f"d/h = {trace.d_k}",
                   fontsize=10.0, color="#444444", va="top")
        top_token = int(np.argmax(row.weights))
        for li, tokens_on_line in enumerate(lines):
            x = left_col
            by = y + li * line_h + 0.05
            for t in tokens_on_line:
                w = float(row.weights[t])
                fill = theme.tint(row.color, w / vmax)
                strongest = t == top_token
                box = FancyBboxPatch((x + 0.03, by + 0.03), widths[t] - 0.06, box_h - 0.06,
                                     boxstyle="round,pad=0.03,rounding_size=0.06",
                                     facecolor=fill, edgecolor=row.color if strongest else "#BBBBBB",
                                     linewidth=3.0 if strongest else 0.8)
                sheet.place(box)
                row.boxes.append(box)
                if q is not None and t + view.start == q:
                    sheet.place(Rectangle((x - 0.035, by - 0.035), widths[t] + 0.07, box_h + 0.07,
                                          facecolor="none", edgecolor=theme.LABEL_COLOR,
                                          linewidth=1.3, linestyle=(0, (3, 2))))
                row.labels.append(labels[t])
                row.texts.append(sheet.text(x + widths[t] / 2, by + box_h / 2, labels[t], fontsize=fs,
                                            color=theme.ink_on(fill), ha="center", va="center"))
                row.percents.append(sheet.text(x + widths[t] / 2, by + box_h + 0.06,
                                               f"{w:.0%}" if w >= 0.005 else "0", fontsize=vs,
                                               color="#555555", ha="center"))
                x += widths[t] + gap
        y += row_h
    fig.mhacli_rows = rows  # type: ignore[attr-defined]  # for tests: the drawn rows
    return fig


# --------------------------------------------------------------------------
