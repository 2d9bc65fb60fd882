"""Every sentence about a run states only what its measures say: each number and comparison is parsed back."""

from __future__ import annotations

import math
import re

import pytest

import mhacli
from mhacli.pipeline import with_lesson

from mhacli.measures import narrate
from mhacli.measures.analysis import NONE, RELATIONS, analyse
from mhacli.measures.compare import single_head
from mhacli.attention.designed import RULE_ORDER
from traced import run
from mhacli.attention.tokenize import label
from mhacli.io.samples import list_samples, load_sample

CASES = [(s.name, w) for s in list_samples() for w in ("random", "designed", "trained")]
NAMES = [r for r in RELATIONS] + list(RULE_ORDER) + ["earlier copy of its own word", "the token"]


def _analysis(sample, weights, **options):
    trace = mhacli.run(load_sample(sample).text, weights=weights, **options)  # "trained": the shipped model
    return trace, analyse(trace, single_head(trace), window=min(5, trace.n_tokens))


def _pct(x):
    return round(100 * x)


@pytest.mark.parametrize("sample,weights", CASES)
def test_each_caption_states_the_heads_measures(sample, weights):
    trace, a = _analysis(sample, weights)
    for i, s in enumerate(a.heads):
        text = narrate.head_caption(a, i)
        assert text.startswith(f"head {i + 1}")
        assert ("random weights" in text) == (weights == "random")
        m = re.search(r"(?:: |closest: )(.+?) on (\d+) of (\d+) rows", text)
        if s.near_chance:  # the evidence rule: a head this close to uniform gets no relation's name
            said = re.search(r"close to uniform, no relation \(no key clear of chance on (\d+) of (\d+) rows?; "
                             r"top weight (\d+)% on average, (\d+)% for a uniform", text)
            assert said and [int(x) for x in said.groups()] == [
                s.counted_rows - s.picked_rows, s.counted_rows, _pct(s.mean_top_weight), _pct(a.mean_chance)], text
            assert 2 * s.picked_rows < s.counted_rows and s.describe() in ("spread", "nearly uniform")
        elif s.pattern != NONE:
            assert m and (int(m[2]), int(m[3])) == (s.pattern_rows, s.pattern_of), text
            assert "no single relation" not in text
            where = re.search(r"\(position (\d+)\)", text)
            assert (where and int(where[1])) == (s.pattern_key if s.pattern_key is not None else None), text
        else:
            assert "no single relation" in text
            if m:
                assert (int(m[2]), int(m[3])) == (s.best.rows, s.best.of) and s.best.share < 0.5
        if weights == "designed":
            assert f"(rule: {trace.rules[i]})" in text
        hidden = narrate.head_caption(a, i, hide_rules=True)
        assert not any(name in hidden for name in NAMES), hidden
        assert int(re.search(r"takes (\d+)%", hidden)[1]) == _pct(s.mean_top_weight)


def _heads_named(text):
    """'head 2' -> [1]; 'heads 1, 3 and 4' -> [0, 2, 3]."""
    return [int(x) - 1 for x in re.findall(r"\d+", text)]


