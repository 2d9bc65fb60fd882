"""``mha demo`` in the terminal: the paced lesson, every step narrated and shown with this run's numbers.

Functions read the run (trace, analysis, :class:`mhacli.measures.lesson.LessonNumbers`) and return Rich
renderables; :func:`present` prints the lesson and waits for Enter between steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from mhacli.grammar.score import percent
from mhacli.attention.tokenize import label
from mhacli.render import theme
from mhacli.render.fit import aside, fitted_table, plural, titled_panel
from mhacli.render.terminal import Command, parameters_panel, steps_table

if TYPE_CHECKING:
    from mhacli.measures.analysis import Analysis
    from mhacli.measures.lesson import LessonNumbers, TrainedPair
    from mhacli.attention.trace import Trace

MASK_GRID_MAX = 10  # tokens drawn in the causal-mask grid




@dataclass(frozen=True)
class LessonStep:
    """One stop of the lesson: a short narration, then what shows it."""

    key: str
    title: str
    narration: str
    shows: RenderableType | None



def _tok(trace: Trace, p: int) -> str:
    return f"'{label(trace.tokens[p], 14)}' ({p})"


def _cols(cols: Sequence[int]) -> str:
    if cols and list(cols) == list(range(cols[0], cols[-1] + 1)):
        return f"{cols[0]}:{cols[-1] + 1}"
    return ",".join(map(str, cols))


def positions_table(trace: Trace, numbers: LessonNumbers, rows: int = 6) -> RenderableType:
    """The first rows of E and P (their first non-zero columns), and two copies of a word told apart by X."""
    import numpy as np

    e = np.asarray(trace.embeddings) if trace.embeddings is not None else None
    p = np.asarray(trace.positions) if trace.positions is not None else None
    e_cols, p_cols = list(numbers.e_columns), list(numbers.p_columns)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("pos", justify="right")
    table.add_column("token", max_width=12, overflow="ellipsis")
    if e is not None:
        row = "id" if trace.model_ids else "token"  # E is indexed by the word, P by the position
        table.add_column(Text(f"E[{row}, {_cols(e_cols)}]"), no_wrap=True)
    if p is not None:
        table.add_column(Text(f"P[pos, {_cols(p_cols)}]"), style=theme.STYLE_NUMBER, no_wrap=True)
    for i in range(min(rows, trace.n_tokens)):
        cells: list[RenderableType] = [str(i), Text(label(trace.tokens[i], 12))]
        if e is not None:
            cells.append(" ".join(f"{v:+.2f}" for v in e[i, e_cols]))
        if p is not None:
            cells.append(" ".join(f"{v:+.2f}" for v in p[i, p_cols]))
        table.add_row(*cells)
    parts: list[RenderableType] = [fitted_table(table)]
    twin = numbers.twin
    if twin is not None:
        if twin.x_apart > 0:
            said = f"but their rows of X = E + P are {twin.x_apart:.2f} apart, thanks to P."
        else:
            said = "and so do their rows of X: without P nothing tells the two copies apart."
        parts.append(aside(f"{_tok(trace, twin.first)} and {_tok(trace, twin.second)} are the same word: their E "
                           f"rows differ by {twin.e_apart:.2g}, {said}"))
    if not trace.config.positions:
        parts.append(aside("Positions are off (--no-positions): P is zero, so X = E and word order is invisible."))
    return Group(*parts)


def per_head_table(trace: Trace, hide_rules: bool = False) -> RenderableType:
    """Where each head's W_q^i lives in PyTorch's stacked W_q, and the shapes it makes."""
    d, dk, n = trace.d_model, trace.d_k, trace.n_tokens
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("head")
    table.add_column("W_q^i =", overflow="fold")
    table.add_column("shape", style=theme.STYLE_SHAPE)
    table.add_column("Q^i = X W_q^i", style=theme.STYLE_SHAPE)
    rules = _rules(trace, hide_rules)
    if rules:
        table.add_column("rule", overflow="fold")
    for i in range(trace.num_heads):
        row: list[RenderableType] = [Text(f"● {i + 1}", style=theme.head_style(i)),
                                     Text(f"W_q[{i * dk}:{(i + 1) * dk}]ᵀ"),
                                     f"{d}×{dk}", f"{n}×{dk}"]
        if rules:
            row.append(Text(rules[i]))
        table.add_row(*row)
    h, g = trace.num_heads, trace.kv_heads
    if g != h:  # shared keys and values: W_k^j and W_v^j per group, read by h/g heads each
        return Group(fitted_table(table), aside(
            f"W_q[a:b] is rows a … b−1, as numpy and PyTorch slice. W_k and W_v hold only g = {g} blocks: "
            f"head i reads W_k^j and W_v^j of group j = ⌊i/{h // g}⌋, {h + 2 * g} matrices of {d}×{dk} in all."))
    return Group(fitted_table(table), aside(f"W_q[a:b] is rows a … b−1, as numpy and PyTorch slice. The same holds for "
                              f"W_k^i and W_v^i: {3 * trace.num_heads} matrices of {d}×{dk} in all."))


def _rules(trace: Trace, hide_rules: bool) -> tuple[str, ...] | None:
    """The designed heads' rules, unless hidden (a trained model's labels are measured, not rules)."""
    return trace.rules if trace.config.weights == "designed" and trace.rules and not hide_rules else None


def query_table(trace: Trace, numbers: LessonNumbers, what: str) -> RenderableType:
    """For the lesson's query: each head's top keys by score (``what='scores'``) or by weight (``'weights'``)."""
    import numpy as np

    q = numbers.q
    m = trace.scores if what == "scores" else trace.weights  # (h, N, N)
    keys = numbers.score_keys if what == "scores" else numbers.weight_keys
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("head")
    table.add_column(f"top keys by {'score' if what == 'scores' else 'weight'}", overflow="fold")
    if what == "weights":
        table.add_column("row sum", justify="right")
    for i in range(trace.num_heads):
        row = m[i, q]
        cells = []
        for j in keys[i]:
            v = float(row[j])
            shown = "−∞" if np.isneginf(v) else (f"{v:.0%}" if what == "weights" else f"{v:.2f}")
            cells.append(f"{_tok(trace, j)} {shown}")
        out: list[RenderableType] = [Text(f"● {i + 1}", style=theme.head_style(i)), Text("   ".join(cells))]
        if what == "weights":
            out.append(f"{numbers.row_sums[i]:.3f}")
        table.add_row(*out)
    return fitted_table(table)


def mask_grid(trace: Trace, analysis: Analysis, shown: int = MASK_GRID_MAX) -> RenderableType:
    """Which keys each query may see in this run (first few tokens): ✓ may look, · blocked; a bidirectional run
    gets one sentence, a narrow console fewer tokens rather than squeezed columns."""
    from mhacli.render.fit import Fitted

    if analysis.mask is None:
        return aside("No mask in this run: every query may see every key. With --causal the keys after each "
                     "query (k > q) would be blocked.")
    n = min(trace.n_tokens, shown)
    table = Table(box=box.MINIMAL, padding=(0, 1), pad_edge=False)
    table.add_column("query \\ key", no_wrap=True)
    for k in range(n):
        table.add_column(str(k), justify="center", no_wrap=True)
    for qpos in range(n):
        table.add_row(Text(f"{qpos} {label(trace.tokens[qpos], 8)}"),
                      *(Text("·", style=theme.STYLE_DIM) if analysis.mask[qpos, k] else Text("✓", style=theme.STYLE_OK)
                        for k in range(n)))
    parts: list[RenderableType] = [table]
    if n < trace.n_tokens:
        parts.append(aside(f"(first {n} of {trace.n_tokens} tokens)"))
    parts.append(aside("mask[q, k] = True (blocked) where k > q: the '·' cells, PyTorch's attn_mask polarity."))
    if n <= 2:
        return Group(*parts)
    return Fitted(Group(*parts), lambda console: mask_grid(trace, analysis, n - 1))


def values_table(trace: Trace, numbers: LessonNumbers) -> RenderableType:
    """For the lesson's query: what each head's output row is mostly made of, and the row itself."""
    import numpy as np

    q = numbers.q
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("head")
    table.add_column("largest share of head_i's row", overflow="fold")
    table.add_column(Text(f"head_i[{q}] (first {min(4, trace.d_k)})"), no_wrap=True, style=theme.STYLE_NUMBER)
    for i in range(trace.num_heads):
        top = numbers.values[i]
        # The largest share, with its weight: "mostly" would claim more than half (core.narrate.MOSTLY).
        # A tied row has no single largest share: say how many value rows share the top weight.
        what = (f"{top.weight:.0%} of V^{i + 1} of {_tok(trace, top.key)}" if top.tied == 1
                else f"{top.weight:.0%} each of {top.tied} rows of V^{i + 1} (a tie)")
        vals = " ".join(f"{v:+.2f}" for v in np.asarray(trace.heads[i, q])[:4])
        table.add_row(Text(f"● {i + 1}", style=theme.head_style(i)), Text(what), vals)
    return fitted_table(table)


def concat_table(trace: Trace) -> RenderableType:
    """Which columns of H each head fills."""
    dk = trace.d_k
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("head")
    table.add_column("its output")
    table.add_column("becomes columns of H", style=theme.STYLE_SHAPE)
    for i in range(trace.num_heads):
        table.add_row(Text(f"● {i + 1}", style=theme.head_style(i)), f"{trace.n_tokens}×{dk}",
                      f"{i * dk}–{(i + 1) * dk - 1}")
    table.add_section()
    table.add_row("H", "", f"{trace.n_tokens}×{trace.d_model} (all {trace.d_model})")
    return fitted_table(table)


def output_table(trace: Trace, numbers: LessonNumbers, hide_rules: bool = False) -> RenderableType:
    """W^O at work: the words each head brought back (designed), or how every output column mixes heads."""
    h = trace.num_heads
    found = numbers.decoded
    if found is not None:
        rules = _rules(trace, hide_rules)
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
        table.add_column("token")
        for i in range(h):
            table.add_column(Text(f"{i + 1}: {rules[i]}" if rules else f"head {i + 1}", style=theme.head_style(i)),
                             overflow="fold")
        rows = len(found)
        for p in range(rows):
            table.add_row(Text(_tok(trace, p)), *(Text(label(w, 12)) for w in found[p]))
        parts: list[RenderableType] = [fitted_table(table)]
        if rows < trace.n_tokens:
            parts.append(aside(f"(first {rows} of {trace.n_tokens} tokens)"))
        parts.append(aside("Each cell: the word whose code is closest to that head's block of O[token]."))
        return Group(*parts)
    share = numbers.w_o_shares  # (columns, h)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("output column")
    for i in range(h):
        table.add_column(Text(f"head {i + 1}", style=theme.head_style(i)), justify="right")
    for j in range(share.shape[0]):
        table.add_row(f"O[:, {j}]", *(f"{s:.0%}" for s in share[j]))
    return Group(fitted_table(table), aside("Share of |W^O| weight that each output column takes from each "
                                            "head's block: every column draws on every head."))


def _embedding_note(trace: Trace, mapped: Sequence[tuple[str, str, str]]) -> str:
    """Where this run's E came from, in brackets after the tokens step."""
    kind = trace.config.weights
    if kind == "designed" and trace.rules:
        return " (Designed weights use a hand-made E: a 1 in one column and a code for the word in three others.)"
    if kind == "untrained":
        return (" (The model before training brings the E its training started from: random rows, one per word of "
                "its vocabulary, that no step has moved yet.)")
    if kind == "trained" and trace.folds_case:
        said = (" (The grammar model brings the E it learned, one row per word of its vocabulary. It folds "
                "capitals, so 'The' and 'the' share a row, and every word it was not trained on gets the one "
                "row of the unknown token, which carries only its position")
        if mapped:  # --words: the mapped words read another word's row (core.words), said with the pairs
            said += ("; a word mapped to a class of the grammar takes the row of the word it is read as ("
                     + ", ".join(f"{w} as “{r}”" for w, _, r in mapped) + ")")
        return said + ".)"
    if kind == "trained":
        return (" (The trained model brings the E it learned; a word it was not trained on stands in for one "
                "it was, picked by a stable hash.)")
    return " (This toy E is random, seeded by a hash of each token.)"


