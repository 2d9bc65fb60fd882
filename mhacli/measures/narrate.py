"""The sentences the tool says about a run, each computed from that run's :class:`~mhacli.measures.analysis.Analysis`.

Plain strings, no Rich markup; every number and comparison comes from the analysis, so tests/test_narrate.py can
parse each sentence back. The wording follows what made the weights: random (accidents of the seed, never a
finding), designed (the rule checked against the head), trained (the relation measured). ``hide_rules=True``
names no rule, for the "name what each head does" activity.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mhacli.attention import evidence
from mhacli.measures.analysis import COPY, FIXED, NONE, Analysis, HeadAnalysis, ReadBack
from mhacli.grammar.grammar import NO_RELATION, RELATION_NAMES, Reading
from mhacli.grammar.score import DEFINITION, percent
from mhacli.attention.steps import efficiency_sentence, groups_sentence  # noqa: F401  (numpy-free words: mha shapes)
from mhacli.attention.tokenize import label
from mhacli.grammar.words import mapped_words

if TYPE_CHECKING:
    from mhacli.grammar.card import Card, Disagreement, Elsewhere
    from mhacli.measures.compare import TrainedApart
    from mhacli.grammar.grammar import Parse
    from mhacli.grammar.knockout import Knockout, Mismatch
    from mhacli.grammar.sweep import Sweep
    from mhacli.measures.lesson import TrainedPair
    from mhacli.grammar.score import Control, Crowd

RANDOM, DESIGNED, TRAINED, UNTRAINED = "random", "designed", "trained", "untrained"
RANDOM_LABEL = "random weights: these patterns mean nothing yet"


def kind_of(analysis: Analysis) -> str:
    """random, designed or trained: how the narration treats the run's weights."""
    if analysis.kind in (RANDOM, DESIGNED):
        return analysis.kind
    return TRAINED


def measured_when(analysis: Analysis) -> str:
    """When a model's head names were measured: "before training" for its layer at step 0, else "in training"."""
    return "before training" if analysis.kind == UNTRAINED else "in training"


_PLURAL = {"query": "queries"}


def _count(n: int, word: str) -> str:
    """'1 row', '6 rows', '2 queries'."""
    return f"{n:,} " + (word if n == 1 else _PLURAL.get(word, word + "s"))


def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _heads(heads: Sequence[int]) -> str:
    """'head 2', 'heads 2 and 3', 'heads 1, 2 and 4' (1-based in the text)."""
    return ("head " if len(heads) == 1 else "heads ") + _listed([str(i + 1) for i in heads])


def _pct(x: float) -> str:
    return f"{x:.0%}"


def stuck_phrase(analysis: Analysis, stuck: Sequence[int]) -> str:
    """'heads 1 and 2 put 12 of 13 rows each on one token': collapsed heads, with the rows that follow the
    token (a head is collapsed from :data:`evidence.NAME_SHARE` of its rows on, so "every" only when all do)."""
    counts = [(analysis.heads[i].pattern_rows, analysis.heads[i].pattern_of) for i in stuck]
    verb = "puts" if len(stuck) == 1 else "put"
    if len(set(counts)) == 1:
        rows, of = counts[0]
        said = "every row" if rows == of else f"{rows} of {_count(of, 'row')}" + (" each" if len(stuck) > 1 else "")
        return f"{_heads(stuck)} {verb} {said} on one token"
    each = _listed([f"head {i + 1} {rows} of {_count(of, 'row')}" for i, (rows, of) in zip(stuck, counts)])
    return f"{each} on one token"


def relation_name(s: HeadAnalysis, tokens: Sequence[str]) -> str:
    """The head's pattern in words: 'previous token', 'the token “dog” (position 1)', 'no single relation'."""
    if s.pattern == NONE:
        return "no single relation"
    if s.pattern == FIXED and s.pattern_key is not None:
        return f"the token “{label(tokens[s.pattern_key], 16)}” (position {s.pattern_key})"
    if s.pattern == COPY:
        return "an earlier copy of its own word"
    return s.pattern


