"""``mha bench --tiles``: the peak memory of one head's attention against N, computed whole (N×N) and in tiles of
keys (N×B), as fast kernels never build the N×N matrix (FlashAttention, Dao et al. 2022).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mhacli.bench.baselines import numpy_per_head
from mhacli.bench.runner import human_bytes, peak_bytes
from mhacli.attention.errors import UsageError
from mhacli.attention.tiles import tiled_attention
from mhacli.render import theme
from mhacli.render.fit import fitted_table

MAX_TOKENS = 8192  # the target size: the tiled peak at most 1/8 of the whole one there
MIN_TOKENS = 256
TOP_TOKENS = 32_768  # the whole way holds 8 GiB of scores and temporaries at 16,384 tokens already: no further
BLOCK = 256  # keys per tile
D_K = 64  # one head of width 64: d = 512 and h = 8, the bench's default layer


@dataclass(frozen=True)
class MemoryRow:
    """Both ways at one N: their peaks, the largest difference of their outputs."""

    n: int
    whole_peak: int  # bytes
    tiled_peak: int  # bytes
    difference: float  # largest |tiled − whole| of the layer's output

    @property
    def ratio(self) -> float:
        """The tiled peak over the whole one."""
        return self.tiled_peak / self.whole_peak


def token_counts(max_tokens: int) -> list[int]:
    """N = 256, 512, … up to ``max_tokens``."""
    if isinstance(max_tokens, bool) or not MIN_TOKENS <= max_tokens <= TOP_TOKENS:
        raise UsageError(f"--max-tokens with --tiles must be from {MIN_TOKENS} to {TOP_TOKENS:,}, "
                         f"got {max_tokens!r}.")
    counts = [MIN_TOKENS]
    while counts[-1] * 2 <= max_tokens:
        counts.append(counts[-1] * 2)
    return counts


def tiled_layer(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray, w_o: np.ndarray,
                block: int) -> np.ndarray:
    """One head, its attention in tiles of ``block`` keys: X (N, d_k) -> O (N, d_k)."""
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (N, d_k) each
    return tiled_attention(q, k, v, block) @ w_o.T  # (N, d_k) @ (d_k, d_k)


def memory_curve(max_tokens: int = MAX_TOKENS, block: int = BLOCK, d_k: int = D_K, seed: int = 0,
                 tick: Callable[[str], None] | None = None) -> list[MemoryRow]:
    """Both ways' peak memory for every N up to ``max_tokens`` (one head of width ``d_k``, float64)."""
    rng = np.random.default_rng(seed)
    w_q, w_k, w_v, w_o = rng.standard_normal((4, d_k, d_k)) / np.sqrt(d_k)  # (d_k, d_k) each
    rows = []
    for n in token_counts(max_tokens):
        x = rng.standard_normal((n, d_k))  # (N, d_k)
        outputs: dict[str, np.ndarray] = {}

        def whole() -> None:
            outputs["whole"] = numpy_per_head(x, w_q, w_k, w_v, w_o, 1, False)

        def tiled() -> None:
            outputs["tiled"] = tiled_layer(x, w_q, w_k, w_v, w_o, min(block, n))

        whole_peak, tiled_peak = peak_bytes(whole), peak_bytes(tiled)
        rows.append(MemoryRow(n, whole_peak, tiled_peak, float(np.max(np.abs(outputs["tiled"] - outputs["whole"])))))
        if tick is not None:
            tick(f"N = {n:,}")
    return rows


def _ratio(ratio: float) -> str:
    """1/24 for a saving; the plain ratio when tiles save less than half (their block is most of N)."""
    return f"1/{1 / ratio:.0f}" if ratio < 0.5 else f"{ratio:.2f}"


def tiles_document(rows: list[MemoryRow], block: int = BLOCK, d_k: int = D_K) -> dict[str, Any]:
    """``mha bench --tiles --json``: the settings and each N's peaks in bytes."""
    return {"block": block, "d_k": d_k, "dtype": "float64",
            "rows": [{**asdict(r), "ratio": r.ratio} for r in rows]}


def tiles_table(rows: list[MemoryRow], block: int = BLOCK, d_k: int = D_K) -> Group:
    """The memory curve as a Rich table, with what its columns mean."""
    table = Table(title=Text("mha bench --tiles: peak memory", style=theme.STYLE_TITLE), title_justify="left",
                  box=None, pad_edge=False)
    for name in ("N", "whole N×N", "tiles N×B", "tiles ÷ whole", "largest |diff|"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(f"{r.n:,}", human_bytes(r.whole_peak), human_bytes(r.tiled_peak), _ratio(r.ratio),
                      f"{r.difference:.1e}")
    notes = [Text(f"One head of width d_k = {d_k}, float64, tiles of B = {block} keys. Peak memory of one call, as "
                  "tracemalloc saw it: the whole way builds the N×N scores and their temporaries; the tiles hold "
                  "N×B scores at a time (the online softmax).", style=theme.STYLE_DIM),
             Text("largest |diff|: the two outputs, number by number.", style=theme.STYLE_DIM)]
    return Group(fitted_table(table), *notes)


__all__ = ["BLOCK", "D_K", "MAX_TOKENS", "MemoryRow", "memory_curve", "tiled_layer", "tiles_document",
           "tiles_table", "token_counts"]
