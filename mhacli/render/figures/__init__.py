"""Figures that read a Trace, drawn with plain matplotlib (``Figure`` objects, never pyplot).

* ``head-1 … head-h`` (:mod:`.head`): the weights A^i of one head, keys along x (top),
  queries along y, one colour scale from 0 to 1.
* ``heads`` (:mod:`.heads`): every head on the same scale, with the average over heads
  that PyTorch returns by default.
* ``magnifiers`` (:mod:`.magnifiers`): the sentence under one magnifying glass per head.
* ``split`` (:mod:`.split`): W_q cut into the heads' row blocks, Q's and H's column blocks, W^O mixing them.
* ``single-vs-multi`` (:mod:`.single_vs_multi`, ``mha compare``): one head against h.

All of them draw their matrices with one helper, :func:`.heatmap.heatmap`, from a result whose
windows the pipeline chose (:func:`mhacli.pipeline.shown`); the functions a notebook calls on a bare
trace are :mod:`mhacli.notebook`'s.  matplotlib is imported only inside the functions that draw, so
importing this package (for the option checks) does not load it.
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
