"""Figures and the terminal grid: what is drawn is the trace, labelled, legible and written safely."""

from __future__ import annotations

import dataclasses
import inspect
import io
import os
import re
import shutil
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from rich.console import Console

from mhacli.attention import evidence
from mhacli.measures.analysis import analyse
from mhacli.render import figures
from mhacli.render import theme
from mhacli.cli.app import app
from mhacli.measures.compare import single_head as _single_head
from traced import run
from mhacli.attention.errors import UsageError
from mhacli.render.grid import grid_width, head_grid, head_grids
from mhacli import notebook
from mhacli.measures.window import token_view
from mhacli.pipeline import result_of
from mhacli.pipeline import shown as windows_chosen

CAT = "the cat sat on the mat"
LONG30 = ("The animal did not cross the busy street because it was far too tired after walking "
          "all day long under the hot summer sun near the old river bank")
FAST_DPI = 30  # tests not about size draw small


@pytest.fixture(scope="module")
def cat():
    return run(CAT, heads=4, d_model=16)


@pytest.fixture(scope="module")
def cat_causal():
    return run(CAT, heads=4, d_model=16, causal=True)


MINE = {"notes.txt": b"my homework", "heads.png.bak": b"keep"}  # files of the user's in --out


@pytest.fixture(scope="module")
def cat_pngs(cat, tmp_path_factory):
    """ONE save of the cat run's PNGs (dpi FAST_DPI) read by several tests, into a folder that already
    held two files of the user's and a broken heads.png from before. Returns (saved, out, mtimes before)."""
    out = tmp_path_factory.mktemp("cat_pngs")
    for name, data in MINE.items():
        (out / name).write_bytes(data)
    (out / "heads.png").write_bytes(b"an old broken image")
    stamps = {name: (out / name).stat().st_mtime_ns for name in MINE}
    return notebook.save_figures(cat, out, dpi=FAST_DPI), out, stamps


@pytest.fixture(scope="module")
def cat_svgs(cat, tmp_path_factory):
    """ONE save of the cat run's figures as SVG (default dpi), read by several tests."""
    out = tmp_path_factory.mktemp("cat_svgs")
    return notebook.save_figures(cat, out, fmt="svg"), out


def expected_names(h: int, fmt: str = "png") -> list[str]:
    return [f"head-{i}.{fmt}" for i in range(1, h + 1)] + [f"heads.{fmt}", f"magnifiers.{fmt}", f"split.{fmt}"]


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def all_text(fig) -> str:
    """Every piece of text drawn in a figure."""
    from matplotlib.text import Text

    return " ".join(t.get_text() for t in fig.findobj(Text))


def heatmaps(fig):
    """The Axes that draw a weight matrix, in the order the figure made them (the colour bar has no image)."""
    return [ax for ax in fig.axes if ax.images]


def matrices(fig):
    """The images of the weight matrices, in the order drawn: a heads sheet draws all its panels on one Axes."""
    return [image for ax in heatmaps(fig) for image in ax.images]


def token_labels(fig):
    """The token labels beside the matrices: tick labels, or the texts a sheet of panels writes (not cell numbers)."""
    ticks = [t for ax in heatmaps(fig) for t in ax.get_xticklabels() + ax.get_yticklabels()]
    written = [t for ax in heatmaps(fig) for t in ax.texts if not re.fullmatch(r"\d\.\d\d", t.get_text())]
    return [t for t in ticks + written if t.get_text()]


def colour_bars(fig):
    return [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]


def drawn(ax) -> np.ndarray:
    """The matrix an Axes shows, as the figure holds it (masked where blocked)."""
    return ax.images[0].get_array()


def _shown(trace, max_tokens=40, query=None, single=None):
    """The result the figures draw: ``trace`` measured once, its windows chosen (as the pipeline does)."""
    result = result_of(trace)
    return windows_chosen(dataclasses.replace(result, single=single) if single is not None else result, max_tokens,
                          query)


def head_map(trace, i: int, **kw):
    """The per-head figure showing head i, and its heatmap artists."""
    with figures.drawing() as pen:
        hf = figures.HeadFigure(trace, _shown(trace, kw.get("max_tokens", 40), kw.get("query")).figures, pen)
        hf.show(i)
    return hf


# ---------------------------------------------------------------------------
# Files: names, sizes, content
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_save_figures_writes_the_tools_names_at_figsize_times_dpi(cat, cat_pngs):
    saved, out, _ = cat_pngs
    dpi = FAST_DPI
    assert [p.name for p in saved] == expected_names(4)
    assert sorted(os.listdir(out)) == sorted(expected_names(4) + list(MINE))  # no temp files left
    import matplotlib

    with matplotlib.rc_context({"figure.dpi": dpi}):  # built at the dpi they are saved at, as save_figures builds
        sizes = {  # them: on matplotlib 3.7 a text's size, and so the figure's, depends on the renderer's dpi
            "head-1.png": notebook.head_figure(cat, 0).get_size_inches(),
            "heads.png": notebook.heads_figure(cat).get_size_inches(),
            "magnifiers.png": notebook.magnifiers_figure(cat, _single_head(cat)).get_size_inches(),
        }
    for name, (w, h) in sizes.items():
        with Image.open(out / name) as im:
            assert im.size == (int(w * dpi), int(h * dpi)), name
            assert im.format == "PNG"
            assert im.info["dpi"][0] == pytest.approx(dpi, abs=0.05)


def test_the_commands_default_dpi_is_the_figures():
    """request.py imports nothing, so it writes the figures' default dpi again: the two must agree."""
    from mhacli import notebook, request
    import importlib

    save = importlib.import_module("mhacli.render.figures.save")  # the module (the package exports a save())
    from mhacli.render.figures.view import DPI

    assert request.DPI == request.Outputs().dpi == DPI
    for function in (notebook.save_figures, save.save_figures, save.save_compare):
        assert inspect.signature(function).parameters["dpi"].default == DPI


@pytest.mark.slow
def test_default_dpi_gives_projector_sized_images(cat, tmp_path):
    """At the default dpi (the API's and the command line's), a head's smallest text is at least 10 px tall on
    a 1080p projector showing the PNG fitted to its screen."""
    from matplotlib.text import Text

    from mhacli.render.figures.view import DPI

    saved = notebook.save_figures(cat, tmp_path)
    fig = notebook.head_figure(cat, 0)
    w, h = fig.get_size_inches()
    smallest = min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip())  # points
    with Image.open(saved[0]) as im:
        assert im.size == (int(w * DPI), int(h * DPI))
        shown = min(1920 / im.size[0], 1080 / im.size[1])  # the PNG fitted to the screen
        assert smallest / 72 * DPI * shown >= 10


def test_images_are_not_blank_and_heads_differ(cat_pngs):
    saved = cat_pngs[0]
    images = [pixels(p) for p in saved]
    for p, a in zip(saved, images):
        assert a.std() > 20, p.name  # not a flat page
        assert len(np.unique(a.reshape(-1, 3), axis=0)) > 50, p.name
    heads = images[:4]
    for i in range(4):
        for j in range(i + 1, 4):
            assert heads[i].shape == heads[j].shape
            assert np.abs(heads[i].astype(int) - heads[j].astype(int)).sum() > 0


