"""Figures that show themselves in Jupyter, and the one way a PNG's pixels are drawn.

IPython displays an object by asking for ``_repr_png_``; a plain ``Figure`` built without pyplot has none, so every
figure mhacli builds is :func:`figure_class`'s subclass: still a ``Figure``, also an image in a notebook.
"""

from __future__ import annotations

import functools
import io
from typing import Any


def _text_size(renderer: Any, sizes: dict[tuple[Any, ...], Any], s: str, prop: Any,
               ismath: Any) -> tuple[float, float, float]:
    """Agg's size of text ``s`` in font ``prop`` (width, height, descent), kept in ``sizes`` by font, dpi and
    hinting."""
    import matplotlib

    measure = type(renderer).get_text_width_height_descent
    if ismath:  # mathtext and TeX depend on more settings: measured as matplotlib does
        return measure(renderer, s, prop, ismath)  # type: ignore[no-any-return]
    rc = matplotlib.rcParams
    key = (s, tuple(prop.get_family()), prop.get_style(), prop.get_variant(), prop.get_weight(), prop.get_stretch(),
           prop.get_size_in_points(), prop.get_file(), float(renderer.dpi), rc["text.hinting"],
           rc["text.hinting_factor"], rc["text.kerning_factor"])
    size = sizes.get(key)
    if size is None:
        size = sizes[key] = measure(renderer, s, prop, ismath)
    return size  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1)
def figure_class() -> Any:
    """The ``Figure`` subclass (made on first use: matplotlib is imported only when something draws)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    class Canvas(FigureCanvasAgg):  # type: ignore[misc]
        """Agg's canvas whose renderers share one cache of text sizes (:func:`_text_size`): matplotlib caches them
        per renderer, and a figure resized after its texts were measured draws on a new renderer."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.text_sizes: dict[tuple[Any, ...], Any] = {}

        def get_renderer(self, *args: Any, **kwargs: Any) -> Any:
            renderer = super().get_renderer(*args, **kwargs)
            if "get_text_width_height_descent" not in vars(renderer):
                renderer.get_text_width_height_descent = functools.partial(_text_size, renderer, self.text_sizes)
            return renderer

    class InlineFigure(Figure):
        """A Figure with an Agg canvas (no pyplot, no global state) that IPython shows as a PNG; ``moving``: the
        artists that change between saves (head-N)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            Canvas(self)
            self.moving: list[Any] = []  # in the order a whole draw paints them (by zorder)
            self.still: tuple[tuple[Any, ...], Any] | None = None  # (pixel size, dpi and paper; kept region)

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
    """Whether this matplotlib's blitting gives savefig's pixels to the byte: 3.11 does; 3.7 (the oldest allowed)
    blends a few edge pixels up to 4 levels apart, so there a moving figure is drawn whole."""
    import matplotlib

    return tuple(int(part) for part in matplotlib.__version__.split(".")[:2]) >= (3, 11)


def rgba(fig: Any, dpi: float) -> tuple[memoryview, int, int]:
    """``fig``'s RGBA pixels at ``dpi`` as ``savefig`` draws them, read from its Agg canvas, with their width and
    height. A figure's ``moving`` artists are drawn over a kept picture of the rest where that is exact."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    old = (fig.get_dpi(), fig.patch.get_facecolor(), fig.patch.get_edgecolor(), fig.canvas)
    canvas = old[3] if isinstance(old[3], FigureCanvasAgg) else FigureCanvasAgg(fig)  # as savefig lends one
    fig.set_dpi(dpi)
    face, edge = matplotlib.rcParams["savefig.facecolor"], matplotlib.rcParams["savefig.edgecolor"]
    if face != "auto":
        fig.patch.set_facecolor(face)
    if edge != "auto":
        fig.patch.set_edgecolor(edge)
    try:
        width, height = canvas.get_width_height(physical=True)
        if not (getattr(fig, "moving", None) and blits_exactly()):
            canvas.draw()
            return canvas.buffer_rgba(), int(width), int(height)
        # A kept picture serves the same pixel size, dpi and paper colours only.
        key = (width, height, float(dpi), tuple(fig.patch.get_facecolor()), tuple(fig.patch.get_edgecolor()))
        if fig.still is None or fig.still[0] != key:
            for artist in fig.moving:
                artist.set_animated(True)  # left out of the whole draw
            try:
                canvas.draw()
            finally:
                for artist in fig.moving:
                    artist.set_animated(False)
            fig.still = (key, canvas.copy_from_bbox(fig.bbox))
        else:
            canvas.restore_region(fig.still[1])
        for artist in fig.moving:
            fig.draw_artist(artist)
        return canvas.buffer_rgba(), int(width), int(height)
    finally:
        fig.set_dpi(old[0])
        fig.patch.set_facecolor(old[1])
        fig.patch.set_edgecolor(old[2])
        fig.set_canvas(old[3])