def short_relation(s: HeadAnalysis, tokens: Sequence[str]) -> str:
    """The head's pattern for a table cell: 'previous token', 'token “sat” (pos 2)', 'earlier copy', 'none'."""
    if s.pattern == FIXED and s.pattern_key is not None:
        return f"token “{label(tokens[s.pattern_key], 12)}” (pos {s.pattern_key})"
    return s.pattern


def pattern_phrase(s: HeadAnalysis, tokens: Sequence[str]) -> str:
    """'previous token on 10 of 10 rows', or for no pattern 'no single relation (closest: itself on 3 of 11 rows)'."""
    if s.pattern != NONE:
        return f"{relation_name(s, tokens)} on {s.pattern_rows} of {_count(s.pattern_of, 'row')}"
    if s.best.name == NONE or s.best.rows == 0:
        return "no single relation"
    closest = replace(s, pattern=s.best.name, pattern_key=s.best.key)
    return (f"no single relation (closest: {relation_name(closest, tokens)} on {s.best.rows} of "
            f"{_count(s.best.of, 'row')})")


def uniform_caution(analysis: Analysis) -> str | None:
    """The one line for a run whose heads are all near chance (:mod:`evidence`), whatever made the weights."""
    if not analysis.close_to_uniform:
        return None
    rows = sum(s.counted_rows for s in analysis.heads)
    unpicked = rows - sum(s.picked_rows for s in analysis.heads)
    top = sum(s.mean_top_weight for s in analysis.heads) / max(analysis.num_heads, 1)
    return (f"{evidence.CLOSE_TO_UNIFORM} (on {unpicked} of {_count(rows, 'row')} across the heads no key "
            f"stands clear of chance; top weight {_pct(top)} on average, {_pct(analysis.mean_chance)} for a "
            "uniform row)")


def cautions(analysis: Analysis) -> list[str]:
    """What a reader must know before trusting any pattern of this run: near-uniform weights, a model used
    outside what it saw.  Shown on the figures, the page and in the walkthrough, not only on stderr."""
    out = [c for c in (uniform_caution(analysis), analysis.caution, mapped_words(analysis.mapped)) if c]
    stuck = analysis.collapsed()
    if stuck:
        out.append(f"{stuck_phrase(analysis, stuck)} here: not counted as a pattern")
    return out


def weights_label(kind: str, rules: Sequence[str] | None = None, hide_rules: bool = False,
                  analysis: Analysis | None = None) -> str:
    """The honest label for a figure or the page: which weights made it, and what that means.

    With the run's ``analysis``, its cautions (:func:`cautions`) follow, so a figure of near-uniform
    weights says so whatever made them."""
    said = _weights_label(kind, rules, hide_rules)
    more = cautions(analysis) if analysis is not None else []
    if more and kind == RANDOM and analysis is not None and analysis.close_to_uniform:
        said = "random weights"  # the caution says the rest
    return "; ".join([said, *more])


def _weights_label(kind: str, rules: Sequence[str] | None, hide_rules: bool) -> str:
    if kind == RANDOM:
        return RANDOM_LABEL
    if kind == DESIGNED:
        if hide_rules or not rules:
            return "designed weights: each head follows a rule built by hand (rules hidden: name them)"
        return "designed weights: " + "; ".join(f"head {i + 1}, {r}" for i, r in enumerate(rules))
    if kind == UNTRAINED:  # a trained model's layer before its first step: the caution after it says the rest
        return "untrained weights (before training): what each head does is measured, and nothing was learned"
    if hide_rules:
        return ("trained weights: what each head does is measured, not built (hidden: name it, or say that a "
                "head follows no single relation)")
    return "trained weights: each head's relation is measured from its weights"


