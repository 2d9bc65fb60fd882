"""``magnifiers``: the article's analogy drawn literally, one magnifying glass per head.

For one query, the sentence once per head, each token a box shaded by that head's weight, under one head of
size d above them. Without ``--query``, a few queries side by side, chosen where the heads' top keys differ
most: an average over all queries comes out flat and teaches nothing.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.measures import narrate
from mhacli.render import theme
from mhacli.render.figures.inline import new_figure
from mhacli.render.figures.layout import EM, INSET, PT, Pen, Slide, about, clamp, wrap
from mhacli.measures.window import MAGNIFIER_MAX_TOKENS, View  # noqa: F401 - the limit, read here by its users
from mhacli.render.labels import is_view, pattern_words, weights_note, window_note

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.offsetbox import DrawingArea

    from mhacli.measures.analysis import Analysis
    from mhacli.attention.trace import Trace
    from mhacli.pipeline import Window
    from mhacli.render.labels import Shown

def magnifier(area: DrawingArea, x: float, y: float, radius: float, color: str) -> list[Any]:
    """A magnifying glass centred at (x, y) points of ``area`` (an offsetbox ``DrawingArea``), lens ``radius``."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Arc, Circle

    handle_dir = np.array([math.cos(-math.pi / 4), math.sin(-math.pi / 4)])
    start = np.array([x, y]) + handle_dir * radius * 1.05
    end = start + handle_dir * radius * 1.1
    lw = max(2.0, radius * 0.18)
    handle = Line2D([start[0], end[0]], [start[1], end[1]], color=color, linewidth=lw * 1.8,
                    solid_capstyle="round")
    lens = Circle((x, y), radius, facecolor=theme.tint(color, 0.18), edgecolor=color, linewidth=lw)
    glint = Arc((x, y), radius * 1.2, radius * 1.2, theta1=110, theta2=160, color="white",
                linewidth=lw * 0.7)
    for artist in (handle, lens, glint):
        area.add_artist(artist)
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


def token_rows(trace: Shown, single: Trace | None, window: Window, queries: Sequence[int]) -> list[list[TokenRow]]:
    """One block per query: the single head's row (when given), then one row per head; masks and top keys are
    the analysis's and the window's."""
    view, analysis = window.view, window.analysis
    weights = np.asarray(trace.weights)  # (h, N, N)
    blocked = None if analysis.mask is None else np.asarray(analysis.mask)

    def row(name: str, w_row: np.ndarray, q: int, key: int, color: str, text_color: str) -> TokenRow:
        masked = blocked[q, view.rows] if blocked is not None else np.zeros(view.n, bool)
        top = key - view.start if view.start <= key < view.stop else None  # −1 (a tied row) is outside
        return TokenRow(name, q, w_row[view.rows], color, text_color, masked, top)  # (N,) -> (n,)

    single_keys = window.single_keys if single is not None else None  # (N,)
    blocks = []
    for q in queries:
        block = []
        if single is not None and single_keys is not None:
            block.append(row("1 head", np.asarray(single.weights[0])[q], q, int(single_keys[q]),
                             theme.SINGLE_HEAD_COLOR, theme.SINGLE_HEAD_COLOR))
        for i in range(trace.num_heads):
            block.append(row(f"Head {i + 1}", weights[i, q], q, int(analysis.top_keys[i, q]), theme.head_color(i),
                             theme.head_text_color(i)))
        blocks.append(block)
    return blocks


def percent(w: float) -> str:
    """A weight as the number under its box: 40%, or 0 for less than half a percent."""
    return f"{w:.0%}" if w >= 0.005 else "0"


def _flow(chars: Sequence[float], max_chars: float) -> list[list[int]]:
    """Token indices per line, wrapping like a paragraph: each line holds at most ``max_chars`` (in ems)."""
    lines: list[list[int]] = [[]]
    used = 0.0
    for k, w in enumerate(chars):
        if lines[-1] and used + w > max_chars:
            lines.append([])
            used = 0.0
        used += w
        lines[-1].append(k)
    return lines


SUBTEXT_CHARS = 13  # characters a line under a head's name
NAME_CHARS = 40  # a head's name whole, over a few such lines (a report card's longest title is 38 characters)
MAX_BLOCKS_HEIGHT = 10.0  # inches of stacked queries when they are chosen: the figure must stay a slide
MAX_WIDTH = 16.0  # inches: queries stand side by side while the figure stays this narrow
MAX_QUERIES = 3
COLUMN_GAP = 0.45  # inches between side-by-side queries
MASKED_FILL = theme.tint(theme.MASK_COLOR, 0.45)  # a masked key: light grey, hatched, no number
MASKED_HATCH = "//"


