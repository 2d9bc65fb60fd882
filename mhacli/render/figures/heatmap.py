"""The ax-first helper every figure uses: one attention matrix as an annotated heatmap.

As matplotlib's gallery ``image_annotated_heatmap.py``: it draws on the Axes it is given and returns its artists,
so a figure shows another head by updating them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.render import theme

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colorbar import Colorbar
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage
    from matplotlib.patches import PathPatch, Rectangle
    from matplotlib.text import Text

    from mhacli.measures.analysis import Analysis
    from mhacli.render.figures.view import View


def cmap() -> Any:
    """The theme's colour map, with masked (blocked) cells in the mask colour."""
    import matplotlib

    return matplotlib.colormaps[theme.HEATMAP_CMAP].with_extremes(bad=theme.MASK_COLOR)


def shown_mask(analysis: Analysis, view: View) -> np.ndarray | None:
    """The blocked cells of the shown window (the analysis's mask), or None when every key is visible."""
    return None if analysis.mask is None else np.asarray(analysis.mask)[view.rows, view.rows]


def value_text(v: float) -> str:
    return f"{v:.2f}"


def row_tops(weights: np.ndarray) -> np.ndarray:
    """Each row's largest weight, and any weight that prints as the same number: the cells a reader reads."""
    shown = [[value_text(v) for v in row] for row in np.asarray(weights).tolist()]
    tops = [value_text(max(row)) for row in np.asarray(weights).tolist()]
    return np.array([[t == top for t in row] for row, top in zip(shown, tops)], bool).reshape(np.shape(weights))


def _mask_path(mask: np.ndarray) -> Any:
    """One compound path over every blocked cell, in the image's data units (cell (r, c) is centred at (c, r))."""
    from matplotlib.path import Path as MplPath

    rects = []
    for r, row in enumerate(mask):
        c, n = 0, len(row)
        while c < n:
            if row[c]:
                start = c
                while c < n and row[c]:
                    c += 1
                x0, x1, y0, y1 = start - 0.5, c - 0.5, r - 0.5, r + 0.5
                rects.append(MplPath([(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)], closed=True))
            else:
                c += 1
    return MplPath.make_compound_path(*rects)


@dataclass
class Heatmap:
    """The artists of one drawn attention matrix, so a figure can be redrawn for another head."""

    ax: Axes
    image: AxesImage  # ``image.get_array()`` is the matrix drawn (masked where blocked)
    frame: Rectangle  # the border, in the head's colour
    x_labels: list[str] = field(default_factory=list)  # keys, along the top
    y_labels: list[str] = field(default_factory=list)  # queries, down the left side
    values: list[Text] = field(default_factory=list)  # the cell numbers, row-major; empty when not shown
    hatch: PathPatch | None = None
    mask: np.ndarray | None = None
    cells: tuple[float, float, float, float] = (-0.5, -0.5, 1.0, 1.0)  # left, top, cell width, height (data units)

    @property
    def value_texts(self) -> list[str]:
        """The numbers drawn in the cells, row-major ("" for blocked cells)."""
        return [t.get_text() for t in self.values]

    def cell_center(self, row: int, col: int) -> tuple[float, float]:
        """The centre of cell (query ``row``, key ``col``) in the Axes' data units."""
        left, top, width, height = self.cells
        return left + (col + 0.5) * width, top + (row + 0.5) * height

    def update(self, weights: np.ndarray, color: str | None = None) -> None:
        """Show ``weights`` (same shape) in place: cells, cell numbers and frame colour."""
        self.image.set_data(masked(weights, self.mask))
        if self.values:
            blocked = self.mask.ravel() if self.mask is not None else np.zeros(weights.size, bool)
            for t, v, b in zip(self.values, weights.ravel().tolist(), blocked.tolist()):
                t.set_text("" if b else value_text(v))
                t.set_color(theme.heat_ink(v))
        if color is not None:
            self.frame.set_edgecolor(color)


