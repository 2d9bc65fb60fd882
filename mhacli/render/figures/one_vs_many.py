"""``one-vs-many.png``: one head trained alone beside h heads trained together, same parameters, one text.

One row per shipped pair (:class:`~mhacli.core.lesson.TrainedPair`): the lone head's
weights, then each of the h heads', all on one colour scale (0 … 1), each panel
titled with what that head learned.  The row's title gives both models' held-out
accuracies (per relation when recorded) and parameter counts, read from the
models' training records; this module draws them and computes nothing.

Sized for a projector: 16 × 9 inches, so a PNG fitted to 1920 × 1080 is drawn at
120 pixels per inch and the smallest text (9 pt) is 15 pixels high.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Sequence

from mhacli.render.theme import HEATMAP_CMAP, LABEL_COLOR, SINGLE_HEAD_COLOR, head_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure, SubFigure

    from mhacli.core.lesson import TrainedPair

FIGSIZE = (16.0, 9.0)  # inches: 1920 × 1080 at 120 dpi
TICK_POINTS = 9.0  # token labels; 15 px when fitted to 1920 × 1080
TITLE_POINTS = 11.0
ROW_POINTS = 12.0
TASK_NAMES = {"relations": "letters", "grammar": "grammar"}


#: Where the numbers come from, and what is not known about the texts (said, never claimed).
CAPTION = ("Rows: queries; columns: keys; one colour scale. Accuracies: each model's own training record, "
           "measured on fresh held-out sequences "
           "(mhacli/data/*.npz). The texts shown were not checked against the training batches.")


ROW_CHARS = 160  # a row title's longest line


def _percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def row_title(pair: TrainedPair) -> str:
    """Both held-out accuracies and parameter counts, as the training records hold them."""
    params = (f"{pair.heads_parameters:,} parameters each" if pair.single_parameters == pair.heads_parameters
              else f"{pair.single_parameters:,} and {pair.heads_parameters:,} parameters")
    pairs = [*pair.by_relation, ("all", pair.single_accuracy, pair.heads_accuracy)]
    numbers = ", ".join(f"{r} {100 * single:.1f} → {100 * heads:.1f} %" for r, single, heads in pairs)
    name = TASK_NAMES.get(pair.task, pair.task)
    task = name if name == pair.task else f"{name} ('{pair.task}')"
    return f"{task} task, {params} · held-out accuracy, 1 head → {pair.heads} heads:\n{numbers}"


def _draw_row(sub: SubFigure, pair: TrainedPair, show_colorbar: bool, hide_rules: bool) -> None:
    import numpy as np

    h = pair.heads
    axes = sub.subplots(1, h + 1, squeeze=False)[0]
    tokens = list(pair.tokens)
    n = len(tokens)
    def learned(relation: str) -> str:  # --hide-rules: the class names what each head does
        return "" if hide_rules else f"\nlearned: {relation}"

    panels = [(pair.single_weights, "1 head alone" + learned(pair.single_relation), SINGLE_HEAD_COLOR)]
    panels += [(pair.heads_weights[i], f"head {i + 1} of {h}" + learned(pair.heads_relations[i]), head_color(i))
               for i in range(h)]
    image = None
    for k, (ax, (weights, title, color)) in enumerate(zip(axes, panels)):
        image = ax.imshow(np.asarray(weights), cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(title, fontsize=TITLE_POINTS, color=color, fontweight="bold")
        ax.set_xticks(range(n), tokens, rotation=90, fontsize=TICK_POINTS)
        ax.set_yticks(range(n), tokens if k == 0 else [""] * n, fontsize=TICK_POINTS)
        for side in ax.spines.values():
            side.set_edgecolor(color)
            side.set_linewidth(3 if k == 0 else 2)
        if k == 0:
            ax.set_ylabel("query (row)", fontsize=TICK_POINTS + 1, color=LABEL_COLOR)
    if show_colorbar and image is not None:
        bar = sub.colorbar(image, ax=list(axes), shrink=0.8, pad=0.01)
        bar.set_label("attention weight", fontsize=TICK_POINTS + 1)
        bar.ax.tick_params(labelsize=TICK_POINTS)
    # Two lines, the numbers on the second: the letters task's four relations made one line of 190 characters,
    # which ran off both edges of the 16-inch width.
    lines = [textwrap.fill(line, ROW_CHARS) for line in row_title(pair).split("\n")]
    sub.suptitle("\n".join(lines), fontsize=ROW_POINTS, color=LABEL_COLOR)


def one_vs_many_figure(pairs: Sequence[TrainedPair], caption: str = CAPTION, hide_rules: bool = False) -> Figure:
    """One row per pair: the lone head, then each of the h heads, on that pair's text.

    ``hide_rules``: the panels say which head they are, not what it learned.
    """
    from mhacli.render.figures.inline import new_figure

    if not pairs:
        raise ValueError("one_vs_many_figure needs at least one trained pair")
    fig = new_figure(figsize=FIGSIZE, dpi=120, layout="constrained")
    # The last row also holds the caption: it gets that line's height more, or its title meets its panels.
    ratios = [1.0] * (len(pairs) - 1) + [1.1]
    subs = (list(fig.subfigures(len(pairs), 1, hspace=0.04, height_ratios=ratios)) if len(pairs) > 1
            else [fig.subfigures(1, 1)])
    for sub, pair in zip(subs, pairs):
        _draw_row(sub, pair, show_colorbar=True, hide_rules=hide_rules)
    if caption:  # under the last row, inside its own layout (a figure-level label would overlap it)
        subs[-1].supxlabel(caption, fontsize=TICK_POINTS + 1, color=LABEL_COLOR)
    fig.suptitle("One head trained alone, or several trained together: the same parameters, the same text",
                 fontsize=ROW_POINTS + 3, fontweight="bold", color=LABEL_COLOR)
    return fig


__all__ = ["CAPTION", "FIGSIZE", "one_vs_many_figure", "row_title"]
