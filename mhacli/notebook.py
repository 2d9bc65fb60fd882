"""What a notebook or a script calls: a run, a trace or a view in (measured once when bare), a page or figures out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mhacli.attention.errors import UsageError
from mhacli.pipeline import Run, paged, result_of, shown
from mhacli.render.figures.view import DPI

if TYPE_CHECKING:
    from mhacli.render.figures.layout import Pen

Figure = Any  # a matplotlib Figure (imported by the renderers only, when they draw)


def _shown_kind(trace: Any) -> Any:
    """``trace`` if it is what these functions draw (a run, a trace, a view); else one usage error saying so."""
    from mhacli.attention.checks import kind_name
    from mhacli.attention.trace import Trace
    from mhacli.measures.view import AttentionView

    if not isinstance(trace, (Run, Trace, AttentionView)):
        raise UsageError(f"expected a run (mhacli.run), a trace (mhacli.load_trace) or an attention view "
                         f"(mhacli.from_attention), got {kind_name(trace)}.")
    return trace


def _result(trace: Any, *, single: bool = False, layers: bool = False) -> Run:
    """``trace`` as a result: a :class:`Run` as it is (its single head made when asked), else measured once."""
    _shown_kind(trace)
    if isinstance(trace, Run) and (trace.single is not None or not single) and (trace.layers or not layers):
        return trace
    return result_of(getattr(trace, "trace", trace), single=single, layers=layers)


def _tokens_shown(max_tokens: Any) -> int:
    """``max_tokens`` as the figures and the page take it: a whole number, at least 1."""
    from mhacli.attention.checks import whole_number

    return whole_number("max_tokens", max_tokens, low=1)


def _windowed(trace: Any, max_tokens: Any, query: Any, *, single: bool = False) -> Run:
    """The result with the figures' window chosen: ``max_tokens`` and ``query`` (a position or a token's text, as
    ``--query`` takes it) checked once, in the API's words, before anything is drawn."""
    from mhacli.render.figures import resolve_query

    result = _result(trace, single=single)
    return shown(result, _tokens_shown(max_tokens), resolve_query(result.trace.tokens, query))


def _one_head(single: Any) -> Any:
    """A one-head run to set beside the heads: a trace or a run of one (its trace), else one usage error."""
    from mhacli.attention.checks import kind_name
    from mhacli.attention.trace import Trace

    found = single.trace if isinstance(single, Run) else single
    if not isinstance(found, Trace) or found.num_heads != 1:
        raise UsageError(f"single must be a one-head run (mhacli.run(text, heads=1), or a run's .single), got "
                         f"{kind_name(single)}.")
    return found


def html_page(trace: Any, max_tokens: int | None = None, *, hide_rules: bool = False, packed: bool = False) -> str:
    """The interactive page of ``trace`` (a run or an attention view) as one self-contained HTML string.

    ``packed``: the weights stored compactly (what a notebook keeps in its file; see
    :func:`mhacli.render.html.compact`), unpacked by the page as it opens.
    """
    from mhacli.render.html import render_html

    result = trace if isinstance(_shown_kind(trace), Run) else result_of(trace, layers=True)  # measured once here
    shown_tokens = None if max_tokens is None else _tokens_shown(max_tokens)
    return render_html(paged(result, shown_tokens), hide_rules=hide_rules, packed=packed)


def display_page(shown_object: Any) -> str:
    """What Jupyter shows for a run, a trace or a view: its page, packed, in an isolated frame (a view's shown layer
    only; :func:`model_figure` shows every layer)."""
    from mhacli.render.html import render_html
    from mhacli.render.notebook import html_frame

    result = shown_object if isinstance(_shown_kind(shown_object), Run) else result_of(shown_object)
    return html_frame(render_html(paged(result), packed=True))


def head_figure(trace: Any, head: int, *, max_tokens: int = 40, query: int | None = None, pen: Pen | None = None,
                hide_rules: bool = False) -> Figure:
    """The heatmap of one head (0-based) of a run or an attention view, as a Figure (``head-{head+1}.png``)."""
    from mhacli.attention.checks import whole_number
    from mhacli.render.figures import HeadFigure
    from mhacli.render.figures.layout import drawing

    result = _windowed(trace, max_tokens, query)
    h = result.trace.num_heads
    i = whole_number("head", head)
    if not 0 <= i < h:
        raise UsageError(f"head counts from 0 (head_figure(run, 0) is head-1.png): give 0 to {h - 1} for "
                         f"{h} head{'s' if h != 1 else ''}, got {i}.")
    with drawing(pen) as p:
        return HeadFigure(result.trace, result.figures, p, hide_rules).show(i)  # type: ignore[arg-type]


def heads_figure(trace: Any, *, max_tokens: int = 40, query: int | None = None, pen: Pen | None = None,
                 hide_rules: bool = False) -> Figure:
    """All heads of a run or a view on one scale, with the average over heads beside them (``heads.png``)."""
    from mhacli.render.figures import build_heads
    from mhacli.render.figures.layout import drawing

    result = _windowed(trace, max_tokens, query)
    with drawing(pen) as p:
        return build_heads(result.trace, result.figures, p, hide_rules)  # type: ignore[arg-type]