def distinct_tops(analysis: Analysis, q: int) -> int:
    """How many different keys the heads pick from query ``q`` (tied rows and rows too close to chance left
    out: the evidence rule, ``Analysis.picked_keys``)."""
    return len({int(k) for k in analysis.picked_keys[:, q] if k >= 0})


def chosen_queries(window: Window, count: int) -> tuple[int, ...]:
    """Up to ``count`` queries inside the window, where the heads' top keys differ most (``Window.showcase``)."""
    return window.showcase[:max(1, count)] or (window.view.start,)


def why_chosen(analysis: Analysis, queries: Sequence[int], hide_rules: bool = False) -> str:
    """The sentence that says why the figure shows its queries, from the measures (``hide_rules``: the parse's
    queries without their relations). Each query's position and count of tokens in focus is its block's heading,
    and the title says they are where the heads differ most: neither is said again here."""
    h = analysis.num_heads
    parsed = (narrate.parse_queries_sentence(analysis.reading, queries, hide_rules=hide_rules)
              if analysis.reading is not None else None)
    if parsed is not None:
        return parsed
    if h == 1:
        return ("Chosen queries: with one head there is nothing to disagree on, so the first queries with a "
                "single top key are shown; give --query to pick another.")
    if distinct_tops(analysis, queries[0]) <= 1:
        return ("On every query the heads look most at the same token, or at none clear of chance (or tie). "
                "Give --query to pick another.")
    return "Chosen from the measures. Give --query to pick another."


def block_heading(analysis: Analysis, q: int, pen: Pen) -> str:
    """'Query “cat” (position 7): 4 different tokens in focus: “the” 6, “cat” 4, …' from the top keys."""
    text = f"Query “{pen.shown(analysis.tokens[q], 16)}” (position {q})"
    if analysis.num_heads == 1:
        return text
    d = distinct_tops(analysis, q)
    if d == 0:
        return text + ": no head's top token is clear of chance"
    return text + f": {d} different token{'s' if d != 1 else ''} in focus"


