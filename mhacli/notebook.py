"""What a notebook or a script calls: a run, a trace or a view in, a page or figures out.

The layer above the pipeline and the renderers: each function makes the result
(:func:`mhacli.pipeline.result_of`, once) when it is handed a bare trace or view,
then hands it to a renderer, which only draws.  ``import mhacli`` registers
:func:`display_page` as what Jupyter shows for a run, a trace or a view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mhacli.pipeline import Run, result_of


def html_page(trace: Any, max_tokens: int | None = None, *, hide_rules: bool = False, packed: bool = False) -> str:
    """The interactive page of ``trace`` (a run or an attention view) as one self-contained HTML string.

    ``packed``: the weights stored compactly (what a notebook keeps in its file; see
    :func:`mhacli.render.html.compact`), unpacked by the page as it opens.
    """
    from mhacli.render.html import DEFAULT_MAX_TOKENS, render_html

    result = trace if isinstance(trace, Run) else result_of(trace, layers=True)  # a result's measures, else once here
    return render_html(result.trace, result.analysis, DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                       hide_rules=hide_rules, layers=result.layers, packed=packed)


def display_page(shown: Any) -> str:
    """What Jupyter shows for a run, a trace or a view: its page, packed, in an isolated frame."""
    from mhacli.render.notebook import html_frame

    return html_frame(html_page(shown, packed=True))


def save_figures(trace: Any, out_dir: str | Path = "mha-output", *, fmt: str = "png", dpi: int = 150,
                 query: int | str | None = None, max_tokens: int = 40, hide_rules: bool = False) -> list[Path]:
    """Every figure of a run or a view into ``out_dir`` (created, with its parents, when missing).

    A run gets what ``mha explain`` writes; an attention view its heads, the heads sheet and the
    magnifiers (no split: a view has no weight matrices).  ``hide_rules`` leaves rule and pattern names out.
    """
    from mhacli.render.figures import save_figures as save_all

    result = trace if isinstance(trace, Run) and trace.single is not None else result_of(
        getattr(trace, "trace", trace), single=True)  # the one-head contrast and the measures, once
    return list(save_all(result.trace, result.single, Path(out_dir), fmt=fmt, dpi=dpi, query=query,
                         max_tokens=max_tokens, hide_rules=hide_rules, analysis=result.analysis))
