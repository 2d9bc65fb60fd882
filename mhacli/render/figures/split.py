"""split.png: how X and three weight matrices become h heads, and how W^O mixes them back.

Top row, the split in the article's orientation: X, W_q, W_k, W_v in per-head blocks, then Q = [Q¹ | Q² | …];
bottom row, the merge: H, W^O and O. Blocks are outlined in their head's colour; X and O have one plain frame,
since every head reads all of X and every column of O mixes all heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.attention.trace import Trace
from mhacli.render import theme
from mhacli.render.figures.layout import BAR_WIDTH, TICK, Pen
from mhacli.render.labels import weights_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SPLIT_CMAP = "PuOr"  # diverging and colour-blind safe: negative and positive values read apart
MAX_TOKEN_LABELS = 24  # beyond this the rows of X, Q, H and O are not labelled one by one
MAX_LEGEND_HEADS = 8
LABEL_PT = 9  # the row labels' size, points
ROW_GAP = 1.25  # a label needs its height and a quarter more, or the row labels touch
ROW_BOX = 0.045  # a token's row is at least this share of its panel's width tall (11 tokens: half as tall as wide)


FIG_SIZE = (16.0, 8.625)  # inches: a 16:9-ish slide, a whole number of pixels at any dpi
TITLE_PAD = 6.0  # points between a panel and its title (matplotlib's default)
CAPTION_PAD = 4.0  # points between a panel and its caption (matplotlib's default label pad)
GAP = 0.3  # inches between two panels' texts, side by side
_SPACE = 0.06  # inches around a row's title
BAR_TICKS = (-1.0, -0.5, 0.0, 0.5, 1.0)
BAR_LABEL = "value ÷ the panel's largest |value|"


@dataclass
class Panel:
    """One matrix of the figure and what is written around it, before it is placed."""

    m: np.ndarray  # the matrix, not yet divided by its largest |value|
    title: str
    caption: str
    heads: int  # column blocks outlined in the heads' colours (1: one plain frame)
    rows: Sequence[str] | None  # a label per row (the tokens), or None for a weight matrix
    units: float  # its width, in units of a weight matrix's side
    readers: int = 1  # heads that read each block: block j is outlined in its first reader's colour, head j·readers
    # Whether its rows are labelled: Q and O sit level with X and H, row for row, so the tokens are written once a row.
    labelled: bool = True


def _draw_panel(ax: Axes, p: Panel, step: int) -> None:
    """One matrix, each value divided by the panel's largest |value|, its h column blocks outlined; a token row
    labelled every ``step`` rows (none beyond :data:`MAX_TOKEN_LABELS`). Its row labels and caption are plain texts
    where matplotlib would put its tick labels and x label: the panel's Axis is not drawn."""
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import ScaledTranslation

    r, c = p.m.shape
    scale = float(np.max(np.abs(p.m))) or 1.0
    ax.imshow(p.m / scale, cmap=SPLIT_CMAP, vmin=-1.0, vmax=1.0, interpolation="nearest", aspect="auto")
    ax.set_title(p.title, fontsize=12, color=theme.LABEL_COLOR, y=1.0, pad=TITLE_PAD)  # y given: not moved at draw
    ax.xaxis.set_visible(False)
    ax.yaxis.set_visible(False)
    inches = ax.get_figure().dpi_scale_trans  # type: ignore[union-attr]
    if p.rows is not None and p.labelled and r <= MAX_TOKEN_LABELS:
        beside = ax.transData + ScaledTranslation(-TICK / 72, 0.0, inches)  # a tick's pad left of the panel
        for i in range(0, r, step):
            ax.text(-0.5, i, p.rows[i], fontsize=LABEL_PT, color=theme.LABEL_COLOR, ha="right",
                    va="center_baseline", transform=beside)
    width = c // p.heads
    inset = 0.12  # neighbouring blocks' outlines must not overlap
    for i in range(p.heads):
        ax.add_patch(Rectangle((i * width - 0.5 + inset, -0.5 + inset), width - 2 * inset, r - 2 * inset,
                               fill=False, lw=2.2, ec=theme.head_color(i * p.readers)))
    ax.text(0.5, 0.0, _caption(p), fontsize=9, color=theme.LABEL_COLOR, ha="center", va="top",
            transform=ax.transAxes + ScaledTranslation(0.0, -CAPTION_PAD / 72, inches))


def _caption(p: Panel) -> str:
    """What is written under a panel: what it is, and the largest |value| it was divided by."""
    return f"{p.caption}\nlargest |value| {float(np.max(np.abs(p.m))) or 1.0:.2f}"


def _height(p: Panel, unit: float) -> float:
    """A panel's height at its full width: a weight matrix is square; a matrix with a row per token is at least
    :data:`ROW_BOX` of its width tall per row (up to square), so each token has a row, not a sliver."""
    r, c = p.m.shape
    if p.rows is None:
        return unit * p.units * r / c
    return p.units * unit * min(1.0, max(r / c, ROW_BOX * r))