def heatmap(
    ax: Axes,
    weights: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    mask: np.ndarray | None = None,
    color: str | None = None,
    tick_size: float = 10.0,
    value_size: float = 0.0,
    label_step: int = 1,
    rotate_x: bool = False,
    show_x: bool = True,
    show_y: bool = True,
    frame_width: float = 3.0,
    numbered: np.ndarray | None = None,
) -> Heatmap:
    """One attention matrix on ``ax``, keys along the top, queries down the side, on a fixed 0…1 scale; blocked
    cells grey and hatched ("not allowed" never looks like "zero"). ``value_size`` > 0 writes the weights in the
    cells (only those ``numbered`` marks, if given: then :meth:`Heatmap.update` is not for it)."""
    from matplotlib.patches import Rectangle

    n_rows, n_cols = weights.shape
    image = ax.imshow(masked(weights, mask), cmap=cmap(), vmin=0.0, vmax=1.0, interpolation="nearest",
                      aspect="equal")
    # No clip: an SVG names a clip by a hash of its path object or of its box to the last float digit, and two
    # saves of the same heads.svg in one process gave different names. The image fills its Axes exactly.
    image.set_clip_on(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    frame = Rectangle((0.0, 0.0), 1.0, 1.0, transform=ax.transAxes, fill=False, clip_on=False,
                      edgecolor=color or theme.LABEL_COLOR, linewidth=frame_width, zorder=3)
    ax.add_artist(frame)
    out = Heatmap(ax=ax, image=image, frame=frame, mask=mask)

    pad = frame_width / 2 + 3  # points between the frame (it straddles the edge) and the labels
    picked_x, picked_y = _picked(out, weights.shape, rows, cols, label_step, show_x, show_y)
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.tick_params(length=0, pad=pad, labelsize=tick_size, top=False, bottom=False, left=False,
                   labeltop=show_x, labelbottom=False, labelleft=show_y)
    ax.set_xticks(picked_x, out.x_labels, rotation=90 if rotate_x else 0)
    ax.set_yticks(picked_y, out.y_labels)
    _marks(out, weights, ax.transData, value_size, numbered)
    return out


def panel(
    ax: Axes,
    weights: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    at: tuple[float, float, float],
    *,
    mask: np.ndarray | None = None,
    color: str | None = None,
    tick_size: float = 10.0,
    value_size: float = 0.0,
    label_step: int = 1,
    rotate_x: bool = False,
    show_x: bool = True,
    show_y: bool = True,
    frame_width: float = 3.0,
    numbered: np.ndarray | None = None,
) -> Heatmap:
    """:func:`heatmap` as one of several alike panels on one Axes whose data units are inches from its top-left
    corner, y down: the square ``at`` = (left, top, side), its keys and queries written as plain texts beside it.
    One Axes for a sheet of panels spares an Axes, its Axis and its ticks a panel."""
    from matplotlib.patches import Rectangle

    x, y, side = at
    n_rows, n_cols = weights.shape
    image = ax.imshow(masked(weights, mask), cmap=cmap(), vmin=0.0, vmax=1.0, interpolation="nearest",
                      aspect="auto", extent=(x, x + side, y + side, y))
    image.set_clip_on(False)  # as heatmap's: no clip path in an SVG
    frame = Rectangle((x, y), side, side, fill=False, clip_on=False, edgecolor=color or theme.LABEL_COLOR,
                      linewidth=frame_width, zorder=3)
    ax.add_artist(frame)
    out = Heatmap(ax=ax, image=image, frame=frame, mask=mask, cells=(x, y, side / n_cols, side / n_rows))

    pad = (frame_width / 2 + 3) / 72  # inches between the frame (it straddles the edge) and the labels
    picked_x, picked_y = _picked(out, weights.shape, rows, cols, label_step, show_x, show_y)
    for j, key in zip(picked_x, out.x_labels):
        ax.text(out.cell_center(0, j)[0], y - pad, key, fontsize=tick_size, ha="center", va="bottom",
                rotation=90 if rotate_x else 0)
    for i, query in zip(picked_y, out.y_labels):  # as matplotlib writes a y tick label
        ax.text(x - pad, out.cell_center(i, 0)[1], query, fontsize=tick_size, ha="right", va="center_baseline")
    _marks(out, weights, ax.transData, value_size, numbered)
    return out


def masked(weights: np.ndarray, mask: np.ndarray | None) -> np.ma.MaskedArray:
    """``weights`` as an image shows them: blocked cells masked (none without a mask)."""
    return np.ma.masked_array(weights, mask=mask if mask is not None else False)


def _picked(out: Heatmap, shape: tuple[int, ...], rows: Sequence[str], cols: Sequence[str], label_step: int,
            show_x: bool, show_y: bool) -> tuple[list[int], list[int]]:
    """The key and query positions labelled (every ``label_step``-th, on the sides shown), their texts kept in
    ``out``: one rule for a heatmap on its own Axes and a panel on a shared one."""
    n_rows, n_cols = shape
    picked_x = list(range(0, n_cols, label_step)) if show_x else []
    picked_y = list(range(0, n_rows, label_step)) if show_y else []
    out.x_labels, out.y_labels = [cols[j] for j in picked_x], [rows[i] for i in picked_y]
    return picked_x, picked_y


def _marks(out: Heatmap, weights: np.ndarray, data: Any, value_size: float, numbered: np.ndarray | None) -> None:
    """The hatch over ``out``'s blocked cells and its cell numbers (``value_size`` > 0; only the ``numbered``)."""
    from matplotlib.patches import PathPatch
    from matplotlib.transforms import Affine2D

    left, top, width, height = out.cells
    mask, ax = out.mask, out.ax
    if mask is not None and mask.any():
        cells = Affine2D().scale(width, height).translate(left + width / 2, top + height / 2)
        out.hatch = PathPatch(_mask_path(mask), facecolor="none", edgecolor=theme.HATCH_COLOR,
                              hatch=theme.MASK_HATCH, linewidth=0, zorder=2, transform=cells + data)
        ax.add_artist(out.hatch)
    if value_size > 0:
        blocked = mask if mask is not None else np.zeros(weights.shape, bool)
        for r in range(weights.shape[0]):
            for c in range(weights.shape[1]):
                if numbered is not None and not numbered[r, c]:
                    continue
                v = float(weights[r, c])
                out.values.append(ax.text(*out.cell_center(r, c), "" if blocked[r, c] else value_text(v),
                                          ha="center", va="center", fontsize=value_size, color=theme.heat_ink(v),
                                          in_layout=False))  # inside its cell: nothing for the layout to measure


BAR_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
BAR_TICK_LABELS = ("0", "0.25", "0.5", "0.75", "1")
BAR_LABEL = "attention weight"


def colour_bar(fig: Figure, *, cax: Axes, size: float = 11.0) -> Colorbar:
    """matplotlib's colour bar for the fixed 0…1 scale every heatmap of the figure shares, in ``cax`` (an Axes
    placed by arithmetic, :func:`~layout.axes_at`)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    bar = fig.colorbar(ScalarMappable(norm=Normalize(0.0, 1.0), cmap=cmap()), cax=cax, ticks=list(BAR_TICKS))
    bar.ax.set_yticklabels(BAR_TICK_LABELS)
    bar.ax.tick_params(labelsize=size, length=3, width=0.8)
    bar.set_label(BAR_LABEL, fontsize=size)
    bar.outline.set_linewidth(0.8)
    return bar
