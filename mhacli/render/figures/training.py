"""Figures of training runs: loss and accuracy curves, and each head finding its relation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mhacli.measures import narrate
from mhacli.render.figures.layout import (BAR_TICK, BAR_WIDTH, LABEL_PAD, LABEL_PX, PT, Measured, bar_room, grid,
                                          ordinal, readable_points)
from mhacli.render.theme import HEAD_COLORS, HEATMAP_CMAP, LABEL_COLOR, SINGLE_HEAD_COLOR, head_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

    from mhacli.grammar.train import TrainResult


def _run_color(result: "TrainResult", index: int) -> str:
    """One colour per run: the single head in the comparison grey, the others from the head palette."""
    return SINGLE_HEAD_COLOR if result.heads == 1 else HEAD_COLORS[(index + 1) % len(HEAD_COLORS)]


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Running mean over ``window`` steps (training batches are noisy; the trend is the lesson)."""
    if window <= 1 or len(values) < window:
        return values
    kernel = np.ones(window) / window
    return np.convolve(values, kernel, mode="valid")


def training_figure(results: Sequence["TrainResult"]) -> "Figure":
    """Loss (left) and accuracy (right) against training step, one line per run."""
    from mhacli.render.figures.inline import new_figure

    width, height = 10.0, 4.0
    fig = new_figure(figsize=(width, height), dpi=100)
    task = results[0].config.task
    first = results[0]
    suptitle = (f"mha train --task {task}: d = {first.config.d_model}, {first.parameters:,} parameters "
                f"in every run, {first.config.steps:,} steps of {first.config.batch} sequences")
    titles = ("loss (cross-entropy, training batches)", "accuracy (training batches, %)")
    big, small = 12.0, 10.0  # matplotlib's own sizes for titles and for tick labels
    axes = [fig.add_axes((0.1 + 0.45 * k, 0.1, 0.35, 0.7)) for k in range(2)]  # placed below, once plotted
    ax_loss, ax_acc = axes
    for index, result in enumerate(results):
        steps = len(result.history_loss)
        window = max(1, steps // 50)
        x = np.arange(window, steps + 1)  # step at the end of each averaging window
        label = (f"{result.heads} head{'s' if result.heads > 1 else ''} (d/h = {result.config.d_k}): "
                 f"held-out {result.accuracy:.0%}")
        color = _run_color(result, index)
        ax_loss.plot(x, _smooth(result.history_loss, window), color=color, lw=2, label=label)
        ax_acc.plot(x, 100 * _smooth(result.history_accuracy, window), color=color, lw=2, label=label)
    ax_loss.set_yscale("log")
    ax_loss.set_title(titles[0], fontsize=big, color=LABEL_COLOR, pad=_TITLE_PAD)
    ax_acc.set_title(titles[1], fontsize=big, color=LABEL_COLOR, pad=_TITLE_PAD)
    ax_acc.set_ylim(0, 102)
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel("training step", fontsize=small, labelpad=LABEL_PAD)
        ax.grid(alpha=0.3)
    ax_acc.legend(loc="lower right", fontsize=9)
    fig.suptitle(suptitle, fontsize=big, color=LABEL_COLOR, y=1 - _EDGE / height, va="top")
    # Placed around the tick labels the scales chose for the curves (the loss's powers of ten are the widest).
    m = Measured(fig)
    top = _EDGE + m.tallest([suptitle], big) + _GAP + _TITLE_PAD * PT + m.tallest(titles, big)
    under = 2 * BAR_TICK * PT + m.tallest([t.get_text() for t in ax_loss.get_xticklabels()], small)
    bottom = _EDGE + m.tallest(["training step"], small) + LABEL_PAD * PT + under
    ticks = [2 * BAR_TICK * PT + m.widest([t.get_text() for t in ax.get_yticklabels()], small) for ax in axes]
    panel = (width - 2 * _EDGE - sum(ticks) - 2 * _GAP) / 2
    x0 = _EDGE + ticks[0]
    for ax, left in zip(axes, (x0, x0 + panel + 2 * _GAP + ticks[1])):
        ax.set_position((left / width, bottom / height, panel / width, (height - top - bottom) / height))
    return fig


SAVED_DPI = 100  # mha train saves its figures at the figure's own dpi


def label_points(width_in: float, height_in: float, dpi: float = SAVED_DPI) -> float:
    """The smallest font size (points) for any text of a training figure: LABEL_PX tall on a 1920 × 1080
    projector both at the file's own size (one file pixel, one screen pixel) and fitted when it is larger."""
    return max(LABEL_PX * 72 / dpi, readable_points(width_in, height_in))


def heads_grid_sizes(n: int, heads: int, moments: int) -> tuple[float, tuple[float, float], float, int]:
    """Cell (inches), figure size (inches), token label size (points, readable per :func:`label_points`) and the
    label step that keeps neighbours apart, for the heads grid."""
    cell = min(max(1.9, n * 0.07), 3.2)  # 12 tokens: 1.9 in; 40 tokens: 2.8 in
    size = (1.0 + cell * moments, 1.0 + cell * heads)
    label = label_points(*size)
    step = max(1, math.ceil(label * 1.25 / 72 / (cell / n)))
    return cell, size, label, step


def training_heads_figure(result: "TrainResult") -> "Figure":
    """Each head's weights on one held-out sequence (rows) at a few moments of training (columns)."""
    from mhacli.render.figures.inline import new_figure

    heads, moments = result.heads, len(result.snapshot_steps)
    tokens = result.snapshot_tokens
    n = len(tokens)
    _, size, label, step = heads_grid_sizes(n, heads, moments)
    big = max(label, 10.0)  # titles and names: never smaller than the token labels
    fig = new_figure(figsize=size, dpi=100)
    picked = list(range(0, n, step))
    shown = [tokens[k] for k in picked]
    rotated = max(map(len, shown)) > 1
    titles = [f"step {step_at:,}\nheld-out {acc:.0%}" for step_at, acc in zip(result.snapshot_steps,
                                                                               result.snapshot_accuracy)]
    names = ["\n".join(w for w in _head_words(result, row) if w) for row in range(heads)]
    suptitle = (f"{result.config.task}: each head's weights on one held-out sequence during training\n"
                f"(rows: queries, columns: keys{f'; every {ordinal(step)} token labelled' if step > 1 else ''})")
    m = Measured(fig)
    tick = m.widest(shown, label), m.tallest(shown, label)  # a token label's (width, height)
    ylabel = m.tallest(["head 1\nquery"], big)  # turned on its side: its height is its width
    left = _EDGE + ylabel + (LABEL_PAD + _TICK_PAD) * PT + tick[0]
    right = m.tallest(names, big) + _bar_room(m, big)  # the names on their side, then the colour bar
    top = _EDGE + m.tallest([suptitle], big + 1) + _GAP + _TITLE_PAD * PT + m.tallest(titles, big)
    bottom = _TICK_PAD * PT + (tick[0] if rotated else tick[1]) + _EDGE
    width = size[0]
    side = (width - left - right - _GAP * (moments - 1)) / (moments + _WORDS)  # a map's side; the names' offset
    height = top + side * heads + _GAP * (heads - 1) + bottom  # rows as close as columns: no empty bands
    fig.set_size_inches(width, height)
    axes = grid(fig, heads, moments, left, top, side, _GAP, _GAP)
    image = None
    for col, title in enumerate(titles):
        for row in range(heads):
            ax = axes[row, col]
            image = ax.imshow(result.snapshots[col, row], cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0)
            # Tokens on the outer edges only: keys under the bottom row, queries left of the first column.
            # The inner Axes get no ticks at all (not ticks with empty labels): each tick is an object that
            # drawing visits, and they made half of this figure's time (529 ticks for 4 × 5 maps).
            if row == heads - 1:
                ax.set_xticks(picked, shown, fontsize=label, rotation=90 if rotated else 0)
            else:
                ax.set_xticks([])
            if col == 0:
                ax.set_yticks(picked, shown, fontsize=label)
            else:
                ax.set_yticks([])
            ax.tick_params(length=0, pad=_TICK_PAD)
            if row == 0:
                ax.set_title(title, fontsize=big, color=LABEL_COLOR, pad=_TITLE_PAD)
            if col == 0:
                ax.set_ylabel(f"head {row + 1}\nquery", fontsize=big, color=head_color(row), labelpad=LABEL_PAD)
            if col == moments - 1:
                ax.text(1 + _WORDS, 0.5, names[row], transform=ax.transAxes, fontsize=big, rotation=90,
                        va="center", ha="left", color=head_color(row))
    if image is not None:
        _colour_bar(fig, image, width - _bar_room(m, big) + _GAP, bottom, height - top - bottom, big)
    fig.suptitle(suptitle, fontsize=big + 1, color=LABEL_COLOR, y=1 - _EDGE / height, va="top")
    return fig


_EDGE = 0.1  # inches between the figure's edge and its outermost texts
_GAP = 0.08  # inches between two maps, and between the grid and what stands beside it
_TICK_PAD = 1.0  # points between a map and its token labels
_TITLE_PAD = 6.0  # points between a map and its title (matplotlib's default)
_WORDS = 0.04  # of a map's width: between the last column and a head's name beside it


def _bar_room(m: Measured, size: float) -> float:
    """Inches right of the grid's names: a gap, the colour bar, its tick labels and its label, the edge."""
    return _GAP + bar_room(m, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"], "attention weight", size) + _EDGE



def _colour_bar(fig: "Figure", image: "AxesImage", x0: float, y0: float, span: float, size: float) -> None:
    """One slim colour bar ``x0`` inches from the left, over the middle 80 % of the ``span`` inches of grid above
    ``y0``, its ticks and label as readable as the rest of the figure."""
    width, height = fig.get_size_inches()
    cax = fig.add_axes((x0 / width, (y0 + 0.1 * span) / height, BAR_WIDTH / width, 0.8 * span / height))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("attention weight", fontsize=size, labelpad=LABEL_PAD)
    bar.ax.tick_params(labelsize=size, length=BAR_TICK, pad=BAR_TICK)


def _head_words(result: "TrainResult", head: int, of: str = " of queries") -> tuple[str, str]:
    """A head's name and its evidence, two short lines: a grammar model's from its report card (``feeling adj →
    noun``, ``89% trained``), any other from the share of training's queries its top key followed (``of``
    after it: a small title leaves it out)."""
    title = narrate.learned_title(result.model.labels[head]) if getattr(result.model, "card", None) else None
    if title is not None:  # the card's title, read from the label the model stores (Card.labels)
        name, _, rest = title.partition(" (")
        return (name, rest.rstrip(")")) if rest else (name, "")
    name, share = result.model.relations[head]
    return _short(name), f"{_share(name, share)}{of}"


def _short(name: str) -> str:
    """A relation's name for a small label: a grammar relation by its few words (verb → subject)."""
    from mhacli.grammar.grammar import SHORT_NAMES

    return SHORT_NAMES.get(name, name)


def _share(name: str, share: float) -> str:
    """A head's share; below the naming share it is rounded down, so 49.9 % never reads as the 50 % that names."""
    from mhacli.grammar.grammar import NO_RELATION

    return f"{math.floor(100 * share)}%" if name == NO_RELATION else f"{share:.0%}"


def training_runs_figure(results: "Sequence[TrainResult]") -> "Figure":
    """After ``--compare``: every run's heads at the end of training on the same held-out sequence, one row a run,
    each row titled with its held-out accuracy (per relation when the task reads out several)."""
    from mhacli.render.figures.inline import new_figure

    tokens = results[0].snapshot_tokens  # every run draws the same held-out sequences (same seed, same shapes)
    n, widest = len(tokens), max(r.heads for r in results)
    cell = min(max(2.3, n * 0.07), 3.2)
    size = (1.6 + cell * widest, 1.6 + (cell + 0.5) * len(results))
    label = label_points(*size)  # readable at the saved size and once fitted to a 1080p screen
    big = max(label, 10.0)  # titles and names: never smaller than the token labels
    step = max(1, math.ceil(label * 1.25 / 72 / (cell / n)))  # thinned so neighbours never overlap
    picked = list(range(0, n, step))
    shown = [tokens[k] for k in picked]
    first = results[0]
    thinned = f"; every {ordinal(step)} token labelled" if step > 1 else ""
    suptitle = (f"{first.config.task}: every run's heads after {first.config.steps:,} steps, on the same held-out "
                f"sequence,\n{first.parameters:,} parameters each (rows: queries, columns: keys{thinned})")
    fig = new_figure(figsize=size, dpi=100)
    m = Measured(fig)
    tick = m.widest(shown, label)  # the token labels stand on their side under every map, lie left of the first
    bar = _bar_room(m, big)
    # A map's side is what the width leaves; its title and the run's name wrap to it, so nothing runs into
    # its neighbour, and the row's height follows from the tallest of them.
    side = cell
    for _ in range(2):  # the names' widths depend on the side, the side on the names: twice settles it
        rows = [_run_name(m, r, side, big) for r in results]
        left = _EDGE + m.tallest(rows, big) + (LABEL_PAD + _TICK_PAD) * PT + tick
        side = (size[0] - left - bar - _GAP * (widest - 1)) / widest
    titles = [[_packed(m, [f"head {col + 1}:", *(w for w in _head_words(r, col, of="") if w)], " ", side, big)
               for col in range(r.heads)] for r in results]
    title = _TITLE_PAD * PT + m.tallest([t for row in titles for t in row], big)
    under = _TICK_PAD * PT + tick  # the keys under each map
    top = _EDGE + m.tallest([suptitle], big + 1) + _GAP + title
    gap_y = under + _GAP + title
    height = top + side * len(results) + gap_y * (len(results) - 1) + under + _EDGE
    fig.set_size_inches(size[0], height)
    axes = grid(fig, len(results), widest, left, top, side, _GAP, gap_y)
    image = None
    for row, result in enumerate(results):
        for col in range(widest):
            ax = axes[row, col]
            if col >= result.heads:
                ax.set_axis_off()
                continue
            image = ax.imshow(result.snapshots[-1, col], cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0)
            ax.set_xticks(picked, shown, fontsize=label, rotation=90)
            if col == 0:
                ax.set_yticks(picked, shown, fontsize=label)
            else:
                ax.set_yticks([])  # no ticks rather than ticks with empty labels (see training_heads_figure)
            ax.tick_params(length=0, pad=_TICK_PAD)
            ax.set_title(titles[row][col], fontsize=big, color=head_color(col), pad=_TITLE_PAD)
            if col == 0:
                ax.set_ylabel(rows[row], fontsize=big, color=LABEL_COLOR, labelpad=LABEL_PAD)
    if image is not None:
        _colour_bar(fig, image, size[0] - bar + _GAP, under + _EDGE, height - top - under - _EDGE, big)
    fig.suptitle(suptitle, fontsize=big + 1, color=LABEL_COLOR, y=1 - _EDGE / height, va="top")
    return fig


def _run_name(m: Measured, result: "TrainResult", side: float, size: float) -> str:
    """A run's name beside its row, on its side: heads, d/h, held-out accuracy, then per relation, as many to a
    line as the map's height holds."""
    per = [f"{t} {a:.0%}" for t, a in zip(result.model.targets, result.relation_accuracy)]
    return (f"{result.heads} head{'s' if result.heads > 1 else ''}, d/h = {result.config.d_k}\n"
            f"held-out {result.accuracy:.1%}\n{_packed(m, per, ', ', side, size)}")


def _packed(m: Measured, parts: "Sequence[str]", sep: str, width: float, size: float) -> str:
    """``parts`` joined by ``sep``, a new line wherever the next part would make a line wider than ``width``
    inches (measured); a part is never broken."""
    lines: list[str] = []
    for part in parts:
        joined = f"{lines[-1]}{sep}{part}" if lines else part
        if lines and m.size(joined, size)[0] <= width:
            lines[-1] = joined
        else:
            if lines:
                lines[-1] += sep.rstrip()
            lines.append(part)
    return "\n".join(lines)
