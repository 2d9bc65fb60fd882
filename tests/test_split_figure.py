"""split.png: X, the per-head blocks W_q^i, W_k^i, W_v^i (d × d/h, the article's orientation), Q's blocks,
H, W^O and O, one colour per head, a colour bar and a legend in the heads' colours."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from traced import run
from mhacli.render import theme
from mhacli.render.figures.split import split_figure

matplotlib.use("Agg")


def panels(fig) -> dict[str, np.ndarray]:
    """Each matrix panel's title and the matrix it shows (divided by its largest |value|, as drawn)."""
    return {ax.get_title(): np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images}


def caption(ax) -> str:
    """What is written under a panel (its last text)."""
    return ax.texts[-1].get_text()


def row_labels(ax) -> list:
    """The token labels beside a panel's rows: its texts before the caption."""
    return [t for t in ax.texts[:-1] if t.get_text()]


def scaled(m: np.ndarray) -> np.ndarray:
    return m / np.max(np.abs(m))


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_each_panel_shows_its_matrix_in_the_articles_orientation(heads):
    t = run("the cat sat on the mat", heads=heads)
    shown = panels(split_figure(t))
    n, d, dk = t.n_tokens, t.d_model, t.d_k
    first, last = "⁽¹⁾", "⁽" + str(heads).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")) + "⁾"
    assert np.allclose(shown["X  (N × d)"], scaled(t.X))
    for k, name in enumerate("qkv"):
        block_view = shown[f"W_{name}{first} … W_{name}{last}"]
        assert block_view.shape == (d, d)
        for i in range(heads):  # column block i is the article's W^i, d × d/h, Q^i = X W_q^i
            block = block_view[:, i * dk:(i + 1) * dk]
            assert block.shape == (d, dk)
            assert np.allclose(block, scaled(np.concatenate([b[k] for b in map(t.head_weights, range(heads))],
                                                            axis=1))[:, i * dk:(i + 1) * dk])
    q = shown[f"Q{first} … Q{last}"]
    assert q.shape == (n, d)
    for i in range(heads):
        assert np.allclose(q[:, i * dk:(i + 1) * dk] * np.max(np.abs(t.Q)), t.X @ t.head_weights(i)[0])
    assert np.allclose(shown["H = [head_1 … head_h]  (N × d)"], scaled(t.concat))
    assert np.allclose(shown["W^O  (d × d)"], scaled(t.W_o))
    assert np.allclose(shown["O = H W^Oᵀ  (N × d)"], scaled(t.output))


@pytest.mark.parametrize("heads", [2, 4])
def test_blocks_are_outlined_and_named_in_the_heads_colours(heads):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    t = run("the cat sat on the mat", heads=heads)
    fig = split_figure(t)
    want = [theme.head_color(i).lower() for i in range(heads)]
    for ax in fig.axes:
        if ax.images and not ax.get_title().startswith(("O =", "X ")):
            boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
            assert [to_hex(b.get_edgecolor()) for b in boxes] == want, ax.get_title()
    legend = fig.legends[0]
    assert [x.get_text() for x in legend.get_texts()] == [f"head {i + 1}" for i in range(heads)]
    assert [to_hex(x.get_color()) for x in legend.get_texts()] == [theme.head_text_color(i).lower()
                                                                    for i in range(heads)]
    assert [to_hex(p.get_edgecolor()) for p in legend.get_patches()] == want
    bars = [ax for ax in fig.axes if "largest |value|" in ax.get_ylabel()]
    assert len(bars) == 1  # one colour bar reads every panel: each is divided by its own largest |value|
    for ax in fig.axes:
        if ax.images:
            assert ax.images[0].get_clim() == (-1.0, 1.0) and "largest |value|" in caption(ax)
    tokens = [label.get_text() for label in row_labels(fig.axes[0])]
    assert tokens == list(t.tokens)


