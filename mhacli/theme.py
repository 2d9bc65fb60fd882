"""One palette for the whole tool: terminal, figures and the HTML page.

Head colours are the Okabe–Ito set (distinguishable with the common forms of
colour blindness), ordered so the first four stay apart on a washed-out
projector; yellow, which vanishes on white, comes last.  Heatmaps use
``viridis``: perceptually uniform, colour-blind-safe and readable in greyscale.
"""

from __future__ import annotations

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
STYLE_ERROR = "bold red"


def head_color(i: int) -> str:
    """Colour of head i (0-based); cycles past eight heads."""
    return HEAD_COLORS[i % len(HEAD_COLORS)]


def head_style(i: int) -> str:
    """Rich style for head i's label."""
    return f"bold {head_color(i)}" if head_color(i) != "#000000" else "bold"
