"""Figures that read a Trace, drawn with plain matplotlib (``Figure`` objects, never pyplot).

One module a figure, each heat map drawn by :func:`.heatmap.heatmap`; matplotlib is imported only inside the
functions that draw, so importing this package does not load it.
"""

from mhacli.render.figures.head import HeadFigure
from mhacli.render.figures.heads import build_heads
from mhacli.render.figures.heatmap import Heatmap, colour_bar, heatmap
from mhacli.render.figures.layout import Pen, drawing, font_faces
from mhacli.render.figures.magnifiers import build_magnifiers, magnifier
from mhacli.render.figures.save import Saved, save, save_compare, save_figures
from mhacli.render.figures.single_vs_multi import build_compare
from mhacli.render.figures.split import split_figure
from mhacli.render.figures.view import FORMATS, View, check_dpi, check_format, resolve_query

__all__ = [
    "FORMATS", "HeadFigure", "Heatmap", "Pen", "Saved", "View", "build_compare", "build_heads", "build_magnifiers",
    "check_dpi", "check_format", "colour_bar", "drawing", "font_faces", "heatmap", "magnifier", "resolve_query",
    "save", "save_compare", "save_figures", "split_figure",
]
