"""mhacli in Jupyter: a run or a view shows as its interactive page, figures as images.

The page is a whole HTML document with its own styles; written straight into a
notebook it would restyle the notebook's buttons and prompts.  So it is shown
inside an ``<iframe srcdoc=…>``: a document of its own, sandboxed so that its
script runs but cannot reach the notebook.  Nothing here needs IPython.
"""

from __future__ import annotations

import html
import uuid
from pathlib import Path
from typing import Any

FRAME_HEIGHT = 760  # pixels: the frame's height until the page has said its own
MAX_FRAME_HEIGHT = 40_000  # a page never makes its frame taller than this, whatever it posts


def html_page(trace: Any, max_tokens: int | None = None, *, hide_rules: bool = False, packed: bool = False) -> str:
    """The interactive page of ``trace`` (a run or an attention view) as one self-contained HTML string.

    ``packed``: the weights stored compactly (what a notebook keeps in its file; see
    :func:`mhacli.render.html.compact`), unpacked by the page as it opens.
    """
    from mhacli.pipeline import Run, result_of
    from mhacli.render.html import DEFAULT_MAX_TOKENS, render_html

    result = trace if isinstance(trace, Run) else result_of(trace, layers=True)  # a result's measures, else once here
    return render_html(result.trace, result.analysis, DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                       hide_rules=hide_rules, layers=result.layers, packed=packed)


def html_frame(trace: Any, height: int = FRAME_HEIGHT) -> str:
    """The page inside an isolated iframe, sized to the page: what ``_repr_html_`` gives Jupyter.

    The page posts its height to its parent (``postMessage``) once drawn and
    whenever it changes; the script beside the frame takes the message only
    from this frame's own window and sets the frame's height, so the whole page
    shows without a scroll bar inside the notebook, exported or not.  The
    weights are packed, so a notebook holding a big view stays small.
    """
    document = html.escape(html_page(trace, packed=True), quote=True)
    frame_id = f"mhacli-{uuid.uuid4().hex}"
    resize = ("<script>(function () {"
              f"var f = document.getElementById('{frame_id}');"
              "window.addEventListener('message', function (e) {"
              "if (!f || e.source !== f.contentWindow || !e.data) return;"
              "var h = Number(e.data.mhacli_height);"
              f"if (h > 0 && isFinite(h)) f.style.height = Math.min(Math.ceil(h) + 2, {MAX_FRAME_HEIGHT}) + 'px';"
              "});})();</script>")
    return (f'<iframe id="{frame_id}" srcdoc="{document}" sandbox="allow-scripts" title="mhacli attention page" '
            f'style="width: 100%; height: {int(height)}px; border: 1px solid #ddd; border-radius: 4px;">'
            f'</iframe>{resize}')


def save_figures(trace: Any, out_dir: str | Path = "mha-output", *, fmt: str = "png", dpi: int = 150,
                 query: int | str | None = None, max_tokens: int = 40, hide_rules: bool = False) -> list[Path]:
    """Every figure of a run or a view into ``out_dir`` (created, with its parents, when missing).

    A run gets what ``mha explain`` writes; an attention view its heads, the heads sheet and the
    magnifiers (no split: a view has no weight matrices).  ``hide_rules`` leaves rule and pattern names out.
    """
    from mhacli.pipeline import Run, result_of
    from mhacli.render.figures import save_figures as save_all

    result = trace if isinstance(trace, Run) and trace.single is not None else result_of(
        getattr(trace, "trace", trace), single=True)  # the one-head contrast and the measures, once
    return list(save_all(result.trace, result.single, Path(out_dir), fmt=fmt, dpi=dpi, query=query,
                         max_tokens=max_tokens, hide_rules=hide_rules, analysis=result.analysis))
