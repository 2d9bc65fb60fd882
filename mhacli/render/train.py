"""``mha train``'s terminal output: the results table and what each head learned.  They read the runs only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mhacli.measures import narrate
from mhacli.render.fit import Fitted, fitted_table, plural

if TYPE_CHECKING:
    from mhacli.grammar.train import TrainResult


def results_table(results: "list[TrainResult]") -> Table:
    """Heads, d/h, parameters, final loss, held-out accuracy (per relation too), seconds; the steps, which every
    run shares, in the title."""
    first = results[0].config
    table = Table(title=f"mha train --task {first.task}: {first.steps:,} steps", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 1))
    targets = results[0].model.targets
    per = len(targets) > 1  # one held-out column per relation the task reads out
    # A relation's words one to a line ("previous" over "token"), and h and "params" in the article's short
    # words, so the grammar's four relations fit 80 characters.
    relations = [t.replace(" ", "\n") for t in targets] if per else []  # records put them back on one line
    for name in ("h", "d/h", "params", "loss", "held-out", *relations, "seconds"):
        table.add_column(name, justify="right")
    for r in results:
        table.add_row(str(r.heads), str(r.config.d_k), f"{r.parameters:,}",
                      f"{r.loss:.4f}", f"{r.accuracy:.1%}", *([f"{a:.1%}" for a in r.relation_accuracy] if per else []),
                      f"{r.seconds:.1f}")
    return table


def fitted_results(results: "list[TrainResult]") -> Fitted:
    """The table where it fits without cutting a number (the default task's does at 80 columns), else one
    record per run, headed "4 heads"."""
    return fitted_table(results_table(results), lambda heads: plural(int(heads), "head"))


def learned_lines(results: "list[TrainResult]") -> list[RenderableType]:
    """Per run, what each head learned: from its report card for a grammar model, else the relation its top key
    follows and for what share of queries. One head a line, indented under its run, so a long label wraps under
    itself at any width."""
    carded = all(r.model.card is not None for r in results)
    lines: list[RenderableType] = [Text(
        "What each head learned, by its report card (below):" if carded else
        "What each head learned (the relation its most-weighted key follows, share of held-out queries):")]
    for r in results:
        said = [narrate.learned_title(label) or label for label in r.model.labels] if carded else r.model.labels
        lines.append(Padding(Text(f"{plural(r.heads, 'head')}:"), (0, 0, 0, 2)))
        lines += [Padding(Text(f"head {i + 1} {label}"), (0, 0, 0, 4)) for i, label in enumerate(said)]
    return lines