def test_the_figure_says_which_weights_and_renders(tmp_path):
    from PIL import Image

    from mhacli.render.figures import save

    t = run("the cat sat", heads=2, weights="designed", d_model=16)
    fig = split_figure(t, label="designed weights: each head follows a rule")
    title = " ".join(x.get_text() for x in fig.texts)  # the suptitle is one of the figure's texts
    assert "d = 16 split into h = 2 blocks of d/h = 8" in title
    assert "designed weights: each head follows a rule" in title
    path = save(fig, tmp_path / "split.png", "png", 40)
    with Image.open(path) as im:
        assert im.size == (640, 345)
        assert len(np.unique(np.asarray(im.convert("RGB")).reshape(-1, 3), axis=0)) > 50  # not blank


@pytest.mark.parametrize("heads", [1, 4])
def test_x_is_framed_as_one_matrix_every_head_reads(heads):
    """X is not cut into the heads' blocks: every head reads all of X (its own W_q^i makes Q^i), so X has one
    frame around all d columns, in no head's colour, and the caption says so."""
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    t = run("the cat sat on the mat", heads=heads)
    x = next(ax for ax in split_figure(t).axes if ax.get_title().startswith("X "))
    frames = [p for p in x.patches if isinstance(p, Rectangle)]
    assert len(frames) == 1 and frames[0].get_width() > t.d_model - 1  # one frame over every column
    assert to_hex(frames[0].get_edgecolor()) == to_hex(theme.LABEL_COLOR)
    assert to_hex(frames[0].get_edgecolor()) not in {to_hex(theme.head_color(i)) for i in range(max(heads, 2))}
    assert "every head reads all of X" in caption(x)


@pytest.mark.parametrize("words", [11, 24])
def test_row_labels_never_overlap_at_the_saved_size(words):
    """Every row label of X and H has room: no two shown labels' boxes overlap in the drawn figure, and a label,
    when shown, sits on its own row's token; Q and O, level with X and H row for row, carry none (each token is
    written once a row of panels)."""
    t = run(" ".join(f"word{k}" for k in range(words)), heads=4, d_model=32)
    fig = split_figure(t)
    fig.set_dpi(150)
    fig.draw_without_rendering()
    checked = 0
    for ax in fig.axes:
        labels = row_labels(ax) if ax.images else []
        if not labels:
            continue
        for lab in labels:  # at its row's height, in the matrix's data units
            assert lab.get_text() == t.tokens[int(lab.get_position()[1])]
        boxes = sorted((lab.get_window_extent() for lab in labels), key=lambda b: b.y0)
        assert all(low.y1 <= high.y0 for low, high in zip(boxes, boxes[1:])), ax.get_title()
        checked += 1
    assert checked == 2  # X and H
    placed = {ax.get_title().split()[0]: ax.get_position() for ax in fig.axes if ax.images and ax.get_title()}
    x, q, h, o = (placed[k] for k in ("X", "Q⁽¹⁾", "H", "O"))
    assert np.isclose(x.y0, q.y0) and np.isclose(x.y1, q.y1) and np.isclose(h.y0, o.y0) and np.isclose(h.y1, o.y1)


@pytest.mark.parametrize("text", ["x" * 80, "a " + "supercalifragilistic" * 4 + " b"])
def test_a_token_of_any_length_labels_its_row_shortened_and_every_panel_keeps_its_width(text):
    # The layout gave each row label the raw token's width: one 80-letter token left the panels a negative
    # width ("Width and height specified must be non-negative"), found by tests/test_fuzz_cli.py.
    t = run(text, heads=4)
    fig = split_figure(t)
    x = next(ax for ax in fig.axes if ax.get_title().startswith("X "))
    labels = [label.get_text() for label in row_labels(x)]
    assert all(len(label) <= 12 for label in labels) and any(label.endswith("…") for label in labels)
    assert all(ax.get_position().width > 0.02 for ax in fig.axes if ax.images)