def head_caption(analysis: Analysis, i: int, hide_rules: bool = False, *, stand_alone: bool = True) -> str:
    """One line under head ``i`` (0-based): what its per-query argmax follows, in the run's words, e.g.
    ``head 2: previous token on 4 of 10 rows (random weights: this means nothing yet)``. ``stand_alone=False``
    leaves out the random-weights remark, for a figure whose weights line already says it.
    """
    s = analysis.heads[i]
    kind = kind_of(analysis)
    head = f"head {i + 1}"
    if hide_rules:
        return f"{head}: its top key takes {_pct(s.mean_top_weight)} of a row on average; {s.describe()}"
    if s.near_chance:
        what = (f"close to uniform, no relation (no key clear of chance on {s.counted_rows - s.picked_rows} of "
                f"{_count(s.counted_rows, 'row')}; top weight {_pct(s.mean_top_weight)} on average, "
                f"{_pct(analysis.mean_chance)} for a uniform row)")
    elif i in analysis.collapsed():
        what = (stuck_phrase(analysis, [i]).removeprefix(f"head {i + 1} puts ")
                + ", outside what the model saw (not a pattern)")
    else:
        what = pattern_phrase(s, analysis.tokens)
    if kind == RANDOM and stand_alone:
        return f"{head}: {what} (random weights: this means nothing yet)"
    if kind == DESIGNED and analysis.rules and i < len(analysis.rules):
        return f"{head} (rule: {analysis.rules[i]}): {what}"
    return f"{head}: {what}"


def agreement_sentence(analysis: Analysis) -> str:
    """How much the most alike pair of heads agrees: 'heads 2 and 3 agree on 5 of 6 queries'."""
    pair = next(iter(analysis.pairs()), None)  # the pair that agrees most
    total = analysis.counted_rows
    if pair is None:
        return "one head: nothing to agree with"
    rows = int(analysis.agreement_rows[pair])
    if rows == 0:
        return f"no two heads pick the same top key on any of the {_count(total, 'query')}"
    return f"{_heads(pair)} agree on {rows} of {_count(total, 'query')}"


def closing_sentence(analysis: Analysis, hide_rules: bool = False) -> str:
    """The demo's last words about the heads: how many patterns, and which heads look at the same places."""
    h = analysis.num_heads
    kind = kind_of(analysis)
    if analysis.close_to_uniform:
        return (f"{_count(h, 'head')}, no named pattern: {uniform_caution(analysis)}"
                + (", as random weights usually are." if kind == RANDOM else "."))
    patterns = analysis.patterns()
    stuck = analysis.collapsed()
    unnamed = [s.head for s in analysis.heads if s.pattern == NONE]
    agree = agreement_sentence(analysis)
    pair = next(iter(analysis.pairs()), None)  # the pair that agrees most
    half = pair is not None and 2 * int(analysis.agreement_rows[pair]) > analysis.counted_rows
    found = {0: "no named pattern", 1: "1 named pattern"}.get(len(patterns), f"{len(patterns)} different patterns")
    first = [next(s for s in analysis.heads if (s.pattern, s.pattern_key) == p) for p in patterns]
    names = ", ".join(relation_name(s, analysis.tokens) for s in first)
    parts = [f"{_count(h, 'head')}, {found}" + (f" ({names})" if names and not hide_rules else "")]
    if unnamed:
        parts.append(f"{_heads(unnamed)} follow{'s' if len(unnamed) == 1 else ''} no single relation")
    if stuck:
        parts.append(f"{stuck_phrase(analysis, stuck)}, outside what the model saw (not counted)")
    text = "; ".join(parts) + f"; {agree}"
    if kind == RANDOM:
        if half:
            return text + ": with random weights heads often share a popular token."
        return text + ": with random weights these patterns are accidents of the seed, not findings."
    if h == 1:
        return text + "."
    if len(patterns) == h and not stuck:
        if all(s.pattern == FIXED for s in analysis.heads):  # one token from every row: a place, not a relation
            return text + ": each head looks at one token of its own from every row."
        return text + ": each head follows a relation of its own."
    if half:
        return text + ": those heads look at the same places on most queries."
    return text + "."