def test_one_figure_updated_per_head_gives_the_same_pixels_as_a_new_figure(cat, cat_pngs, tmp_path):
    """save_figures reuses one head figure for every head, laid out by its first save only; each PNG must equal
    a figure built (and laid out) for that head, at the dpi it is saved at, as save_figures builds its PNGs' figures."""
    import matplotlib

    saved = cat_pngs[0]
    for i in (0, 2, 3):
        fresh = tmp_path / f"fresh-{i}.png"
        with matplotlib.rc_context({"figure.dpi": FAST_DPI}):
            built = notebook.head_figure(cat, i)
        figures.save(built, fresh, "png", FAST_DPI)
        assert np.array_equal(pixels(saved[i]), pixels(fresh)), i


@pytest.mark.slow
def test_a_head_figures_kept_still_parts_give_the_pixels_of_a_whole_draw(cat_causal):
    """A PNG of head-N draws the figure's still parts once and then only what show() changes (blitting); every
    head, at two dpi and back, must be the very pixels savefig draws whole (the causal hatch lies over the cells).
    Where this matplotlib's blitting is not exact (3.7 blends a few edge pixels up to 4 levels apart), head-N's
    PNGs are drawn whole instead, and are then savefig's pixels by construction."""
    from mhacli.render.figures.inline import blits_exactly, rgba
    from mhacli.render.figures.save import write_png

    with figures.drawing() as pen:
        hf = figures.HeadFigure(cat_causal, _shown(cat_causal).figures, pen)
        for dpi in (FAST_DPI, 2 * FAST_DPI, FAST_DPI):
            for i in (0, 3, 1, 2):
                fig = hf.show(i)
                whole = io.BytesIO()
                fig.savefig(whole, format="rgba", dpi=dpi)
                if blits_exactly():
                    assert bytes(rgba(fig, dpi)[0]) == whole.getvalue(), (dpi, i)
                saved = io.BytesIO()
                write_png(fig, saved, dpi)  # what a head-N file holds, blitted or whole
                with Image.open(saved) as png:
                    assert np.array_equal(np.asarray(png.convert("RGB")),
                                          np.frombuffer(whole.getvalue(), np.uint8).reshape(
                                              png.size[1], png.size[0], 4)[..., :3]), (dpi, i)