def _weights_sentence(trace: Trace, hide_rules: bool) -> str:
    """What made the weights, said once at the start of the lesson: random, designed (which rules) or trained."""
    kind, h = trace.config.weights, trace.num_heads
    if kind == "designed" and trace.rules:
        from mhacli.attention.designed import rules_note

        if hide_rules:
            return (" Here the weights were built by hand so each head follows a rule you can name; the rules "
                    "are hidden (--hide-rules): name each one from what its head does.")
        return (" Here the weights were built by hand so each head follows a rule you can name: "
                + "; ".join(f"head {i + 1}, {r}" for i, r in enumerate(trace.rules)) + "."
                + (f" {rules_note(h)}" if h != 4 else ""))
    if kind == "random":
        return (" The weights here are random: whatever pattern a head shows is an accident of the seed, not "
                "a finding (--weights designed gives heads that follow rules, --weights trained heads that "
                "learned them).")
    if kind == "untrained":
        return (" The weights here are a model of 'mha train' before its first training step: what each head "
                "does is measured the same way, and nothing was learned.")
    if kind == "trained":
        return (" The weights here are a model of 'mha train': what each head does is measured from its "
                "weights at the end of the lesson" + (", without naming it (--hide-rules)." if hide_rules else "."))
    return " The weights here are your own: the lesson measures what each head does, it does not assume it."