def compare_conclusion(analysis: Analysis) -> str:
    """``mha compare``'s last words: capacity (how many places come back per token), not sharpness.

    Needs ``analysis.readback`` (:func:`~mhacli.measures.analysis.analyse` with ``single``).
    """
    back = analysis.readback
    if back is None:
        raise ValueError("compare_conclusion needs an analysis made with the single head (analyse(trace, single))")
    h, rows = analysis.num_heads, back.rows
    if rows == 0:
        return "With one token there is nothing to choose between: every head and the single head look at it."
    several = back.rows_with_several
    if analysis.close_to_uniform:
        said = str(uniform_caution(analysis))
        return (f"{said[0].upper()}{said[1:]}. The heads bring back 2 or more different tokens clear of chance on "
                f"{several} of {_count(rows, 'token')}. What holds for any weights is that {_count(h, 'head')} "
                f"return {h} blends per token and one head one; here most are close to an even average of all the "
                "tokens.")
    text = (f"On {several} of {_count(rows, 'token')} the {_count(h, 'head')} bring back 2 or more different "
            f"tokens ({back.mean_distinct:.1f} on average). Each head gives its own top token "
            f"{_pct(back.mean_head_weight)} of its row, so together the heads bring back "
            f"{back.mean_heads_mass:.2f} rows' worth of weight (at most {h}); the single head has one row to "
            f"share among those tokens and gives them {back.mean_single_mass:.2f} of it (at most 1).")
    if h == 1:
        return ("With 1 head, the 'heads' and the single head are the same magnifier: "
                f"its top key takes {_pct(back.mean_head_weight)} of a row on average.")
    if kind_of(analysis) == RANDOM:
        return text + (" With random weights which tokens come back is an accident of the seed; "
                       f"what holds for any weights is that {h} heads return {h} blends per token and one head one.")
    return text + f" {h} heads can bring back {h} different things per token; one softmax row has to share its 100 %."


def apart_sentence(apart: TrainedApart, heads: int) -> str:
    """``mha compare --weights trained``: one head trained alone against the h heads, from their training records."""
    same = apart.single_parameters == apart.heads_parameters
    size = (f"the same {apart.single_parameters:,} parameters" if same else
            f"{apart.single_parameters:,} and {apart.heads_parameters:,} parameters")
    text = (f"Trained apart on the same task ({apart.task}) with {size}: one head alone reached "
            f"{percent(apart.single_accuracy)} ({DEFINITION}), the {_count(heads, 'head')} together "
            f"{percent(apart.heads_accuracy)}.")
    if apart.single_relations and apart.heads_relations:
        text += (f" The lone head learned to follow {_learned(apart.single_relations)}; the "
                 f"{_count(heads, 'head')} learned {_learned(apart.heads_relations)}.")
    if apart.worst is not None:  # where the lone head falls shortest, relation by relation
        name, alone, together = apart.worst
        if together - alone >= 0.01:
            text += (f" It falls shortest on {name}: {alone:.1%} against {together:.1%}.")
    if apart.crowds is not None and apart.heads_accuracy > apart.single_accuracy:
        text += " " + crowd_sentence(apart.crowds, heads)
    if apart.control is not None:
        text += " " + control_sentence(apart.control, apart.gap)
    # a head below the naming share learned none; one its card names only "partly" is not one of its own either
    named = [r for r in apart.heads_relations if r != NO_RELATION and not r.startswith("partly ")]
    distinct = len(set(named)) == len(named) == heads > 1
    if distinct and apart.heads_accuracy > apart.single_accuracy:
        text += (f" Each of the {heads} heads follows a relation of its own; one head has one softmax row per "
                 "query to spend on all of them.")
    return text


def _learned(relations: Sequence[str]) -> str:
    """``previous token and next token``; a grammar relation by its long name; heads that learned none, counted."""
    from mhacli.grammar.card import relation_words  # the grammar's relations and the card's rows, by their long names

    named = [relation_words(r) for r in relations if r != NO_RELATION]
    none = len(relations) - len(named)
    if none:
        named.append(("no clear relation" if none == 1 else f"no clear relation ({none} heads)") if not named
                     else f"no clear relation in {_count(none, 'head')}")
    return _listed(named)


def window_sentence(analysis: Analysis) -> str | None:
    """For a windowed view: how much attention falls outside it (None when the view is not windowed)."""
    if analysis.window is None:
        return None
    start, stop = analysis.window
    outside = [s.outside_window or 0.0 for s in analysis.heads]
    worst = max(range(len(outside)), key=lambda i: outside[i])
    mean = sum(outside) / len(outside)
    return (f"Showing tokens {start}–{stop - 1} of {len(analysis.tokens)}: on average {_pct(mean)} of the shown "
            f"rows' attention falls outside the window (head {worst + 1}: {_pct(outside[worst])}).")


