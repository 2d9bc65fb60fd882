"""split.png: W_q's row blocks, Q's and H's column blocks and W^O's column blocks, one colour per head."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from mhacli.core.trace import run
from mhacli.render import theme
from mhacli.render.figures.split import split_figure

matplotlib.use("Agg")


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_each_panel_shows_its_matrix_with_one_outline_per_head(heads):
    from matplotlib.patches import Rectangle

    t = run("the cat sat on the mat", heads=heads)
    fig = split_figure(t)
    axes = fig.axes
    assert len(axes) == 5
    shown = [np.asarray(ax.images[0].get_array()) for ax in axes]
    n, d = t.n_tokens, t.d_model
    assert np.array_equal(shown[0], t.W_q)
    assert np.array_equal(shown[1], np.concatenate(list(t.Q), axis=1))  # Q's column blocks are the Q^i
    assert np.array_equal(shown[2], t.concat) and np.array_equal(shown[3], t.W_o)
    assert np.array_equal(shown[4], t.output) and shown[1].shape == (n, d)
    for ax in axes[:4]:
        boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert [matplotlib.colors.to_hex(b.get_edgecolor()) for b in boxes] == \
            [theme.head_color(i).lower() for i in range(heads)]
    assert [tick.get_text() for tick in axes[1].get_yticklabels()] == list(t.tokens)


def test_the_figure_says_which_weights_and_renders(tmp_path):
    t = run("the cat sat", heads=2, weights="designed", d_model=16)
    fig = split_figure(t, label="designed weights: each head follows a rule")
    texts = " ".join(x.get_text() for x in fig.texts)
    assert "designed weights" in texts and "d = 16 split into h = 2 blocks of d/h = 8" in fig._suptitle.get_text()
    fig.savefig(tmp_path / "split.png", dpi=40)
    from PIL import Image

    with Image.open(tmp_path / "split.png") as im:
        assert im.size == (600, 184)
        assert len(np.unique(np.asarray(im.convert("RGB")).reshape(-1, 3), axis=0)) > 50  # not blank