@pytest.mark.parametrize("hide", [False, True])
@pytest.mark.parametrize("sample,weights", CASES)
def test_the_closing_sentence_counts_patterns_and_names_the_most_agreeing_pair(sample, weights, hide):
    trace, a = _analysis(sample, weights)
    text = narrate.closing_sentence(a, hide_rules=hide)
    h = a.num_heads
    assert text.startswith(f"{h} heads, ")
    if a.close_to_uniform:  # every head near chance: one verdict, no pattern counted, no pair compared
        assert text.startswith(f"{h} heads, no named pattern: these weights are close to uniform"), text
        assert ("random weights" in text) == (weights == "random") and "agree" not in text
        return
    count = re.match(r"\d+ heads, (\d+|no|1) (different|named) patterns?", text)
    found = {"no": 0}.get(count[1], None)
    assert (int(count[1]) if found is None else found) == len(a.patterns())
    none = re.search(r"(heads? [\d, and]+) follows? no single relation", text)
    assert (_heads_named(none[1]) if none else []) == [s.head for s in a.heads if s.pattern == NONE]
    pair = re.search(r"heads (\d+) and (\d+) agree on (\d+) of (\d+) queries", text)
    best = int(a.agreement_rows[a.pairs()[0]])
    if pair:
        a_, b_, rows, total = (int(x) for x in pair.groups())
        assert rows == a.agreement_rows[a_ - 1, b_ - 1] == best > 0 and total == a.counted_rows
        assert ("same places on most queries" in text or "popular token" in text) == (2 * rows > total)
    else:
        assert best == 0 and "no two heads pick the same top key" in text
    assert ("random weights" in text) == (weights == "random")
    if hide:
        assert not any(name in text for name in NAMES), text


@pytest.mark.parametrize("sample,weights", CASES)
def test_compare_speaks_of_capacity_with_the_read_back_numbers(sample, weights):
    _, a = _analysis(sample, weights)
    back = a.readback
    text = narrate.compare_conclusion(a)
    if a.close_to_uniform:
        assert text.startswith("These weights are close to uniform: no head follows a relation"), text
        m = re.search(r"different tokens clear of chance on (\d+) of (\d+) tokens?", text)
        assert back is not None and m and (int(m[1]), int(m[2])) == (back.rows_with_several, back.rows), text
        return
    m = re.search(r"On (\d+) of (\d+) tokens the (\d+) heads bring back 2 or more different tokens "
                  r"\((\d+\.\d) on average\)\. Each head gives its own top token (\d+)% of its row, so together "
                  r"the heads bring back (\d+\.\d\d) rows' worth of weight \(at most (\d+)\); the single head has "
                  r"one row to share among those tokens and gives them (\d+\.\d\d) of it \(at most 1\)", text)
    assert m, text
    assert (int(m[1]), int(m[2]), int(m[3])) == (back.rows_with_several, back.rows, a.num_heads)
    assert m[4] == f"{back.mean_distinct:.1f}" and int(m[5]) == _pct(back.mean_head_weight)
    assert m[6] == f"{back.mean_heads_mass:.2f}" and m[8] == f"{back.mean_single_mass:.2f}"
    assert float(m[8]) <= 1.0
    assert ("random weights" in text) == (weights == "random")
    assert "spread their attention less" not in text  # the sharpness claim that flipped with the seed


def test_compare_needs_the_single_head():
    a = analyse(run("the cat sat on the mat"))
    with pytest.raises(ValueError, match="single head"):
        narrate.compare_conclusion(a)


@pytest.mark.parametrize("weights", ["random", "designed"])
def test_weight_labels_say_which_weights_made_the_picture(weights):
    trace = run("the dog saw the cat", weights=weights)
    label = narrate.weights_label(weights, trace.rules)
    hidden = narrate.weights_label(weights, trace.rules, hide_rules=True)
    if weights == "random":
        assert label == hidden == "random weights: these patterns mean nothing yet"
    else:
        assert all(f"head {i + 1}, {r}" in label for i, r in enumerate(trace.rules))
        assert not any(r in hidden for r in RULE_ORDER)
    assert "trained" in narrate.weights_label("trained")


def test_the_window_sentence_states_the_mass_outside():
    _, a = _analysis("paragraph", "random")
    text = narrate.window_sentence(a)
    m = re.search(r"tokens 0–4 of (\d+): on average (\d+)% .* \(head (\d+): (\d+)%\)", text)
    outside = [s.outside_window for s in a.heads]
    assert int(m[1]) == len(a.tokens)
    assert int(m[2]) == _pct(sum(outside) / len(outside))
    assert int(m[3]) - 1 == max(range(len(outside)), key=outside.__getitem__) and int(m[4]) == _pct(max(outside))
    assert narrate.window_sentence(analyse(run("a b c"))) is None