def lesson(trace: Trace, analysis: Analysis, numbers: LessonNumbers, intro: str = "", width: int = 80,
           figures_at: str | None = None, hide_rules: bool = False,
           pairs: Sequence[TrainedPair] = (), *, split_diff: float) -> list[LessonStep]:
    """The article's steps, in order, each narrated in a few sentences and shown with this run's numbers.

    ``figures_at``: the figures' folder, if any; ``analysis``, ``numbers``: the run's and the lesson's measures;
    ``pairs``: the shipped one-head-against-many results, ending the lesson when given; ``split_diff``: the split check.
    """
    import numpy as np

    from mhacli.measures import narrate
    from mhacli.render.terminal import claim_panel, header, tokens_table

    a = analysis
    n, d, h, dk = trace.n_tokens, trace.d_model, trace.num_heads, trace.d_k
    q = numbers.q
    kind = trace.config.weights
    designed = kind == "designed" and bool(trace.rules)
    rules = _weights_sentence(trace, hide_rules)
    pc = trace.parameters
    if h == 1:
        rules += (" This run has a single head, one magnifier: run it again with --heads 4 to hand out "
                  "more.")
    steps = [
        LessonStep(
            "why", "Why more than one head?",
            "Reading with one attention head is like reading through one magnifier: wherever you hold it, "
            "one part of the text comes into focus. Multi-head attention gives the model several smaller "
            f"magnifiers at once (here h = {h}). Every head looks at the same {plural(n, 'token')}, but each "
            "can look for something different, like a panel of experts who each check one thing and then "
            f"pool their notes. {intro}".rstrip() + rules + _magnifier_limit(pairs),
            header(trace)),
        LessonStep(
            "tokens", "Tokens and embeddings",
            f"First the text is cut into N = {plural(n, 'token')}. Each distinct token is looked up in a table E "
            f"that holds one row of d = {d} numbers per token, so the same string always gets the same "
            f"row. Stacked, the rows make an N×d = {n}×{d} matrix."
            + _embedding_note(trace, analysis.mapped),
            tokens_table(trace, max_tokens=24, width=width, mapped=analysis.mapped)),
        LessonStep(
            "positions", "Positions",
            "Attention on its own ignores order: shuffle the rows and each head gives the same answers, "
            "only shuffled. So a position vector P[p] is added to the row of the token at position p: "
            "X = E + P. Now two copies of the same word get different rows of X, and 'dog bites man' "
            "differs from 'man bites dog'."
            + ("" if trace.config.positions else " This run has --no-positions: P is zero, so X = E."),
            positions_table(trace, numbers)),
        LessonStep(
            "plan", "The whole plan",
            "Here is every step of this run with the shape it produces and its cost in multiply-adds. "
            f"Steps marked (×{h}) happen once per head, side by side; d/h = {dk} is the width of one head.",
            steps_table(trace.steps, h, title="Steps", efficiency=narrate.efficiency_sentence(trace.split_cost),
                        sharing=narrate.groups_sentence(n, d, h, trace.config.kv_heads))),
        LessonStep(
            "projections", "Each head gets its own W_q^i, W_k^i, W_v^i",
            "A single head multiplies X by three d×d matrices W_q, W_k and W_v to get queries, keys and "
            f"values. With h = {plural(h, 'head')}, head i gets three smaller matrices W_q^i, W_k^i, W_v^i of size "
            f"d×d/h = {d}×{dk}: {3 * h} matrices in all. Head i's queries are Q^i = X W_q^i, an N×d/h = "
            f"{n}×{dk} matrix, and likewise K^i and V^i. PyTorch stores the h small matrices stacked in "
            "one d×d weight, so W_q^i is a block of rows of W_q, transposed.",
            per_head_table(trace, hide_rules)),
        LessonStep(
            "parameters", "More matrices, the same number of parameters",
            f"h = {h} × 3 matrices × d·d/h numbers = 3·d·d = {pc.multi_head_qkv:,}: exactly what one "
            "full-width head costs. Splitting changes the shape of the work, not its size. The output "
            f"matrix W^O adds d·d = {pc.w_o:,} once, either way.",
            parameters_panel(pc, title="Parameters")) if not pc.grouped else LessonStep(
            "parameters", "Shared keys and values, fewer parameters",
            f"The {h} query heads still cost h·d·d/h = d·d = {d * d:,}, what one full-width head's W_q costs; but "
            f"this layer shares its keys and values among g = {pc.groups} group{'s' if pc.groups != 1 else ''}, "
            f"so W_k and W_v cost 2·g·d·d/h = {2 * pc.groups * d * dk:,} instead of 2·d·d = {2 * d * d:,}. With "
            f"W^O the layer has 2d²(1 + g/h) = {pc.total:,} parameters, not the article's 4d² = {pc.mha_total:,}.",
            parameters_panel(pc, title="Parameters")),
        LessonStep(
            "split", "Split the big matrix, or build each head directly?",
            f"You could also compute the full Q = X W_qᵀ ({n}×{d}) and cut its columns into {h} blocks of "
            f"{dk}. Block i is exactly Q^i, because those columns only ever use head i's rows of W_q. The "
            "tool does it both ways, for Q, K and V, and compares.",
            claim_panel(trace, split_diff)),
        LessonStep(
            "scores", "Scores, scaled",
            f"Each head now compares every query with every key: S^i = Q^i K^iᵀ, an N×N = {n}×{n} table "
            f"per head. The dot products are divided by √(d/h) = √{dk} = {np.sqrt(dk):.3g}, so their "
            "spread does not grow with the head width and the softmax does not saturate. Below, for the "
            f"query {_tok(trace, q)}, the keys each head scores highest."
            + (" (Designed heads use huge scales on purpose, so each rule wins by a wide margin.)"
               if designed else ""),
            query_table(trace, numbers, "scores")),
        LessonStep(
            "mask", "The causal mask",
            "A model that writes one token at a time must not peek at later tokens. The causal mask "
            "sets every score of a key after its query to −∞ before the softmax, so those keys get "
            "weight exactly 0. Mind the polarity: in PyTorch's nn.MultiheadAttention a boolean attn_mask "
            "means True = blocked, but F.scaled_dot_product_attention reads a boolean mask as "
            "True = may attend. This tool stores True = blocked. "
            + ("This run is causal." if trace.config.causal
               else "This run is bidirectional (no mask); add --causal to switch it on."),
            mask_grid(trace, a)),
        LessonStep(
            "softmax", "Softmax: scores become weights",
            "The softmax turns each row of scores into weights that are positive and add up to 1: the "
            "shares of that query's attention. A key scored far above the rest takes nearly all of it. "
            "The tool subtracts each row's largest score first, which changes nothing but keeps exp() "
            "from overflowing." + (f" Every head's whole weight matrix, as a heat map: {figures_at}/head-1.png … "
                                   f"head-{h}.png." if figures_at else "")
            + f" The same query {_tok(trace, q)}:",
            query_table(trace, numbers, "weights")),
        LessonStep(
            "weighted", "Weighted values",
            "Each head now blends the value vectors: head_i = A^i V^i. Row p of head_i is the average "
            "of all tokens' values, weighted by how much token p attends to each; it is N×d/h = "
            f"{n}×{dk}. For {_tok(trace, q)}:",
            values_table(trace, numbers)),
        LessonStep(
            "concat", "Concatenate",
            f"The head outputs ({h} of them, each {n}×{dk}) go side by side: H = [head_1 … head_h] is "
            f"N×d = {n}×{d} again, with head i in its own block of columns.",
            concat_table(trace)),
        LessonStep(
            "output", "W^O mixes the heads",
            f"Last, one d×d = {d}×{d} matrix W^O mixes the heads: O = H W^Oᵀ, N×d = {n}×{d}, the same "
            "shape as X, ready for the next layer. Each output column can draw on every head, so what "
            "one head found can be combined with what another found."
            + (" Here W^O is the identity, so each head's finding stays readable in its own block: the "
               "table reads back the word each head brought to each token." if designed else ""),
            output_table(trace, numbers, hide_rules)),
        LessonStep(
            "magnifiers", "Each head is its own magnifier",
            "Back to the magnifiers. For every query the table takes the key each head weights most"
            + (" and, when at least half of the rows agree, names the relation those keys follow (the previous "
               "token, itself, an earlier copy of the word, …). " if not hide_rules else
               "; the names are hidden, so say from the numbers and the heat maps what each head does. ")
            + narrate.closing_sentence(a, hide_rules=hide_rules)
            + f" On average the heads' rows differ by {a.mean_pairwise_js:.2f} bits "
            "(Jensen–Shannon divergence: 0 = identical, 1 = no overlap)."
            + (f" The pictures: {figures_at}/heads.png (all heads side by side) and "
               f"{figures_at}/magnifiers.png (each head as a magnifier over the text)." if figures_at else "")
            + _parse_note(a, hide_rules),
            _magnifiers_shows(trace, a, hide_rules)),
    ]
    if pairs:
        steps.append(one_vs_many_step(pairs, figures_at, hide_rules))
    return steps