def build_magnifiers(trace: Shown, single: Trace | None, window: Window, pen: Pen, hide_rules: bool = False) -> Figure:
    """The figure as a slide: every box is a token's own text box (``bbox``), each text measured once and
    placed at fixed inches from the figure's top-left corner (:class:`~mhacli.render.figures.layout.Slide`),
    every row below its query's heading; the figure is as large as what is placed on it."""
    from matplotlib.offsetbox import AnnotationBbox, DrawingArea

    view, analysis = window.view, window.analysis
    if is_view(trace):
        single = None  # a view has no weight matrices to run as one head

    h, n = trace.num_heads, view.n
    lead = 1 if single is not None else 0  # the single head's row comes first in every block
    per_query = h + lead
    fs = 14.0 if n <= 10 else 12.0 if n <= 20 else 10.5  # token size, points
    vs = max(8.5, fs * 0.72)
    labels = [pen.shown(t) for t in trace.tokens[view.rows]]
    pad = 0.4  # the token box's padding, in font sizes
    gap = 6.0  # points between two boxes
    # A box is at least as wide as "100%" under it, so every head's row of boxes lines up.
    labels = [t.center(max(len(t), 3), "\u2007") if len(t) < 3 else t for t in labels]
    ems = [len(t) * EM + 2 * pad + gap / fs for t in labels]  # each box's width, in ems of the token size
    box_pt = fs * (1.2 + 2 * pad)  # a box's height, in points
    line_pt = box_pt + 4 + vs * 1.25 + 6  # one line of boxes and their numbers

    groups = getattr(trace, "kv_heads", h)  # key/value groups (a trace of shared keys and values has g < h)

    def subtext(k: int, q: int | None, hidden: bool = hide_rules) -> list[str]:
        """Small lines under a row's name: the single head's width, a head's pattern, what the window cut."""
        if k < lead:
            return [f"d = {trace.d_model}"]  # type: ignore[union-attr]
        i = k - lead
        # A few words a line, under the head's name: a long name would widen the left column and leave room
        # for fewer queries side by side.
        # A share stays on the line of what it measures: "verb →" / "object · 100%", not "· 100%" alone.
        words = pen.shown(pattern_words(analysis, i, hidden), NAME_CHARS).replace(" · ", "\u00a0· ")
        out = [line.replace("\u00a0", " ") for line in
               textwrap.wrap(words, SUBTEXT_CHARS, break_on_hyphens=False)] or [""]
        if groups != h:  # heads that share keys and values: experts with one set of notes, their own questions
            out.insert(0, f"group {i // (h // groups) + 1}")
        if view.windowed and q is not None:
            out.append(f"{float(np.asarray(analysis.outside_rows)[i, q]):.0%} outside the window")
        return out

    names = (["1 head"] if lead else []) + [f"Head {i + 1}" for i in range(h)]
    name_w = max(about(t, 13.0, bold=True) for t in names)
    # As wide as the names with or without --hide-rules: the slides and the answers then choose the same
    # queries and lay them out alike, so the reveal shows the very picture the class named.
    sub_w = max(about(t, 10.0) for k in range(per_query) for hidden in (False, True)
                for t in subtext(k, None, hidden) + (["100% outside the window"] if view.windowed else []))
    lens_r = {True: box_pt * 0.62, False: box_pt * 0.5}  # points; the single head's lens is the big one
    lens_col = (2 * lens_r[True] + 18) * PT
    left_col = INSET + lens_col + max(name_w, sub_w) + 0.2
    area = clamp(sum(ems) * fs * PT, 4.0, 11.0)
    lines = _flow(ems, area / (fs * PT))
    area = max(sum(ems[k] for k in ln) for ln in lines) * fs * PT

    sub_lines = max(len(subtext(k, 0 if view.windowed else None, hidden))
                    for k in range(per_query) for hidden in (False, True))
    sub_pt = box_pt / 2 + 8 + sub_lines * 10.0 * 1.3
    row_pt = max(len(lines) * line_pt, 2 * lens_r[True] + 14, sub_pt) + 6
    head_pt = 13.0 * 1.4 + 6
    block_h = (head_pt + per_query * row_pt) * PT

    # Which queries, and how they stand: side by side while the figure stays slide-wide, else stacked.
    # A column is as wide as the sentence, or as the longest heading a query of the window could have.
    asked = view.query is not None
    col_w = max([area] + [about(block_heading(analysis, q, pen), 13.0, bold=True)
                          for q in range(view.start, view.stop)])
    side = 1
    while (not view.windowed and side < MAX_QUERIES
           and left_col + (side + 1) * col_w + side * COLUMN_GAP + 0.3 <= MAX_WIDTH):
        side += 1
    count = side if side > 1 else max(1, min(MAX_QUERIES, int(MAX_BLOCKS_HEIGHT // block_h)))
    queries = (view.query,) if view.query is not None else chosen_queries(window, count)
    cols = min(side, len(queries))
    block_rows = -(-len(queries) // cols)

    width = max(left_col + (cols * col_w + (cols - 1) * COLUMN_GAP if cols > 1 else area) + 0.3, 8.0,
                INSET + max(about(block_heading(analysis, q, pen), 13.0, bold=True) for q in queries) + 0.3)
    inner = width - 2 * INSET

    blocks = token_rows(trace, single, window, queries)
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
    team = ""
    if single is not None:
        team = (f" “1 head” is one head of size d = {trace.d_model} over the same text; "  # type: ignore[union-attr]
                + (f"heads 1–{h} are {h} heads of size d/h = {trace.d_k}, "  # type: ignore[union-attr]
                   + ("same parameters." if groups == h else f"sharing keys and values in {groups} "
                      f"group{'s' if groups != 1 else ''}; the one head reads them written out once per head.")
                   if h > 1 else "head 1 is that same head."))
    sub = (f"Each box is a token, shaded by the weight the query gives it in that head "
           f"(white = none, full colour = {vmax:.2f}, the largest shown); the number under each "
           "row's largest is that weight. A thick outline marks the token the head looks at most from that query; "
           "the dashed box marks the query."
           + (" Hatched boxes are masked: the query may not look at later tokens."
              if analysis.mask is not None else "")
           + team)
    extra = [] if asked else [why_chosen(analysis, queries, hide_rules)]
    if view.windowed:
        extra.append(window_note(analysis) or view.note())

    fig = new_figure(figsize=(width, 8.0))
    slide = Slide(fig)
    slide.stack([
        (wrap(title, inner, 16.0 * 1.1), {"fontsize": 16.0, "fontweight": "bold", "linespacing": 1.1}),
        (wrap(weights_note(trace, hide_rules, analysis), inner, 12.0), {"fontsize": 12.0, "fontstyle": "italic",
                                                                "linespacing": 1.15}),
        (wrap(sub, inner, 11.0), {"fontsize": 11.0, "color": "#444444", "linespacing": 1.15}),
        (wrap(" ".join(extra), inner, 11.0), {"fontsize": 11.0, "color": theme.LABEL_COLOR, "linespacing": 1.15}),
    ])
    # Every token's box and number, measured once: the same labels at the same size in every row.
    token_size: list[tuple[float, float] | None] = [None] * n
    number_size: dict[str, tuple[float, float]] = {}

    def draw_row(row: TokenRow, x0: float, top: float) -> None:
        """One head's boxes for one query, wrapped like the sentence, ``top`` inches below the figure's top; a number
        under the row's largest weight only (and any that prints the same): the shades carry the rest."""
        largest = percent(float(row.weights[~row.masked].max(initial=0.0)))
        for li, tokens_on_line in enumerate(lines):
            x = x0 + pad * fs * PT
            y = top + (li * line_pt + pad * fs) * PT  # the token texts' top
            for t in tokens_on_line:
                w = float(row.weights[t])
                masked = bool(row.masked[t])
                fill = MASKED_FILL if masked else theme.tint(row.color, w / vmax)
                strongest = t == row.top
                box = {"boxstyle": f"round,pad={pad}", "facecolor": fill,
                       "edgecolor": row.color if strongest else (
                           theme.LABEL_COLOR if t + view.start == row.query else
                           theme.HATCH_COLOR if masked else "#BBBBBB"),
                       "linewidth": 3.0 if strongest else 1.3 if t + view.start == row.query else 0.8,
                       "linestyle": (0, (3, 2)) if t + view.start == row.query and not strongest else "-",
                       "hatch": MASKED_HATCH if masked else None}
                ink = "#555555" if masked else theme.ink_on(fill)
                _, tw, th = slide.text(labels[t], x, y, measured=token_size[t], reach=pad * fs + 1.5, fontsize=fs,
                                       color=ink, bbox=box)
                token_size[t] = (tw, th)
                number = "" if masked else percent(w)
                if number and number == largest:
                    number_size[number] = slide.text(number, x + tw / 2, y + th + (pad * fs + 4) * PT,
                                                     measured=number_size.get(number), ha="center", fontsize=vs,
                                                     color="#555555")[1:]
                x += tw + (2 * pad * fs + gap) * PT

    box = 2 * lens_r[True] + 6  # points: the square each magnifier is drawn in
    top = slide.depth + 14.0 * PT  # inches from the figure's top to the first heading's top
    for br in range(block_rows):
        chunk = list(zip(queries, blocks))[br * cols:(br + 1) * cols]
        heading_h = 0.0
        for c, (q, _) in enumerate(chunk):
            x = (left_col + c * (col_w + COLUMN_GAP)) if cols > 1 else INSET
            heading_h = max(heading_h, slide.text(block_heading(analysis, q, pen), x, top, fontsize=13.0,
                                                  fontweight="bold")[2])
        under = top + heading_h  # the rows hang from the heading's bottom
        for k in range(per_query):
            y = under + (6.0 + k * row_pt) * PT
            first = chunk[0][1][k]
            r = lens_r[k < lead]
            lens = DrawingArea(box, box)
            magnifier(lens, lens_r[True] + 1, lens_r[True] + 5, r, first.color)
            centre = y + (box_pt / 2 + 1) * PT  # the lens's anchor: level with the middle of the boxes
            fy = 0.5 + 4 / box
            slide.box(AnnotationBbox(lens, (INSET, 0.0), xycoords=fig.dpi_scale_trans, xybox=(0.0, 0.0),
                                     boxcoords="offset points", box_alignment=(0.0, fy),
                                     frameon=False, pad=0.0, annotation_clip=False), INSET, centre,
                      (INSET + box * PT, centre - (1 - fy) * box * PT, centre + fy * box * PT))
            name_x = INSET + lens_col
            slide.text(first.name, name_x, y + (box_pt / 2 - 1) * PT, fontsize=13.0, fontweight="bold",
                       color=first.text_color, va="bottom")
            slide.text("\n".join(subtext(k, chunk[0][0] if cols == 1 else None)), name_x,
                       y + (box_pt / 2 + 2) * PT, fontsize=10.0, color="#444444", linespacing=1.1)
            for c, (q, block) in enumerate(chunk):
                draw_row(block[k], left_col + c * (col_w + COLUMN_GAP), y)
        top = under + (per_query * row_pt + 18.0) * PT

    # As large as what is hung on it, and a margin: nothing cut off, nothing left over.
    slide.hang(width, slide.depth + INSET)
    return fig
