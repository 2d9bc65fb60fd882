"""``mha samples`` in the terminal: the ready-made texts, each chosen to teach one thing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mhacli.attention.tokenize import label
from mhacli.render import theme
from mhacli.render.fit import aside, fitted_table, heading_text, plural

if TYPE_CHECKING:
    from mhacli.io.samples import Sample





def samples_table(samples: Sequence[Sample], tokenizer: str = "word") -> RenderableType:
    """Name, token count and what each sample shows, in a table that fits 80 columns."""
    table = Table(title=heading_text("Ready-made texts"), title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 1))
    table.add_column("name", no_wrap=True, style=theme.STYLE_FORMULA)
    table.add_column("tokens", justify="right", no_wrap=True, style=theme.STYLE_NUMBER)
    table.add_column("distinct", justify="right", no_wrap=True, style=theme.STYLE_NUMBER)
    table.add_column("what it shows", overflow="fold")
    for s in samples:
        tokens = s.tokens(tokenizer)
        table.add_row(s.name, str(len(tokens)), str(len(set(tokens))), Text(s.description))
    note = aside(Text.assemble(
        ("Use one with ", theme.STYLE_DIM), ("mha explain --sample NAME", theme.STYLE_FORMULA),
        (" (also demo, quiz, compare); see its text with ", theme.STYLE_DIM),
        ("mha samples NAME", theme.STYLE_FORMULA), (". Tokens counted with the ", theme.STYLE_DIM),
        (tokenizer, theme.STYLE_DIM), (" tokenizer.", theme.STYLE_DIM)))
    return Group(fitted_table(table), note)


def sample_view(sample: Sample, tokenizer: str = "word") -> RenderableType:
    """One sample: its description, its text, and its tokens."""
    tokens = sample.tokens(tokenizer)
    body = Text(sample.text)
    shown = " · ".join(label(t, 16) for t in tokens)
    return Group(
        Panel(body, title=f"{sample.name}: {plural(len(tokens), 'token')}", title_align="left", box=box.ROUNDED),
        aside(sample.description),
        aside(Text.assemble(("tokens: ", theme.STYLE_DIM), (shown, ""))),
    )


def sample_table_or_view(name: str | None, tokenizer: str = "word") -> RenderableType:
    """``mha samples``: the table, or one sample when named."""
    from mhacli.io.samples import list_samples, load_sample

    if name is None:
        return samples_table(list_samples(), tokenizer)
    return sample_view(load_sample(name), tokenizer)


__all__ = ["sample_table_or_view", "sample_view", "samples_table"]