def test_a_png_is_the_pixels_matplotlib_draws_whatever_inches_times_dpi_rounds_to(tmp_path):
    """6.699999999999999 inches at 100 dpi is 669.99… in Python and 670 pixels in Agg: the PNG writer once took 669
    and wrote every row sheared (training-heads.png at 100 dpi); it now asks the canvas, as savefig sizes it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.699999999999999, 2.75750017))  # as training-heads.png came to be
    fig.add_axes((0.1, 0.1, 0.8, 0.8)).imshow(np.arange(48.0).reshape(6, 8))
    path = figures.save(fig, tmp_path / "odd.png", "png", 100)
    import matplotlib

    reference = io.BytesIO()
    with matplotlib.rc_context(figures.layout.RENDER_RC):  # as save draws: the same glyphs in the tick labels
        fig.savefig(reference, format="png", dpi=100)
    with Image.open(path) as ours, Image.open(reference) as theirs:
        assert ours.size == theirs.size  # 670 pixels wide on matplotlib 3.8+, 669 on 3.7: whatever Agg draws
        assert np.array_equal(np.asarray(ours.convert("RGB")), np.asarray(theirs.convert("RGB")))


@pytest.mark.parametrize("fmt", ["svg", "pdf"])
@pytest.mark.slow
def test_vector_formats_are_valid_files(cat, tmp_path, fmt, request):
    if fmt == "svg":
        saved = request.getfixturevalue("cat_svgs")[0]
    else:
        saved = notebook.save_figures(cat, tmp_path, fmt=fmt)
    assert [p.name for p in saved] == expected_names(4, fmt)
    for p in saved:
        data = p.read_bytes()
        if fmt == "svg":
            root = ET.fromstring(data)
            assert root.tag.endswith("svg")
            assert len(list(root.iter())) > 50
        else:
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
            assert len(data) > 5000


def test_svg_keeps_tokens_and_cell_values_as_text(cat, cat_svgs):
    saved = cat_svgs[0]
    for path in saved[:1] + saved[-2:]:  # head-1, heads, magnifiers
        root = ET.parse(path).getroot()
        texts = {"".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("}text")}
        assert set(cat.tokens) <= texts, path.name
    root = ET.parse(saved[0]).getroot()
    texts = ["".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("}text")]
    assert f"{float(cat.weights[0][0, 0]):.2f}" in texts


def test_pdf_text_is_extractable(cat, tmp_path):
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    path = figures.save(notebook.head_figure(cat, 1), tmp_path / "head-2.pdf", "pdf", 72)
    words = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert set(cat.tokens) <= set(words)
    assert f"{float(cat.weights[1][2, 3]):.2f}" in words
    assert "Head" in words and "attention" in words


def test_cjk_and_arabic_tokens_render_without_error(tmp_path):
    trace = run("猫 が 好き مرحبا بك cat", heads=2, d_model=8, tokenizer="whitespace")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-label "Glyph missing" warning may escape
        saved = notebook.save_figures(trace, tmp_path, dpi=FAST_DPI, fmt="svg")
    assert [p.name for p in saved] == expected_names(2, "svg")
    pen = figures.Pen()
    root = ET.parse(saved[0]).getroot()
    texts = {"".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("}text")}
    assert pen.shown("مرحبا") in texts and pen.shown("猫") in texts  # drawn, or as U+732B when no font has it
    figures.save(notebook.head_figure(trace, 0), tmp_path / "h.png", "png", FAST_DPI)
    assert pixels(tmp_path / "h.png").std() > 20


def test_vector_output_is_reproducible(cat, cat_svgs, tmp_path):
    """Same figure, same bytes: no dates inside, so students can compare their outputs."""
    a, b = cat_svgs[1], tmp_path / "b"
    b.mkdir()
    notebook.save_figures(cat, b, fmt="svg")
    for name in expected_names(4, "svg"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _placement(fig):
    """The anchor of every text placed on the figure itself, and every Axes' rectangle (figure fractions).

    The rectangles are kept to 12 decimals: matplotlib 3.7 applies an image's aspect again at each draw, which
    moves an Axes by float round-off (5e-17 of the figure, seen on heads.png), a billionth of a pixel; a layout run
    again moves it by thousandths."""
    return ([tuple(t.get_position()) for t in fig.texts],
            [tuple(round(v, 12) for v in ax.get_position().bounds) for ax in fig.axes])


@pytest.mark.slow
def test_a_save_never_lays_the_figure_out_again(cat, tmp_path):
    """Placed once, with no layout engine: saving at another dpi moves no text and no Axes (a layout run again
    would move them)."""
    single = _single_head(cat)
    with figures.drawing() as pen:
        built = [notebook.head_figure(cat, 0, pen=pen), notebook.heads_figure(cat, pen=pen),
                 notebook.magnifiers_figure(cat, single, pen=pen), notebook.compare_figure(cat, single, pen=pen),
                 figures.split_figure(cat)]
    for k, fig in enumerate(built):
        assert fig.get_layout_engine() is None, k  # placed by arithmetic: no engine to run at a save
        texts = _placement(fig)[0]
        figures.save(fig, tmp_path / f"f{k}-first.png", "png", FAST_DPI)
        first = _placement(fig)  # the colour bar's Axes takes its aspect on the first draw
        assert first[0] == texts, k
        for dpi in (150, FAST_DPI):
            figures.save(fig, tmp_path / f"f{k}-{dpi}.png", "png", dpi)
            assert _placement(fig) == first, (k, dpi)


def test_each_magnifier_is_level_with_its_row_of_token_boxes(cat):
    from matplotlib.patches import Circle
    from matplotlib.text import Text

    fig = notebook.magnifiers_figure(cat, _single_head(cat))
    fig.draw_without_rendering()
    boxes = [t.get_bbox_patch().get_window_extent() for t in fig.findobj(Text) if t.get_bbox_patch() is not None]
    centres = [lens.get_window_extent().intervaly.mean() for lens in fig.findobj(Circle)]
    assert len(centres) == 5 and len(set(np.round(centres))) == 5  # one lens a row, each at its own height
    for y in centres:
        assert any(b.y0 <= y <= b.y1 for b in boxes), y


def test_other_files_in_out_are_never_touched(cat_pngs):
    _, out, stamps = cat_pngs  # notes.txt and heads.png.bak were there before the figures were saved
    mine = out / "notes.txt"
    assert mine.read_text() == "my homework" and mine.stat().st_mtime_ns == stamps["notes.txt"]
    assert (out / "heads.png.bak").read_bytes() == b"keep"
    assert sorted(os.listdir(out)) == sorted(expected_names(4) + ["notes.txt", "heads.png.bak"])


def test_an_existing_figure_is_replaced_whole(cat_pngs):
    _, out, _ = cat_pngs  # its heads.png held "an old broken image" before the figures were saved
    with Image.open(out / "heads.png") as im:
        im.verify()


def test_leftover_heads_from_a_bigger_run_are_named_not_deleted(cat, tmp_path):
    for name in expected_names(8):  # what an 8-head run left: only the names matter (leftovers reads no file)
        (tmp_path / name).write_bytes(b"")
    saved = notebook.save_figures(cat, tmp_path, dpi=FAST_DPI)
    assert (tmp_path / "head-8.png").exists()
    assert any("head-5.png … head-8.png" in n and "earlier run" in n for n in saved.notices)


def test_interrupted_drawing_leaves_no_partial_file(cat, tmp_path, monkeypatch):
    import importlib

    save_module = importlib.import_module("mhacli.render.figures.save")
    calls = {"n": 0}
    real = save_module.write_png

    def flaky(fig, handle, dpi):
        calls["n"] += 1
        if calls["n"] == 3:
            handle.write(b"\x89PNG half an image")
            raise KeyboardInterrupt
        return real(fig, handle, dpi)

    monkeypatch.setattr(save_module, "write_png", flaky)
    with pytest.raises(KeyboardInterrupt):
        notebook.save_figures(cat, tmp_path, dpi=FAST_DPI)
    names = os.listdir(tmp_path)
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")]
    for n in names:
        with Image.open(tmp_path / n) as im:
            im.verify()


# ---------------------------------------------------------------------------
# What is drawn is the trace
# ---------------------------------------------------------------------------


def test_heatmap_array_equals_the_weights_and_labels_equal_the_tokens(cat):
    for i in range(cat.num_heads):
        hf = head_map(cat, i)
        drawn = hf.map.image.get_array()
        assert drawn.shape == (6, 6)
        assert np.array_equal(np.ma.getdata(drawn), cat.weights[i])
        assert not np.ma.getmaskarray(drawn).any()
        assert hf.map.x_labels == list(cat.tokens)
        assert hf.map.y_labels == list(cat.tokens)
        # Real tick labels: keys along x above the columns, queries along y left of the rows.
        ax = hf.map.ax
        top = [t.label2.get_text() for t in ax.xaxis.get_major_ticks() if t.label2.get_visible()]
        left = [t.label1.get_text() for t in ax.yaxis.get_major_ticks() if t.label1.get_visible()]
        assert top == list(cat.tokens) == left
        assert not any(t.label1.get_visible() for t in ax.xaxis.get_major_ticks())  # nothing below
        assert list(ax.get_xticks()) == [hf.map.cell_center(0, c)[0] for c in range(6)]
        assert list(ax.get_yticks()) == [hf.map.cell_center(r, 0)[1] for r in range(6)]
        assert "key" in hf.x_title.get_text() and "query" in hf.y_title.get_text()
        assert hf.title.get_text().startswith(f"Head {i + 1} of 4")
        assert "6 × 6 (queries × keys)" in hf.title.get_text()
        assert hf.title.get_color() == theme.head_text_color(i)
        assert hf.map.frame.get_edgecolor()[:3] == pytest.approx(
            tuple(int(theme.head_color(i)[k:k + 2], 16) / 255 for k in (1, 3, 5)))


def test_a_heads_title_names_its_index_never_a_power(cat, tmp_path):
    """Issue 20: 'A² is 11×11' read as A squared; the index stands in parentheses, as in A⁽²⁾."""
    import re

    path = figures.save(notebook.head_figure(cat, 1), tmp_path / "head-2.svg", "svg", 72)
    root = ET.parse(path).getroot()
    texts = ["".join(e.itertext()) for e in root.iter() if e.tag.endswith("}text")]
    title = next(t for t in texts if t.startswith("Head 2 of 4"))
    assert "weights A⁽²⁾, 6 × 6" in title
    assert not re.search(r"A[⁰¹²³⁴⁵⁶⁷⁸⁹]", title)


def test_cell_numbers_are_the_rounded_weights(cat):
    hf = head_map(cat, 1)
    expected = [f"{v:.2f}" for v in np.asarray(cat.weights[1]).ravel()]
    assert hf.map.value_texts == expected


def test_no_cell_numbers_when_the_cells_are_too_small():
    trace = run(LONG30, heads=2, d_model=8)
    hf = head_map(trace, 0)
    assert hf.map.values == []


def test_one_colour_scale_shared_by_every_head(cat):
    fig = notebook.heads_figure(cat)
    panels = matrices(fig)
    assert len(panels) == cat.num_heads + 1
    for image in panels:
        assert image.get_clim() == (0.0, 1.0)
    bars = colour_bars(fig)
    assert len(bars) == 1
    assert [t.get_text() for t in bars[0].get_yticklabels()] == ["0", "0.25", "0.5", "0.75", "1"]
    for i in range(cat.num_heads):
        assert np.array_equal(np.ma.getdata(panels[i].get_array()), cat.weights[i])
    average = np.ma.getdata(panels[-1].get_array())
    assert np.allclose(average, np.asarray(cat.weights).mean(axis=0))
    text = all_text(fig)
    assert "average_attn_weights=False" in text and "PyTorch" in text


def test_one_head_is_its_own_average():
    trace = run(CAT, heads=1, d_model=8)
    fig = notebook.heads_figure(trace)
    assert len(matrices(fig)) == 1
    assert "its own average" in all_text(fig) and "Average of the 1" not in all_text(fig)


def test_designed_weights_show_each_heads_rule(cat):
    trace = run(CAT, heads=4, d_model=16, weights="designed")
    for i in range(4):
        assert f"rule: {trace.rules[i]}" in head_map(trace, i).subtitle.get_text()


def test_causal_cells_are_masked_and_hatched(cat_causal):
    hf = head_map(cat_causal, 2)
    drawn = hf.map.image.get_array()
    assert np.array_equal(np.ma.getmaskarray(drawn), cat_causal.mask)
    visible = ~cat_causal.mask
    assert np.array_equal(np.ma.getdata(drawn)[visible], np.asarray(cat_causal.weights[2])[visible])
    hatch = hf.map.hatch
    assert hatch is not None and hatch.get_hatch() == theme.MASK_HATCH
    path = hatch.get_path()
    for r in range(6):
        for c in range(6):
            assert path.contains_point(hf.map.cell_center(r, c)) == bool(cat_causal.mask[r, c]), (r, c)
    # Masked cells carry no number (they are not "0.00": they are not allowed at all).
    texts = np.array(hf.map.value_texts).reshape(6, 6)
    assert (texts[cat_causal.mask] == "").all() and (texts[visible] != "").all()
    assert "masked" in all_text(hf.fig)


def test_masked_cells_are_drawn_grey_not_dark(cat_causal, tmp_path):
    """A blocked cell must not look like a weight of 0 (the darkest colour)."""
    hf = head_map(cat_causal, 0)
    path = figures.save(hf.fig, tmp_path / "c.png", "png", 100)
    img = pixels(path)
    cx, cy = hf.map.cell_center(0, 4)  # a masked cell: row 0 may not look at key 4
    x, y = hf.map.ax.transData.transform((cx - 0.2, cy - 0.2))  # cells are 1 data unit wide
    pixel = img[int(img.shape[0] - y), int(x)]
    mask_rgb = np.array([int(theme.MASK_COLOR[k:k + 2], 16) for k in (1, 3, 5)])
    hatch_rgb = np.array([int(theme.HATCH_COLOR[k:k + 2], 16) for k in (1, 3, 5)])
    assert min(np.abs(pixel - mask_rgb).max(), np.abs(pixel - hatch_rgb).max()) < 60


def shown_queries(fig) -> tuple[int, ...]:
    """The queries a magnifier figure shows, read from its block headings ('Query “cat” (position 1)…')."""
    import re

    return tuple(int(m.group(1)) for t in all_text_list(fig) if (m := re.match(r"Query .*\(position (\d+)\)", t)))


def all_text_list(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text)]


def token_boxes(fig):
    """The token boxes of a magnifier figure, in the order drawn (one query: row after row, token after token):
    each token is a text drawn in its own box (``bbox``)."""
    from matplotlib.text import Text

    return [t.get_bbox_patch() for t in fig.findobj(Text) if t.get_bbox_patch() is not None]


def magnifier_rows(fig, trace, single, max_tokens=40, query=None):
    """The rows the figure was drawn from: the queries its headings name, the data for each head."""
    from mhacli.render.figures.magnifiers import token_rows

    window = _shown(trace, max_tokens, query, single).magnified
    return [r for block in token_rows(trace, single, window, shown_queries(fig)) for r in block]


def test_magnifier_rows_are_shaded_by_the_attention_each_token_receives(cat):
    from matplotlib.text import Text

    single = _single_head(cat)
    fig = notebook.magnifiers_figure(cat, single, query=1)
    assert shown_queries(fig) == (1,)
    rows = magnifier_rows(fig, cat, single, query=1)
    assert [r.name for r in rows] == ["1 head", "Head 1", "Head 2", "Head 3", "Head 4"]
    assert np.allclose(rows[0].weights, np.asarray(single.weights[0])[1])
    for i in range(4):
        assert np.allclose(rows[i + 1].weights, np.asarray(cat.weights[i])[1])
        assert rows[i + 1].color == theme.head_color(i)
        row = np.sort(np.asarray(cat.weights[i][1]))  # the outlined box is the row's argmax, unless tied
        tied = row[-1] - row[-2] < evidence.TIE_MARGIN
        assert rows[i + 1].top == (None if tied else int(np.argmax(cat.weights[i][1])))
    texts = all_text_list(fig)
    for r in rows[1:]:
        assert r.name in texts
    boxed = [t.get_text().strip() for t in fig.findobj(Text) if t.get_bbox_patch() is not None]
    assert boxed == list(cat.tokens) * 5  # every row spells the sentence
    boxes = token_boxes(fig)
    assert len(boxes) == 5 * cat.n_tokens
    vmax = max(float(r.weights.max()) for r in rows)
    for k, r in enumerate(rows):
        drawn_row = boxes[k * cat.n_tokens:(k + 1) * cat.n_tokens]
        for box, w in zip(drawn_row, r.weights):
            want = np.array([int(theme.tint(r.color, w / vmax)[k:k + 2], 16) / 255 for k in (1, 3, 5)])
            assert np.allclose(box.get_facecolor()[:3], want, atol=1 / 255)
        widths = [b.get_linewidth() for b in drawn_row]
        assert widths.count(3.0) == (r.top is not None) and (r.top is None or widths.index(3.0) == r.top)
    assert "random weights: these patterns mean nothing yet" in texts


def test_magnifiers_without_a_query_show_the_queries_where_the_heads_differ_most(cat):
    from mhacli.measures.analysis import analyse

    single = _single_head(cat)
    fig = notebook.magnifiers_figure(cat, single)
    a = analyse(cat)
    distinct = {q: len({int(k) for k in a.top_keys[:, q] if k >= 0}) for q in range(cat.n_tokens)}
    chosen = shown_queries(fig)
    rows = magnifier_rows(fig, cat, single)
    assert 1 <= len(chosen) <= 3 and len(token_boxes(fig)) == 5 * len(chosen) * cat.n_tokens
    assert distinct[chosen[0]] == max(distinct.values())  # no query has more different top keys
    assert all(distinct[q] >= distinct[p] for q in chosen for p in range(cat.n_tokens) if p not in chosen)
    for k, q in enumerate(chosen):  # each block shows that query's rows, never an average over queries
        block = rows[5 * k:5 * (k + 1)]
        assert all(r.query == q for r in block)
        for i in range(4):
            assert np.allclose(block[i + 1].weights, np.asarray(cat.weights[i])[q])
    text = all_text(fig).replace("\n", " ")
    assert "differ most" in text and f"(position {chosen[0]}): {distinct[chosen[0]]} different tokens" in text
    assert "averaged" not in text


def test_repeated_designed_magnifiers_show_four_different_tokens_without_a_query():
    """Issue 12's acceptance: the opening slide of --sample repeated --weights designed, no --query."""
    from mhacli.io.samples import load_sample

    trace = run(load_sample("repeated").text, heads=4, weights="designed")
    single = _single_head(trace)
    fig = notebook.magnifiers_figure(trace, single)
    first = [r for r in magnifier_rows(fig, trace, single)
             if r.query == shown_queries(fig)[0] and r.name.startswith("Head")]
    focus = [r.top for r in first]
    assert None not in focus and len(set(focus)) == 4, focus
    for r in first:  # in focus means all of the row's weight
        assert r.weights[r.top] > 0.9
    outlined = [b for b in token_boxes(fig) if b.get_linewidth() == 3.0]
    rows = magnifier_rows(fig, trace, single)
    assert len(outlined) == sum(r.top is not None for r in rows)  # one outline per row with a top key
    text = all_text(fig).replace("\n", " ")
    assert "4 different tokens in focus" in text
    for rule in trace.rules:
        assert rule in text


