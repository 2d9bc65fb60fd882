"""``mha shapes``' shared keys and values: MHA, GQA and MQA side by side, with the cache each keeps (the numbers of
:mod:`mhacli.attention.kv` as a Rich table or Markdown)."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mhacli.attention.config import human_bytes
from mhacli.attention.kv import SideBySide
from mhacli.render import theme
from mhacli.render.fit import fitted_table


def binary_size(n: int) -> str:
    """Bytes in binary units with up to three digits: ``320 KiB``, ``1.25 GiB``, ``10 GiB``: the one size formatter
    of :func:`mhacli.attention.config.human_bytes`, at three significant digits (a cache's sizes as the papers give
    them) where the memory messages print one decimal."""
    return human_bytes(n, digits=3)


def count(n: int) -> str:
    """A count as written in papers: exact below a million, then ``151.0 M``, ``4.4 G``."""
    for size, unit in ((10**12, "T"), (10**9, "G"), (10**6, "M")):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,}"


def _rows(table: SideBySide) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The column heads and the rows (label, one cell per sharing) of the side-by-side table."""
    shown = table.sized
    heads = [s.name for s in shown]
    rows = [
        ("key/value heads g", [f"{s.kv_heads:,}" for s in shown]),
        ("query heads per group h/g", [f"{s.per_group:,}" for s in shown]),
        ("parameters per layer", [count(s.parameters) for s in shown]),
        ("K, V projections, mult-adds", [count(s.kv_projection_madds) for s in shown]),
        ("Q·Kᵀ and A·V, mult-adds", [count(s.attention_madds) for s in shown]),
        ("KV cache per token", [binary_size(s.cache_per_token) for s in shown]),
        (f"KV cache for {table.n_tokens:,} tokens", [binary_size(s.cache_per_sequence) for s in shown]),
    ]
    return heads, rows


def _notes(table: SideBySide) -> list[str]:
    """What the table's numbers mean, each sentence computed from them."""
    layer, n_tokens = table.layer, table.n_tokens
    d, h, g, dh = layer.d_model, layer.heads, layer.kv_heads, layer.head_dim
    notes = [f"Query head i reads key/value group ⌊i/(h/g)⌋ = ⌊i/{h // g}⌋."
             if g < h else "g = h: every query head has its own keys and values, as in the article.",
             f"Parameters per layer: 2·d·h·d_h for W_q and W_o (unchanged) + 2·d·g·d_h for W_k and W_v = "
             f"2·{d:,}·{h:,}·{dh:,} + 2·{d:,}·{g:,}·{dh:,} = {layer.parameters:,}"
             + (f", {layer.parameters / table.mha_parameters:.0%} of MHA's {table.mha_parameters:,}." if g < h
                else "."),
             f"KV cache per token: 2·L·g·d_h·b = 2·{layer.layers:,}·{g:,}·{dh:,}·{layer.bytes_per_number} = "
             f"{layer.cache_per_token:,} bytes ({layer.dtype}).",
             "Q·Kᵀ and A·V cost the same for every g (h·N²·d_h each): every query head still scores every "
             "key; only the K and V projections and the cache shrink."]
    if h * dh == d:
        notes.insert(2, "With d_h = d/h the article's claim (h heads cost what one head costs, 4d² with W_o) "
                     "holds for MHA; sharing keys and values goes below it: 2d²(1 + g/h).")
    latent = layer.latent_per_token
    if latent is not None:
        notes.append(f"Latent (MLA) cache: d_c + d_r = {layer.kv_lora_rank:,} + {layer.rope_dim or 0:,} = "
                     f"{layer.latent_numbers:,} numbers per token and layer against MHA's 2·h·d_h = "
                     f"{table.mha_cache_numbers:,}: {binary_size(latent)} per token, "
                     f"{binary_size(n_tokens * latent)} for {n_tokens:,} tokens.")
    return notes


def sharing_view(sizes: SideBySide) -> RenderableType:
    """The side-by-side table of a layer's sharing against MHA and MQA, and its notes."""
    layer = sizes.layer
    heads, rows = _rows(sizes)
    title = (f"Shared keys and values: L = {layer.layers:,} "
             f"layer{'s' if layer.layers != 1 else ''} · {layer.dtype} · d_h = {layer.head_dim:,}")
    table = Table(title=Text(title, style=theme.STYLE_TITLE), title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("", overflow="fold")
    for name in heads:
        table.add_column(name, justify="right", overflow="fold")
    for label, cells in rows:
        table.add_row(label, *cells)
    notes = [Padding(Text(n, style=theme.STYLE_DIM), (0, 0, 0, 2)) for n in _notes(sizes)]
    return Group(fitted_table(table), *notes)


def sharing_markdown(table: SideBySide) -> str:
    """The same table and notes in Markdown, for slides."""
    layer = table.layer
    heads, rows = _rows(table)
    lines = ["", f"| L = {layer.layers:,}, {layer.dtype} | " + " | ".join(heads) + " |",
             "|---|" + "---:|" * len(heads)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    lines += ["", *(f"- {n}" for n in _notes(table))]
    return "\n".join(lines) + "\n"


__all__ = ["binary_size", "count", "sharing_markdown", "sharing_view"]
