"""Every sentence about a run states only what its measures say: each number and comparison is parsed back."""

from __future__ import annotations

import re

import pytest

from mhacli.core import narrate
from mhacli.core.analysis import NONE, RELATIONS, analyse
from mhacli.core.compare import single_head
from mhacli.core.designed import RULE_ORDER
from mhacli.core.trace import run
from mhacli.io.samples import list_samples, load_sample

CASES = [(s.name, w) for s in list_samples() for w in ("random", "designed")]
NAMES = [r for r in RELATIONS] + list(RULE_ORDER) + ["earlier copy of its own word", "the token"]


def _analysis(sample, weights, **options):
    trace = run(load_sample(sample).text, weights=weights, **options)
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
        if s.pattern != NONE:
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
    assert text.endswith("every head brings back something different.")