def test_magnifiers_hatch_masked_keys_and_state_what_the_window_leaves_out():
    import re

    trace = run(LONG30, heads=2, d_model=8, causal=True)
    fig = notebook.magnifiers_figure(trace, None, max_tokens=10, query=6)
    rows = magnifier_rows(fig, trace, None, max_tokens=10, query=6)
    boxes = token_boxes(fig)
    assert len(boxes) == 2 * 10
    for k, r in enumerate(rows):
        for j, box in enumerate(boxes[k * 10:(k + 1) * 10]):
            assert bool(box.get_hatch()) == (j > 6) == bool(r.masked[j])
    percents = [t for t in all_text_list(fig) if re.fullmatch(r"\d+%|0", t)]
    # A number under each row's largest weight among its visible keys (and any that prints the same), none under
    # the masked ones: the shades carry the rest.
    want = []
    for r in rows:
        shown = [f"{w:.0%}" if w >= 0.005 else "0" for w in r.weights[~r.masked]]
        top = f"{float(r.weights[~r.masked].max()):.0%}"
        want += [p for p in shown if p == top]
    assert percents == want and 2 <= len(percents) < 2 * 7
    text = all_text(fig).replace("\n", " ")
    assert "tokens 0–9 of 29" in text and "falls outside the window" in text
    # Query 6 sees keys 0…6, all inside the window: nothing of its row is outside.
    assert text.count("0% outside the window") >= 2


