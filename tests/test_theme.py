"""One palette: head colours stay the Okabe–Ito eight, and never repeat past eight heads."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mhacli.render import theme


def rgb(c: str) -> tuple[int, ...]:
    return tuple(int(c[k:k + 2], 16) for k in (1, 3, 5))


def test_the_first_eight_are_okabe_ito():
    assert [theme.head_color(i) for i in range(8)] == list(theme.HEAD_COLORS)


def test_head_colours_never_repeat():
    colours = [theme.head_color(i) for i in range(64)]
    assert len(set(colours)) == 64


def test_the_first_16_heads_are_told_apart_by_eye():
    """No two of the first 16 colours are closer than 35 (of 255) in their most different RGB channel.

    (Past 16 heads colours get close; every figure also writes each head's number.)
    """
    colours = [rgb(theme.head_color(i)) for i in range(16)]
    closest = min(max(abs(x - y) for x, y in zip(a, b)) for a, b in itertools.combinations(colours, 2))
    assert closest >= 35, closest


@given(st.lists(st.lists(st.floats(-1.0, 2.0), min_size=1, max_size=6), min_size=1, max_size=6))
def test_a_grid_s_cells_get_the_colour_and_ink_each_weight_would_get_alone(rows):
    """theme.heat_cells, one call per terminal grid, colours every cell as heat_color and ink_on do one by one;
    the ink keeps the WCAG contrast that ink_on picks (black or white, whichever reads better)."""
    cells = theme.heat_cells(rows)
    assert [len(r) for r in cells] == [len(r) for r in rows]
    for row, shaded in zip(rows, cells):
        for value, (background, ink) in zip(row, shaded):
            assert background == theme.heat_color(value) and ink == theme.ink_on(background)
            assert theme.contrast(ink, background) >= 4.5
