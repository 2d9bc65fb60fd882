"""The walkthrough in the terminal: Rich tables that only read a Trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mhacli.render import theme
from mhacli.render.fit import Fitted, aside, fitted_table, heading_text
from mhacli.attention.steps import ParameterCount, Step
from mhacli.attention.tokenize import label

if TYPE_CHECKING:  # numpy stays unloaded until a trace is drawn: 'mha shapes' never needs it
    import numpy as np

    from mhacli.measures.analysis import Analysis
    from mhacli.attention.trace import Trace

SHOW_VALUES_MAX_TOKENS = 12
SHOW_VALUES_MAX_D = 16




def header(trace: Trace) -> RenderableType:
    """What was run: the sentence as tokens and the configuration."""
    c = trace.config
    lines = Text()
    noun = "token" if trace.n_tokens == 1 else "tokens"
    shared = f"   g = {c.groups}" if c.groups != c.heads else ""  # key/value heads, when the heads share them
    lines.append(f"N = {trace.n_tokens} {noun}   d = {c.d_model}   h = {c.heads}{shared}   d/h = {c.d_k}\n")
    if trace.source:
        lines.append(f"loaded from {label(trace.source, 60)}\n", style=theme.STYLE_DIM)
    # A saved run keeps its whole config (npz format 2), so a loaded trace says the same as the run did.
    theta = getattr(trace, "rope_theta", None)  # a Llama-style layer turns Q and K by position instead
    said = f"rotary (θ = {theta:,.0f}, in Q and K)" if theta is not None else "on" if c.positions else "off"
    lines.append(f"seed {c.seed} · tokenizer {c.tokenizer} · positions {said}\n", style=theme.STYLE_DIM)
    lines.append(f"{'causal' if c.causal else 'bidirectional'} · weights {c.weights} · {c.dtype}",
                 style=theme.STYLE_DIM)
    return Panel(lines, title="Multi-head attention, step by step", title_align="left",
                 box=box.ROUNDED, expand=False)


def _token_block(trace: Trace, positions: range) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("pos", justify="right")
    table.add_column("token", overflow="fold", max_width=16)
    table.add_column("id", justify="right")
    for p in positions:
        table.add_row(str(p), Text(label(trace.tokens[p], 14)), str(int(trace.token_ids[p])))
    return table


def tokens_table(trace: Trace, max_tokens: int, width: int = 80,
                 mapped: Sequence[tuple[str, str, str]] = ()) -> RenderableType:
    """Step 1: position, token and vocabulary id of each token, side by side when many (windowed when long)."""
    shown = min(trace.n_tokens, max_tokens)
    # Up to three blocks side by side keep a long sentence on one projector screen.
    blocks = 1 if shown <= 8 else min(3, max(1, width // 26))
    per_block = -(-shown // blocks)
    tables = [_token_block(trace, range(start, min(start + per_block, shown)))
              for start in range(0, shown, per_block)]
    grid = Table.grid(padding=(0, 3))
    for _ in tables:
        grid.add_column(vertical="top")
    grid.add_row(*tables)
    parts: list[RenderableType] = [heading_text("1. Tokens"), grid]
    if shown < trace.n_tokens:
        parts.append(aside(f"… {trace.n_tokens - shown} more tokens not listed "
                           f"(--max-tokens {max_tokens})."))
    said = _mapped_ids_note(trace.tokens, trace.token_ids.tolist(), mapped)
    parts.append(aside(" ".join(filter(None, (_ids_note(trace), said)))))
    return Group(*parts)


def _mapped_ids_note(tokens: Sequence[str], token_ids: Sequence[int],
                     mapped: Sequence[tuple[str, str, str]]) -> str | None:
    """What the token table's id is for mapped words: ``lion and park have no row of their own: each takes the
    id of the word it is read as (lion → “animal” 11, park → “street” 17)``; None without any."""
    if not mapped:
        return None
    first = {t.lower(): int(i) for t, i in reversed(list(zip(tokens, token_ids)))}
    names = [w for w, _, _ in mapped]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    has = "has" if len(names) == 1 else "have"
    each = "it takes" if len(names) == 1 else "each takes"
    pairs = ", ".join(f"{w} → “{r}” {first[w]}" for w, _, r in mapped if w in first)
    own = "its" if len(names) == 1 else "their"
    return f"{listed} {has} no row of {own} own: {each} the id of the word it is read as ({pairs})."


def _ids_note(trace: Trace) -> str:
    """What the id column is: a trained model's own vocabulary id, or the order of first appearance."""
    distinct = len(set(trace.tokens))
    counted = f"{trace.n_tokens} tokens, {distinct} distinct"
    if not trace.model_ids:  # a random or designed run, your own weights, or a trace saved before ids were kept
        return (f"{counted}. id numbers the distinct strings in order of first appearance: the same string "
                "always gets the same id and the same embedding row.")
    ids = len(set(trace.token_ids.tolist()))
    counted += f", {ids} distinct id{'s' if ids != 1 else ''}" if ids != distinct else ""
    whose = "the model's" if trace.config.weights == "untrained" else "the trained model's"
    if trace.folds_case:
        return (f"{counted}. id is the row of {whose} vocabulary (its embedding table). The model "
                "folds capitals: a word and its capitalised form share one id; a word it never saw gets the "
                "one unknown token's id.")
    return (f"{counted}. id is the row of {whose} vocabulary (its embedding table); a word it "
            "never saw reads as one of its words, and gets that word's id.")


