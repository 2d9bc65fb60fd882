"""A real notebook, executed headlessly (nbclient + ipykernel): figures come out as images, a run and an
attention view as an isolated iframe, and nothing restyles the notebook."""

from __future__ import annotations

import base64
import html
import re
import sys
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
                                     resources={"metadata": {"path": str(work)}},
                                     kernel_manager_kwargs={"kernel_cmd": [sys.executable, "-m", "ipykernel_launcher",
                                                                           "-f", "{connection_file}"]})
    client.execute()
    return nb, work


def outputs_of(nb, tag: str) -> list[dict]:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r} in {NOTEBOOK.name}"
    return [o for c in cells for o in c.get("outputs", [])]


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
    assert shown.startswith("<iframe srcdoc=\"") and 'sandbox="allow-scripts"' in shown
    # Outside the iframe's (escaped) document there is no markup that could restyle the notebook.
    outside = re.sub(r'srcdoc="[^"]*"', 'srcdoc=""', shown)
    assert "<style" not in outside and "<script" not in outside and "<link" not in outside
    inner = html.unescape(re.search(r'srcdoc="([^"]*)"', shown).group(1))
    assert inner.startswith("<!DOCTYPE html>") and "<style" in inner
    text = out["data"]["text/plain"]
    assert len(text) < 400 and ("mhacli Trace" in text or "mhacli AttentionView" in text)


def test_saving_figures_into_a_new_folder_creates_it(executed):
    nb, work = executed
    saved = sorted(p.name for p in (work / "new" / "folder").iterdir())
    assert "heads.png" in saved and "magnifiers.png" in saved and "split.png" in saved
