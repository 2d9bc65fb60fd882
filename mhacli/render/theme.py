"""One palette for the whole tool: terminal, figures and the HTML page.

Head colours are the Okabe–Ito set (colour-blind safe), the first four apart on a washed-out projector and
yellow last; heat maps use ``viridis`` (perceptually uniform, colour-blind safe, readable in greyscale).
"""

from __future__ import annotations

from collections.abc import Sequence

HEAD_COLORS = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)
SINGLE_HEAD_COLOR = "#555555"  # the one-head contrast in comparisons
AVERAGE_COLOR = "#333333"
HEATMAP_CMAP = "viridis"
MASK_COLOR = "#BBBBBB"  # masked (causal) cells
MASK_HATCH = "////"

# Rich styles
STYLE_TITLE = "bold"
STYLE_FORMULA = "cyan"
STYLE_SHAPE = "green"
STYLE_NUMBER = "magenta"
STYLE_DIM = "dim"
STYLE_OK = "bold green"
STYLE_BAD = "bold red"


def head_color(i: int) -> str:
    """Colour of head i (0-based): the eight Okabe–Ito colours, then new ones, never a repeat.

    No palette keeps more than eight colours apart for every colour blindness, so heads 9–24 get those hues darkened,
    then lightened, then hues spaced by the golden angle; every figure also names each head by its number.
    """
    base = HEAD_COLORS[i % len(HEAD_COLORS)]
    cycle = i // len(HEAD_COLORS)
    if cycle == 0:
        return base
    if cycle == 1:
        return _hex(tuple(c * 0.6 for c in _rgb(base if base != "#000000" else "#7F7F7F")))  # type: ignore[arg-type]
    if cycle == 2:
        return tint(base if base != "#000000" else "#7F7F7F", 0.55)
    import colorsys

    hue = (i * 0.618033988749895) % 1.0
    light = 0.35 + 0.3 * ((i * 7) % 5) / 4
    return _hex(colorsys.hls_to_rgb(hue, light, 0.75))


def head_style(i: int) -> str:
    """Rich style for head i's label."""
    return f"bold {head_color(i)}" if head_color(i) != "#000000" else "bold"

# The heatmap colour map sampled at 0, 1/16, … 1 (matplotlib's viridis), so the
# terminal grid shades cells like the figures without importing matplotlib;
# linear between these stays within 6/255 of the real map.
HEATMAP_ANCHORS = (
    "#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d", "#2c728e", "#26828e",
    "#21918c", "#1fa088", "#28ae80", "#3fbc73", "#5ec962", "#84d44b", "#addc30", "#d8e219",
    "#fde725",
)
HATCH_COLOR = "#777777"  # the hatch lines drawn over masked cells
PAPER_COLOR = "#FFFFFF"  # figure background and the "no attention" end of a token shade
LABEL_COLOR = "#222222"  # ordinary text in figures


def _rgb(hex_color: str) -> tuple[float, float, float]:
    h = hex_color.lstrip("#")
    return tuple(int(h[k : k + 2], 16) / 255 for k in (0, 2, 4))  # type: ignore[return-value]


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(max(0.0, min(1.0, c)) * 255):02x}" for c in rgb)


def heat_color(value: float) -> str:
    """The heatmap colour of a weight in 0..1, as ``#rrggbb`` (linear between the viridis anchors)."""
    v = max(0.0, min(1.0, float(value))) * (len(HEATMAP_ANCHORS) - 1)
    k = min(int(v), len(HEATMAP_ANCHORS) - 2)
    lo, hi = _rgb(HEATMAP_ANCHORS[k]), _rgb(HEATMAP_ANCHORS[k + 1])
    t = v - k
    return _hex(tuple(a + (b - a) * t for a, b in zip(lo, hi)))  # type: ignore[arg-type]


def heat_cells(weights: Sequence[Sequence[float]]) -> list[list[tuple[str, str]]]:
    """A matrix of weights in 0..1 as its cells' (background, ink) colours: :func:`heat_color` and
    :func:`ink_on` for every cell, made in one pass over the matrix."""
    return [[(bg, ink_on(bg)) for bg in map(heat_color, row)] for row in weights]


def tint(color: str, amount: float) -> str:
    """``color`` mixed into white: 0 gives white, 1 gives the colour itself (token shading)."""
    a = max(0.0, min(1.0, float(amount)))
    return _hex(tuple(1.0 + (c - 1.0) * a for c in _rgb(color)))  # type: ignore[arg-type]


def luminance(color: str) -> float:
    """Relative luminance (WCAG) of ``#rrggbb``: 0 black … 1 white."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in _rgb(color))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ink_on(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (WCAG contrast)."""
    lum = luminance(background)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#FFFFFF"


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio between two colours (1 … 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_color(color: str, background: str = PAPER_COLOR, minimum: float = 3.0) -> str:
    """``color`` darkened just enough to read as text on ``background`` (yellow on white would vanish)."""
    rgb = _rgb(color)
    for step in range(21):
        shade = _hex(tuple(c * (1 - step / 20) for c in rgb))  # type: ignore[arg-type]
        if contrast(shade, background) >= minimum:
            return shade
    return "#000000"


def head_text_color(i: int) -> str:
    """Head i's colour for text on white: the same hue, darkened when it is too pale to read."""
    return text_color(head_color(i))


def _heat_ink_threshold() -> float:
    """The weight above which a heatmap cell is light enough for black text (viridis only brightens)."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if ink_on(heat_color(mid)) == "#000000":
            hi = mid
        else:
            lo = mid
    return hi


HEAT_INK_THRESHOLD = _heat_ink_threshold()


def heat_ink(value: float) -> str:
    """Black or white text for a heatmap cell of this weight: ``ink_on(heat_color(value))``, fast."""
    return "#000000" if value >= HEAT_INK_THRESHOLD else "#FFFFFF"