def parse_sentence(reading: Reading) -> str:
    """``The grammar parses this sentence: subject: animal · object: street · tired describes: animal.``"""
    return f"The grammar parses this sentence: {reading.parse.describe()}."


def reading_lines(reading: Reading) -> list[str]:
    """Per query of the parse: which heads look at the noun the relation points to, with their weights."""
    t = [f"“{label(w)}”" for w in reading.parse.tokens]
    lines = []
    for look in reading.looks:
        answered = look.answered  # at least half its row on the true key (evidence.ANSWER_SHARE)
        truth = f"from {t[look.query]} ({RELATION_NAMES[look.relation]}, {t[look.key]})"
        if not answered:
            best = int(np.argmax(look.weight))
            lines.append(f"{truth}: no head puts half its weight on {t[look.key]} (at most "
                         f"{_pct(look.weight[best])}, head {best + 1}).")
            continue
        said = ", ".join(f"head {i + 1} {_pct(look.weight[i])}" for i in answered)
        lines.append(f"{truth}: {said}.")
    return lines


def parse_queries_sentence(reading: Reading, queries: Sequence[int], hide_rules: bool = False) -> str | None:
    """Why a figure shows these queries, when they are the parse's own: what each query's relations point to
    (``hide_rules``: only the queries, since the relations are what the class is to name).

    None when some query is not one of the parse's (the figure then says why it chose them by the measures).
    """
    if not queries or any(q not in reading.queries for q in queries):
        return None
    t = reading.parse.tokens
    parts = []
    for q in queries:
        said = ", ".join(f"{look.relation} “{label(t[look.key], 12)}”" for look in reading.looks if look.query == q)
        parts.append(f"“{label(t[q], 12)}” (position {q})" + ("" if hide_rules else f": {said}"))
    return "Queries chosen from the grammar's parse of this sentence: " + "; ".join(parts) + \
        ". Give --query to pick another."


def readback_note(back: ReadBack, rows: int) -> str:
    """Under the read-back table: what a cell means, and "mostly" only as far as the shown weights support it."""
    shown = np.concatenate([np.asarray(back.head_weights)[:, :rows].ravel(),
                            np.asarray(back.single_weights)[:rows]])  # every cell of the table
    under = int((shown < evidence.MOSTLY).sum())  # "mostly" from half a row on
    what = "Each cell: the token that row weights most, and its weight."
    if under == 0:
        return (what + " Every weight shown is over half its row, so a head's output for a token is mostly that "
                "token's value; h heads bring back h of them, one head one.")
    return (what + f" A head's output for a token is a weighted average of value rows; here {under} of the "
            f"{shown.size} weights shown are under half their row (lowest {shown.min():.0%}), so that token is its "
            "largest share, not most of it. h heads make h such averages per token, one head one.")


def pair_sentence(pair: TrainedPair) -> str:
    """The lesson's sentence for one pair, every number from the two training records."""
    h, apart = pair.heads, pair.apart
    same = (f"{apart.heads_parameters:,} parameters each" if apart.single_parameters == apart.heads_parameters
            else f"{apart.single_parameters:,} and {apart.heads_parameters:,} parameters")
    said = (f"Task '{apart.task}', {same}: one head alone reached "
            f"{percent(apart.single_accuracy)} ({DEFINITION}), {h} heads together {percent(apart.heads_accuracy)}")
    if apart.by_relation:
        said += " (" + ", ".join(f"{r} {s:.1%} against {m:.1%}" for r, s, m in apart.by_relation) + ")"
    said += "."
    if apart.gap <= 0:
        return said + " Here the heads gain nothing over the lone head."
    worst = apart.worst
    if worst is not None and worst[2] - worst[1] > 0:
        said += (f" The gap is {apart.gap:.1f} points overall, widest on {worst[0]} "
                 f"({100 * (worst[2] - worst[1]):.1f} points).")
    else:
        said += f" The gap is {apart.gap:.1f} points."
    said += f" {crowd_sentence(apart.crowds, h)}" if apart.crowds is not None else ""
    return said + (f" {control_sentence(apart.control, apart.gap)}" if apart.control is not None else "")