def test_designed_repeated_closing_says_every_head_brings_back_something_different():
    _, a = _analysis("repeated", "designed")
    text = narrate.closing_sentence(a)
    assert text.startswith("4 heads, 4 different patterns (previous token, an earlier copy of its own word, "
                           "first token, itself)")
    assert text.endswith("each head follows a relation of its own.")


# --------------------------------------------------------------------------
# The lesson: every number it says is this run's
# --------------------------------------------------------------------------

# Numbers that are part of the method, not of the run (a row sums to 1, a masked weight is 0, Q/K/V are 3).
CONSTANTS = ("add up to 1", "weight exactly 0", "0 = identical, 1 = no overlap", "× 3 matrices ×", "head_1",
             "a 1 in one column", "--heads 4 to hand out")
TERM = r"[\w/√()·×.,^]+"
CHAIN = re.compile(rf"(?<![\w/√(·×]){TERM}(?: = {TERM})+")


def _evaluate(term, dims):
    """A term of N, d, h, d/h and numbers with ·, / and √, as a number; None when it holds anything else."""
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", term.strip(".,:;")).replace("d/h", "k")  # 12,288
    while expr.count(")") > expr.count("("):  # "(here h = 4)": the bracket belongs to the sentence
        expr = expr[:-1] if expr.endswith(")") else expr.replace(")", "", 1)
    expr = expr.lstrip("(") if expr.count("(") > expr.count(")") else expr
    if not expr or re.search(r"[^Ndhk0-9·/√().]", expr) or not re.search(r"[0-9Ndhk]", expr):
        return None
    expr = re.sub(r"√\(?(\w+)\)?", r"(\1)**0.5", expr).replace("·", "*")
    return eval(expr, {}, dict(dims))  # noqa: S307 - the test's own narrow arithmetic


def _check_chain(chain, dims):
    """'N×d/h = 6×4', '√(d/h) = √4 = 2', '3·d·d = 768': every evaluable side equal, shape by shape.

    A side written with decimals ('2.83') may differ by half its last digit; any other must be exact.
    """
    sides = []
    for term in chain.split(" = "):
        values = [_evaluate(f, dims) for f in term.split("×")]
        if None not in values:
            places = re.search(r"\.(\d+)", term)
            sides.append((values, 0.5 * 10 ** -len(places[1]) if places else 1e-9))
    if len(sides) < 2:
        return False
    (first, tol0), rest = sides[0], sides[1:]
    for values, tol in rest:
        if len(values) != len(first):
            values, first_ = [math.prod(values)], [math.prod(first)]
        else:
            first_ = first
        assert values == pytest.approx(first_, abs=max(tol, tol0)), chain
    return True