def magnifiers_figure(trace: Any, single: Any = None, *, query: int | None = None, max_tokens: int = 40,
                      pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """The sentence under one magnifier per head (and one big head for contrast, if ``single`` is given).

    ``query`` picks the query; without it, a few queries where the heads disagree most.
    """
    from dataclasses import replace

    from mhacli.render.figures import build_magnifiers
    from mhacli.render.figures.layout import drawing

    result = _result(trace)
    if single is not None:
        result = replace(result, single=_one_head(single))
    result = _windowed(result, max_tokens, query)
    with drawing(pen) as p:
        return build_magnifiers(result.trace, result.single, result.magnified, p, hide_rules)  # type: ignore[arg-type]


def split_figure(trace: Any, label: str | None = None, *, hide_rules: bool = False, pen: Pen | None = None,
                 dpi: float | None = None) -> Figure:
    """How the run's W_q, W_k, W_v split into heads and H merges through W^O (``split.png``), from a run or a trace.

    An attention view has no weight matrices (only the weights after softmax), so it has no split to draw.
    """
    from mhacli.attention.trace import Trace
    from mhacli.render.figures import split_figure as draw_split

    found = _shown_kind(trace)
    found = found.trace if isinstance(found, Run) else found
    if not isinstance(found, Trace):
        raise UsageError("split_figure draws a run's weight matrices (mhacli.run, mhacli.load_trace); an attention "
                         "view holds only the weights after softmax, so it has no split to draw.")
    return draw_split(found, label, hide_rules=hide_rules, pen=pen, dpi=dpi)


def compare_figure(trace: Any, single: Any = None, comparison: Any = None, *, max_tokens: int = 40,
                   pen: Pen | None = None, hide_rules: bool = False) -> Figure:
    """One head of size d beside h heads of size d/h, and how spread and how different they are.

    ``single``: the one head to compare with (a one-head run or trace); else the run's own (the shipped grammar
    model's twin trained alone, as ``mha compare`` shows it), else one head of size d from the same matrices.
    """
    from mhacli.measures.compare import compare
    from mhacli.render.figures import build_compare
    from mhacli.render.figures.layout import drawing

    result = _windowed(trace, max_tokens, None, single=single is None)
    single = _one_head(single if single is not None else result.single)
    comparison = comparison or result.comparison or compare(result.trace, single)
    with drawing(pen) as p:
        return build_compare(result.trace, single, comparison, result.figures, p,  # type: ignore[arg-type]
                             hide_rules=hide_rules)


def model_figure(trace: Any) -> Figure:
    """Every layer × every head as thumbnails on one scale (BertViz's ``model_view``): rows are layers, counted from
    0, columns heads; a run of mhacli's own has one layer. Draw one large with ``head_figure(view.at_layer(L), i)``.
    """
    from mhacli.attention.messages import layers_range
    from mhacli.attention.tokenize import label
    from mhacli.measures.view import AttentionView
    from mhacli.render.figures.model_view import MAX_CELLS, model_view

    found = _shown_kind(trace)
    found = found.trace if isinstance(found, Run) else found
    layers = found.layers if isinstance(found, AttentionView) else np.asarray(found.weights)[None]  # (L, h, N, N)
    names = found.layer_names if isinstance(found, AttentionView) else ("layer 0",)
    n_layers, h = layers.shape[:2]
    if n_layers * h > MAX_CELLS:
        raise UsageError(f"{n_layers} layers × {h} heads is {n_layers * h:,} thumbnails, more than the "
                         f"{MAX_CELLS:,} one figure can show readably; draw a layer at a time: "
                         "heads_figure(view.at_layer(L)).")
    where = "your model" if isinstance(found, AttentionView) else "this run"
    title = f"Attention of {where}: {layers_range(n_layers)} × {h} head{'s' if h != 1 else ''}, {len(found.tokens)} " \
        "tokens, on one scale from 0 to 1"
    shared = found.kv_heads != h  # heads that share keys and values: each thumbnail's head names its group
    return model_view(layers, tuple(label(n, 16) for n in names), found.mask, title,
                      found.head_groups if shared else None)


def save_figures(trace: Any, out_dir: str | Path = "mha-output", *, fmt: str = "png", dpi: int = DPI,
                 query: int | str | None = None, max_tokens: int = 40, hide_rules: bool = False,
                 on_saved: Any = None) -> list[Path]:
    """Every figure of a run or a view into ``out_dir`` (created, with its parents, when missing).

    A run gets what ``mha explain`` writes; an attention view its heads, the heads sheet and the
    magnifiers (no split: a view has no weight matrices).  ``hide_rules`` leaves rule and pattern names out.
    """
    from mhacli.io.cleanup import settle_made
    from mhacli.io.files import prepare_out_dir
    from mhacli.render.figures import check_dpi, check_format
    from mhacli.render.figures import save_figures as save_all

    if isinstance(out_dir, str) and out_dir == "":  # Path('') is '.': the figures would land among the user's files
        raise UsageError("out_dir is empty (''); give a folder's name ('.' for the current folder).")
    result = _windowed(trace, max_tokens, query, single=getattr(trace, "config", None) is not None)
    fmt, dpi = check_format(fmt), check_dpi(dpi)  # every argument checked before out_dir is made
    made: list[Path] = []
    prepare_out_dir(Path(out_dir), "out_dir", made)  # a file or a device in its place: one line, not FileExistsError
    failed = True
    try:
        saved = save_all(result, Path(out_dir), fmt=fmt, dpi=dpi, hide_rules=hide_rules, on_saved=on_saved)
        failed = False
        return saved
    finally:  # a folder made for figures never drawn (Ctrl-C in a notebook) goes again; a kept one is the caller's
        settle_made(made, failed)
