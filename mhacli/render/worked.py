"""``mha explain --worked``: every matrix of a hand-sized run, each under the formula that made it.

In the article's order (X, the weights and each head's slice, per head Q^i … head_i, then H, W^O, O). Whole
numbers print whole, so the products before the softmax can be redone exactly; the rest to 3 decimals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mhacli.attention.trace import Trace
from mhacli.render import theme


def _cell(v: float) -> str:
    if np.isneginf(v):
        return "−∞"
    if float(v).is_integer():
        return f"{int(v)}".replace("-", "−")
    return f"{v:.3f}".replace("-", "−")


def matrix(title: str, formula: str, m: np.ndarray, rows: Sequence[str] | None = None,
           cols: Sequence[str] | None = None, style: str = "") -> RenderableType:
    """One matrix with its name, formula and shape above it."""
    r, c = m.shape
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=cols is not None)
    table.add_column("", no_wrap=True, style=theme.STYLE_DIM)
    for j in range(c):
        table.add_column(cols[j] if cols else "", justify="right", no_wrap=True)
    for i in range(r):
        table.add_row(rows[i] if rows else "", *(_cell(x) for x in m[i]))
    head = Text()
    head.append(title, style=style or theme.STYLE_TITLE)
    head.append(f"  {formula}   ({r}×{c})", style=theme.STYLE_DIM)
    return Group(head, table, Text(""))


def worked_view(trace: Trace) -> list[RenderableType]:
    """Every matrix of ``trace`` in the order the article computes them."""
    toks, h = list(trace.tokens), trace.num_heads
    dk = trace.d_k
    intro = Text.assemble(
        ("A worked example you can redo by hand", theme.STYLE_TITLE),
        (f"\nN = {trace.n_tokens} tokens, d = {trace.d_model}, h = {h}, d/h = {dk}. X and the weights are whole "
         f"numbers (seed {trace.config.seed}), so every product up to S^i is exact; from S^i on, values are rounded "
         f"to 3 decimals. Weights are in PyTorch's layout: Q = X W_qᵀ, and head i's W_q^i is rows "
         f"i·d/h … (i+1)·d/h − 1 of W_q, transposed.", theme.STYLE_DIM),
    )
    parts: list[RenderableType] = [intro, Text(""),
                                   matrix("X", "the input, one row per token", np.asarray(trace.X), toks)]
    for name, w in (("W_q", trace.W_q), ("W_k", trace.W_k), ("W_v", trace.W_v)):
        parts.append(matrix(name, "full d×d weight, PyTorch layout", np.asarray(w)))
    scale = f"√{dk}" if dk != 1 else "1"
    for i in range(h):
        style = theme.head_style(i)
        k = i + 1
        parts.append(Text(f"Head {k}", style=style))
        for sym, w in zip("qkv", trace.head_weights(i)):  # the article's W^i, derived by the trace
            rows = f"rows {i * dk}–{(i + 1) * dk - 1} of W_{sym}, transposed"
            parts.append(matrix(f"W_{sym}^{k}", rows, np.asarray(w), style=style))
        parts += [
            matrix(f"Q^{k}", f"X W_q^{k}", np.asarray(trace.Q[i]), toks, style=style),
            matrix(f"K^{k}", f"X W_k^{k}", np.asarray(trace.K[i]), toks, style=style),
            matrix(f"V^{k}", f"X W_v^{k}", np.asarray(trace.V[i]), toks, style=style),
            matrix(f"S^{k}", f"Q^{k} K^{k}ᵀ / {scale}" + (", later keys −∞" if trace.config.causal else ""),
                   np.asarray(trace.scores[i]), toks, toks, style=style),
            matrix(f"A^{k}", f"softmax of each row of S^{k}", np.asarray(trace.weights[i]), toks, toks, style=style),
            matrix(f"head_{k}", f"A^{k} V^{k}", np.asarray(trace.heads[i]), toks, style=style),
        ]
    parts += [
        matrix("H", "[" + " ".join(f"head_{i + 1}" for i in range(h)) + "], side by side",
               np.asarray(trace.concat), toks),
        matrix("W^O", "output weight, PyTorch layout", np.asarray(trace.W_o)),
        matrix("O", "H W^Oᵀ", np.asarray(trace.output), toks),
    ]
    return parts