def split_figure(trace: Trace, label: str | None = None, *, hide_rules: bool = False, pen: Pen | None = None,
                 dpi: float | None = None) -> Any:
    """The split and the merge of ``trace`` as one figure; ``label`` replaces the line naming the weights; ``dpi``:
    the PNG's, so the renderer that measures the texts draws them."""
    from matplotlib.patches import Patch

    from mhacli.render.figures.inline import new_figure
    from mhacli.render.figures.layout import INSET, PT, Measured, Slide, axes_at, bar_room, sup_index

    h, d, dk, n = trace.num_heads, trace.d_model, trace.d_k, trace.n_tokens
    pen = pen or Pen()
    toks = [pen.shown(t) for t in trace.tokens]  # a token of any length labels a row in at most 12 characters
    blocks = [trace.head_weights(i) for i in range(h)]  # h × (W_q^i, W_k^i, W_v^i), each (d, d/h)
    first, last = sup_index(1), sup_index(h)
    q = np.asarray(trace.Q).transpose(1, 0, 2).reshape(n, d)  # (h, N, d/h) -> (N, d)
    # X is not split: every head reads all of it (its own W_q^i makes Q^i), so X has one frame, no head's.
    reads = ("every head's Q and K read all of X;\nits V reads E, the words alone" if trace.word_values
             else "every head reads all of X")  # a grammar model's values come from the word embeddings
    top = [Panel(np.asarray(trace.X), "X  (N × d)", f"the tokens' vectors, one row each:\n{reads}", 1, toks, 1.5)]
    g = trace.kv_heads
    for k, name in enumerate(("q", "k", "v")):
        if name != "q" and g != h:  # shared keys and values: one block per group j, read by h/g heads
            per_group = np.asarray(trace.W_k if name == "k" else trace.W_v).T  # (g·d/h, d) -> (d, g·d/h)
            top.append(Panel(per_group, f"W_{name}{first} … W_{name}{sup_index(g)}",
                             f"block j is W_{name}^j: d × d/h = {d} × {dk},\nread by {h // g} heads, in the "
                             "first one's colour", g, None, g / h, readers=h // g))
            continue
        per_head = np.concatenate([b[k] for b in blocks], axis=1)  # h × (d, d/h) -> (d, d)
        top.append(Panel(per_head, f"W_{name}{first} … W_{name}{last}",
                         f"block i is W_{name}^i: d × d/h = {d} × {dk}", h, None, 1.0))
    top.append(Panel(q, f"Q{first} … Q{last}", f"block i is Q^i = X W_q^i: N × d/h = {n} × {dk}", h, toks, 1.5,
                     labelled=False))
    bottom = [Panel(np.asarray(trace.concat), "H = [head_1 … head_h]  (N × d)", "head_i = A^i V^i, side by side",
                    h, toks, 2.0),
              Panel(np.asarray(trace.W_o), "W^O  (d × d)", "column block i reads head i", h, None, 1.0),
              Panel(np.asarray(trace.output), "O = H W^Oᵀ  (N × d)", "every output mixes all heads", 1, toks, 2.0,
                    labelled=False)]

    fig = new_figure(figsize=FIG_SIZE, facecolor=theme.PAPER_COLOR, **({"dpi": dpi} if dpi else {}))
    width, height = FIG_SIZE
    m = Measured(fig)
    labelled = n <= MAX_TOKEN_LABELS
    row_w = m.widest(toks, LABEL_PT) + TICK * PT if labelled else 0.0
    title_h = [m.tallest([p.title for p in row], 12.0) + TITLE_PAD * PT for row in (top, bottom)]
    cap_h = [m.tallest([_caption(p) for p in row], 9.0) + CAPTION_PAD * PT for row in (top, bottom)]
    bar_w = GAP + bar_room(m, [f"{v:.1f}".replace("-", "−") for v in BAR_TICKS], BAR_LABEL, 10.0)
    wide = {id(p): max(m.size(_caption(p), 9.0)[0], m.size(p.title, 12.0)[0]) for p in top + bottom}

    def spacing(row: list[Panel], unit: float) -> list[float]:
        """Inches from each panel's right edge to the next one's left edge: its row labels, and room for texts
        wider than the panels (centred on them)."""
        over = [max(0.0, (wide[id(p)] - p.units * unit) / 2) for p in row]
        return [max(GAP + (row_w if b.rows is not None and b.labelled else 0.0), over[k] + over[k + 1] + GAP)
                for k, b in enumerate(row[1:])]

    def row_width(row: list[Panel], unit: float, extra: float) -> float:
        lead = row_w if row[0].rows is not None else 0.0
        return lead + sum(p.units for p in row) * unit + sum(spacing(row, unit)) + extra

    # A weight matrix's side ("unit"): what the width leaves (twice: the spacing depends on it), and the height.
    unit = 3.0
    for _ in range(2):
        unit = min((width - 2 * INSET - (row_width(top, unit, 0.0) - 6.0 * unit)) / 6.0,
                   (width - 2 * INSET - (row_width(bottom, unit, bar_w) - 5.0 * unit)) / 5.0)
    slide = Slide(fig)
    sub = label if label is not None else weights_note(trace, hide_rules)
    _, _, head_h = slide.text(f"One matrix, {h} heads: d = {d} split into h = {h} blocks of d/h = {dk}\n{sub}",
                              width / 2, INSET, fontsize=15, ha="center", color=theme.LABEL_COLOR)
    v_from = "E" if trace.word_values else "X"  # a grammar model's values read the word embeddings alone
    split_title = (f"The split: W_q, W_k and W_v cut into h = {h} blocks of d/h = {dk} columns (Q^i = X W_q^i, "
                   + ("likewise K^i and V^i)" if v_from == "X" else "likewise K^i; V^i = E W_v^i)") if g == h else
                   f"The split: W_q cut into h = {h} blocks of d/h = {dk} columns (Q^i = X W_q^i); W_k and W_v into "
                   f"g = {g} (K^j = X W_k^j, V^j = {v_from} W_v^j)")
    merge_title = "The merge: the heads' outputs side by side, mixed by W^O"
    sub_h = m.tallest([split_title, merge_title], 12.0)
    legend_h = m.tallest(["head 1"], 11.0) + 1.3 * 11.0 * PT  # its text, its border pad and the pad to the edge
    fixed = INSET + head_h + 2 * (2 * _SPACE + sub_h) + sum(title_h) + sum(cap_h) + legend_h + INSET
    # Each row's band: as tall as its tallest panel wants; when both do not fit, the split gets 1.25 parts of the
    # height to the merge's 1 (its X and Q are where the tokens are labelled first).
    need = [max(_height(p, unit) for p in row) for row in (top, bottom)]
    room = height - fixed - 3 * _SPACE
    bands = need if sum(need) <= room else [min(need[0], room * 1.25 / 2.25), 0.0]
    bands[1] = min(need[1], room - bands[0])
    spare = (height - fixed - sum(bands)) / 3  # what is left, between the rows and above the legend

    y = INSET + head_h + spare / 2
    placed: list[tuple[Panel, Any]] = []
    last_x = 0.0
    for k_row, (row, title, extra) in enumerate(((top, split_title, 0.0), (bottom, merge_title, bar_w))):
        band = bands[k_row]
        y += _SPACE
        slide.text(title, width / 2, y, fontsize=12, ha="center", color=theme.LABEL_COLOR)
        y += sub_h + _SPACE + title_h[k_row]
        middle = y + band / 2
        x = (width - row_width(row, unit, extra)) / 2 + (row_w if row[0].rows is not None else 0.0)
        for k, p in enumerate(row):
            slot = p.units * unit
            ph = min(_height(p, unit), band)
            w = slot if p.rows is not None else ph * p.m.shape[1] / p.m.shape[0]  # a weight matrix stays square
            placed.append((p, axes_at(fig, x + (slot - w) / 2, middle - ph / 2, w, ph)))
            x += slot + (spacing(row, unit)[k] if k < len(row) - 1 else 0.0)
        y += band + cap_h[k_row] + spare
        last_x = x
    width, height = slide.hang(width, height)

    for p, ax in placed:
        pitch = ax.get_position().height * height * 72 / max(len(p.m), 1)  # points per row
        step = max(1, math.ceil(LABEL_PT * ROW_GAP / pitch)) if p.rows is not None else 1
        _draw_panel(ax, p, step)
    placed[0][1].patches[0].set_edgecolor(theme.LABEL_COLOR)
    placed[-1][1].patches[0].set_edgecolor(theme.LABEL_COLOR)  # O belongs to no one head

    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    o_ax = placed[-1][1]
    o_top = (1 - o_ax.get_position().y1) * height
    o_h = o_ax.get_position().height * height
    cax = axes_at(fig, last_x + GAP, o_top + 0.05 * o_h, BAR_WIDTH, 0.9 * o_h)
    bar = fig.colorbar(ScalarMappable(norm=Normalize(-1.0, 1.0), cmap=SPLIT_CMAP), cax=cax, ticks=list(BAR_TICKS))
    bar.set_label(BAR_LABEL, fontsize=10)
    shown = min(h, MAX_LEGEND_HEADS)
    handles = [Patch(facecolor="none", edgecolor=theme.head_color(i), linewidth=2.2, label=f"head {i + 1}")
               for i in range(shown)]
    more = f"heads {shown + 1}–{h} in the same palette" if h > shown else None
    if more:
        handles.append(Patch(facecolor="none", edgecolor="none", label=more))
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, INSET / height), ncols=len(handles),
               fontsize=11, frameon=False, borderaxespad=0.0,
               labelcolor=[theme.head_text_color(i) for i in range(shown)] + ([theme.LABEL_COLOR] if more else []))
    return fig
