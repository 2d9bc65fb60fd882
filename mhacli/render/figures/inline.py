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
