"""A matplotlib ``Figure`` that shows itself in Jupyter, with no pyplot and no ``%matplotlib``.

IPython displays an object by asking for ``_repr_png_``; a plain ``Figure`` built
without pyplot has none and prints as ``<Figure size … with 1 Axes>``.  Every
figure mhacli builds is this subclass, so it is still a ``Figure`` (``savefig``,
``axes`` …) and also an image in a notebook.
"""

from __future__ import annotations

import functools
import io
from typing import Any


@functools.lru_cache(maxsize=1)
def figure_class() -> Any:
    """The ``Figure`` subclass (made on first use: matplotlib is imported only when something draws)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    class InlineFigure(Figure):
        """A Figure that IPython shows as a PNG (``_repr_png_``)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            FigureCanvasAgg(self)  # no pyplot, no global state: the Agg canvas draws PNGs and measures text

        def _repr_png_(self) -> bytes:
            from mhacli.render.figures.layout import RENDER_RC
            import matplotlib

            buffer = io.BytesIO()
            with matplotlib.rc_context(RENDER_RC):  # type: ignore[arg-type]
                self.savefig(buffer, format="png", dpi=min(float(self.dpi), 100.0))
            return buffer.getvalue()

    return InlineFigure


def new_figure(**kwargs: Any) -> Any:
    """A new :func:`figure_class` figure (``Figure(**kwargs)``) with its Agg canvas attached."""
    return figure_class()(**kwargs)


@functools.lru_cache(maxsize=1)
def blits_exactly() -> bool:
    """Whether this matplotlib's blitting gives savefig's pixels to the byte: 3.11 does (tested at two dpi, every
    head); 3.7, the oldest pyproject allows, blends a few edge pixels up to 4 levels apart, so there head-N is drawn
    whole, as any other figure."""
    import matplotlib

    return tuple(int(part) for part in matplotlib.__version__.split(".")[:2]) >= (3, 11)


@functools.lru_cache(maxsize=1)
def moving_class() -> Any:
    """The :func:`figure_class` subclass whose few changing artists are drawn over a kept picture of the rest."""

    class MovingFigure(figure_class()):  # type: ignore[misc]
        """A figure saved many times with only ``moving`` changed between saves (``head-1`` … ``head-h``).

        :meth:`rgba` keeps the still parts drawn once per pixel size and draws only the moving artists over them
        (matplotlib's blitting): the same pixels as a whole draw, under the same rc. SVG and PDF are drawn whole.
        """

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.moving: list[Any] = []  # in the order a whole draw paints them (by zorder)
            self._still: tuple[tuple[Any, ...], Any] | None = None  # (pixel size, dpi and paper, kept region)

        def rgba(self, dpi: float) -> bytes:
            """The figure's RGBA pixels at ``dpi``, as ``savefig(format="rgba")`` draws them."""
            import matplotlib

            canvas = self.canvas
            old: tuple[float, Any, Any] = (float(self.get_dpi()), self.patch.get_facecolor(),
                                           self.patch.get_edgecolor())
            self.set_dpi(dpi)  # as savefig sets it for the draw, and its face and edge colours
            face, edge = matplotlib.rcParams["savefig.facecolor"], matplotlib.rcParams["savefig.edgecolor"]
            if face != "auto":
                self.patch.set_facecolor(face)
            if edge != "auto":
                self.patch.set_edgecolor(edge)
            try:
                # A kept picture serves the same pixel size, dpi and paper colours only.
                key = (*canvas.get_width_height(physical=True), float(dpi), tuple(self.patch.get_facecolor()),
                       tuple(self.patch.get_edgecolor()))
                if self._still is None or self._still[0] != key:
                    for artist in self.moving:
                        artist.set_animated(True)  # left out of the whole draw
                    try:
                        canvas.draw()
                    finally:
                        for artist in self.moving:
                            artist.set_animated(False)
                    self._still = (key, canvas.copy_from_bbox(self.bbox))
                else:
                    canvas.restore_region(self._still[1])
                for artist in self.moving:
                    self.draw_artist(artist)
                return bytes(canvas.buffer_rgba())
            finally:
                self.set_dpi(old[0])
                self.patch.set_facecolor(old[1])
                self.patch.set_edgecolor(old[2])

    return MovingFigure


def new_moving_figure(**kwargs: Any) -> Any:
    """A new :func:`moving_class` figure (``Figure(**kwargs)``); give it its moving artists (``fig.moving``)."""
    return moving_class()(**kwargs)
