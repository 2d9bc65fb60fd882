"""A real notebook, executed headlessly (nbclient + ipykernel): figures come out as images, a run and an
attention view as an isolated iframe, and nothing restyles the notebook."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs the test extra: pip install '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs the test extra: pip install '.[test]'")
pytest.importorskip("ipykernel", reason="the notebook test needs the test extra: pip install '.[test]'")

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "notebooks" / "mhacli.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    work = tmp_path_factory.mktemp("nb")
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(work)}})
    client.execute()
    return nb, work


def outputs_of(nb, tag: str) -> list[dict]:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r} in {NOTEBOOK.name}"
    return [o for c in cells for o in c.get("outputs", [])]


@pytest.mark.slow
def test_no_cell_fails(executed):
    nb, _ = executed
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors


def test_a_figure_displays_as_an_image_without_matplotlib_magic(executed):
    nb, _ = executed
    assert not any("%matplotlib" in c.source for c in nb.cells if c.cell_type == "code")
    images = [o for o in outputs_of(nb, "figure") if "image/png" in o.get("data", {})]
    assert len(images) == 1
    png = base64.b64decode(images[0]["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") and "image/png" not in o.get("data", {})
                   for o in outputs_of(nb, "figure"))


@pytest.mark.parametrize("tag", ["trace", "view"])
def test_a_run_and_a_view_display_as_an_isolated_page(executed, tag):
    nb, _ = executed
    (out,) = [o for o in outputs_of(nb, tag) if "text/html" in o.get("data", {})]
    shown = out["data"]["text/html"]
    assert shown.startswith("<iframe id=\"mhacli-") and 'sandbox="allow-scripts"' in shown
    # Outside the iframe's (escaped) document there is no markup that could restyle the notebook: only the
    # script that sets this frame's height from the page's own message.
    outside = re.sub(r'srcdoc="[^"]*"', 'srcdoc=""', shown)
    assert "<style" not in outside and "<link" not in outside and outside.count("<script") == 1
    script = outside[outside.index("<script"):]
    assert "e.source !== f.contentWindow" in script and "f.style.height" in script and "innerHTML" not in script
    inner = html.unescape(re.search(r'srcdoc="([^"]*)"', shown).group(1))
    assert inner.startswith("<!DOCTYPE html>") and "<style" in inner
    text = out["data"]["text/plain"]
    assert len(text) < 400 and ("mhacli Trace" in text or "mhacli AttentionView" in text)


def test_saving_figures_into_a_new_folder_creates_it(executed):
    nb, work = executed
    saved = sorted(p.name for p in (work / "new" / "folder").iterdir())
    assert "heads.png" in saved and "magnifiers.png" in saved and "split.png" in saved


# ---------------------------------------------------------------------------
# Notebooks that fit (issue 22, item 4): a BERT-sized view, its size, and the exported page in Chromium
# ---------------------------------------------------------------------------

BERT_CELL = """
import numpy as np
from mhacli.measures.view import from_attention
rng = np.random.default_rng(0)
scores = rng.standard_normal((12, 12, 100, 100)) * 2.0   # 12 layers x 12 heads x 100 x 100, as BERT-base
w = np.exp(scores)
w /= w.sum(-1, keepdims=True)
view = from_attention(w, [f"tok{i}" for i in range(100)], layer=3)
view
"""


@pytest.fixture(scope="module")
def bert_notebook(tmp_path_factory):
    work = tmp_path_factory.mktemp("bert")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(BERT_CELL)]
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(work)}})
    client.execute()
    path = work / "bert.ipynb"
    nbformat.write(nb, path)
    return nb, path


@pytest.mark.slow
def test_a_bert_sized_display_keeps_the_notebook_under_3_mb(bert_notebook):
    nb, path = bert_notebook
    (out,) = [o for o in nb.cells[0].outputs if "text/html" in o.get("data", {})]
    assert path.stat().st_size < 3_000_000, path.stat().st_size
    inner = html.unescape(re.search(r'srcdoc="([^"]*)"', out["data"]["text/html"]).group(1))
    assert '"q16":' in inner  # the weights are packed: 11.9 MB as plain JSON


def test_the_packed_weights_are_the_shown_values():
    import base64
    import json
    import zlib

    import numpy as np

    from mhacli import run
    from mhacli.pipeline import paged
    from mhacli.render.html import compact, page_data

    result = run("the cat sat on the mat", causal=True)
    data = page_data(paged(result))
    packed = compact(data)
    for key in ("weights", "average", "outside", "outside_average"):
        p = packed[key]
        units = np.frombuffer(zlib.decompress(base64.b64decode(p["q16"])), dtype="<u2").reshape(p["shape"])
        shown = np.array(json.loads(json.dumps(data[key])), dtype=np.float64)
        np.testing.assert_array_equal(units / p["scale"], shown)  # exactly the 4-decimal values the page shows


@pytest.mark.slow
def test_the_exported_notebook_shows_the_whole_page_in_chromium(bert_notebook, tmp_path, browser):
    pytest.importorskip("nbconvert", reason="nbconvert is not installed (pip install nbconvert)")
    import os

    from nbconvert import HTMLExporter

    nb, _ = bert_notebook
    body, _ = HTMLExporter().from_notebook_node(nb)
    exported = tmp_path / "bert.html"
    exported.write_text(body, encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # the worker's Chromium (conftest)
    try:
        page = context.new_page()
        page.goto(exported.as_uri())
        frame_el = page.wait_for_selector("iframe[id^=mhacli-]")
        inner = frame_el.content_frame()
        inner.wait_for_selector("html[data-ready=true]", timeout=60000)
        wanted = inner.evaluate("document.documentElement.scrollHeight")
        page.wait_for_function("h => document.querySelector('iframe[id^=mhacli-]').offsetHeight >= h", arg=wanted,
                               timeout=30000)
        box = frame_el.bounding_box()
        # the whole display, no scroll bar inside the frame, and it fits one 1080p screen (issue 47)
        assert 500 < wanted <= 950 and box["height"] >= wanted
        shown = inner.eval_on_selector_all('#qtable tbody td.v[data-head="0"]:not(.outside)',
                                           "els => els.map(e => e.textContent)")
        assert len(shown) == 100 and all(re.fullmatch(r"0\.\d{4}", s) for s in shown)
        page.screenshot(path=str(Path(__file__).resolve().parent.parent / "notebook-export.png"
                                 if os.environ.get("MHA_KEEP_SCREENSHOT") else tmp_path / "export.png"),
                        full_page=True)
    finally:
        context.close()
