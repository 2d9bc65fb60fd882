"""``magnifiers``: the article's analogy drawn literally, one magnifying glass per head.

For one query at a time, the sentence once per head, led by a magnifying glass
in that head's colour, each token a box shaded by the weight that query gives
it; above them, the same sentence under one head of size d.  Without
``--query`` the figure shows a few queries side by side (small multiples),
chosen from the per-query measures where the heads' top keys differ most: an
average over all queries comes out flat and teaches nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.core import narrate
from mhacli.core.analysis import top_keys
from mhacli.render import theme
from mhacli.render.figures.layout import PT, Pen, Sheet, clamp, drawing, line
from mhacli.render.figures.view import View, token_view
from mhacli.render.labels import is_view, measure, pattern_words, weights_note, window_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mhacli.core.analysis import Analysis
    from mhacli.core.trace import Trace
    from mhacli.render.labels import Shown

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


@dataclass(frozen=True)
class TokenRow:
    """What one head's row of token boxes shows for one query: the data the figure draws, nothing drawn."""

    name: str
    query: int  # the query position (in the whole text) whose weights the row shows
    weights: np.ndarray  # (n,) the weight that query gives each shown token
    color: str
    text_color: str
    masked: np.ndarray  # (n,) bool: keys that query may not look at (hatched)
    top: int | None  # the shown token the query looks at most (outlined), None when tied or outside


def token_rows(trace: Shown, single: Trace | None, view: View, queries: Sequence[int]) -> list[list[TokenRow]]:
    """One block per query: the single head's row (when given), then one row per head.

    The only place the figure asks the core for numbers (the masked keys and each row's top key);
    a caller holding them precomputed can swap them in here.
    """
    weights = np.asarray(trace.weights)  # (h, N, N)
    blocked = np.asarray(trace.mask) if trace.mask is not None else (
        np.triu(np.ones((trace.n_tokens, trace.n_tokens), dtype=bool), 1) if trace.causal else None)

    def row(name: str, w_row: np.ndarray, q: int, color: str, text_color: str) -> TokenRow:
        masked = blocked[q, view.rows] if blocked is not None else np.zeros(view.n, bool)
        key = int(top_keys(w_row)[0])  # the analysis's own argmax: −1 when the maximum is tied
        top = key - view.start if view.start <= key < view.stop else None
        return TokenRow(name, q, w_row[view.rows], color, text_color, masked, top)  # (N,) -> (n,)

    blocks = []
    for q in queries:
        block = []
        if single is not None:
            block.append(row("1 head", np.asarray(single.weights[0])[q], q, theme.SINGLE_HEAD_COLOR,
                             theme.SINGLE_HEAD_COLOR))
        for i in range(trace.num_heads):
            block.append(row(f"Head {i + 1}", weights[i, q], q, theme.head_color(i), theme.head_text_color(i)))
        blocks.append(block)
    return blocks


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


