"""``one-vs-many.png``: one head trained alone beside h heads trained together, same parameters, one text.

One row per shipped pair, every panel on one 0…1 scale and titled with what its head learned; drawn from the
training records at 16 × 9 inches (9 pt text is 15 px high on a 1080p projector).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Sequence

from mhacli.grammar.card import CARD_SEED, CARD_SENTENCES  # the held-out set every accuracy is scored on
from mhacli.grammar.score import DEFINITION, percent
from mhacli.render.theme import HEATMAP_CMAP, LABEL_COLOR, SINGLE_HEAD_COLOR, head_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mhacli.measures.lesson import TrainedPair

FIGSIZE = (16.0, 9.0)  # inches: 1920 × 1080 at 120 dpi
TICK_POINTS = 9.0  # token labels; 15 px when fitted to 1920 × 1080
TITLE_POINTS = 11.0
ROW_POINTS = 12.0


#: Where the numbers come from, and what is not known about the texts (said, never claimed).
CAPTION = ("Rows: queries; columns: keys; one colour scale. Accuracies: the shipped models (mhacli/data/*.npz) on "
           f"the card's {CARD_SENTENCES:,} held-out sequences (seed {CARD_SEED}); the texts shown may have been in "
           "training.")


ROW_CHARS = 160  # a row title's longest line


def row_title(pair: TrainedPair) -> str:
    """Both held-out accuracies and parameter counts, as the training records hold them."""
    apart = pair.apart
    params = (f"{apart.heads_parameters:,} parameters each" if apart.single_parameters == apart.heads_parameters
              else f"{apart.single_parameters:,} and {apart.heads_parameters:,} parameters")
    pairs = [*apart.by_relation, ("mean", apart.single_accuracy, apart.heads_accuracy)]
    numbers = ", ".join(f"{r} {percent(single)} → {percent(heads)}" for r, single, heads in pairs)
    from mhacli.measures.narrate import cause_line

    cause = cause_line(pair)  # why, measured: the lone head by nouns of a class, and the control
    return f"'{apart.task}' task, {params} · {DEFINITION}, 1 head → {pair.heads} heads:\n{numbers}" + (
        f"\n{cause}" if cause else "")


TITLE_PAD = 6.0  # points between a panel and its title (matplotlib's default)
PANEL_GAP = 0.22  # inches between two panels of a row
ROW_GAP = 0.3  # inches between one row's tick labels and the next row's title
BAR_GAP = 0.15  # inches between a row's last panel and its colour bar


def _titles(pair: TrainedPair, hide_rules: bool) -> list[tuple[str, str]]:
    """Each panel's title and colour: the lone head, then each of the h heads (``hide_rules``: not what it
    learned, for the class to name)."""

    def learned(relation: str) -> str:
        return "" if hide_rules else f"\nlearned: {relation}"

    h = pair.heads
    return ([("1 head alone" + learned(pair.apart.single_relations[0]), SINGLE_HEAD_COLOR)]
            + [(f"head {i + 1} of {h}" + learned(pair.apart.heads_relations[i]), head_color(i)) for i in range(h)])


def one_vs_many_figure(pairs: Sequence[TrainedPair], caption: str = CAPTION, hide_rules: bool = False) -> Figure:
    """One row per pair: the lone head, then each of the h heads, on that pair's text; ``hide_rules``: the panels
    say which head they are, not what it learned."""
    import numpy as np

    from mhacli.render.figures.heatmap import BAR_LABEL, BAR_TICK_LABELS, colour_bar
    from mhacli.render.figures.inline import new_figure
    from mhacli.render.figures.layout import BAR_WIDTH, INSET, LABEL_PAD, PT, TICK, Measured, axes_at, bar_room

    if not pairs:
        raise ValueError("one_vs_many_figure needs at least one trained pair")
    width, height = FIGSIZE
    fig = new_figure(figsize=FIGSIZE, dpi=120)
    m = Measured(fig)
    heading = "One head trained alone, or several trained together: the same parameters, the same text"
    # Two lines, the numbers on the second: the letters task's four relations made one line of 190 characters,
    # which ran off both edges of the 16-inch width.
    rows = ["\n".join(textwrap.fill(line, ROW_CHARS) for line in row_title(p).split("\n")) for p in pairs]
    titles = [_titles(p, hide_rules) for p in pairs]
    head_h = m.size(heading, ROW_POINTS + 3)[1]
    caption_h = m.size(caption, TICK_POINTS + 1)[1] if caption else 0.0
    row_h = [m.size(r, ROW_POINTS)[1] for r in rows]
    title_h = [m.tallest([t for t, _ in ts], TITLE_POINTS) + TITLE_PAD * PT for ts in titles]
    tick = 2 * TICK * PT
    below = [m.widest(list(p.tokens), TICK_POINTS) + tick for p in pairs]  # the keys, turned upright
    left = [m.widest(list(p.tokens), TICK_POINTS) + tick + LABEL_PAD * PT
            + m.tallest(["query (row)"], TICK_POINTS + 1) for p in pairs]  # the queries, and the axis label
    bar = bar_room(m, BAR_TICK_LABELS, BAR_LABEL, TICK_POINTS + 1)
    # One panel size for every row: as large as the height allows, and as the widest row's width allows.
    fixed = 2 * INSET + head_h + caption_h + sum(row_h) + sum(title_h) + sum(below) + ROW_GAP * len(pairs)
    side = (height - fixed) / len(pairs)
    for p, lw in zip(pairs, left):
        side = min(side, (width - 2 * INSET - lw - BAR_GAP - bar - p.heads * PANEL_GAP) / (p.heads + 1))
    fig.text(width / 2, height - INSET, heading, transform=fig.dpi_scale_trans, ha="center", va="top",
             fontsize=ROW_POINTS + 3, fontweight="bold", color=LABEL_COLOR)
    spare = (height - fixed - side * len(pairs)) / (len(pairs) + 1)  # the height the width leaves: between rows
    top = INSET + head_h + ROW_GAP / 2 + spare
    for pair, row, ts, rh, th, lw, under in zip(pairs, rows, titles, row_h, title_h, left, below):
        n, h = len(pair.tokens), pair.heads
        tokens = list(pair.tokens)
        used = lw + (h + 1) * side + h * PANEL_GAP + BAR_GAP + bar
        x0 = (width - used) / 2 + lw  # the row's first panel: the row centred on the slide
        fig.text(width / 2, height - top, row, transform=fig.dpi_scale_trans, ha="center", va="top",
                 fontsize=ROW_POINTS, color=LABEL_COLOR, multialignment="center")
        top += rh + th
        weights = [pair.single_weights, *pair.heads_weights[:h]]
        for k, (w, (title, color)) in enumerate(zip(weights, ts)):
            ax = axes_at(fig, x0 + k * (side + PANEL_GAP), top, side, side)
            ax.imshow(np.asarray(w), cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest",
                      aspect="auto")
            ax.set_title(title, fontsize=TITLE_POINTS, color=color, fontweight="bold", y=1.0,
                         pad=TITLE_PAD)  # y given: not moved at draw
            ax.set_xticks(range(n), tokens, rotation=90, fontsize=TICK_POINTS)
            ax.set_yticks(range(n), tokens if k == 0 else [""] * n, fontsize=TICK_POINTS)
            for spine in ax.spines.values():
                spine.set_edgecolor(color)
                spine.set_linewidth(3 if k == 0 else 2)
            if k == 0:
                ax.set_ylabel("query (row)", fontsize=TICK_POINTS + 1, color=LABEL_COLOR)
        cax = axes_at(fig, x0 + (h + 1) * side + h * PANEL_GAP + BAR_GAP, top, BAR_WIDTH, side)
        colour_bar(fig, cax=cax, size=TICK_POINTS + 1)
        top += side + under + ROW_GAP + spare
    if caption:
        fig.text(width / 2, INSET, caption, transform=fig.dpi_scale_trans, ha="center", va="bottom",
                 fontsize=TICK_POINTS + 1, color=LABEL_COLOR)
    return fig


__all__ = ["CAPTION", "FIGSIZE", "one_vs_many_figure", "row_title"]
