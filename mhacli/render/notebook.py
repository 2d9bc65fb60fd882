"""mhacli in Jupyter: a page inside an isolated frame.

Written straight into a notebook the page's styles would restyle the notebook, so it is shown in a sandboxed
``<iframe srcdoc=…>``: its script runs but cannot reach the notebook. Nothing here needs IPython.
"""

from __future__ import annotations

import html
import uuid

FRAME_HEIGHT = 760  # pixels: the frame's height until the page has said its own
MAX_FRAME_HEIGHT = 40_000  # a page never makes its frame taller than this, whatever it posts


def html_frame(page: str, height: int = FRAME_HEIGHT) -> str:
    """``page`` (a whole HTML document) inside an isolated iframe, sized to the page: what Jupyter shows.

    The page posts its height to its parent; the script beside the frame takes it only from this frame's window and
    sets the frame's height, so the whole page shows without an inner scroll bar, exported or not.
    """
    document = html.escape(page, quote=True)
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