def magnifiers_figure(trace: Shown, single: Trace | None = None, *, query: int | None = None,
                      max_tokens: int = 40, pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """The sentence under one magnifier per head (and one big head for contrast, if ``single`` is given).

    ``query`` picks the query; without it, a few queries where the heads disagree most.
    """
    with drawing(pen) as p:
        return build_magnifiers(trace, single, token_view(trace.n_tokens, max_tokens, query), p,
                                hide_rules=hide_rules)


MAGNIFIER_MAX_TOKENS = 60  # a row of boxes per head stops being a picture beyond this
MAX_BLOCKS_HEIGHT = 10.0  # inches of stacked queries when they are chosen: the figure must stay a slide
MAX_WIDTH = 16.0  # inches: queries stand side by side while the figure stays this narrow
MAX_QUERIES = 3
COLUMN_GAP = 0.45  # inches between side-by-side queries
MASKED_FILL = theme.tint(theme.MASK_COLOR, 0.45)  # a masked key: light grey, hatched, no number
MASKED_HATCH = "//"


def distinct_tops(analysis: Analysis, q: int) -> int:
    """How many different keys the heads look at most from query ``q`` (tied rows left out)."""
    return len({int(k) for k in analysis.top_keys[:, q] if k >= 0})


def chosen_queries(analysis: Analysis, view: View, count: int) -> tuple[int, ...]:
    """Up to ``count`` queries inside the window, where the heads' top keys differ most.

    The ranking is the analysis's own (:meth:`Analysis.showcase_queries`: most distinct top keys,
    then fewest tied rows, then position).
    """
    return analysis.showcase_queries(max(1, count), view.start, view.stop) or (view.start,)


def why_chosen(analysis: Analysis, queries: Sequence[int], pen: Pen) -> str:
    """The sentence that says which queries the figure shows and why, from the measures."""
    h = analysis.num_heads
    parsed = narrate.parse_queries_sentence(analysis.reading, queries) if analysis.reading is not None else None
    if parsed is not None:
        return parsed
    if h == 1:
        return ("Chosen queries: with one head there is nothing to disagree on, so the first queries with a "
                "single top key are shown; give --query to pick another.")
    parts = []
    for k, q in enumerate(queries):
        d = distinct_tops(analysis, q)
        what = (f"{d} different token{'s' if d != 1 else ''} in focus for {h} heads" if k == 0
                else f"{d} different")
        parts.append(f"“{pen.shown(analysis.tokens[q], 16)}” (position {q}): {what}")
    if distinct_tops(analysis, queries[0]) <= 1:
        lead = "On every query the heads look most at the same token (or tie); shown: "
    else:
        lead = "Queries chosen from the measures, where the heads' top tokens differ most: "
    return lead + "; ".join(parts) + ". Give --query to pick another."


def block_heading(analysis: Analysis, q: int, pen: Pen) -> str:
    """'Query “cat” (position 7): 4 different tokens in focus: “the” 6, “cat” 4, …' from the top keys."""
    text = f"Query “{pen.shown(analysis.tokens[q], 16)}” (position {q})"
    if analysis.num_heads == 1:
        return text
    d = distinct_tops(analysis, q)
    return text + f": {d} different token{'s' if d != 1 else ''} in focus"


def build_magnifiers(trace: Shown, single: Trace | None, view: View, pen: Pen, analysis: Analysis | None = None,
                     hide_rules: bool = False) -> Figure:
    from matplotlib.patches import FancyBboxPatch, Rectangle

    if view.n > MAGNIFIER_MAX_TOKENS:
        view = token_view(trace.n_tokens, MAGNIFIER_MAX_TOKENS, view.query)
    analysis = analysis or measure(trace)
    weights = np.asarray(trace.weights)  # (h, N, N)
    if is_view(trace):
        single = None  # a view has no weight matrices to run as one head

    h, n = trace.num_heads, view.n
    lead = 1 if single is not None else 0  # the single head's row comes first in every block
    per_query = h + lead
    fs = 14.0 if n <= 10 else 12.0 if n <= 20 else 10.5  # token size, points
    vs = max(8.5, fs * 0.72)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    pad = 0.45 * fs * PT
    min_box = pen.width("100%", vs) + 2 * pad * 0.6
    widths = [max(pen.width(s, fs) + 2 * pad, min_box) for s in labels]
    box_h = fs * 2.0 * PT
    gap = 0.08
    inside = weights[:, :, view.start:view.stop].sum(axis=-1)  # (h, N): each row's weight inside the window

    def subtext(k: int, q: int | None) -> list[str]:
        """Small lines under a row's name: the single head's width, a head's pattern, what the window cut."""
        if k < lead:
            return [f"d = {trace.d_model}"]  # type: ignore[union-attr]
        i = k - lead
        out = [pen.shown(pattern_words(analysis, i, hide_rules), 22)]
        if view.windowed and q is not None:
            out.append(f"{1 - float(inside[i, q]):.0%} outside the window")
        return out

    names = (["1 head"] if lead else []) + [f"Head {i + 1}" for i in range(h)]
    name_w = pen.widest(names, 13.0, bold=True)
    sub_w = max(pen.widest(subtext(k, None) + (["100% outside the window"] if view.windowed else []), 10.0)
                for k in range(per_query))
    lens_col = 2 * box_h * 0.62 + 0.25
    left_col = 0.25 + lens_col + max(name_w, sub_w) + 0.2
    area = clamp(sum(widths) + gap * (n - 1), 4.0, 11.0)
    lines = _flow(widths, area, gap)
    area = max(sum(widths[k] for k in ln) + gap * (len(ln) - 1) for ln in lines)

    line_h = box_h + 0.085 + line(vs) + 0.1
    lens_r = {True: box_h * 0.62, False: box_h * 0.5}  # the single head's lens is the big one
    sub_h = box_h / 2 + 0.1 + (2 if view.windowed else 1) * line(10.0) * 1.1
    row_h = max(len(lines) * line_h, 2 * lens_r[True] + 0.2, sub_h) + 0.08
    block_head = line(13.0) + 0.1
    block_h = block_head + per_query * row_h

    # Which queries, and how they stand: side by side while the figure stays slide-wide, else stacked.
    # A column is as wide as the sentence, or as the longest heading a query of the window could have.
    asked = view.query is not None
    col_w = max([area] + [pen.width(block_heading(analysis, q, pen), 13.0, bold=True)
                          for q in range(view.start, view.stop)])
    side = 1
    while (not view.windowed and side < MAX_QUERIES
           and left_col + (side + 1) * col_w + side * COLUMN_GAP + 0.3 <= MAX_WIDTH):
        side += 1
    count = side if side > 1 else max(1, min(MAX_QUERIES, int(MAX_BLOCKS_HEIGHT // block_h)))
    queries = (view.query,) if view.query is not None else chosen_queries(analysis, view, count)
    cols = min(side, len(queries))
    block_rows = -(-len(queries) // cols)

    width = max(left_col + (cols * col_w + (cols - 1) * COLUMN_GAP if cols > 1 else area) + 0.3, 8.0,
                0.25 + max(pen.width(block_heading(analysis, q, pen), 13.0, bold=True) for q in queries) + 0.3)
    inner = width - 0.5

    blocks = token_rows(trace, single, view, queries)
    rows = [r for b in blocks for r in b]
    vmax = max(float(r.weights[~r.masked].max(initial=0.0)) for r in rows) or 1.0

    if asked:
        who = f"the query “{pen.shown(trace.tokens[queries[0]])}” (position {queries[0]})"
    else:
        parsed = analysis.reading is not None and all(q in analysis.reading.queries for q in queries)
        why = " of the grammar's parse" if parsed else " where the heads differ most" if h > 1 else ""
        who = f"{len(queries)} quer{'ies' if len(queries) != 1 else 'y'}" + why
    title = (f"One magnifier or {h}? Where attention goes, seen from {who}" if h != 1
             else f"One magnifier: where attention goes, seen from {who}")
    title_lines = pen.wrap(title, inner, 16.0, bold=True)
    label_lines = pen.wrap(weights_note(trace, hide_rules), inner, 12.0)
    team = ""
    if single is not None:
        team = (f" “1 head” is one head of size d = {trace.d_model} over the same text; "  # type: ignore[union-attr]
                + (f"heads 1–{h} are {h} heads of size d/h = {trace.d_k}, same parameters." if h > 1  # type: ignore[union-attr]
                   else "head 1 is that same head."))
    sub = (f"Each box is a token, shaded by the weight the query gives it in that head "
           f"(white = none, full colour = {vmax:.2f}, the largest shown); the number under it is "
           "that weight. A thick outline marks the token the head looks at most from that query; "
           "the dashed box marks the query."
           + (" Hatched boxes are masked: the query may not look at later tokens."
              if trace.mask is not None or trace.causal else "")
           + team)
    sub_lines = pen.wrap(sub, inner, 11.0)
    extra = [] if asked else [why_chosen(analysis, queries, pen)]
    if view.windowed:
        extra.append(window_note(analysis, weights, view.start, view.stop) or view.note())
    extra_lines = [ln for e in extra for ln in pen.wrap(e, inner, 11.0)]
    top = 0.2 + len(title_lines) * line(16.0) + len(label_lines) * line(12.0) + len(sub_lines) * line(11.0)
    top += len(extra_lines) * line(11.0) + 0.2
    height = top + block_rows * block_h + (block_rows - 1) * 0.2 + 0.15

    sheet = Sheet(width, height)
    fig, ax = sheet.fig, sheet.ax
    y = 0.2
    sheet.text(0.25, y, "\n".join(title_lines), fontsize=16.0, fontweight="bold", linespacing=1.1)
    y += len(title_lines) * line(16.0)
    sheet.text(0.25, y, "\n".join(label_lines), fontsize=12.0, fontstyle="italic", linespacing=1.15)
    y += len(label_lines) * line(12.0)
    sheet.text(0.25, y, "\n".join(sub_lines), fontsize=11.0, color="#444444", linespacing=1.15)
    y += len(sub_lines) * line(11.0)
    if extra_lines:
        sheet.text(0.25, y, "\n".join(extra_lines), fontsize=11.0, color=theme.LABEL_COLOR,
                   linespacing=1.15)

    def draw_row(row: TokenRow, x0: float, y0: float) -> None:
        """One head's boxes for one query, wrapped like the sentence, from (x0, y0)."""
        for li, tokens_on_line in enumerate(lines):
            x = x0
            by = y0 + li * line_h + 0.05
            for t in tokens_on_line:
                w = float(row.weights[t])
                masked = bool(row.masked[t])
                fill = MASKED_FILL if masked else theme.tint(row.color, w / vmax)
                strongest = t == row.top
                box = FancyBboxPatch((x + 0.03, by + 0.03), widths[t] - 0.06, box_h - 0.06,
                                     boxstyle="round,pad=0.03,rounding_size=0.06", facecolor=fill,
                                     edgecolor=row.color if strongest else (
                                         theme.HATCH_COLOR if masked else "#BBBBBB"),
                                     linewidth=3.0 if strongest else 0.8,
                                     hatch=MASKED_HATCH if masked else None)
                sheet.place(box)
                if t + view.start == row.query:
                    sheet.place(Rectangle((x - 0.035, by - 0.035), widths[t] + 0.07, box_h + 0.07,
                                          facecolor="none", edgecolor=theme.LABEL_COLOR,
                                          linewidth=1.3, linestyle=(0, (3, 2))))
                sheet.text(x + widths[t] / 2, by + box_h / 2, labels[t], fontsize=fs,
                           color="#555555" if masked else theme.ink_on(fill), ha="center", va="center")
                sheet.text(x + widths[t] / 2, by + box_h + 0.085, "" if masked else f"{w:.0%}" if w >= 0.005 else "0",
                           fontsize=vs, color="#555555", ha="center")
                x += widths[t] + gap

    for br in range(block_rows):
        y0 = top + br * (block_h + 0.2)
        if br:
            ax.plot([0.25, sheet.w - 0.25], [y0 - 0.1, y0 - 0.1], color="#CCCCCC", linewidth=1)
        chunk = list(zip(queries, blocks))[br * cols:(br + 1) * cols]
        for c, (q, block) in enumerate(chunk):
            x0 = left_col + c * (col_w + COLUMN_GAP)
            sheet.text(x0 if cols > 1 else 0.25, y0, block_heading(analysis, q, pen), fontsize=13.0,
                       fontweight="bold")
        for k in range(per_query):
            y = y0 + block_head + k * row_h
            first = chunk[0][1][k]
            is_single = k < lead
            cy = y + 0.05 + box_h / 2  # level with the first line of tokens
            magnifier(ax, 0.25 + lens_r[True] + 0.05, cy, lens_r[is_single], first.color)
            name_x = 0.25 + lens_col
            sheet.text(name_x, cy - 0.02, first.name, fontsize=13.0, fontweight="bold",
                       color=first.text_color, va="bottom")
            sheet.text(name_x, cy + 0.02, "\n".join(subtext(k, chunk[0][0] if cols == 1 else None)),
                       fontsize=10.0, color="#444444", va="top", linespacing=1.1)
            for c, (q, block) in enumerate(chunk):
                draw_row(block[k], left_col + c * (col_w + COLUMN_GAP), y)
    return fig
