"""``mha shapes`` in the terminal: every step's shape and cost, and the parameter count, for N, d and h alone.

The numbers of :mod:`mhacli.attention.steps` as a Rich table or Markdown; no numpy, so it starts quickly.
"""

from __future__ import annotations

from typing import Sequence

from rich import box
from rich.console import RenderableType
from rich.panel import Panel
from rich.text import Text

from mhacli.attention.steps import ParameterCount, Step
from mhacli.render import theme
from mhacli.render.terminal import parameters_panel, steps_table


def shapes_view(n_tokens: int, steps: Sequence[Step], params: ParameterCount, causal: bool,
                efficiency: str | None = None) -> list[RenderableType]:
    """The step table and parameter count for N, d, h alone (``steps``, ``params`` and the ``efficiency`` sentence
    from the core; no numpy)."""
    d_model, heads = params.d_model, params.heads
    dk = d_model // heads
    head = Text()
    head.append(f"N = {n_tokens:,} tokens   d = {d_model:,}   h = {heads:,}   d/h = {dk:,}\n")
    head.append(("causal (later keys masked)" if causal else "bidirectional (no mask)")
                + " · every number follows from N, d and h alone", style=theme.STYLE_DIM)
    return [
        Panel(head, title="Shapes of multi-head attention", title_align="left", box=box.ROUNDED, expand=False),
        Text(),
        steps_table(steps, heads, title="Steps", efficiency=efficiency),
        Text(),
        parameters_panel(ParameterCount(d_model, heads), title="Parameters"),
    ]


def shapes_markdown(n_tokens: int, steps: Sequence[Step], pc: ParameterCount, causal: bool, total: int) -> str:
    """The same numbers as a Markdown table, to paste into slides or notes (``total``: the steps' multiply-adds)."""
    heads = pc.heads
    single, multi = pc.arithmetic()
    lines = [
        f"N = {n_tokens:,}, d = {pc.d_model:,}, h = {heads:,}, d/h = {pc.d_k:,}"
        + (" (causal)" if causal else ""),
        "",
        "| step | formula | shape | numbers | mult-adds |",
        "|---|---|---|---|---:|",
    ]
    for s in steps:
        per = " (×h)" if s.per_head and heads > 1 else ""
        lines.append(f"| {s.name}{per} | {s.formula} | {s.shape} | {s.shape_numeric} | {s.madds:,} |")
    lines += [
        f"| **total** | | | | **{total:,}** |",
        "",
        "| parameters | count |",
        "|---|---:|",
        f"| 1 head, W_q, W_k, W_v each d×d | {single} |",
        f"| {heads} heads, W_q^i, W_k^i, W_v^i each d×d/h | {multi} |",
        f"| W^O, d×d | {pc.w_o:,} |",
        f"| **total with W^O** | **{pc.total:,}** |",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["shapes_markdown", "shapes_view"]