def _lesson_numbers_left(step, trace, a, q, description):
    """The narration of one step with every checked number removed; what is left must hold no digit."""
    n, d, h, dk = trace.n_tokens, trace.d_model, trace.num_heads, trace.d_k
    dims = {"N": n, "d": d, "h": h, "k": dk}
    text = step.narration
    for fixed in (description, narrate.closing_sentence(a), narrate.closing_sentence(a, hide_rules=True)):
        text = text.replace(fixed, "")  # each checked on its own: tests/test_samples.py and above
    for m in list(CHAIN.finditer(text)):
        if _check_chain(m[0], dims):
            text = text.replace(m[0], "")
    checks = [
        (r"\(×(\d+)\)", lambda m: int(m[1]) == h),
        (r"(\d+) matrices in all", lambda m: int(m[1]) == 3 * h),
        (r"into (\d+) blocks of (\d+)", lambda m: (int(m[1]), int(m[2])) == (h, dk)),
        (r"\((\d+) of them, each (\d+)×(\d+)\)", lambda m: (int(m[1]), int(m[2]), int(m[3])) == (h, n, dk)),
        (r"\((\d+)×(\d+)\)", lambda m: (int(m[1]), int(m[2])) == (n, d)),
        (r"the same (\d+) tokens?", lambda m: int(m[1]) == n),
        (r"'([^']*)' \((\d+)\)", lambda m: int(m[2]) == q and m[1] == label(trace.tokens[q], 14)),
        (r"differ by (\d+\.\d\d) bits", lambda m: m[1] == f"{a.mean_pairwise_js:.2f}"),
        (r"head (\d+), ([^;.]+)", lambda m: trace.rules is not None and trace.rules[int(m[1]) - 1] == m[2]),
        (r"With (\d+) heads? the tool uses (?:only )?the first (?:(\d+) )?of its (\d+) rules",
         lambda m: int(m[1]) == h and int(m[2] or 1) == h and int(m[3]) == len(RULE_ORDER)),
        (r"With (\d+) heads every one of the (\d+) rules", lambda m: int(m[1]) == int(m[2]) == len(RULE_ORDER)),
        (r"With (\d+) heads the (\d+) rules are used in order and then repeat: head (\d+) follows",
         lambda m: int(m[1]) == h and int(m[2]) == len(RULE_ORDER) == int(m[3]) - 1),
        (r"the rule of head 1 again", lambda m: True),
    ]
    for pattern, ok in checks:
        for m in list(re.finditer(pattern, text)):
            assert ok(m), (step.key, m[0])
            text = text.replace(m[0], "", 1)
    for fixed in CONSTANTS:
        text = text.replace(fixed, "")
    return text


OTHER_SHAPES = [("pronoun", "random", {"heads": 8, "d_model": 64, "causal": True}),
                ("repeated", "designed", {"heads": 2, "d_model": 8, "causal": True, "positions": True}),
                ("cat", "random", {"heads": 1, "d_model": 8, "positions": False})]


@pytest.mark.parametrize("sample,weights,options", [(s, w, {}) for s, w in CASES] + OTHER_SHAPES)
def test_every_number_the_lesson_says_is_this_runs(sample, weights, options):
    """The demo's narration for every sample × {random, designed, trained}: each number checked, none left over."""
    from mhacli.render.lesson import lesson

    result = mhacli.run(load_sample(sample).text, weights=weights, **options)
    trace, a = result.trace, result.analysis
    numbers = with_lesson(result).lesson
    description = load_sample(sample).description
    steps = lesson(trace, a, numbers, intro=f"The text is the sample '{sample}': {description}",
                   split_diff=result.split_diff)
    q = numbers.q
    for step in steps:
        left = _lesson_numbers_left(step, trace, a, q, description)
        assert not re.search(r"\d", left), (step.key, left)
    said = " ".join(s.narration for s in steps)
    assert narrate.closing_sentence(a) in said  # the run's own closing sentence, checked above
    assert ("is an accident of the seed, not a finding" in said) == (weights == "random")
    assert ("built by hand" in said) == (weights == "designed")
    assert ("a model of 'mha train'" in said) == (weights == "trained")


@pytest.mark.parametrize("sample,weights", CASES[::3] + CASES[1::3][:3])
def test_the_hidden_lesson_names_no_rule_and_no_relation(sample, weights):
    from mhacli.render.lesson import lesson

    result = with_lesson(mhacli.run(load_sample(sample).text, weights=weights))
    trace = result.trace
    said = " ".join(s.narration for s in lesson(trace, result.analysis, result.lesson, hide_rules=True,
                                                split_diff=result.split_diff))
    assert not any(name in said for name in NAMES if name != "the token"), said  # "the token at position p"
    assert narrate.closing_sentence(analyse(trace), hide_rules=True) in said