def control_sentence(control: "Control", gap: float) -> str:
    """The control beside a one-vs-many result: the same training with positions in the values, its gap and its
    lone head's verb accuracy by nouns of a class (``gap``: the shown pair's, in points)."""
    split = _by_crowd(control.crowd)
    return (f"The control, the same training (seed {control.seed}) with positions put back into the values "
            f"(V from X = E + P, not E): one head {percent(control.single)}, {control.head_count} heads "
            f"{percent(control.heads)}, a gap of {control.gap:.1f} points against {gap:.1f}; its lone head at the "
            f"verb: {split} with one, two and three nouns of the class."
            + (" Most of the gap, then, comes from values without positions, in this grammar and this training."
               if round(control.gap, 1) < round(gap, 1) / 2 else ""))  # decided on the two gaps as printed


def cause_line(pair: "TrainedPair") -> str:
    """One-vs-many.png's line under a grammar pair's numbers: the lone head by nouns of a class, and the control
    ("" for a pair without them)."""
    apart = pair.apart
    if apart.crowds is None:
        return ""
    said = f"1 head at the verb, by nouns of the asked noun's class: {_by_crowd(apart.crowds[0])}"
    c = apart.control
    if c is not None:
        said += (f"\nwith positions in the values (the control): 1 head {percent(c.single)} → {percent(c.heads)}, "
                 f"gap {c.gap:.1f} points (here {apart.gap:.1f})")
    return said


def magnifier_limit(pairs: "Sequence[TrainedPair]") -> str | None:
    """Where the magnifier analogy stops, from the shipped pairs' own weights: a trained lone head need not be
    focused (None when every lone head is at least as focused as its pair's heads)."""
    for pair in reversed(pairs):  # the last pair first: the grammar's, the lesson's sentence
        alone, each = pair.single_entropy, pair.heads_entropy  # bits, mean over rows
        if each and alone > max(each):
            return (f"The analogy has a limit: a trained head need not be focused. Trained alone on the "
                    f"{pair.apart.task} task, the lone head of step 15 spreads its rows over its text (mean entropy "
                    f"{alone:.2f} bits) where each of its {pair.heads} heads is sharper ({min(each):.2f}–"
                    f"{max(each):.2f} bits).")
    return None


def _by_crowd(crowd: "Crowd", counted: bool = False) -> str:
    """'one 95%, two 34%': a lone head's verb accuracy by nouns of a class (``counted``: with the queries)."""
    return ", ".join(f"{c} {percent(a)}" + (f" ({n:,} queries)" if counted else "")
                     for c, a, n in zip(("one", "two", "three"), crowd.accuracy, crowd.queries) if n)


def crowd_sentence(crowds: "tuple[Crowd, Crowd]", heads: int) -> str:
    """Where the lone head loses, measured: its verb accuracy by how many nouns share the asked noun's class."""
    alone, many = crowds
    said = _by_crowd(alone, counted=True)
    them = ", ".join(percent(a) for a, n in zip(many.accuracy, many.queries) if n)
    return (f"Where the lone head loses, measured at the verb by how many of the sentence's nouns share the class "
            f"of the noun asked for: {said}; the {heads} heads {them}. One softmax row has to tell apart nouns "
            "that only their roles distinguish.")


def _role(parse: "Parse", key: int) -> str:
    """A key of the parse by its role where it has one: 'the object “street”', 'itself', else '“too”'."""
    t = parse.tokens
    word = f"“{label(t[key], 12)}”"
    if key == parse.subject:
        return f"the subject {word}"
    if key == parse.object:
        return f"the object {word}"
    return word


def disagreement_sentence(d: "Disagreement", parse: "Parse") -> str:
    """``head 2, subject in training, looks at the object “street” here (72% from “cross”).``"""
    t = parse.tokens
    name = f"head {d.head + 1}, {d.name} in training"
    where = f"“{label(t[d.query], 12)}”"
    if not d.picked:
        return (f"{name}, picks no key from {where} here (its top weight {_pct(d.weight)} is not clear of "
                "chance).")
    looked = "itself" if d.top == d.query else _role(parse, d.top)
    return f"{name}, looks at {looked} here ({_pct(d.weight)} from {where}), not {_role(parse, d.key)}."


