"""The report card, the knockout and the seed sweep as terminal tables: they only read what they are handed.

Numbers and words come from a :class:`~mhacli.pipeline.CardShown`, a knockout or a sweep, sentences from
:mod:`mhacli.measures.narrate`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mhacli.measures import narrate
from mhacli.grammar.knockout import Knockout
from mhacli.grammar.score import percent
from mhacli.grammar.sweep import Sweep
from mhacli.render import theme
from mhacli.render.fit import Fitted, fitted_table, heading_text

if TYPE_CHECKING:
    from mhacli.pipeline import CardShown


def _pct(x: float) -> str:
    return f"{math.floor(100 * x + 1e-9)}%"


def _table() -> Table:
    """A table without a title: its heading is a line of its own, which wraps to the console, not the table."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 1))



def _cell(card: CardShown, r: int, i: int) -> Text:
    """A card cell: its rate over its interval; bold in the head's colour where the head is named for it."""
    style = theme.head_style(i) if card.named[r, i] else ""
    text = Text(_pct(card.rate[r, i]), style=style)
    text.append(f"\n{_pct(card.low[r, i])}–{_pct(card.high[r, i])}", style=theme.STYLE_DIM)
    if card.bases and card.bases[r][i]:  # the baselines its name must beat: why it is, or is not, named
        text.append(f"\n{card.bases[r][i]}", style=theme.STYLE_DIM)
    return text


def card_table(card: CardShown) -> RenderableType:
    """Relation × head: each cell the held-out hit rate and its 95 % interval."""
    table = _table()
    table.add_column("relation")
    table.add_column("queries", justify="right")
    for i in range(card.heads):
        table.add_column(Text(f"head {i + 1}", style=theme.head_style(i)), justify="right")
    for r, row in enumerate(card.rows):
        table.add_row(row, f"{card.queries[r]:,}", *(_cell(card, r, i) for i in range(card.heads)))
    return Fitted(table, lambda console: _card_records(card))


def _card_records(card: CardShown) -> RenderableType:
    """The card at a narrow width: a record per row, each head's rate, interval and baselines on one labelled
    line (``head 4: 92%, 91%–93%, vs 90/69``), in the order the rule sentence names them."""
    parts: list[RenderableType] = []
    for r, row in enumerate(card.rows):
        parts += [Text(row), Padding(Text(f"queries: {card.queries[r]:,}"), (0, 0, 0, 2))]
        for i in range(card.heads):
            line = Text(f"head {i + 1}: ")
            line.append(_pct(card.rate[r, i]), style=theme.head_style(i) if card.named[r, i] else "")
            base = f", {card.bases[r][i]}" if card.bases and card.bases[r][i] else ""
            line.append(f", {_pct(card.low[r, i])}–{_pct(card.high[r, i])}{base}", style=theme.STYLE_DIM)
            parts.append(Padding(line, (0, 0, 0, 2)))
    return Group(*parts)


def card_lines(card: CardShown) -> list[str]:
    """What the card names each head, and what a name needs."""
    return [card.rule, *(f"head {i + 1}: {label}" for i, label in enumerate(card.labels))]


def card_report(card: CardShown) -> list[RenderableType]:
    """The card's table under its heading, its names, and what it was measured on."""
    said = [] if card.accuracy is None else [Text(f"The model's {card.accuracy}.")]
    return [heading_text(card.heading), card_table(card), *said, *(Text(line) for line in card_lines(card))]


def explain_card(card: CardShown | None) -> list[RenderableType]:
    """``mha explain`` with a grammar model that carries a card (:attr:`mhacli.pipeline.Run.card`): the card
    once, labelled as measured in training, how the shipped seed was chosen, then where its names and this
    sentence part (nothing for any other model)."""
    if card is None:
        return []
    told = [] if card.chosen is None else [Text(card.chosen)]
    return [Text(""), *card_report(card), *told, *(Text(line) for line in card.sentence)]


def knockout_table(card: CardShown, knock: Knockout) -> RenderableType:
    """Card and knockout side by side: per head, where it looks (card) and what switching it off costs."""
    table = _table()
    table.add_column("relation")
    table.add_column("all\nheads", justify="right")
    for i in range(card.heads):
        table.add_column(Text(f"h{i + 1}\nlooks", style=theme.head_style(i)), justify="right")
        table.add_column(Text(f"h{i + 1}\noff", style=theme.head_style(i)), justify="right")
    for r, row in enumerate(card.rows):
        cells: list[Text | str] = [row, percent(knock.full[r])]  # the same digits as train's table
        for i in range(card.heads):
            cells.append(Text(_pct(card.rate[r, i]), style=theme.head_style(i) if card.named[r, i] else ""))
            shown = knock.points[i][r]  # the digits that keep it on its verdict's side
            said = "0" if float(shown) == 0 else f"+{shown[1:]}" if shown.startswith("-") else f"−{shown}"
            cell = Text(said, style=theme.STYLE_BAD if knock.matters[i, r] else theme.STYLE_DIM)
            if knock.at_stake[i, r]:  # a cost worth a word, or one whose interval reaches 10: its interval
                cell.append(f"\n{knock.intervals[i][r].replace('-', '−').replace(' to ', '–')}", style=theme.STYLE_DIM)
            cells.append(cell)
        table.add_row(*cells)
    return fitted_table(table)


def knockout_report(card: CardShown, knock: Knockout) -> list[RenderableType]:
    """The side-by-side table, then every place the two disagree (``card.knockout``, from narrate)."""
    heading = (f"Where each head looks (report card) and what switching it off costs (knockout), "
               f"{knock.sentences:,} held-out sentences")
    return [heading_text(heading), knockout_table(card, knock), Text(card.rule),
            Text(narrate.knockout_rule_sentence()), *(Text(s) for s in card.knockout)]


def sweep_table(s: Sweep) -> RenderableType:
    """A row per seed: each head count's held-out accuracy (mean over relations) and the gap; then the spread."""
    most, fewest = max(s.heads), min(s.heads)
    table = _table()
    table.add_column("seed", justify="right")
    for h in s.heads:
        table.add_column(f"{h} head{'s' if h != 1 else ''}", justify="right")
    table.add_column(f"gap\n{most}−{fewest}", justify="right")
    for k, seed in enumerate(s.seeds):
        table.add_row(str(seed), *(f"{a:.1%}" for a in s.accuracy[k]), f"{s.gap[k]:+.1f}")
    gap, accuracy = s.spread, s.accuracy_spread
    table.add_section()
    for name in ("mean", "min", "max"):  # min and max per column: the lowest gap need not be the lowest run's
        table.add_row(name, *(f"{a:.1%}" for a in accuracy[name]), f"{gap[name]:+.1f}")
    return fitted_table(table)


def sweep_report(s: Sweep) -> list[RenderableType]:
    """A heading line (a table's own title would wrap to the table's width), the table, the spread in words."""
    heading = Text(f"mha train --task {s.task}, {len(s.seeds)} seeds: held-out accuracy, mean over relations",
                   style=theme.STYLE_TITLE)
    return [heading, sweep_table(s), Text(narrate.sweep_sentence(s))]