def test_each_row_is_led_by_a_magnifier_in_its_heads_colour(cat):
    from matplotlib.patches import Circle

    fig = notebook.magnifiers_figure(cat, _single_head(cat))
    lenses = fig.findobj(Circle)
    colours = [theme.SINGLE_HEAD_COLOR] + [theme.head_color(i) for i in range(4)]
    assert len(lenses) == 5
    for lens, colour in zip(lenses, colours):
        want = tuple(int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
        assert np.allclose(lens.get_edgecolor()[:3], want)
    assert lenses[0].radius > lenses[1].radius  # one big magnifier against h small ones


# ---------------------------------------------------------------------------
# Legible: nothing cut off, nothing overlapping, long texts windowed
# ---------------------------------------------------------------------------


def _text_boxes(fig):
    """Every piece of text drawn (titles, tick labels, cell values, tokens), with its box in pixels."""
    import matplotlib
    from matplotlib.text import Text

    from mhacli.render.figures.layout import RENDER_RC

    with matplotlib.rc_context(RENDER_RC):
        fig.set_dpi(72)
        # Lays out every artist as a draw does, without painting pixels (the boxes are the same, painting
        # took half the time).
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        return [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(Text)
                if t.get_visible() and t.get_text().strip() and t.get_figure() is not None]


def _assert_legible(fig):
    boxes = _text_boxes(fig)
    frame = fig.bbox
    for text, b in boxes:
        assert b.x0 >= frame.x0 - 1 and b.x1 <= frame.x1 + 1, f"{text!r} cut off at the side"
        assert b.y0 >= frame.y0 - 1 and b.y1 <= frame.y1 + 1, f"{text!r} cut off at top/bottom"
    # Every pair at once (a Python loop over the pairs took seconds on 40 tokens): a pair overlaps when
    # both its overlaps are over 1 pixel; the first such pair, in the order of the boxes, is named.
    x0, y0, x1, y1 = np.array([b.extents for _, b in boxes], dtype=float).reshape(-1, 4).T
    overlap_w = np.minimum.outer(x1, x1) - np.maximum.outer(x0, x0)
    overlap_h = np.minimum.outer(y1, y1) - np.maximum.outer(y0, y0)
    clash = np.triu(~(overlap_w <= 1.0) & ~(overlap_h <= 1.0), k=1)
    if clash.any():
        k, j = np.argwhere(clash)[0]
        raise AssertionError(f"{boxes[k][0]!r} overlaps {boxes[j][0]!r}")


@pytest.mark.parametrize("text, heads, causal", [
    (CAT, 4, False),
    (CAT, 1, True),
    (LONG30, 4, True),
    (" ".join(f"w{i}" for i in range(40)), 8, False),
    ("我的猫 likes 🐈 and 👍🏽 café $5 naïve 🇫🇷 مرحبا extraordinarily-long-hyphenated-word", 2, False),
])
@pytest.mark.slow
def test_nothing_cut_off_and_no_overlapping_labels(text, heads, causal):
    trace = run(text, heads=heads, d_model=16, causal=causal)
    single = _single_head(trace)
    with figures.drawing() as pen:
        hf = figures.HeadFigure(trace, _shown(trace).figures, pen)
        _assert_legible(hf.show(heads - 1))
        _assert_legible(notebook.heads_figure(trace, pen=pen))
        _assert_legible(notebook.magnifiers_figure(trace, single, pen=pen))
        _assert_legible(notebook.compare_figure(trace, single, pen=pen))


def test_labels_are_readable_sizes_up_to_40_tokens():
    trace = run(" ".join(f"tok{i}" for i in range(40)), heads=2, d_model=8)
    hf = head_map(trace, 0)
    sizes = {t.get_fontsize() for t in hf.map.ax.get_xticklabels() + hf.map.ax.get_yticklabels()}
    assert min(sizes) >= 7.5
    assert len(hf.map.x_labels) == 40 and len(hf.map.y_labels) == 40  # every token, none thinned


def test_long_texts_are_windowed_and_the_title_says_so():
    tokens = [f"t{i}" for i in range(100)]
    trace = run(" ".join(tokens), heads=2, d_model=8)
    hf = head_map(trace, 0, max_tokens=20)
    assert hf.map.x_labels == tokens[:20]
    assert np.array_equal(np.ma.getdata(hf.map.image.get_array()), np.asarray(trace.weights[0])[:20, :20])
    notes = all_text(hf.fig)
    assert "tokens 0–19 of 100" in notes and "--max-tokens 20" in notes
    # A query beyond the first window moves the window to it.
    hf = head_map(trace, 0, max_tokens=20, query=70)
    labels = hf.map.x_labels
    assert "t70" in labels and len(labels) == 20
    assert token_view(100, 20, 99).stop == 100


@pytest.mark.slow
def test_missing_glyphs_are_reported_once_and_never_crash(tmp_path):
    trace = run("cat 🐈 and 🐈 again 猫", heads=2, d_model=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no matplotlib "Glyph missing" warning may escape
        saved = notebook.save_figures(trace, tmp_path, dpi=FAST_DPI)
    pen = figures.Pen()
    if pen.has_glyph("🐈"):
        pytest.skip("this machine has an emoji font")
    glyph_notes = [n for n in saved.notices if "no glyph" in n]
    assert len(glyph_notes) == 1
    assert "🐈" in glyph_notes[0] and glyph_notes[0].count("🐈") == 1
    assert pen.shown("🐈") == "U+1F408"
    assert pen.shown("café") == "café"
    hf = head_map(trace, 0)
    assert "U+1F408" in hf.map.x_labels


@pytest.mark.slow
def test_tokens_are_never_read_as_mathtext(tmp_path):
    trace = run("pay $5 or $x^2$ now", heads=2, d_model=8, tokenizer="whitespace")
    notebook.save_figures(trace, tmp_path, dpi=FAST_DPI)
    hf = head_map(trace, 0)
    assert "$x^2$" in hf.map.x_labels
    from matplotlib.text import Text

    assert not any(t.get_parse_math() for t in hf.fig.findobj(Text) if t.get_text())


def test_font_fallback_uses_only_installed_families():
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    faces = figures.font_faces()
    assert faces and all(f.family in installed for f in faces)
    assert faces[0].family == "DejaVu Sans"


def test_theme_heat_colours_follow_matplotlibs_colour_map():
    import matplotlib
    from matplotlib.colors import to_hex

    cmap = matplotlib.colormaps[theme.HEATMAP_CMAP]
    for v in np.linspace(0, 1, 101):
        got = np.array([int(theme.heat_color(v)[k:k + 2], 16) for k in (1, 3, 5)])
        want = np.array([int(to_hex(cmap(v))[k:k + 2], 16) for k in (1, 3, 5)])
        assert np.abs(got - want).max() <= 6, v


def test_fast_cell_ink_matches_the_contrast_rule():
    for v in np.linspace(0, 1, 2001):
        assert theme.heat_ink(v) == theme.ink_on(theme.heat_color(v)), v


def test_head_text_colours_are_readable_on_white():
    for i in range(8):
        assert theme.contrast(theme.head_text_color(i), theme.PAPER_COLOR) >= 3.0


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------


def test_query_is_a_position_or_a_token():
    tokens = ("the", "cat", "sat", "on", "the", "mat")
    assert figures.resolve_query(tokens, None) is None
    assert figures.resolve_query(tokens, "2") == 2
    assert figures.resolve_query(tokens, 5) == 5
    assert figures.resolve_query(tokens, "the") == 0  # first copy
    assert figures.resolve_query(tokens, "MAT") == 5  # any case when nothing matches exactly
    with pytest.raises(UsageError, match=r"^query 6 is outside the sentence; give a position from 0 to 5") as caught:
        figures.resolve_query(tokens, "6")
    assert caught.value.for_cli().startswith("--query 6 is outside")  # the command line's words there
    with pytest.raises(UsageError, match=r"from 0 to 5"):
        figures.resolve_query(tokens, "-1")
    with pytest.raises(UsageError, match=r"'dog' is not a token of the text.*the, cat, sat, on, mat"):
        figures.resolve_query(tokens, "dog")


def test_format_and_dpi_are_checked():
    assert figures.check_format("SVG") == "svg"
    with pytest.raises(UsageError, match="png, svg, pdf"):
        figures.check_format("bmp")
    assert figures.check_dpi(72) == 72
    for bad in (0, 10, 5000):
        with pytest.raises(UsageError, match="^dpi must be a whole number from 30 to 600") as caught:
            figures.check_dpi(bad)
        assert caught.value.for_cli().startswith("--dpi must be")  # each caller reads its own spelling


# ---------------------------------------------------------------------------
# The terminal grid
# ---------------------------------------------------------------------------


def render(renderable, width=80, color_system=None) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=color_system, legacy_windows=False).print(renderable)
    return out.getvalue()


def test_terminal_grid_shows_every_weight_in_percent(cat):
    text = render(head_grids(cat, analyse(cat), view=token_view(cat.n_tokens, 40), width=80))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for i in range(4):
        assert f"head {i + 1}" in text
    # Read head 1's grid back: the numbers are the weights, rows sum to about 100.
    grid = render(head_grid(np.asarray(cat.weights[0]), cat.tokens))
    rows = [line for line in grid.splitlines()[2:] if line.strip()]
    assert len(rows) == 6
    for r, line in enumerate(rows):
        numbers = [int(x) for x in line.split()[2:]]
        assert numbers == [round(v * 100) for v in np.asarray(cat.weights[0])[r]]
        assert abs(sum(numbers) - 100) <= 3


def test_terminal_grid_colours_come_from_the_theme(cat):
    text = render(head_grid(np.asarray(cat.weights[0]), cat.tokens), color_system="truecolor")
    v = float(cat.weights[0][0, 0])
    r, g, b = (int(theme.heat_color(v)[k:k + 2], 16) for k in (1, 3, 5))
    assert f"48;2;{r};{g};{b}m" in text
    plain = render(head_grid(np.asarray(cat.weights[0]), cat.tokens))
    assert "\x1b" not in plain


def test_terminal_grid_marks_masked_cells_and_the_query(cat_causal):
    text = render(head_grid(np.asarray(cat_causal.weights[0]), cat_causal.tokens,
                            mask=np.asarray(cat_causal.mask), query=1))
    rows = text.splitlines()[2:]
    assert rows[0].count("·") == 5 and "▶" in rows[1]


def test_terminal_grid_steps_aside_when_the_sentence_is_too_wide():
    trace = run(LONG30, heads=2, d_model=8)
    assert grid_width(trace.n_tokens) > 80
    a = analyse(trace)
    text = render(head_grids(trace, a, view=token_view(trace.n_tokens, 40), width=80, figures_at="mha-output"))
    from mhacli.render.labels import weights_note

    said = weights_note(trace, analysis=a)  # what the grids would have shown above them, cautions included
    assert " ".join(text.split()).startswith(" ".join(said.split())) and said.startswith("random weights")
    # The weights line, then one sentence saying where the grids are instead of them.
    assert "mha-output" in text and len(text.strip().splitlines()) <= len(said) // 80 + 3
    text = render(head_grids(trace, analyse(trace), view=token_view(trace.n_tokens, 40), width=80, figures_at=None))
    assert "--no-plots" in text
    wide = render(head_grids(trace, analyse(trace), view=token_view(trace.n_tokens, 40), width=200), width=200)
    assert "head 2" in wide


def test_terminal_grids_name_the_weights_and_each_heads_per_query_pattern():
    trace = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed")
    text = render(head_grids(trace, analyse(trace), view=token_view(trace.n_tokens, 40), width=200), width=200)
    assert "designed weights: head 1, previous token" in text
    for i, rule in enumerate(trace.rules):
        assert f"head {i + 1}  {rule}" in text
    hidden = render(head_grids(trace, analyse(trace), view=token_view(trace.n_tokens, 40), width=200,
                               hide_rules=True), width=200)
    assert not any(rule in hidden for rule in trace.rules) and "rules hidden" in hidden
    shown = run(CAT, heads=2, d_model=8)
    random = render(head_grids(shown, analyse(shown), view=token_view(shown.n_tokens, 40), width=80))
    assert "random weights: these patterns mean nothing yet" in random
    assert all(len(line) <= 80 for line in random.splitlines())


def test_terminal_grids_of_a_view_show_its_weights_and_whose_they_are():
    from mhacli.measures.view import from_attention

    trace = run(CAT, heads=2, d_model=8, causal=True)
    view = from_attention(trace.weights, trace.tokens, layer_names=["only"])
    text = render(head_grids(view, analyse(view), view=token_view(view.n_tokens, 40), width=80))
    assert "attention from your model" in text and "·" in text  # causal cells found from the weights
    grid = render(head_grid(np.asarray(view.weights[1]), view.tokens))
    assert [int(x) for x in grid.splitlines()[3].split()[2:4]] == [round(v * 100) for v in trace.weights[1][1, :2]]


def test_terminal_grid_escapes_what_the_text_could_smuggle_in():
    trace = run("a \x1b[31mred\x1b[0m b", heads=1, d_model=4)
    assert "\x1b[31m" not in render(head_grids(trace, analyse(trace), view=token_view(trace.n_tokens, 40), width=80))


# ---------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_explain_saves_figures_and_lists_every_file(explain_drawn):
    assert explain_drawn.argv == ("explain", CAT)  # conftest: the session's one explain run with --out
    assert explain_drawn.names() == sorted(expected_names(4))
    for name in expected_names(4):
        assert f"{explain_drawn.shown}/{name}" in explain_drawn.output
    assert "Each head's weights" in explain_drawn.output  # the terminal grid


def test_explain_query_and_format(runner, tmp_path):
    result = runner.invoke(app, ["explain", CAT, "-o", str(tmp_path), "-q", "cat", "--format", "svg",
                                 "--heads", "2", "--d-model", "8"])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == sorted(expected_names(2, "svg"))
    assert "▶" in result.output


def test_explain_no_plots_writes_nothing(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["explain", CAT, "--no-plots"])
    assert result.exit_code == 0, result.output
    assert os.listdir(tmp_path) == []
    assert "Wrote" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--format", "bmp"], "unknown figure format 'bmp'; choose one of: png, svg, pdf."),
    (["--dpi", "5"], "--dpi must be a whole number from 30 to 600"),
    (["-q", "9"], "--query 9 is outside the sentence; give a position from 0 to 5"),
    (["-q", "dog"], "--query 'dog' is not a token of the text"),
])
def test_explain_refuses_bad_figure_options(runner, tmp_path, args, message):
    result = runner.invoke(app, ["explain", CAT, "-o", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists() or os.listdir(tmp_path / "o") == []


def test_out_is_checked_before_anything_is_computed(runner, tmp_path, monkeypatch):
    import mhacli.attention.trace

    def boom(*a, **k):
        raise AssertionError("computed before checking --out")

    monkeypatch.setattr(mhacli.attention.trace, "run_tokens", boom)
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    result = runner.invoke(app, ["explain", CAT, "--out", str(afile)])
    assert result.exit_code == 2
    assert "is a file, not a folder" in result.output
    assert afile.read_text() == "x"


@pytest.mark.slow
def test_show_draws_the_same_figures_from_an_npz(runner, tmp_path):
    npz = tmp_path / "cat.npz"
    result = runner.invoke(app, ["explain", CAT, "--no-plots", "--causal", "--save-npz", str(npz)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["show", str(npz), "-o", str(tmp_path / "o"), "--dpi", str(FAST_DPI)])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path / "o")) == sorted(expected_names(4))
    assert "·" in result.output  # the causal mask in the terminal grid


def test_explain_no_plots_never_imports_matplotlib():
    code = ("import sys; from typer.testing import CliRunner; from mhacli.cli.app import app; "
            "r = CliRunner().invoke(app, ['explain', 'the cat sat', '--no-plots']); "
            "assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_drawing_never_uses_pyplot(tmp_path):
    code = ("import sys; import mhacli; from mhacli import notebook; "
            f"notebook.save_figures(mhacli.run('the cat sat', heads=2, d_model=8), {str(tmp_path)!r}, dpi=30); "
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_installed_mha_draws_figures_in_a_real_process(tmp_path):
    mha = Path(sys.executable).with_name("mha")
    out = subprocess.run([str(mha), "explain", "the cat sat on the mat 🐈", "-o", str(tmp_path / "o"),
                          "--dpi", "40", "--heads", "2", "--d-model", "8"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path / "o")) == sorted(expected_names(2))
    if not figures.Pen().has_glyph("🐈"):
        assert out.stderr.count("no glyph") == 1  # reported once, as a note, not a warning per label
    assert "Warning" not in out.stderr and "Traceback" not in out.stderr


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 60), st.integers(1, 80), st.one_of(st.none(), st.integers(0, 59)))
def test_window_always_holds_the_query(n, max_tokens, query):
    if query is not None and query >= n:
        query = n - 1
    v = token_view(n, max_tokens, query)
    assert 0 <= v.start < v.stop <= n
    assert v.n == min(n, max_tokens)
    if query is not None:
        assert v.start <= query < v.stop


def test_single_head_uses_the_same_input_and_weights(cat):
    single = _single_head(cat)
    assert single.num_heads == 1 and single.d_k == cat.d_model
    assert np.array_equal(single.X, cat.X) and np.array_equal(single.W_q, cat.W_q)
    again = run(CAT, heads=1, d_model=16)
    assert np.allclose(single.weights, again.weights)
    assert dataclasses.replace(cat.config, heads=1) == single.config


# ---------------------------------------------------------------------------
# An attention view, honest labels, hidden rules
# ---------------------------------------------------------------------------


def _view(causal: bool = True):
    from mhacli.measures.view import from_attention

    rng = np.random.default_rng(3)
    s = rng.standard_normal((2, 3, 6, 6)) * 2
    if causal:
        s = np.where(np.triu(np.ones((6, 6), bool), 1), -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w, from_attention(w, CAT.split(), layer_names=["enc.0", "enc.1"], layer=1)


@pytest.mark.slow
def test_a_view_draws_heads_sheet_and_magnifiers_of_its_layer_and_nothing_invented(tmp_path):
    import mhacli

    w, view = _view()
    saved = mhacli.save_figures(view, tmp_path / "new" / "dir", dpi=FAST_DPI)
    assert [p.name for p in saved] == ["head-1.png", "head-2.png", "head-3.png", "heads.png", "magnifiers.png"]
    hf = head_map(view, 2)
    assert np.array_equal(np.ma.getdata(hf.map.image.get_array()), w[1][2])
    assert np.array_equal(np.ma.getmaskarray(hf.map.image.get_array()), np.triu(np.ones((6, 6), bool), 1))
    label = "attention from your model, layer 1 of 0–1 (enc.1)"
    assert label in hf.note.get_text()
    sheet = notebook.heads_figure(view)
    assert np.allclose(np.ma.getdata(matrices(sheet)[-1].get_array()), w[1].mean(axis=0))
    assert label in all_text(sheet)
    mag = notebook.magnifiers_figure(view)
    names = [t for t in all_text_list(mag) if t in ("1 head", "Head 1", "Head 2", "Head 3")]
    assert names[:3] == ["Head 1", "Head 2", "Head 3"] and "1 head" not in names  # no one-head contrast
    text = all_text(mag) + all_text(sheet) + all_text(hf.fig)
    for invented in ("d/h", "d =", "W_q", "parameters"):
        assert invented not in text, invented
    for p in saved:
        assert pixels(p).std() > 20, p.name


@pytest.mark.parametrize("weights", ["random", "designed"])
@pytest.mark.slow
def test_every_figure_names_its_weights_and_hide_rules_hides_the_names(weights):
    from mhacli.measures import narrate

    trace = run("the dog saw the cat and the cat saw the dog", heads=4, weights=weights)
    single = _single_head(trace)
    label = narrate.weights_label(weights, trace.rules)
    figs = {
        "head": head_map(trace, 1).fig, "heads": notebook.heads_figure(trace),
        "magnifiers": notebook.magnifiers_figure(trace, single), "split": figures.split_figure(trace),
        "compare": notebook.compare_figure(trace, single),
    }
    for name, fig in figs.items():
        assert label.replace(" ", "") in all_text(fig).replace("\n", "").replace(" ", ""), name
    if weights == "designed":
        hidden = {
            "head": notebook.head_figure(trace, 1, hide_rules=True),
            "heads": notebook.heads_figure(trace, hide_rules=True),
            "magnifiers": notebook.magnifiers_figure(trace, single, hide_rules=True),
            "split": figures.split_figure(trace, hide_rules=True),
            "compare": notebook.compare_figure(trace, single, hide_rules=True),
        }
        for name, fig in hidden.items():
            text = all_text(fig)
            assert "rules hidden" in text, name
            for rule in trace.rules:
                assert rule not in text, (name, rule)


# ---------------------------------------------------------------------------
# Readable on a projector: token labels at 40 tokens, the figure fitted to a 1080p screen
# ---------------------------------------------------------------------------

SCREEN = (1920, 1080)
MIN_LABEL_PX = 10.0


def fitted_label_px(fig, path: Path, dpi: int) -> float:
    """Height in screen pixels of the smallest token label, the saved image fitted to a 1920 × 1080 screen.

    The label's em height is its font size in points × dpi / 72 pixels in the file; shown fitted,
    the file is scaled by min(1920 / W, 1080 / H).
    """
    with Image.open(path) as im:
        width, height = im.size
    fit = min(SCREEN[0] / width, SCREEN[1] / height)
    sizes = [t.get_fontsize() for t in token_labels(fig)]
    assert sizes, "the figure labels its tokens"
    return min(sizes) * dpi / 72 * fit


@pytest.fixture(scope="module")
def paragraph():
    from mhacli.io.samples import load_sample

    trace = run(load_sample("paragraph").text, heads=4, d_model=16)
    assert trace.n_tokens >= 40
    return trace


@pytest.mark.parametrize("name", ["head-1", "heads"])
def test_token_labels_at_40_tokens_are_10_px_on_a_1080p_screen(paragraph, tmp_path, name):
    """Issue 20: heads.png's labels were 7–10 px on a projector at 24–40 tokens."""
    fig = notebook.head_figure(paragraph, 0) if name == "head-1" else notebook.heads_figure(paragraph)
    path = figures.save(fig, tmp_path / f"{name}.png", "png", FAST_DPI)
    assert fitted_label_px(fig, path, FAST_DPI) >= MIN_LABEL_PX


@pytest.mark.parametrize("heads, length", [(4, 12), (4, 40), (8, 40)])
@pytest.mark.slow
def test_training_heads_labels_are_10_px_on_a_1080p_screen_and_never_overlap(tmp_path, heads, length):
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train
    from mhacli.render.figures.training import training_heads_figure

    result = train(TrainConfig(heads=heads, length=length, steps=2, batch=2, held_out=4, snapshots=5))
    fig = training_heads_figure(result)
    path = figures.save(fig, tmp_path / "training-heads.png", "png", 100)  # the dpi mha train saves at
    assert fitted_label_px(fig, path, 100) >= MIN_LABEL_PX
    keys = [t.get_text() for t in heatmaps(fig)[-1].get_xticklabels()]  # the bottom row's keys
    step = 1 if length == 12 else int(np.diff([t for t in heatmaps(fig)[-1].get_xticks()])[0])
    assert keys == list(result.snapshot_tokens[::step])
    _assert_legible(fig)


@pytest.mark.parametrize("length", [12, 40])
@pytest.mark.slow
def test_training_runs_labels_are_10_px_on_a_1080p_screen_and_never_overlap(tmp_path, length):
    """After --compare, training-heads.png shows every run: its labels too stay readable at 40 tokens."""
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train
    from mhacli.render.figures.training import training_runs_figure

    results = [train(TrainConfig(heads=h, length=length, steps=2, batch=2, held_out=4)) for h in (1, 2, 4)]
    fig = training_runs_figure(results)
    path = figures.save(fig, tmp_path / "training-heads.png", "png", 100)
    assert fitted_label_px(fig, path, 100) >= MIN_LABEL_PX
    _assert_legible(fig)


@pytest.mark.parametrize("hide_rules", [False, True])
def test_one_vs_many_is_placed_once_and_nothing_is_cut_off_or_overlaps(hide_rules):
    """mha demo's slide: texts measured once and panels placed by arithmetic (no layout engine at the save),
    every text inside the 16 x 9 inches and clear of every other, and no two panels touching."""
    from mhacli.cli.commands.classroom import shipped_pairs
    from mhacli.render.figures.one_vs_many import FIGSIZE, one_vs_many_figure

    pairs = shipped_pairs()
    fig = one_vs_many_figure(pairs, hide_rules=hide_rules)
    assert fig.get_layout_engine() is None and tuple(fig.get_size_inches()) == FIGSIZE
    _assert_legible(fig)
    panels = [ax.get_window_extent() for ax in fig.axes if ax.images]
    assert len(panels) == sum(p.heads + 1 for p in pairs)
    for k, a in enumerate(panels):
        assert fig.bbox.x0 <= a.x0 and a.x1 <= fig.bbox.x1 and fig.bbox.y0 <= a.y0 and a.y1 <= fig.bbox.y1
        assert not any(a.overlaps(b) for b in panels[k + 1:])


def test_the_compare_figure_with_one_head_names_no_pair():
    trace = run(CAT, heads=1, d_model=8)
    with figures.drawing() as pen:
        said = all_text(notebook.compare_figure(trace, _single_head(trace), pen=pen))
    assert "With one head there is no pair" in said and "divergence 0.000 bits" in said and "the 1 heads" not in said