def learned_title(rule: str) -> str | None:
    """The few words of a head's card label (``subject (92% trained)``), or None for any other label."""
    from mhacli.grammar.card import TITLE_SEPARATOR

    title, _, evidence_part = rule.partition(TITLE_SEPARATOR)
    return title if evidence_part and "held-out queries" in evidence_part else None


def trained_names_note(analysis: Analysis) -> str | None:
    """For a grammar model's run: the heads' names from training beside step 5's sentence-level column, so the
    class sees which description is this sentence's and which is the card's (None for any other run)."""
    from mhacli.grammar.grammar import short_name

    if analysis.reading is None or not analysis.rules:
        return None
    names = [learned_title(r) or short_name(r) or NO_RELATION for r in analysis.rules]
    listed = "; ".join(f"head {i + 1}: {n}" for i, n in enumerate(names))
    return ("“top key follows” is where each head looks on this sentence, by position; the names measured "
            f"{measured_when(analysis)} are another thing ({listed}; section 6 compares them with this sentence).")


def mismatch_sentence(m: "Mismatch") -> str:
    """Where the card and the knockout part, in one sentence, both numbers given."""
    from mhacli.grammar.card import short_name, whole_percent

    row = short_name(m.row)
    across = (f", which reaches {'below' if m.cost >= evidence.KNOCKOUT_POINTS else 'above'} "
              f"{evidence.KNOCKOUT_POINTS:.0f}") if m.unsettled else ""
    ends = f" (95% interval {m.interval}{across})" if m.interval else ""
    if m.named:
        return (f"head {m.head + 1} is known by {row} ({whole_percent(m.rate)}% trained), yet switching it off costs "
                f"{row} only {evidence.points(m.cost)} points{ends}: other heads carry it too.")
    return (f"switching off head {m.head + 1} costs {row} {evidence.points(m.cost)} points{ends}, though its card "
            f"does not name it for {row} (it finds that noun on {whole_percent(m.rate)}% of the queries).")


def sweep_sentence(s: "Sweep") -> str:
    """The sweep's spread in one sentence: the gap's mean, range and sign over the seeds."""
    most, fewest = max(s.heads), min(s.heads)
    spread = s.spread
    ahead = int((s.gap > 0).sum())
    return (f"Over {_count(len(s.seeds), 'seed')}, {_count(most, 'head')} are {spread['mean']:.1f} points above "
            f"{_count(fewest, 'head')} on average (mean over relations; from {spread['min']:.1f} to "
            f"{spread['max']:.1f}, sd {spread['sd']:.1f}); ahead on {ahead} of {len(s.seeds)}.")


def card_row_name(row: str) -> str:
    """A card row in a few words (``subject``, ``he/she → noun``)."""
    from mhacli.grammar.card import short_name

    return short_name(row)


def card_rule_sentence(card: "Card") -> str:
    """How the card names heads, with its thresholds and what it was measured on."""
    return (f"A cell is the share of a relation's queries whose top key, clear of chance, is the relation's noun "
            f"per the grammar's parse, over its 95% interval; {card.caption()}. A head is named from "
            f"{_pct(evidence.CARD_NAME_RATE)} with the interval's lower end at {_pct(evidence.NAME_SHARE)} or "
            f"more, \"partly\" from {_pct(evidence.NAME_SHARE)}, unnamed below" + _baseline_rule(card) + "."
            + ("" if card.always is None else f" In each cell, {CARD_BASES_KEY}."))


def _baseline_rule(card: "Card") -> str:
    """The baselines a name must beat, and the rows that only repeat a role, for a card that measured them."""
    if card.always is None or card.offset is None:
        return ""
    said = (f"; and only when that lower end is a quarter of the way ({_pct(evidence.PICK_LIFT)}) from each "
            "baseline to certain: how often the head looks at that role's noun from every word (always looks "
            "there) and the best fixed positional offset (Clark et al. 2019)")
    repeated = [(row, role) for row, role in zip(card.rows, card.repeats) if role is not None]
    if repeated:
        rows = " and ".join(f"{row} → {role}" for row, role in repeated)
        said += (f". Every scored query of {rows} points to that role's noun (a referent is scored only where "
                 "one noun fits its class), so those rows repeat the role's row: they cannot show a lookup of "
                 "their own")
    return said


