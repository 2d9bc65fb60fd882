"""Figures of training runs: loss and accuracy curves, and each head finding its relation.

Plain functions of :class:`~mhacli.core.train.TrainResult` objects; they draw
what the run recorded and compute nothing about attention.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mhacli.core import narrate
from mhacli.render.figures.layout import LABEL_PX, ordinal, readable_points, settle
from mhacli.render.theme import HEAD_COLORS, HEATMAP_CMAP, LABEL_COLOR, SINGLE_HEAD_COLOR, head_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

    from mhacli.core.train import TrainResult


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

    fig = new_figure(figsize=(10, 4), dpi=100, layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    task = results[0].config.task
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
    ax_loss.set_title("loss (cross-entropy, training batches)", color=LABEL_COLOR)
    ax_acc.set_title("accuracy (training batches, %)", color=LABEL_COLOR)
    ax_acc.set_ylim(0, 102)
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    ax_acc.legend(loc="lower right", fontsize=9)
    first = results[0]
    fig.suptitle(f"mha train --task {task}: d = {first.config.d_model}, {first.parameters:,} parameters "
                 f"in every run, {first.config.steps:,} steps of {first.config.batch} sequences",
                 color=LABEL_COLOR)
    return fig


SAVED_DPI = 100  # mha train saves its figures at the figure's own dpi


def label_points(width_in: float, height_in: float, dpi: float = SAVED_DPI) -> float:
    """The smallest font size (points) for any text of a training figure: LABEL_PX tall on a 1920 × 1080
    projector both at the file's own size (one file pixel, one screen pixel) and fitted when it is larger."""
    return max(LABEL_PX * 72 / dpi, readable_points(width_in, height_in))


def heads_grid_sizes(n: int, heads: int, moments: int) -> tuple[float, tuple[float, float], float, int]:
    """Cell (inches), figure size (inches), token label size (points) and label step for the heads grid.

    The label size keeps a label readable at the saved size and once the whole figure is scaled to fit a
    1080p screen (:func:`label_points`); the step thins the labels so that neighbours do not overlap.
    """
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
    fig = new_figure(figsize=size, dpi=100, layout="constrained")
    axes = np.atleast_2d(fig.subplots(heads, moments, squeeze=False))
    picked = list(range(0, n, step))
    shown = [tokens[k] for k in picked]
    image = None
    for col, (step_at, acc) in enumerate(zip(result.snapshot_steps, result.snapshot_accuracy)):
        for row in range(heads):
            ax = axes[row, col]
            image = ax.imshow(result.snapshots[col, row], cmap=HEATMAP_CMAP, vmin=0.0, vmax=1.0)
            # Tokens on the outer edges only: keys under the bottom row, queries left of the first column.
            # The inner Axes get no ticks at all (not ticks with empty labels): each tick is an object that
            # layout and drawing visit, and they made half of this figure's time (529 ticks for 4 × 5 maps).
            if row == heads - 1:
                ax.set_xticks(picked, shown, fontsize=label, rotation=90 if max(map(len, shown)) > 1 else 0)
            else:
                ax.set_xticks([])
            if col == 0:
                ax.set_yticks(picked, shown, fontsize=label)
            else:
                ax.set_yticks([])
            ax.tick_params(length=0, pad=1)
            if row == 0:
                ax.set_title(f"step {step_at:,}\nheld-out {acc:.0%}", fontsize=big, color=LABEL_COLOR)
            if col == 0:
                ax.set_ylabel(f"head {row + 1}\nquery", fontsize=big, color=head_color(row))
            if col == moments - 1:
                ax.text(1.04, 0.5, "\n".join(w for w in _head_words(result, row) if w), transform=ax.transAxes,
                        fontsize=big, rotation=90, va="center", ha="left", color=head_color(row))
    if image is not None:
        _colour_bar(fig, image, axes, big)
    thinned = f"; every {ordinal(step)} token labelled" if step > 1 else ""
    fig.suptitle(f"{result.config.task}: each head's weights on one held-out sequence during training\n"
                 f"(rows: queries, columns: keys{thinned})", fontsize=big + 1, color=LABEL_COLOR)
    _close_rows(fig, axes)
    return fig


def _close_rows(fig: "Figure", axes: np.ndarray) -> None:
    """Take out the height the square maps leave between rows beyond the gap between columns.

    The grid's width decides how large a square map is; the height left over would open as empty bands
    between the rows.  Measured from matplotlib's own layout pass, then laid out again at the new height."""
    rows, cols = axes.shape
    if rows < 2:
        return
    engine = fig.get_layout_engine()
    assert engine is not None  # made with layout="constrained"
    engine.execute(fig)  # the layout alone places the Axes: no draw of the figure is needed to read them
    width, height = fig.get_size_inches()
    first, below = axes[0, 0].get_position(), axes[1, 0].get_position()
    col_gap = (axes[0, 1].get_position().x0 - first.x1) * width if cols > 1 else 0.1
    slack = ((first.y0 - below.y1) * height - col_gap) * (rows - 1)  # inches
    if slack > 0:
        fig.set_size_inches(width, height - slack)
    settle(fig)  # laid out once more, at the final height, and kept: the save lays nothing out again


def _colour_bar(fig: "Figure", image: "AxesImage", axes: np.ndarray, size: float) -> None:
    """One slim colour bar beside the grid, its ticks and label as readable as the rest of the figure."""
    bar = fig.colorbar(image, ax=axes, shrink=0.8, aspect=40, pad=0.01)
    bar.set_label("attention weight", fontsize=size)
    bar.ax.tick_params(labelsize=size)


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
    from mhacli.core.grammar import SHORT_NAMES

    return SHORT_NAMES.get(name, name)


def _share(name: str, share: float) -> str:
    """A head's share; below the naming share it is rounded down, so 49.9 % never reads as the 50 % that names."""
    from mhacli.core.grammar import NO_RELATION

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
    fig = new_figure(figsize=size, dpi=100, layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(results), widest, squeeze=False))
    image = None
    for row, result in enumerate(results):
        per = ", ".join(f"{t} {a:.0%}" for t, a in zip(result.model.targets, result.relation_accuracy))
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
            ax.tick_params(length=0, pad=1)
            words = " ".join(w for w in _head_words(result, col, of="") if w)
            ax.set_title(f"head {col + 1}: {words}", fontsize=big, color=head_color(col))
            if col == 0:
                ax.set_ylabel(f"{result.heads} head{'s' if result.heads > 1 else ''}, d/h = {result.config.d_k}\n"
                              f"held-out {result.accuracy:.1%}\n{per}", fontsize=big, color=LABEL_COLOR)
    if image is not None:
        _colour_bar(fig, image, axes, big)
    first = results[0]
    thinned = f"; every {ordinal(step)} token labelled" if step > 1 else ""
    fig.suptitle(f"{first.config.task}: every run's heads after {first.config.steps:,} steps, on the same held-out "
                 f"sequence,\n{first.parameters:,} parameters each (rows: queries, columns: keys{thinned})",
                 fontsize=big + 1, color=LABEL_COLOR)
    return fig
