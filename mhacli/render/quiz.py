"""``mha quiz`` in the terminal: the questions about one run, numbered, with their answers when asked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rich import box
from rich.console import RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mhacli.render import theme
from mhacli.render.terminal import Command

if TYPE_CHECKING:
    from mhacli.measures.quiz import Question


def quiz_view(questions: Sequence[Question], answers: bool, title: str, check_command: str) -> list[RenderableType]:
    """The questions, numbered; with ``answers`` each is followed by its answer and where to see it."""
    parts: list[RenderableType] = [Panel(Text(title), title="Quiz", title_align="left", box=box.ROUNDED,
                                         expand=False), Text()]
    for n, q in enumerate(questions, 1):
        # A two-column grid so wrapped lines hang under the question, not under its number.
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, justify="right")
        grid.add_column(overflow="fold")
        grid.add_row(Text(f"{n}.", style=theme.STYLE_TITLE),
                     Text.assemble((f"[{q.topic}] ", theme.STYLE_DIM), (q.prompt, "")))
        if answers:
            grid.add_row("", Text.assemble(("answer: ", theme.STYLE_OK), (q.answer, "")))
            grid.add_row("", Text(f"see it in: {q.check}", style=theme.STYLE_DIM))
        parts += [grid, Text()]
    tail = Text("Check your answers by running this command", style=theme.STYLE_DIM)
    if not answers:
        tail.append(", or print them with ", style=theme.STYLE_DIM)
        tail.append("--answers", style=theme.STYLE_FORMULA)
    tail.append(":", style=theme.STYLE_DIM)
    # the command on a line of its own, never wrapped by us: a copy of it runs (the terminal may fold it)
    parts += [tail, Command(check_command)]
    return parts


__all__ = ["quiz_view"]
