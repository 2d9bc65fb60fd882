"""split.png: how X and three weight matrices become h heads, and how W^O mixes them back.

Top row, the split, in the article's orientation: X (N × d), then W_q, W_k and W_v
each as its h per-head blocks [W_q¹ | W_q² | …] (every W_q^i is d × d/h, the
transposed row block i of PyTorch's weight), then Q = [Q¹ | Q² | …] with
Q^i = X W_q^i. Bottom row, the merge: the heads' outputs side by side as H, W^O whose
column block i reads head i, and O. Every block is outlined in its head's colour, the
colours of every other figure; a legend names them and one colour bar reads every panel.
X and O have one plain frame: every head reads all of X, and every column of O mixes all heads.
Laid out by matplotlib (constrained layout), drawn on a plain ``Figure``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.core.trace import Trace
from mhacli.render import theme
from mhacli.render.labels import weights_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SPLIT_CMAP = "PuOr"  # diverging and colour-blind safe: negative and positive values read apart
MAX_TOKEN_LABELS = 24  # beyond this the rows of X, Q, H and O are not labelled one by one
MAX_LEGEND_HEADS = 8
LABEL_PT = 9  # the row labels' size, points
ROW_GAP = 1.25  # a label needs its height and a quarter more, or the row labels touch
ROW_BOX = 0.045  # a token's row is at least this share of its panel's width tall (11 tokens: half as tall as wide)


def _panel(ax: Axes, m: np.ndarray, title: str, caption: str, heads: int, rows: Sequence[str] | None) -> None:
    """One matrix, each value divided by the panel's largest |value|, its h column blocks outlined.

    A matrix with a row per token (``rows``) is drawn at least :data:`ROW_BOX` of its width tall per row
    (up to square), so each token's label has a row of its own height, not a sliver."""
    from matplotlib.patches import Rectangle

    r, c = m.shape
    scale = float(np.max(np.abs(m))) or 1.0
    ax.imshow(m / scale, cmap=SPLIT_CMAP, vmin=-1.0, vmax=1.0, interpolation="nearest",
              aspect="auto" if rows is not None else "equal")
    if rows is not None:
        ax.set_box_aspect(min(1.0, max(r / c, ROW_BOX * r)))
    ax.set_title(title, fontsize=12, color=theme.LABEL_COLOR)
    ax.set_xticks([])
    if rows is not None and r <= MAX_TOKEN_LABELS:
        ax.set_yticks(range(r), list(rows), fontsize=LABEL_PT)
    else:
        ax.set_yticks([])
    ax.tick_params(length=0)
    width = c // heads
    inset = 0.12  # neighbouring blocks' outlines must not overlap
    for i in range(heads):
        ax.add_patch(Rectangle((i * width - 0.5 + inset, -0.5 + inset), width - 2 * inset, r - 2 * inset,
                               fill=False, lw=2.2, ec=theme.head_color(i)))
    ax.set_xlabel(f"{caption}\nlargest |value| {scale:.2f}", fontsize=9, color=theme.LABEL_COLOR)


