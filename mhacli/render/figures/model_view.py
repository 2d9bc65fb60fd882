"""Every layer and every head of a view at once, as small multiples (BertViz's ``model_view``, as a figure).

One row per layer (from 0), one column per head, all on one 0…1 scale: thumbnails to find the head worth drawing
large with :func:`mhacli.head_figure`. They are one image with gaps (and the mask one image over it), one Axes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mhacli.render import theme
from mhacli.render.figures.heatmap import cmap, masked
from mhacli.render.figures.inline import new_figure

CELL = 0.55  # inches: a thumbnail, the pattern visible, not each weight
LEFT, TOP, RIGHT, BOTTOM = 0.8, 0.55, 0.15, 0.15  # room for the layers' names, the title and the heads' numbers
MAX_CELLS = 4096  # 64 layers × 64 heads: beyond, a picture of thumbnails too small to read


def gap(n_tokens: int) -> int:
    """Blank cells between two thumbnails: about a tenth of one."""
    return max(1, round(n_tokens / 10))


def tiled(layers: np.ndarray, mask: np.ndarray | None) -> tuple[np.ma.MaskedArray, np.ndarray]:
    """(L, h, N, N) -> one (L·(N+g)−g, h·(N+g)−g) image of the thumbnails, gaps and masked cells masked, and where
    the mask is (True on a masked cell, never on a gap)."""
    n_layers, h, n, _ = layers.shape
    g = gap(n)
    image = np.ma.masked_all((n_layers * (n + g) - g, h * (n + g) - g))  # gaps stay masked: drawn blank
    blocked = np.zeros(image.shape, dtype=bool)
    for layer in range(n_layers):
        for head in range(h):
            rows, cols = slice(layer * (n + g), layer * (n + g) + n), slice(head * (n + g), head * (n + g) + n)
            image[rows, cols] = masked(layers[layer, head], mask)
            if mask is not None:
                blocked[rows, cols] = mask
    return image, blocked


def model_view(layers: np.ndarray, layer_names: tuple[str, ...], mask: np.ndarray | None, title: str,
               groups: tuple[int, ...] | None = None) -> Any:
    """(L, h, N, N) weights as an L × h grid of thumbnails; ``mask`` (N, N) True where a query may not look;
    ``groups``: the key/value group (0-based) each head reads, named under its label when heads share them."""
    import matplotlib.colors

    n_layers, h, n, _ = layers.shape
    g = gap(n)
    side = CELL * (n + g) / n  # inches per thumbnail and its gap
    width, height = LEFT + h * side + RIGHT, TOP + n_layers * side + BOTTOM
    fig = new_figure(figsize=(width, height), dpi=100)
    ax = fig.add_axes((LEFT / width, BOTTOM / height, (h * side - CELL * g / n) / width,
                       (n_layers * side - CELL * g / n) / height))
    image, blocked = tiled(layers, mask)
    ax.imshow(image, cmap=cmap().with_extremes(bad=(1.0, 1.0, 1.0, 0.0)), vmin=0.0, vmax=1.0,
              interpolation="nearest", aspect="auto")
    shade = np.zeros((*blocked.shape, 4))  # (rows, cols, RGBA): the mask colour where blocked, clear elsewhere
    shade[blocked] = matplotlib.colors.to_rgba(theme.MASK_COLOR)
    ax.imshow(shade, interpolation="nearest", aspect="auto")
    for spine in ax.spines.values():
        spine.set_visible(False)
    centres = (n - 1) / 2 + np.arange(max(h, n_layers)) * (n + g)
    ax.xaxis.tick_top()
    ax.set_xticks(centres[:h], labels=[f"head {i + 1}" + (f"\ngroup {groups[i] + 1}" if groups else "")
                                     for i in range(h)], fontsize=7, color=theme.LABEL_COLOR)
    ax.set_yticks(centres[:n_layers], labels=list(layer_names), fontsize=7, color=theme.LABEL_COLOR)
    ax.tick_params(length=0, pad=2)
    fig.text(LEFT / width, 1 - 0.08 / height, title, ha="left", va="top", fontsize=9, color=theme.LABEL_COLOR)
    return fig
