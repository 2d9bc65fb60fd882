"""How large the figures of a run are, and whether they fit in memory: render's sizes, planned before drawing.

Arithmetic only (no matplotlib), so a command refuses figures that would not fit before it runs anything.
"""

from __future__ import annotations

import math

from mhacli.attention.config import BASELINE_BYTES, about_bytes, human_bytes
from mhacli.attention.errors import UsageError
from mhacli.io import memory

# Figures: matplotlib's Agg canvas is 4 bytes per pixel, and a PNG is encoded from a copy, with
# the artists' own buffers beside it; a 512-head all-heads sheet at --dpi 400 (about 1.3 billion
# pixels by figure_inches below) peaked at 16 GB, i.e. ~12 bytes per pixel: plan 16.
_FIGURE_BYTES_PER_PIXEL = 16
# svg and pdf embed each heatmap as an image rasterised at --dpi too: 16 heads of the cat sentence peaked
# at 103 MB (svg), 116 MB (pdf) and 113 MB (png) at --dpi 72, and at 422, 511 and 839 MB at --dpi 600.
# They are planned as png, an upper bound; so --format svg is no way around a refusal.


def figure_inches(heads: int, n_shown: int) -> tuple[str, float, float]:
    """The largest figure a run draws, as (name, width, height) in inches; an upper bound of the layouts.

    ``n_shown`` is ``min(N, --max-tokens)``. Mirrors mhacli.render.figures: a heatmap at most 12 inches plus labels
    and colour bar; the heads sheet h + 1 panels of up to 3.2 inches; the magnifiers a row per head.
    """
    n = max(1, n_shown)
    head = min(12.0, max(2.6, min(0.8, 6.4 / n) * n)) + 4.0
    panels = heads + 1 if heads > 1 else 1
    cols = max(1, math.ceil(math.sqrt(panels * 16 / 9)))
    rows = math.ceil(panels / cols)
    panel = max(min(n * 0.16, 3.2), 1.4) + 0.8
    sheet_w, sheet_h = max(cols * panel + 3.0, 8.0), rows * panel + 3.0
    lens_w, lens_h = 13.3, 2.0 + 1.2 * heads
    sizes = [("a head's heatmap", head, head), ("the all-heads sheet", sheet_w, sheet_h),
             ("the magnifier slide", lens_w, lens_h)]
    return max(sizes, key=lambda s: s[1] * s[2])


def figure_bytes(heads: int, n_shown: int, dpi: int, fmt: str = "png") -> int:
    """Peak memory of drawing the largest figure: its pixels (inches² × dpi²) times the bytes each costs (svg
    and pdf too: they rasterise their heatmaps at ``dpi``)."""
    _, width, height = figure_inches(heads, n_shown)
    return int(BASELINE_BYTES + width * height * dpi * dpi * _FIGURE_BYTES_PER_PIXEL)


def check_figures_fit(heads: int, n_shown: int, dpi: int, fmt: str = "png", besides: int = 0,
                      limit: int | None = None) -> None:
    """Refuse, before drawing, figures that would not fit in memory beside ``besides`` bytes (the arrays);
    ``limit``: what this machine can spare (read from the host when not given)."""
    limit = memory.memory_limit_bytes() if limit is None else limit
    need = figure_bytes(heads, n_shown, dpi, fmt) + besides
    if need <= limit:
        return
    name, width, height = figure_inches(heads, n_shown)
    most = 0
    for candidate in range(min(dpi, 600), 29, -1):
        if figure_bytes(heads, n_shown, candidate, fmt) + besides <= limit:
            most = candidate
            break
    fix = "use {dpi:name} " + f"{most} or less, " if most else ""
    raise UsageError(
        f"the figures of {heads:,} heads at " + "{dpi}" + f" need {about_bytes(need)} ({name} is "
        f"{width:,.0f}×{height:,.0f} inches), more than the {human_bytes(limit)} this machine can spare; "
        f"{fix}" + "fewer {heads:name}, or {plots}.",
        dpi=dpi, heads=heads, plots=False,
    )


__all__ = ["check_figures_fit", "figure_bytes", "figure_inches"]