def card_outline_note(card: "Card | None" = None) -> str:
    """What the card figure's outlines mean, and its cells' baselines when the card measured them."""
    said = (f"outlined: named ({_pct(evidence.CARD_NAME_RATE)} and over, the interval's lower end at "
            f"{_pct(evidence.NAME_SHARE)} or more")
    if card is None or card.always is None or card.offset is None:
        return said + ")"
    return said + (f" and {_pct(evidence.PICK_LIFT)} of the way from each baseline to certain); " + CARD_BASES_KEY)


#: What a card cell's third line says (the table's and card.png's): the two baselines its name must beat.
CARD_BASES_KEY = "under each interval, vs always looks there / best offset (%)"


def card_bases(card: "Card") -> tuple[tuple[str, ...], ...]:
    """(R, h) each card cell's baselines as its third line prints them, ``vs 98/41`` (whole percent, rounded down
    as the rates are), or "" for a card that did not measure them."""
    from mhacli.grammar.card import whole_percent

    if card.always is None or card.offset is None:
        return tuple(("",) * card.heads for _ in card.rows)
    return tuple(tuple(f"vs {whole_percent(card.always[r, i])}/{whole_percent(card.offset[r])}"
                       for i in range(card.heads)) for r in range(len(card.rows)))


def knockout_rule_sentence() -> str:
    """What the knockout columns mean."""
    from mhacli.grammar.knockout import BOOTSTRAP

    return ("Off: points of held-out accuracy the relation loses when that head's output is zeroed before W_o "
            f"(its whole contribution to O); {evidence.KNOCKOUT_POINTS:.0f} points or more is a cost worth a word. "
            f"Under each cost worth a word, or whose interval reaches {evidence.KNOCKOUT_POINTS:.0f}: its 95% "
            f"interval in points lost (the held-out sentences resampled {BOOTSTRAP:,} times).")


def knockout_sentences(card: "Card", knock: "Knockout") -> list[str]:
    """Every place the card and the knockout disagree, or one sentence saying they agree."""
    from mhacli.grammar.knockout import mismatches

    found = mismatches(card, knock)
    if not found:
        return ["Card and knockout agree: each named head's knockout costs its relation "
                f"{evidence.KNOCKOUT_POINTS:.0f} points or more, and no other head's costs any relation that much."]
    return [mismatch_sentence(m) for m in found]


def card_sentence_lines(card: "Card", parse: "Parse", weights: np.ndarray, causal: bool = False) -> list[str]:
    """On the sentence shown: each place a head's training name and what it does here part; the named heads that
    find their noun at every query of their row; and those whose row the sentence does not ask."""
    from mhacli.grammar.card import disagreements, elsewhere, row_keys, short_name

    named = [i for i in range(card.heads) if card.best(i)[1] != evidence.UNNAMED]
    if not named:
        return ["No head is named on the card, so there is nothing to check on this sentence."]
    found = disagreements(card, parse, weights, causal)
    said = [disagreement_sentence(d, parse) for d in found]
    missed = {d.head for d in found}
    asked = [i for i in named if row_keys(parse, card.rows[card.best(i)[0]])]
    agree = [i for i in asked if i not in missed]
    idle = [f"head {i + 1}'s row ({short_name(card.rows[card.best(i)[0]])})" for i in named if i not in asked]
    if agree:
        said.append(f"On this sentence {_heads(agree)} find{'s' if len(agree) == 1 else ''} the noun "
                    f"{'its' if len(agree) == 1 else 'their'} card row names, clear of chance, at every query of it.")
    if idle:
        said.append(f"This sentence has no query of {_listed(idle)}.")
    said += [elsewhere_sentence(d, parse) for d in elsewhere(card, parse, weights, causal)]
    return said


def elsewhere_sentence(e: "Elsewhere", parse: "Parse") -> str:
    """``head 2, recipient in training, finds the object noun “street” here (100% from “cross”).``"""
    from mhacli.grammar.card import short_name

    name = f"head {e.head + 1}, {e.name} in training"
    return (f"{name}, finds the {short_name(e.found)} noun “{label(parse.tokens[e.key], 12)}” here "
            f"({_pct(e.weight)} from “{label(parse.tokens[e.query], 12)}”).")