#: From this width up a command to copy is one line however long (the terminal folds it; a copy is one line);
#: below it, lines that each end in a shell continuation, so a copy of them still runs as one command.
WHOLE_COMMAND_COLUMNS = 80


def continued(command: str, width: int, indent: int = 0) -> list[str]:
    """``command`` as lines of at most ``width`` where it can: broken at spaces, each line but the last ending
    in `` \\`` (the shell joins them again), the first indented by ``indent``. Inside double quotes a
    backslash-newline is removed too, so a break there starts its next line at the margin (an indent would enter
    the text); inside single quotes it never breaks (a line may then be longer)."""
    words = command.split(" ")
    lines: list[str] = []
    line, quote = " " * indent + words[0], _quote_after("", words[0])
    for word in words[1:]:
        if len(line) + 1 + len(word) + 2 <= width or quote == "'":
            line += " " + word
        else:
            lines.append(line + " \\")
            line = ("" if quote == '"' else " " * (indent + 4)) + word
        quote = _quote_after(quote, word)
    return [*lines, line]


def _quote_after(quote: str, word: str) -> str:
    """The open quote ('' none, "'" or '"') after ``word``, starting inside ``quote`` (no escapes inside single
    quotes; a backslash escapes the next character elsewhere)."""
    i = 0
    while i < len(word):
        ch = word[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\":
            i += 1
        elif quote == '"':
            quote = "" if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        i += 1
    return quote


class Command:
    """A command to copy, never broken where a copy would not run: one line from :data:`WHOLE_COMMAND_COLUMNS`
    columns (printed with ``crop=False``, :attr:`uncropped`: the terminal may fold it, a copy is still one line),
    and below that, lines joined by shell continuations (:func:`continued`)."""

    uncropped = True  # print_all and the lesson print it uncropped

    def __init__(self, command: str, indent: int = 2) -> None:
        self.command, self.indent = command, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        whole = self.indent + len(self.command) <= width or width >= WHOLE_COMMAND_COLUMNS
        lines = [" " * self.indent + self.command] if whole else continued(self.command, width, self.indent)
        for line in lines:
            yield from Text(line, style=theme.STYLE_FORMULA).render(console)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.indent + len(self.command), self.indent + len(self.command))


