"""``mha compare`` in the terminal: one wide head against h narrow ones, read from a Comparison.

Per token, the key each narrow head weights most against the wide head's; then how spread each head is, and
the conclusion (:func:`mhacli.measures.narrate.compare_conclusion`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mhacli.measures import narrate
from mhacli.measures.analysis import NONE
from mhacli.attention.tokenize import label
from mhacli.render import theme
from mhacli.render.fit import aside, fitted_table

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis
    from mhacli.measures.compare import Comparison

READBACK_ROWS = 12  # tokens listed in the read-back table



def _brought(tokens: tuple[str, ...], key: int, weight: float) -> Text:
    """'mat 97%', or 'a tie' for a row whose largest weight is shared."""
    if key < 0:
        return Text(f"tie {weight:.0%}", style=theme.STYLE_DIM)
    return Text(f"{label(tokens[key], 8)} {weight:.0%}")


def readback_table(cmp: Comparison, max_rows: int = READBACK_ROWS) -> RenderableType:
    """Per token: the token each of the h heads weights most, and the single head's, with those weights."""
    back = cmp.readback
    if back is None:
        return Text("")
    h = len(cmp.heads)
    table = Table(title=Text("What each token brings back most", style=theme.STYLE_TITLE), title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("token", no_wrap=True)
    for i in range(h):
        table.add_column(Text(f"head {i + 1}", style=theme.head_style(i)), overflow="fold")
    table.add_column(Text("1 head alone" if cmp.apart is not None else "1 head",
                          style=f"bold {theme.SINGLE_HEAD_COLOR}"), overflow="fold")
    rows = min(len(cmp.tokens), max_rows)
    for p in range(rows):
        table.add_row(Text(f"{label(cmp.tokens[p], 8)} ({p})"),
                      *(_brought(cmp.tokens, int(back.head_keys[i, p]), float(back.head_weights[i, p]))
                        for i in range(h)),
                      _brought(cmp.tokens, int(back.single_keys[p]), float(back.single_weights[p])))
    parts: list[RenderableType] = [fitted_table(table)]
    if rows < len(cmp.tokens):
        parts.append(aside(f"(first {rows} of {len(cmp.tokens)} tokens)"))
    parts.append(aside(narrate.readback_note(back, rows)))
    return Group(*parts)


def _follows(found: Analysis | None, i: int) -> tuple[str, str]:
    """The relation head ``i``'s top keys follow, and on how many of its rows ('—' for none)."""
    if found is None:
        return "", ""
    s = found.heads[i]
    return narrate.short_relation(s, found.tokens), "—" if s.pattern == NONE else f"{s.pattern_rows} of {s.pattern_of}"


def comparison_panel(cmp: Comparison, hide_rules: bool = False) -> RenderableType:
    """``mha compare``: what each token brings back, how spread each magnifier is, and what that means."""
    h = len(cmp.heads)
    table = Table(title=Text(f"One magnifier against {h}", style=theme.STYLE_TITLE),
                  title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("magnifier", no_wrap=True)
    table.add_column("width", justify="right", no_wrap=True)
    table.add_column("entropy", justify="right")
    table.add_column("of max", justify="right", no_wrap=True)
    table.add_column("top weight", justify="right")
    if not hide_rules:
        table.add_column("top key follows", overflow="fold")
        table.add_column("rows", justify="right", no_wrap=True)
    singles = cmp.single_analysis.heads[0].mean_top_weight if cmp.single_analysis is not None else None
    one = "● 1 head alone" if cmp.apart is not None else "● 1 head"
    rows = [(cmp.single, Text(one, style=f"bold {theme.SINGLE_HEAD_COLOR}"), singles,
             _follows(cmp.single_analysis, 0))]
    rows += [(s, Text(f"● head {i + 1}", style=theme.head_style(i)),
              cmp.analysis.heads[i].mean_top_weight if cmp.analysis is not None else None,
              _follows(cmp.analysis, i)) for i, s in enumerate(cmp.heads)]
    for k, (s, name, top, follows) in enumerate(rows):
        if k == 1:
            table.add_section()
        row: list[RenderableType] = [name, f"{'d' if s.head is None else 'd/h'} = {s.d_k}",
                                     Text(f"{s.mean_entropy:.2f} b", style=theme.STYLE_NUMBER),
                                     f"{s.max_entropy:.2f} b", "" if top is None else f"{top:.0%}"]
        if not hide_rules:
            row += [Text(follows[0]), follows[1]]
        table.add_row(*row)
    js = Text("How different the heads are: mean pairwise Jensen–Shannon divergence ")
    js.append(f"{cmp.mean_pairwise_js:.3f} bits", style=theme.STYLE_NUMBER)
    js.append(" (0 = identical heads, 1 = heads that never look at the same token).")
    note = Text("Entropy: how spread a row is, in bits, averaged over queries; the maximum is every visible key "
                "weighted equally. Top weight: a row's largest weight, on average.", style=theme.STYLE_DIM)
    parts: list[RenderableType] = [fitted_table(table), js, note, Text(""), readback_table(cmp)]
    if cmp.analysis is not None and cmp.readback is not None:
        parts += [Text(""), Text(narrate.compare_conclusion(cmp.analysis))]
    if cmp.apart is not None:
        parts += [Text(""), Text(narrate.apart_sentence(cmp.apart, h))]
    return Group(*parts)
