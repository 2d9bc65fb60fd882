"""card.png: the report card as a heat map a projector can read; and the gap of a seed sweep, per seed.

They draw what they are handed (a :class:`~mhacli.pipeline.CardShown`, a :class:`~mhacli.grammar.sweep.Sweep`);
every label is at least 11 pt, 15 px at the 100 dpi they are saved at.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mhacli.render.figures.layout import LABEL_PAD, PT, TICK
from mhacli.render.theme import HEAD_COLORS, HEATMAP_CMAP, LABEL_COLOR, head_color, ink_on

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.grammar.sweep import Sweep
    from mhacli.pipeline import CardShown

FONT = 12  # points: 16.7 px at 100 dpi, readable from the back of a room on a 1920×1080 projector
SMALL = 11  # points: the smallest text drawn
MIN_WIDTH = 6.4  # inches: the narrowest card.png (the title and the caption wrap to it)


def _pct(x: float) -> str:
    return f"{math.floor(100 * x + 1e-9)}%"


def card_figure(card: "CardShown") -> "Figure":
    """Relation × head hit rates as a heat map; each cell its rate and 95 % interval; named cells outlined."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    from mhacli.render.figures.inline import new_figure

    rows, heads = card.rate.shape
    width = max(2.2 + 1.5 * heads, MIN_WIDTH)  # inches: a card of one or two heads still holds its words
    height = 1.6 + (1.0 if card.bases else 0.75) * rows  # a third line per cell: its baselines
    fig = new_figure(figsize=(width, height), dpi=100)
    chars = _chars(width)
    from mhacli.render.figures.layout import Measured

    m = Measured(fig)
    measured = card.caption if card.accuracy is None else f"{card.caption}; {card.accuracy}"
    caption = _wrapped(f"{measured};", chars) + "\n" + _wrapped(card.outline, chars)
    left = _EDGE + m.widest(list(card.rows), FONT) + TICK * PT
    title = _wrapped(card.figure_title, int((width - left - _EDGE) * 72 / (0.62 * FONT)))
    right = (_GAP + _BAR + 2 * TICK * PT + m.widest(["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"], SMALL)
             + LABEL_PAD * PT + m.tallest(["hit rate"], SMALL) + _EDGE)
    top = _EDGE + m.tallest([title], FONT) + _TITLE_PAD * PT
    bottom = _EDGE + m.tallest([caption], SMALL) + _GAP + m.tallest(["head 1"], FONT) + TICK * PT
    ax = fig.add_axes((left / width, bottom / height, (width - left - right) / width, (height - top - bottom) / height))
    rate = card.rate
    low, high = card.low, card.high
    image = ax.imshow(rate, cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    cmap = colormaps[HEATMAP_CMAP]
    for r in range(rows):
        for i in range(heads):
            ink = ink_on(_hex(cmap(float(rate[r, i]))))
            base = f"\n{card.bases[r][i]}" if card.bases and card.bases[r][i] else ""  # the baselines it must beat
            ax.text(i, r, f"{_pct(rate[r, i])}\n{_pct(low[r, i])}–{_pct(high[r, i])}{base}", ha="center", va="center",
                    fontsize=SMALL, color=ink, linespacing=1.1)
            if card.named[r, i]:
                ax.add_patch(Rectangle((i - 0.47, r - 0.47), 0.94, 0.94, fill=False, lw=3, ec=head_color(i)))
    ax.set_xticks(range(heads), labels=[f"head {i + 1}" for i in range(heads)], fontsize=FONT)
    for i, tick in enumerate(ax.get_xticklabels()):
        tick.set_color(head_color(i))
    ax.set_yticks(range(rows), labels=list(card.rows), fontsize=FONT)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=FONT, color=LABEL_COLOR, loc="left", pad=_TITLE_PAD)
    span = height - top - bottom
    cax = fig.add_axes(((width - right + _GAP) / width, (bottom + 0.1 * span) / height, _BAR / width,
                        0.8 * span / height))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("hit rate", fontsize=SMALL, labelpad=LABEL_PAD)
    bar.ax.tick_params(labelsize=SMALL, pad=TICK, length=TICK)
    fig.supxlabel(caption, fontsize=SMALL, color=LABEL_COLOR, y=_EDGE / height, va="bottom")
    return fig


_EDGE = 0.1  # inches between the figure's edge and its outermost texts
_GAP = 0.15  # inches between the map and the colour bar, and between the head names and the caption
_BAR = 0.2  # inches: the colour bar's width
_TITLE_PAD = 6.0  # points between the map and its title (matplotlib's default)


def _chars(width: float) -> int:
    """Characters of SMALL text a line of the figure's width holds, with room to spare (a glyph is at most about
    0.62 of the font size wide in DejaVu Sans, its digits and lower case narrower)."""
    return int(0.9 * width * 72 / (0.62 * SMALL))


def _wrapped(text: str, chars: int) -> str:
    """``text`` broken between words into lines of at most ``chars`` characters (each of its own lines kept)."""
    import textwrap

    return "\n".join(textwrap.fill(line, chars, break_long_words=False) for line in text.split("\n"))


def _hex(rgba: tuple[float, ...]) -> str:
    return "#" + "".join(f"{round(255 * c):02X}" for c in rgba[:3])


def sweep_figure(s: "Sweep") -> "Figure":
    """The gap (most heads − fewest, mean over relations, points) per seed, with the mean over seeds."""
    from mhacli.render.figures.inline import new_figure

    most, fewest = max(s.heads), min(s.heads)
    fig = new_figure(figsize=(max(6.0, 1.2 * len(s.seeds) + 3), 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    gap = s.gap
    x = list(range(len(s.seeds)))
    bars = ax.bar(x, gap, color=HEAD_COLORS[1], width=0.6)
    for bar, g in zip(bars, gap):
        ax.annotate(f"{g:+.1f}", (bar.get_x() + bar.get_width() / 2, g), xytext=(0, 4 if g >= 0 else -4),
                    textcoords="offset points", ha="center", va="bottom" if g >= 0 else "top", fontsize=SMALL,
                    color=LABEL_COLOR, zorder=3,  # above the mean's line, on a white ground: a gap near the mean
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})  # stays readable
    mean = s.spread["mean"]
    ax.axhline(mean, color=LABEL_COLOR, lw=1.5, ls="--", label=f"mean {mean:+.1f} points", zorder=2)
    ax.axhline(0.0, color=LABEL_COLOR, lw=0.8)
    ax.set_xticks(x, labels=[f"seed {seed}" for seed in s.seeds], fontsize=FONT)
    ax.tick_params(axis="y", labelsize=SMALL)
    ax.set_ylabel("points", fontsize=FONT)
    ax.set_title(f"{s.task}: {most} heads minus {fewest} head{'s' if fewest != 1 else ''}, per seed\n"
                 "held-out accuracy, mean over relations", fontsize=FONT, color=LABEL_COLOR, loc="left")
    low, high = min(0.0, float(gap.min())), max(0.0, float(gap.max()))
    pad = max(2.0, 0.15 * (high - low))
    ax.set_ylim(low - pad, high + pad)
    ax.legend(fontsize=SMALL, loc="best")
    ax.grid(axis="y", alpha=0.3)
    return fig