def _parse_note(analysis: Analysis, hide_rules: bool) -> str:
    """For a sentence the grammar parses: what the second table of the magnifiers step holds."""
    if analysis.reading is None:
        return ""
    if hide_rules:
        return (" The second table: from each word of the grammar's parse, the token every head looks at most. "
                "Which head finds which relation?")
    return (" The second table is the reveal: from each word of the grammar's parse, its relation and noun, "
            "where every head looks (with its weight on that noun), and what each head learned in training.")


def _magnifiers_shows(trace: Trace, analysis: Analysis, hide_rules: bool) -> RenderableType:
    """The heads table, and for a sentence the grammar parses, what each head does from the parse's words."""
    from mhacli.render.terminal import grammar_panel, heads_panel

    heads = heads_panel(trace, analysis, title="Heads", hide_rules=hide_rules, sentence=False)
    parsed = grammar_panel(analysis, title="From the words of the parse", hide_rules=hide_rules)
    return heads if parsed is None else Group(heads, Text(""), parsed)


def _magnifier_limit(pairs: Sequence[TrainedPair]) -> str:
    from mhacli.measures.narrate import magnifier_limit

    said = magnifier_limit(pairs) if pairs else None
    return f" {said}" if said else ""


def one_vs_many_table(pairs: Sequence[TrainedPair]) -> RenderableType:
    """Per shipped pair and relation: the lone head's held-out accuracy against the h heads'."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("task")
    table.add_column("relation read out")
    table.add_column("1 head", justify="right", style=theme.STYLE_NUMBER)
    table.add_column("h heads", justify="right", style=theme.STYLE_NUMBER)
    table.add_column("parameters", justify="right")
    for pair in pairs:
        apart = pair.apart
        rows = list(apart.by_relation) or [("mean", apart.single_accuracy, apart.heads_accuracy)]
        if apart.by_relation:
            rows.append(("mean", apart.single_accuracy, apart.heads_accuracy))
        for k, (relation, single, heads) in enumerate(rows):
            table.add_row(apart.task if k == 0 else "", relation, percent(single), f"{percent(heads)} ({pair.heads})",
                          f"{apart.heads_parameters:,}" if k == 0 else "",
                          end_section=k == len(rows) - 1)
    return fitted_table(table)


def one_vs_many_step(pairs: Sequence[TrainedPair], figures_at: str | None = None,
                     hide_rules: bool = False) -> LessonStep:
    """The last stop: one head trained alone against h heads trained together, from the shipped records."""
    from dataclasses import replace

    from mhacli.measures.narrate import pair_sentence

    if hide_rules:  # the letters task's relations are the names the class is asked to find: overall only
        pairs = [replace(p, apart=replace(p.apart, by_relation=())) for p in pairs]
    said = " ".join(pair_sentence(p) for p in pairs)
    if not hide_rules:
        said += " " + " ".join(
            f"On '{p.apart.task}' the lone head learned {p.apart.single_relations[0]}; the {p.heads} heads learned "
            f"{', '.join(p.apart.heads_relations)}." for p in pairs)
    return LessonStep(
        "one-vs-many", "One head against many, trained apart",
        "Does splitting pay off? The package ships models trained twice by the same command, once with one "
        "head and once with several, with the same number of parameters. " + said
        + " A softmax row adds up to 1: one head has one row per query to spend on every relation."
        + (f" The picture: {figures_at}/one-vs-many.png." if figures_at else ""),
        one_vs_many_table(pairs))


def step_panel(step: LessonStep, number: int, total: int) -> RenderableType:
    """The narration box for one step (its title moves inside when the border is too short for it)."""
    return titled_panel(Text(step.narration), f"Step {number} of {total} · {step.title}",
                        border_style=theme.STYLE_FORMULA, padding=(0, 1))


def present(console: Console, steps: Sequence[LessonStep], pause: bool, start: int = 1,
            wait: Callable[[str], str] | None = None, closing: RenderableType | None = None) -> None:
    """Print the lesson from step ``start``; when ``pause``, wait for Enter (q quits) between steps."""
    total = len(steps)
    ask = wait or (lambda prompt: console.input(prompt))
    for number in range(start, total + 1):
        step = steps[number - 1]
        console.print(step_panel(step, number, total))
        if step.shows is not None:
            console.print(step.shows)
        if pause and number < total:
            try:
                reply = ask(f"[dim]Enter: step {number + 1} of {total} · q: quit[/dim] ")
            except EOFError:  # input closed: finish without stopping again
                pause = False
                console.print()
                continue
            if reply.strip().lower() in ("q", "quit", "exit"):
                return
        console.print()
    if closing is not None:
        console.print(closing, crop=False)  # its commands are whole lines (Command); the rest wraps to the width


def next_steps(trace: Trace, source: str, options: str, weights_name: str | None = None) -> RenderableType:
    """Where to go after the lesson: ``source`` and ``options`` as typed (without --weights); ``weights_name``:
    the shipped model's name when --weights named one ('grammar' runs as 'trained')."""
    c = trace.config
    weights = weights_name or c.weights
    other = "random" if weights == "designed" else "designed"
    shapes = f"mha shapes --tokens {trace.n_tokens} --d-model {c.d_model} --heads {c.heads}" + (
        " --causal" if c.causal else "")
    same = f"{source} {options}".strip()
    lines: list[RenderableType] = [Text("What next", style=theme.STYLE_TITLE)]
    for cmd, why in (
        (f"mha explain {same} --weights {weights}", "the same run as one walkthrough; heat maps in mha-output/"),
        (f"mha compare {same} --weights {weights}", "one wide head against these narrow ones"),
        (f"mha demo {same} --weights {other}", "the lesson again with the other weights"),
        (f"mha quiz {same} --weights {weights}", "homework about this run (--answers prints the answers)"),
        (shapes, "the shapes table for a slide, no text needed"),
    ):
        # a command to copy is one line, never wrapped by us (the terminal may fold it; a copy keeps it whole)
        lines += [Command(cmd), Text(f"      {why}", style=theme.STYLE_DIM)]
    return Group(*lines, Text(""))