@pytest.mark.parametrize("weights", ["random", "designed"])
@pytest.mark.slow
def test_a_head_figure_says_random_weights_once(weights):
    # The figure's weights line says it; the caption under the title does not repeat it there,
    # while the same caption standing alone (the page, the terminal) still carries it.
    from matplotlib.text import Text

    from mhacli.notebook import head_figure

    trace, a = _analysis("pronoun", weights)
    for i in range(trace.num_heads):
        texts = " ".join(t.get_text() for t in head_figure(trace, i).findobj(Text))
        assert texts.count("random weights") == (1 if weights == "random" else 0), texts
        assert ("random weights" in narrate.head_caption(a, i)) == (weights == "random")
        assert "random weights" not in narrate.head_caption(a, i, stand_alone=False)
        assert narrate.head_caption(a, i, stand_alone=False) in texts.replace("\n", " ")


def test_mostly_is_said_only_where_every_weight_shown_is_over_half():
    import numpy as np

    from mhacli.measures.analysis import ReadBack
    from mhacli.measures.narrate import readback_note

    def back(heads, single):
        h = np.array(heads, dtype=float)
        n = h.shape[1]
        return ReadBack(head_keys=np.zeros(h.shape, int), head_weights=h, single_keys=np.zeros(n, int),
                        single_weights=np.array(single, dtype=float), distinct=np.ones(n, int),
                        heads_mass=h.sum(axis=0), single_mass=np.array(single, dtype=float),
                        counted=np.ones(n, bool))

    sharp = readback_note(back([[0.9, 0.8], [0.7, 0.6]], [0.55, 0.95]), rows=2)
    assert "mostly that token's value" in sharp
    flat = readback_note(back([[0.22, 0.31], [0.9, 0.6]], [0.25, 0.95]), rows=2)
    assert "mostly" not in flat and "3 of the 6 weights shown are under half their row (lowest 22%)" in flat
    # only the rows the table shows count: a weak row past them does not change the words
    assert "mostly that token's value" in readback_note(back([[0.9, 0.1], [0.7, 0.1]], [0.8, 0.1]), rows=1)


@pytest.mark.parametrize("n,d,h,causal", [(6, 16, 4, False), (40, 64, 8, True), (3, 4, 2, False)])
def test_the_efficiency_sentence_is_the_step_tables_own_counts(n, d, h, causal):
    from mhacli.measures.narrate import efficiency_sentence
    from mhacli.attention.steps import split_cost, steps_for, total_madds

    cost = split_cost(n, d, h, causal)
    assert cost.madds == total_madds(steps_for(n, d, h, causal)) == total_madds(steps_for(n, d, 1, causal))
    text = efficiency_sentence(cost)
    assert text is not None
    assert f"cost the same {cost.madds:,} multiply-adds as one head of width {d}" in text
    assert f"{h} × {n} × {n} = {h * n * n:,} attention weights are kept instead of {n * n:,}" in text
    assert efficiency_sentence(split_cost(n, d, 1, causal)) is None  # one head: nothing was split


@pytest.mark.parametrize("text", ["The animal didn't cross the street because it was too tired",
                                  "the queen saw the boy because she was too angry"])
def test_step_5_tells_this_sentences_column_from_the_names_measured_in_training(text):
    from mhacli.grammar.grammar import short_name
    from mhacli.render.terminal import heads_panel
    from rich.console import Console

    result = mhacli.run(text, weights="grammar")
    note = narrate.trained_names_note(result.analysis)
    assert note is not None and note.startswith("“top key follows” is where each head looks on this sentence")
    for i, rule in enumerate(result.analysis.rules):
        # each head's name is its card title (or its short name), never the sentence's positional pattern
        name = narrate.learned_title(rule) or short_name(rule) or narrate.NO_RELATION
        assert f"head {i + 1}: {name}" in note
    console = Console(width=80, record=True)
    console.print(heads_panel(result.trace, result.analysis))
    shown = " ".join(console.export_text().split())
    assert " ".join(note.split()) in shown
    console = Console(width=80, record=True)
    console.print(heads_panel(result.trace, result.analysis, hide_rules=True))
    assert "measured in training" not in console.export_text()
    # a run that is not a grammar model's has no such note
    assert narrate.trained_names_note(mhacli.run(text, weights="random").analysis) is None
