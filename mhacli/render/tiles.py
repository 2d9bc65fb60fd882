"""``mha tiles`` in the terminal: one query row's online softmax, block by block, and what tiling saves.

Reads a :class:`mhacli.attention.tiles.Tiled` and the numbers the command measured; computes nothing.
"""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mhacli.attention.tiles import Check, Tiled
from mhacli.render import theme
from mhacli.render.fit import fitted_table


def _number(x: float) -> str:
    """A score or sum in four digits; −∞ for a block the causal mask hides from this query."""
    return "−∞" if x == -math.inf else f"{x:.4g}".replace("-", "−")


def tiles_view(tiled: Tiled, query_token: str, head: int, heads: int, causal: bool, check: Check,
               itemsize: int) -> list[RenderableType]:
    """The header, the query row's table of running max, rescale and running sum, and the check against the full
    computation (``check``: as the command measured it; ``itemsize``: bytes a number)."""
    n, b = tiled.output.shape[0], tiled.block
    head_text = Text()
    head_text.append(f"head {head} of {heads} · N = {n:,} keys in blocks of B = {b:,} · "
                     f"{'causal' if causal else 'bidirectional'}\n")
    head_text.append("softmax(Q Kᵀ/√d_k) V one block of keys at a time (the online softmax of FlashAttention, "
                     "Dao et al. 2022): no N×N matrix is ever built.", style=theme.STYLE_DIM)
    table = Table(title=Text(f"Query {tiled.query} '{query_token}', block by block", style=theme.STYLE_TITLE),
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("block", "keys", "block max", "running max m", "rescale", "running sum l"):
        table.add_column(name, justify="right", overflow="fold")
    for step in tiled.steps:
        keys = f"{step.first_key}–{step.last_key}" if step.last_key > step.first_key else f"{step.first_key}"
        table.add_row(f"{step.block + 1}", keys, _number(step.block_max), _number(step.running_max),
                      _number(step.rescale), _number(step.running_sum))
    verdict = Text("largest |tiled − full| over all N rows: ")
    verdict.append(f"{check.difference:.3g}", style=theme.STYLE_OK if check.same else theme.STYLE_BAD)
    verdict.append(f" (round-off allowed: {check.tolerance:g})  → "
                   + ("the same attention" if check.same else "NOT the same attention"))
    memory = Text(f"scores held at once: N×B = {n:,}×{b:,} = {tiled.held:,} numbers "
                  f"({tiled.held * itemsize:,} bytes), against N×N = {tiled.full:,} for the full computation "
                  f"(B/N = {b:,}/{n:,} of it).")
    notes = [Text("Each block: m_new = max(m, block max); the sums so far are multiplied by the rescale "
                  "exp(m − m_new), then the block's exp(score − m_new) are added. At the end, output = weighted "
                  "sum / l.", style=theme.STYLE_DIM), verdict, memory]
    return [Panel(head_text, title="Attention in tiles", title_align="left", box=box.ROUNDED, expand=False),
            Text(), Group(fitted_table(table), *(Padding(t, (0, 0, 0, 2)) for t in notes))]


__all__ = ["tiles_view"]