def split_figure(trace: Trace, label: str | None = None, *, hide_rules: bool = False) -> Any:
    """The split and the merge of ``trace`` as one figure (matplotlib ``Figure``, never pyplot).

    ``label`` replaces the line that names the weights (by default :func:`~mhacli.render.labels.weights_note`).
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch

    from mhacli.render.figures.inline import new_figure
    from mhacli.render.figures.layout import settle, sup_index

    h, d, dk, n = trace.num_heads, trace.d_model, trace.d_k, trace.n_tokens
    toks = list(trace.tokens)
    blocks = [trace.head_weights(i) for i in range(h)]  # h × (W_q^i, W_k^i, W_v^i), each (d, d/h)
    fig = new_figure(figsize=(16, 8.6), facecolor=theme.PAPER_COLOR, layout="constrained")
    split, merge = fig.subfigures(2, 1, height_ratios=(1.15, 1.0))
    top = split.subplots(1, 5, width_ratios=(1.5, 1, 1, 1, 1.5))  # X and Q: room for a label per token
    bottom = merge.subplots(1, 3)
    first, last = sup_index(1), sup_index(h)
    # X is not split: every head reads all of it (its own W_q^i makes Q^i), so X has one frame, no head's.
    _panel(top[0], np.asarray(trace.X), "X  (N × d)", "the tokens' vectors, one row each:\nevery head reads all of X",
           1, toks)
    top[0].patches[0].set_edgecolor(theme.LABEL_COLOR)
    for ax, k, name in zip(top[1:4], range(3), ("q", "k", "v")):
        per_head = np.concatenate([b[k] for b in blocks], axis=1)  # h × (d, d/h) -> (d, d)
        _panel(ax, per_head, f"W_{name}{first} … W_{name}{last}", f"block i is W_{name}^i: d × d/h = {d} × {dk}",
               h, None)
    q = np.asarray(trace.Q).transpose(1, 0, 2).reshape(n, d)  # (h, N, d/h) -> (N, d)
    _panel(top[4], q, f"Q{first} … Q{last}", f"block i is Q^i = X W_q^i: N × d/h = {n} × {dk}", h, toks)
    _panel(bottom[0], np.asarray(trace.concat), "H = [head_1 … head_h]  (N × d)",
           "head_i = A^i V^i, side by side", h, toks)
    _panel(bottom[1], np.asarray(trace.W_o), "W^O  (d × d)", "column block i reads head i", h, None)
    _panel(bottom[2], np.asarray(trace.output), "O = H W^Oᵀ  (N × d)", "every output mixes all heads", 1, toks)
    bottom[2].patches[0].set_edgecolor(theme.LABEL_COLOR)  # O belongs to no one head

    split.suptitle(f"The split: W_q, W_k and W_v cut into h = {h} blocks of d/h = {dk} columns (Q^i = X W_q^i, "
                   "likewise K^i and V^i)", fontsize=12, color=theme.LABEL_COLOR)
    merge.suptitle("The merge: the heads' outputs side by side, mixed by W^O", fontsize=12,
                   color=theme.LABEL_COLOR)
    sub = label if label is not None else weights_note(trace, hide_rules)
    fig.suptitle(f"One matrix, {h} heads: d = {d} split into h = {h} blocks of d/h = {dk}\n{sub}", fontsize=15,
                 color=theme.LABEL_COLOR)
    bar = merge.colorbar(ScalarMappable(norm=Normalize(-1.0, 1.0), cmap=SPLIT_CMAP), ax=list(bottom),
                         shrink=0.9, ticks=[-1, -0.5, 0, 0.5, 1])
    bar.set_label("value ÷ the panel's largest |value|", fontsize=10)
    shown = min(h, MAX_LEGEND_HEADS)
    handles = [Patch(facecolor="none", edgecolor=theme.head_color(i), linewidth=2.2, label=f"head {i + 1}")
               for i in range(shown)]
    more = f"heads {shown + 1}–{h} in the same palette" if h > shown else None
    if more:
        handles.append(Patch(facecolor="none", edgecolor="none", label=more))
    merge.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=11, frameon=False,
                 labelcolor=[theme.head_text_color(i) for i in range(shown)] + ([theme.LABEL_COLOR] if more else []))
    if _thin_crowded_rows(fig, [top[0], top[4], bottom[0], bottom[2]], toks):
        return settle(fig)  # fewer labels: laid out once more, and kept
    fig.set_layout_engine(None)  # the layout pass that measured the rows placed everything: kept, no save redoes it
    return fig


def _thin_crowded_rows(fig: Any, axes: Sequence[Axes], tokens: Sequence[str]) -> bool:
    """Label every k-th row where matplotlib's layout left a row less height than its label needs.

    The panels' heights come from the constrained layout, so they are read from a layout pass, not guessed.
    Returns whether any panel's labels were thinned."""
    import math

    labelled = [ax for ax in axes if len(ax.get_yticks())]
    if not labelled:
        return False
    fig.get_layout_engine().execute(fig)  # the layout alone places the panels: no draw needed to read them
    thinned = False
    for ax in labelled:
        ax.apply_aspect()  # the box aspect, as a draw applies it
        pitch = ax.get_window_extent().height / len(tokens)  # display pixels per row
        need = LABEL_PT * ROW_GAP * fig.dpi / 72  # display pixels a label takes, with a little air
        step = max(1, math.ceil(need / pitch)) if pitch > 0 else len(tokens)
        if step > 1:
            ax.set_yticks(range(0, len(tokens), step), list(tokens)[::step], fontsize=LABEL_PT)
            thinned = True
    return thinned
