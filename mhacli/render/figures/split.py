"""split.png: how one weight matrix becomes h heads and how W^O mixes them back.

Left to right: W_q cut into h blocks of rows (head i owns rows i·d/h … in
PyTorch's layout), Q = X W_qᵀ whose column blocks are the heads' Q^i, the heads'
outputs side by side as H, W^O whose column blocks each read one head, and O.
Every block is outlined in its head's colour, the same colours as every other figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mhacli.core.trace import Trace
from mhacli.render import theme
from mhacli.render.labels import weights_note


def _panel(ax: Any, m: np.ndarray, title: str, blocks: str, heads: int, rows: list[str] | None,
           caption: str) -> None:
    """One matrix, shaded by value (a colour-blind-safe diverging map), its head blocks outlined."""
    from matplotlib.patches import Rectangle

    r, c = m.shape
    lim = float(np.max(np.abs(m))) or 1.0
    ax.imshow(m, cmap="PuOr", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=13, color=theme.LABEL_COLOR, pad=8)
    ax.set_xticks([])
    if rows is not None and r <= 24:
        ax.set_yticks(range(r), rows, fontsize=10)
    else:
        ax.set_yticks([])
    size = (r if blocks == "rows" else c) // heads
    inset = 0.12  # neighbouring blocks' outlines must not overlap
    for i in range(heads):
        if blocks == "rows":
            box = Rectangle((-0.5 + inset, i * size - 0.5 + inset), c - 2 * inset, size - 2 * inset,
                            fill=False, lw=2.5, ec=theme.head_color(i))
        else:
            box = Rectangle((i * size - 0.5 + inset, -0.5 + inset), size - 2 * inset, r - 2 * inset,
                            fill=False, lw=2.5, ec=theme.head_color(i))
        ax.add_patch(box)
    ax.set_xlabel(caption, fontsize=10, color=theme.LABEL_COLOR, labelpad=6)


def split_figure(trace: Trace, label: str | None = None, *, hide_rules: bool = False) -> Any:
    """The split and the merge of ``trace`` as one figure (matplotlib ``Figure``, never pyplot).

    ``label`` replaces the line that names the weights (by default :func:`~mhacli.render.labels.weights_note`).
    """
    from mhacli.render.figures.inline import new_figure

    h, d, dk = trace.num_heads, trace.d_model, trace.d_k
    toks = list(trace.tokens)
    fig = new_figure(figsize=(15, 4.6), facecolor=theme.PAPER_COLOR)
    axes = fig.subplots(1, 5, gridspec_kw={"wspace": 0.42, "left": 0.05, "right": 0.98, "top": 0.74,
                                           "bottom": 0.2})
    _panel(axes[0], np.asarray(trace.W_q), "W_q  (d×d)", "rows", h, None,
           f"head i owns rows i·{dk} … i·{dk}+{dk - 1}")
    _panel(axes[1], np.asarray(trace.Q).transpose(1, 0, 2).reshape(trace.n_tokens, d), "Q = X W_qᵀ  (N×d)",
           "cols", h, toks, f"column block i is Q^i (N×{dk})")
    _panel(axes[2], np.asarray(trace.concat), "H = [head_1 … head_h]", "cols", h, toks,
           "head_i = A^i V^i, side by side")
    _panel(axes[3], np.asarray(trace.W_o), "W^O  (d×d)", "cols", h, None,
           "column block i reads head i")
    axes[4].imshow(np.asarray(trace.output), cmap="PuOr", aspect="auto", interpolation="nearest",
                   vmin=-float(np.max(np.abs(trace.output))), vmax=float(np.max(np.abs(trace.output))))
    axes[4].set_title("O = H W^Oᵀ  (N×d)", fontsize=13, color=theme.LABEL_COLOR, pad=8)
    axes[4].set_xticks([])
    axes[4].set_yticks(range(trace.n_tokens) if trace.n_tokens <= 24 else [],
                       toks if trace.n_tokens <= 24 else [], fontsize=10)
    axes[4].set_xlabel("every output mixes all heads", fontsize=10, color=theme.LABEL_COLOR, labelpad=6)
    for left, right in zip(axes[:-1], axes[1:]):
        middle = (left.get_position().x1 + right.get_position().x0) / 2
        fig.text(middle, 0.775, "→", fontsize=20, ha="center", va="center", color=theme.LABEL_COLOR)
    names = "  ".join(f"head {i + 1}" for i in range(min(h, 8))) + (" …" if h > 8 else "")
    title = f"One matrix, {h} heads: d = {d} split into h = {h} blocks of d/h = {dk}"
    fig.suptitle(title, fontsize=15, color=theme.LABEL_COLOR, y=0.97)
    sub = label if label is not None else weights_note(trace, hide_rules)
    fig.text(0.5, 0.87, f"{sub} · outlines: {names}", ha="center", fontsize=11, color=theme.LABEL_COLOR)
    for i in range(min(h, 8)):
        fig.text(0.5 + (i - min(h, 8) / 2 + 0.5) * 0.07, 0.03, f"■ head {i + 1}", ha="center", fontsize=11,
                 color=theme.head_color(i))
    return fig