def steps_table(steps: Sequence[Step], heads: int, title: str = "2. Steps",
                efficiency: str | None = None, sharing: str | None = None) -> RenderableType:
    """Step 2: formula, shape in symbols and numbers, multiply-adds (``efficiency``: what splitting changes;
    ``sharing``: which query heads read which shared keys and values)."""
    table = Table(title=heading_text(title), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("step", overflow="fold", ratio=2)
    table.add_column("formula", style=theme.STYLE_FORMULA, overflow="fold", ratio=3)
    table.add_column("shape", style=theme.STYLE_SHAPE, overflow="fold", ratio=2)
    total = sum(s.madds for s in steps)
    # Never cut a count short: the column is at least as wide as the total (`mha shapes` reaches 10^14).
    table.add_column("mult-adds", justify="right", style=theme.STYLE_NUMBER, ratio=1,
                     min_width=len(f"{total:,}"), no_wrap=True)
    for s in steps:
        times = heads if s.groups is None else s.groups  # a step of the key/value groups runs g times
        name = s.name + (f" (×{times})" if s.per_head and times > 1 else "")
        # Text, not str: formulas contain brackets that Rich would read as markup.
        table.add_row(Text(name), Text(s.formula), Text(f"{s.shape} = {s.shape_numeric}"), f"{s.madds:,}")
    table.add_section()
    table.add_row("total", "", "", f"{total:,}")
    note = aside("(×h) steps run once per head; shapes are per head. Multiply-adds count all heads."
                 + (f" {sharing}" if sharing else "") + (f" {efficiency}" if efficiency else ""))
    return Group(fitted_table(table), note)


def parameters_panel(params: ParameterCount, title: str = "3. Parameters") -> RenderableType:
    """Step 3: one wide head against h narrow heads, same count, plus W^O."""
    single, multi = params.arithmetic()
    table = Table(title=heading_text(title), title_justify="left", box=box.SIMPLE_HEAD, show_header=True)
    table.add_column("projections W_q, W_k, W_v", overflow="fold")
    table.add_column("count", justify="right", no_wrap=True)  # a formula is never broken mid-expression
    table.add_row(f"1 head, each d×d = {params.d_model}×{params.d_model}", single)
    g = params.groups
    shared = f" (K, V: {g} key/value head{'s' if g != 1 else ''})" if params.grouped else ""
    table.add_row(f"{params.heads} heads, each d×d/h = {params.d_model}×{params.d_k}{shared}", multi)
    table.add_row(f"W^O, d×d = {params.d_model}×{params.d_model}", f"{params.w_o:,}")
    table.add_section()
    table.add_row("total with W^O", f"{params.total:,}")
    if params.grouped:
        d, h = params.d_model, params.heads
        table.add_row("the article's layer, 4d²", f"4 · {d}² = {params.mha_total:,}")
        table.add_row("shared keys and values, 2d²(1 + g/h)", f"2 · {d}² · (1 + {g}/{h}) = {params.total:,}")
    verdict = Text("Same number of parameters: ", style=theme.STYLE_DIM)
    verdict.append("yes" if params.equal else "NO", style=theme.STYLE_OK if params.equal else theme.STYLE_BAD)
    if params.grouped:
        d, h, dk = params.d_model, params.heads, params.d_k
        verdict.append(f" — the {h} query heads still cost one head's W_q (h · d · d/h = d² = {h * d * dk:,}), as "
                       f"the article says; the keys and values of {g} group{'s' if g != 1 else ''} cost {g}/{h} "
                       f"of one head's, so the layer has {params.total:,} parameters, "
                       f"{params.total / params.mha_total:.0%} of the article's {params.mha_total:,}.",
                       style=theme.STYLE_DIM)
    else:
        verdict.append(" — splitting into heads changes the shape of the work, not its size.",
                       style=theme.STYLE_DIM)
    return Group(Fitted(table, lambda console: _formula_records(table)), aside(verdict))


def _formula_records(table: Table) -> RenderableType:
    """A table of formulas at a narrow width: each row's label, then its formula one ``= …`` step a line, so no
    expression is broken inside (``3 · d · d`` / ``= 3 · 32 · 32`` / ``= 3,072``)."""
    labels, formulas = (list(c.cells) for c in table.columns[:2])
    parts: list[RenderableType] = [table.title] if table.title else []
    headers = [c.header for c in table.columns[:2]]
    if all(isinstance(h, str) and h for h in headers):
        parts.append(Text(f"{headers[0]}: {headers[1]}", style=theme.STYLE_DIM))
    for name, formula in zip(labels, formulas):
        parts.append(Text(str(name)))
        steps = str(formula).split(" = ")
        parts.append(Padding(Text("\n".join([steps[0], *(f"= {step}" for step in steps[1:])]),
                                  no_wrap=True, overflow="fold"), (0, 0, 0, 2)))
    return Group(*parts)


def claim_panel(trace: Trace, diff: float) -> RenderableType:
    """Step 4: building Q^i directly equals cutting block i out of the full Q (``diff``: the run's split check)."""
    d, dk = trace.d_model, trace.d_k
    text = Text()
    text.append("Q^i = X W_q^i", style=theme.STYLE_FORMULA)
    text.append(f" (X is N×d, W_q^i is d×d/h = {d}×{dk}) against block i of ")
    text.append("Q = X W_qᵀ", style=theme.STYLE_FORMULA)
    values = ("for K too, and for V from E, the word embeddings alone (V^i = E W_v^i against V = E W_vᵀ)"
              if trace.word_values else "for K and V too")  # the check cuts V from the input the values read
    text.append(f" (columns i·{dk} … i·{dk}+{dk - 1}), for every head and {values}"
                + (f" (K^j and V^j for each of the {trace.kv_heads} key/value groups).\n"
                   if trace.kv_heads != trace.num_heads else ".\n"))
    text.append("largest difference: ")
    text.append(f"{diff:.3g}", style=theme.STYLE_OK if diff < 1e-9 else theme.STYLE_BAD)
    text.append("  → building the heads directly is the same as splitting the full matrices.")
    return Group(heading_text("4. Split or direct?"), text)


def heads_panel(trace: Trace, analysis: Analysis, title: str = "5. Each head is its own magnifier", *,
                hide_rules: bool = False, sentence: bool = True) -> RenderableType:
    """Step 5: per head, the relation its per-query top key follows, how sharply, and what that means here;
    ``hide_rules``: no names (the class names them); ``sentence``: end with the run's closing sentence."""
    from mhacli.measures import narrate
    from mhacli.measures.analysis import NONE

    a = analysis
    kind = narrate.kind_of(a)
    table = Table(title=heading_text(title), title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("head", no_wrap=True)
    if not hide_rules:
        table.add_column("top key follows", overflow="fold")
        table.add_column("rows", justify="right", no_wrap=True)
    table.add_column("top weight", justify="right", no_wrap=True)
    table.add_column("entropy", justify="right", no_wrap=True)
    table.add_column("focus", overflow="fold")
    rules = a.rules if kind == narrate.DESIGNED and not hide_rules else None
    if rules:
        table.add_column("rule", overflow="fold")
    for s in a.heads:
        row: list[RenderableType] = [Text(f"● {s.head + 1}", style=theme.head_style(s.head))]
        if not hide_rules:
            row += [Text(narrate.short_relation(s, a.tokens)),
                    "—" if s.pattern == NONE else f"{s.pattern_rows} of {s.pattern_of}"]
        row += [f"{s.mean_top_weight:.0%}", f"{s.mean_entropy:.2f}/{s.max_entropy:.2f} b", s.describe()]
        if rules:
            row.append(Text(rules[s.head]))
        table.add_row(*row)
    counted = a.counted_rows
    rows = "" if hide_rules else (
        f"top key follows: the relation that each query's most weighted key follows (previous token, "
        f"itself, …); rows: on how many of the query rows where that relation names a key it does (of the "
        f"{counted} rows that can choose, the previous token has none on the first row, for example); a row "
        f"counts only when its top weight is clear of chance (a quarter of the way from a uniform row to all on "
        f"one key). ")
    note = aside(rows + "top weight: the largest weight of a row, on average. entropy: mean per query, "
                 "in bits, against the uniform maximum (lower = sharper).")
    warned = [Text(f"Caution: {c}.", style=theme.STYLE_TITLE) for c in narrate.cautions(a)]
    named = None if hide_rules else narrate.trained_names_note(a)
    if named is not None:
        note = Group(note, aside(named))
    if not sentence:
        return Group(fitted_table(table), *warned, note)
    return Group(fitted_table(table), *warned, note,
                 aside(Text(narrate.closing_sentence(a, hide_rules=hide_rules))))


def grammar_panel(analysis: Analysis, title: str = "6. What the heads learned, on this sentence", *,
                  hide_rules: bool = False) -> RenderableType | None:
    """For a grammar model on a sentence it can parse: the parse, each head's learned relation, and per query
    of the parse, where every head looks (its top key and its weight on the true noun)."""
    from mhacli.measures import narrate

    reading = analysis.reading
    if reading is None:
        return None
    t = reading.parse.tokens
    table = Table(title=heading_text(title), title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("from", no_wrap=True)
    if not hide_rules:
        table.add_column("relation → noun", overflow="fold")
    for i in range(analysis.num_heads):
        table.add_column(Text(f"● {i + 1}", style=theme.head_style(i)), justify="right", overflow="fold")
    asked: set[int] = set()
    for look in reading.looks:
        if hide_rules and look.query in asked:  # hidden, a word's second relation would repeat its row
            continue
        asked.add(look.query)
        row: list[RenderableType] = [label(t[look.query], 12)]
        if not hide_rules:
            row.append(f"{look.relation} → {label(t[look.key], 12)}")
        for i, (k, w) in enumerate(zip(look.top, look.weight)):
            # Hidden, a weight only on the relation's noun would give the answer away.
            found = k == look.key and not hide_rules
            cell = Text(f"{label(t[k], 10)} {w:.0%}" if found else label(t[k], 10))
            if found and i in look.answered:  # half the row or more on the true key
                cell.stylize("bold")
            row.append(cell)
        table.add_row(*row)
    lines: list[RenderableType] = [fitted_table(table)]
    if hide_rules:
        lines.append(aside("Each cell: the token that head looks at most from that word. Which head finds "
                           "which relation? (The relations are hidden: name them.)"))
        return Group(*lines)
    lines.append(aside(narrate.parse_sentence(reading) + " Each cell: the token that head looks at most from "
                       "that word, with its weight when it is the noun of the relation (bold: half the row "
                       "or more)."))
    if analysis.rules:
        learned = "; ".join(f"head {i + 1}: {r}" for i, r in enumerate(analysis.rules))
        lines.append(aside(f"Measured {narrate.measured_when(analysis)}, on held-out sentences: {learned}."))
    for line in narrate.reading_lines(reading):
        lines.append(aside(line[0].upper() + line[1:]))
    return Group(*lines)


def causal_note(trace: Trace) -> RenderableType | None:
    """Step 6: what the causal mask blocked."""
    if not trace.config.causal:
        return None
    n = trace.n_tokens
    blocked = n * (n - 1) // 2
    text = Text()
    text.append("6. Causal mask", style=theme.STYLE_TITLE)
    text.append(f"\nEach token sees only itself and earlier tokens: {blocked:,} of {n * n:,} "
                f"query–key pairs per head ({blocked / (n * n):.0%}) were set to −∞ before the softmax, "
                "so their weights are exactly 0. The first token can only attend to itself.")
    return text


_CELL = 6  # "-12.34" is the widest value a rounded cell shows


def _matrix(title: str, m: np.ndarray, rows: Sequence[str], cols: Sequence[str] | None,
            width: int = 80) -> RenderableType:
    """A matrix rounded to 2 decimals; columns wrap into blocks (as numpy prints) to fit ``width``."""
    import numpy as np

    per_block = max(1, (width - 10) // (_CELL + 1))
    blocks: list[RenderableType] = []
    for first in range(0, m.shape[1], per_block):
        cut = range(first, min(first + per_block, m.shape[1]))
        heading = title if first == 0 else f"{title}, columns {cut[0]}–{cut[-1]}"
        table = Table(title=heading, title_justify="left", box=None, pad_edge=False, padding=(0, 1))
        table.add_column("", no_wrap=True, max_width=8)
        for j in cut:
            table.add_column(Text(label(cols[j], _CELL)) if cols else str(j), justify="right", no_wrap=True)
        for r, row in enumerate(m):
            table.add_row(Text(label(rows[r], 8)), *("−∞" if np.isneginf(row[j]) else f"{row[j]:.2f}" for j in cut))
        blocks.append(table)
    return Group(*blocks)


def values_panel(trace: Trace, width: int = 80) -> RenderableType:
    """``--show-values``: the actual matrices, rounded, for short inputs."""
    import numpy as np

    n, d = trace.n_tokens, trace.d_model
    if n > SHOW_VALUES_MAX_TOKENS or d > SHOW_VALUES_MAX_D:
        return Text(f"--show-values prints matrices only for up to {SHOW_VALUES_MAX_TOKENS} tokens "
                    f"and --d-model {SHOW_VALUES_MAX_D}; use --save-npz or --json for the full numbers.",
                    style=theme.STYLE_DIM)
    toks = trace.tokens
    parts: list[RenderableType] = [heading_text("Values (rounded to 2 decimals)"),
                                   _matrix("X (N×d)", np.asarray(trace.X), toks, None, width)]
    for i in range(trace.num_heads):
        style = theme.head_style(i)
        j = trace.head_groups[i]  # the key/value group head i reads (j = i in the article's layer)
        shared = f", group {j + 1}" if trace.kv_heads != trace.num_heads else ""
        parts.append(Text(f"\nhead {i + 1}{shared}", style=style))
        # Everything S^i = Q^i K^jᵀ / √(d/h) and head_i = A^i V^j need, so each product can be redone by hand.
        for name, m, cols in ((f"Q^{i + 1} (N×d/h)", trace.Q[i], None), (f"K^{j + 1} (N×d/h)", trace.K[j], None),
                              (f"V^{j + 1} (N×d/h)", trace.V[j], None), (f"S^{i + 1} (N×N)", trace.scores[i], toks),
                              (f"A^{i + 1} (N×N)", trace.weights[i], toks),
                              (f"head_{i + 1} = A^{i + 1} V^{j + 1} (N×d/h)", trace.heads[i], None)):
            parts.append(_matrix(name, np.asarray(m), toks, cols, width))
    parts.append(Text(""))
    parts.append(_matrix("H = [head_1 … head_h] (N×d)", np.asarray(trace.concat), toks, None, width))
    parts.append(_matrix("W^O (d×d)", np.asarray(trace.W_o), [str(j) for j in range(d)], None, width))
    bias = " + b_o" if trace.b_o is not None else ""
    parts.append(_matrix(f"O = H W^Oᵀ{bias} (N×d)", np.asarray(trace.output), toks, None, width))
    return Group(*parts)


def walkthrough(trace: Trace, analysis: Analysis, split_diff: float, *, max_tokens: int = 40,
                show_values: bool = False, width: int = 80, hide_rules: bool = False) -> list[RenderableType]:
    """The whole explanation, in the issue's order, a blank line between sections; ``analysis`` and
    ``split_diff`` are the run's (:class:`~mhacli.pipeline.Run`)."""
    from mhacli.measures import narrate

    parts: list[RenderableType | None] = [
        header(trace),
        tokens_table(trace, max_tokens, width, analysis.mapped),
        steps_table(trace.steps, trace.num_heads, efficiency=narrate.efficiency_sentence(trace.split_cost),
                    sharing=narrate.groups_sentence(trace.n_tokens, trace.d_model, trace.num_heads,
                                                    trace.config.kv_heads)),
        parameters_panel(trace.parameters),
        claim_panel(trace, split_diff),
        heads_panel(trace, analysis, hide_rules=hide_rules),
        grammar_panel(analysis, hide_rules=hide_rules),
        causal_note(trace),
        values_panel(trace, width) if show_values else None,
    ]
    spaced: list[RenderableType] = []
    for p in parts:
        if p is not None:
            spaced += [p, Text("")]
    return spaced


def files_written(paths: Iterable[str]) -> RenderableType:
    """The closing list of every file a command wrote."""
    text = Text("Wrote:", style=theme.STYLE_TITLE)
    for p in paths:
        text.append(f"\n  {p}")
    return text


def verify_table(trace: Trace, checks: Sequence, torch_reason: str | None = None) -> RenderableType:
    """``mha verify``: one row per array and reference, with a verdict (``torch_reason``: why PyTorch was not
    compared, when it was not)."""
    table = Table(title=heading_text(f"Verify {label(trace.source, 60) if trace.source else 'trace'}"),
                  title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("reference")
    table.add_column("array")
    table.add_column("largest |diff|", justify="right")
    table.add_column("ok")
    for c in checks:
        table.add_row(c.reference, c.array, f"{c.max_diff:.2e}",
                      Text("yes", style=theme.STYLE_OK) if c.ok else Text("NO", style=theme.STYLE_BAD))
    refs = sorted({c.reference for c in checks})
    failed = [c for c in checks if not c.ok]
    tol = checks[0].tolerance if checks else 0.0
    if failed:
        verdict = Text(f"{len(failed)} of {len(checks)} arrays differ by more than {tol:g}.",
                       style=theme.STYLE_BAD)
    else:
        verdict = Text(f"All {len(checks)} arrays agree within {tol:g} ({', '.join(refs)}).",
                       style=theme.STYLE_OK)
    parts: list[RenderableType] = [fitted_table(table), aside(verdict)]
    if "PyTorch" not in refs:
        parts.append(aside(f"{torch_reason or 'PyTorch is not installed'}, so only the plain loop was compared."))
    return Group(*parts)
