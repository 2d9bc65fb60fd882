"""The one evidence rule (mhacli.attention.evidence), and every renderer's words held to it.

Uniform, near-uniform, one-hot, tied and random attention go through the sentences of the terminal,
the grids, the figures' captions, the page, the JSON and ``mha compare``: a relation is named, a
row called "mostly" or a head "different" only where the thresholds measured against chance allow.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from mhacli.attention import evidence
from mhacli.measures import narrate
from mhacli.measures.analysis import NONE, RELATIONS, analyse
from mhacli.measures.view import from_attention
from mhacli.io.export import head_measures
from mhacli.pipeline import Run, paged
from mhacli.render import html, terminal
from mhacli.render.labels import pattern_words, weights_note

# ---------------------------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize("v", [2, 3, 6, 13, 40, 500])
def test_lift_is_0_at_chance_and_1_at_certain_for_any_row_length(v):
    assert evidence.lift(1 / v, v) == pytest.approx(0.0)
    assert evidence.lift(1.0, v) == pytest.approx(1.0)
    edge = evidence.pick_weight(v)
    assert evidence.picks(edge + 1e-12, v) and not evidence.picks(edge - 1e-9, v)
    assert edge > 1 / v  # picking always needs more than chance


def test_the_pick_weight_is_a_quarter_of_the_way_from_chance_for_two_six_and_thirteen_keys():
    assert evidence.pick_weight(2) == pytest.approx(0.625)
    assert evidence.pick_weight(6) == pytest.approx(0.375)
    assert evidence.pick_weight(13) == pytest.approx(1 / 13 + 0.25 * 12 / 13)


def test_a_row_that_sees_one_key_never_picks_and_lift_stays_in_0_1():
    assert not evidence.picks(1.0, 1)
    assert evidence.lift(0.0, 5) == 0.0  # below chance is not negative evidence: just none
    assert np.all((evidence.lift(np.linspace(0, 1, 11), 4) >= 0) & (evidence.lift(np.linspace(0, 1, 11), 4) <= 1))


def test_the_words_thresholds():
    assert evidence.answers(0.5) and not evidence.answers(0.3)
    assert evidence.named(0.5) and not evidence.named(0.499)
    assert [evidence.focus_word(f) for f in (1.0, 0.5, 0.2, 0.1, 0.0)] == [
        "sharp", "focused", "spread", "nearly uniform", "nearly uniform"]
    assert evidence.near_chance(2, 5, 0.4) and not evidence.near_chance(2, 5, 0.41)  # focused is not uniform
    assert not evidence.near_chance(3, 6, 0.0) and not evidence.near_chance(0, 0, 0.0)


# ------------------------------------------------------------------------------------------ attention to test


def _rows(kind: str, n: int, causal: bool, rng: np.random.Generator, eps: float) -> np.ndarray:
    w = np.zeros((n, n))
    for q in range(n):
        seen = q + 1 if causal else n
        if kind == "uniform":
            row = np.ones(seen)
        elif kind == "near":  # uniform, nudged by at most eps of a row
            row = 1 + eps * rng.uniform(-1, 1, seen)
        elif kind == "onehot":  # the previous token (itself on row 0)
            row = np.full(seen, 1e-6)
            row[max(q - 1, 0)] = 1.0
        elif kind == "tie":
            row = np.full(seen, 0.1)
            row[: min(2, seen)] = 1.0
        else:
            row = rng.random(seen)  # what people try first: rng.random rows, normalised
        w[q, :seen] = row / row.sum()
    return w


@st.composite
def attention(draw):
    h = draw(st.integers(1, 4))
    n = draw(st.integers(2, 12))
    causal = draw(st.booleans())
    kinds = draw(st.lists(st.sampled_from(["uniform", "near", "onehot", "tie", "random"]), min_size=h, max_size=h))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    eps = draw(st.floats(0.0, 0.05))
    w = np.stack([_rows(k, n, causal, rng, eps) for k in kinds])
    tokens = draw(st.lists(st.sampled_from(["the", "cat", "sat", "mat"]), min_size=n, max_size=n))
    return w, tokens, causal, kinds


def _text(renderable) -> str:
    console = Console(width=100, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _single(w, tokens, causal):
    """A one-head contrast for compare's sentences: the mean of the heads, as a trace-like object."""
    return SimpleNamespace(weights=w.mean(axis=0, keepdims=True), tokens=tuple(tokens), mask=None, rules=None,
                           num_heads=1, config=SimpleNamespace(causal=causal, weights="random"))


def _sentences(w, tokens, causal) -> tuple[object, dict[str, str]]:
    view = from_attention(w, tokens, causal=causal)
    a = analyse(view)
    trace_like = SimpleNamespace(weights=w, tokens=tuple(tokens), mask=None, rules=None, num_heads=len(w),
                                 config=SimpleNamespace(causal=causal, weights="attention"))
    b = analyse(trace_like, _single(w, tokens, causal))
    said = {
        "terminal": _text(terminal.heads_panel(view, a)),
        "captions": "\n".join(narrate.head_caption(a, i) for i in range(len(w))),
        "titles": "\n".join(pattern_words(a, i) for i in range(len(w))),
        "label": weights_note(view, analysis=a),
        "page": repr(html.summaries(a)) + "\n"
                + str(html.page_data(paged(Run(config=None, trace=view, analysis=a)))["weights_label"]),
        "json": repr(head_measures(view, a)),  # type: ignore[arg-type]
        "compare": narrate.compare_conclusion(b),
        "readback": narrate.readback_note(b.readback, len(tokens)),  # type: ignore[arg-type]
    }
    return a, said


NAMES = [r for r in RELATIONS if r != "fixed token"] + ["fixed token", "“"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention())
def test_no_renderer_names_more_than_the_thresholds_allow(case):
    w, tokens, causal, kinds = case
    a, said = _sentences(w, tokens, causal)
    n = len(tokens)
    seen = np.array([q + 1 if causal else n for q in range(n)])
    for s in a.heads:
        if s.pattern == NONE:
            continue
        # A named head: at least half its relation's rows pick the relation's key, each clear of chance.
        assert s.pattern_share >= evidence.NAME_SHARE and s.pattern_rows > 0
        top = w[s.head].max(axis=-1)
        assert int((evidence.lift(top, seen) >= evidence.PICK_LIFT).sum()) >= s.pattern_rows
    if a.close_to_uniform:
        for where in ("terminal", "label", "compare"):
            assert evidence.CLOSE_TO_UNIFORM in said[where].lower(), (where, said[where])
        for where in ("captions", "titles", "terminal"):
            text = said[where].split("top key follows:")[0]  # the table's legend explains the words
            assert not any(re.search(rf"\b{re.escape(r)}\b ·|: {re.escape(r)} on", text) for r in RELATIONS), text
        assert "mostly" not in said["compare"]
    if "mostly" in said["readback"]:  # "mostly" only where every weight shown is at least half its row
        shown = w.max(axis=-1)
        assert (shown >= evidence.MOSTLY).all()
    for where in said:
        assert "learned" not in said[where]  # nobody trained these: no word may say they learned


def test_a_head_close_to_chance_is_named_by_nothing_even_when_its_one_clear_row_fits_a_relation():
    """Found by the property above: of three rows only one picks a key (two back), which is half that
    relation's rows; the head is near chance, so it follows nothing and every surface says so."""
    w = np.array([[[1.0, 0.0, 0.0, 0.0],
                   [0.49370501, 0.50629499, 0.0, 0.0],
                   [0.63880393, 0.31126053, 0.04993554, 0.0],
                   [0.38024549, 0.36711516, 0.02264313, 0.22999622]]])
    a, said = _sentences(w, ["the"] * 4, True)
    head = a.heads[0]
    assert head.near_chance and head.picked_rows == 1 and head.counted_rows == 3
    assert head.relation("two back").share == 0.5  # the relation's share alone would have named it
    assert head.pattern == NONE and a.close_to_uniform
    assert "two back ·" not in said["titles"] and "two back ·" not in said["terminal"].split("top key follows:")[0]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(3, 12), st.booleans(), st.floats(0.0, 0.05), st.integers(0, 999))
def test_uniform_and_near_uniform_attention_say_so_whatever_made_it(h, n, causal, eps, seed):
    rng = np.random.default_rng(seed)
    w = np.stack([_rows("near", n, causal, rng, eps) for _ in range(h)])
    a, said = _sentences(w, ["tok"] * n, causal)
    assert a.close_to_uniform and all(s.pattern == NONE for s in a.heads)
    assert evidence.CLOSE_TO_UNIFORM in said["label"] and evidence.CLOSE_TO_UNIFORM in said["page"]
    assert "no head follows a relation" in said["compare"]
    assert "'close_to_uniform': True" in said["json"]


def test_one_hot_previous_token_is_named_on_every_surface():
    rng = np.random.default_rng(0)
    w = np.stack([_rows("onehot", 8, False, rng, 0.0)])
    a, said = _sentences(w, list("abcdefgh"), False)
    assert a.heads[0].pattern == "previous token" and not a.close_to_uniform
    assert "previous token · 100%" in said["titles"]
    assert "previous token on 7 of 7 rows" in said["captions"]
    assert evidence.CLOSE_TO_UNIFORM not in said["label"]


def test_a_user_s_random_rows_get_the_caution_and_no_named_token():
    """rng.random rows, normalised: what a user's untrained model looks like (the issue's example)."""
    rng = np.random.default_rng(1)
    w = rng.random((4, 10, 10))
    w /= w.sum(axis=-1, keepdims=True)
    a, said = _sentences(w, [f"w{i}" for i in range(10)], False)
    assert a.close_to_uniform
    assert "·" not in said["titles"]  # no "head 2 first token · 67%"
    assert "different tokens in focus" not in said["terminal"]


def test_near_uniform_compare_of_a_a_a_a_a_a_names_nothing():
    """``mha compare "a a a a a a" --seed 1``: JS 0.026 bits, top weights 19–23 % where uniform is 17 %."""
    from mhacli.measures.compare import single_head
    from traced import run

    trace = run("a a a a a a", seed=1)
    a = analyse(trace, single_head(trace))
    assert a.close_to_uniform
    assert all(s.pattern == NONE for s in a.heads)
    assert a.readback is not None and a.readback.rows_with_several == 0
    text = narrate.compare_conclusion(a)
    assert text.startswith("These weights are close to uniform: no head follows a relation")
    assert "top weight 22% on average, 17% for a uniform row" in text  # as docs/reading-heatmaps.md quotes it
    doc = (Path(__file__).parents[1] / "docs" / "reading-heatmaps.md").read_text(encoding="utf-8")
    assert "top weights are 22 % on average where a uniform row\ngives 17 %" in doc


def test_a_model_past_its_trained_length_is_cautioned_and_its_collapsed_head_not_counted():
    import mhacli
    from mhacli.io.samples import load_sample

    result = mhacli.run(load_sample("pronoun").text, weights="trained")
    a = result.analysis
    assert a.caution is not None and "trained on 12 tokens, this text has 24" in a.caution
    stuck = a.collapsed()
    assert stuck, "the 12-token model collapses a head onto one key at 24 tokens"
    closing = narrate.closing_sentence(a)
    assert "each head follows a relation of its own" not in closing
    assert f"{len(a.patterns())} different patterns" in closing or len(a.patterns()) < 2
    assert all(i not in [s.head for s in a.heads if (s.pattern, s.pattern_key) in a.patterns()] for i in stuck)
    note = weights_note(result.trace, analysis=a)
    assert a.caution in note and "not counted as a pattern" in note
    assert a.caution in " ".join(_text(terminal.heads_panel(result.trace, a)).split())


def _figure_text(fig) -> str:
    from matplotlib.text import Text

    return " ".join(" ".join(t.get_text().split()) for t in fig.findobj(Text))


def test_the_figures_of_near_uniform_attention_say_so_and_name_no_relation():
    """The figures read the same verdicts: heads.png, head-i.png and magnifiers.png of rng.random attention."""
    from mhacli.notebook import head_figure, heads_figure, magnifiers_figure

    rng = np.random.default_rng(3)
    w = rng.random((3, 8, 8))
    w /= w.sum(axis=-1, keepdims=True)
    view = from_attention(w, [f"w{i}" for i in range(8)], causal=False)
    assert analyse(view).close_to_uniform
    for fig in (heads_figure(view), head_figure(view, 0), magnifiers_figure(view)):
        text = _figure_text(fig)
        assert evidence.CLOSE_TO_UNIFORM in text, text
        assert not any(f"{r} ·" in text for r in RELATIONS) and "0 different" not in text


def test_the_figures_of_a_model_past_its_length_carry_the_caution():
    import mhacli
    from mhacli.io.samples import load_sample
    from mhacli.notebook import heads_figure

    result = mhacli.run(load_sample("pronoun").text, weights="trained")
    text = _figure_text(heads_figure(result))  # the Run: its analysis carries the caution
    assert "outside what the model saw (trained on 12 tokens, this text has 24" in text
    assert "not counted as a pattern" in text


@pytest.mark.parametrize("second", [0.49, 0.47, 0.455])
def test_a_row_split_51_49_is_a_tie_and_picks_neither_key(second):
    """A runner-up within evidence.TIE_MARGIN of the top ties it: no relation, no token named, however far the
    top weight is above chance; a clear lead (56 / 40) still picks."""
    n = 11
    for top, picked in ((1.0 - second - 0.04, False), (0.56, True)):
        runner = second if not picked else 0.40
        row = np.full(n, (1.0 - top - runner) / (n - 2))
        row[4], row[0] = top, runner  # "the" (position 4) just ahead of "the" (position 0)
        a = analyse(SimpleNamespace(weights=np.tile(row, (1, n, 1)), tokens=tuple(f"w{k}" for k in range(n)),
                                    mask=None, rules=None, num_heads=1,
                                    config=SimpleNamespace(causal=False, weights="trained")))
        head = a.heads[0]
        assert evidence.picks(top, n)  # clear of chance: only the tie keeps it from a pick
        assert (head.tied_rows == n) is not picked and (head.pattern != NONE) is picked
        assert (head.pattern_key == 4) is picked


def test_a_head_that_splits_every_row_between_two_the_is_named_for_no_token():
    """The lone grammar head once gave the two "the" of the headline sentence about half each (51 / 49): such rows
    are ties, and a head that picks on none of them is named for no token."""
    import mhacli

    tokens = "the animal didn't cross the street because it was too tired".split()
    n = len(tokens)
    w = np.full((1, n, n), 0.0)
    w[0, :, 0], w[0, :, 4] = 0.51, 0.49  # every row: the first "the" just ahead of the second
    lone = mhacli.from_attention(w, tokens)
    head = analyse(lone).heads[0]
    top2 = np.sort(w[0], axis=-1)[:, -2:]  # (N, 2): each row's runner-up and top weight
    assert np.all(top2[:, 1] - top2[:, 0] < evidence.TIE_MARGIN)
    assert head.tied_rows == n and head.pattern == NONE


def test_a_collapsed_head_says_how_many_rows_it_puts_on_one_token_not_every_row():
    """"every row on one token" only when every row does: the 12-of-13 heads of the grammar model outside its
    grammar say 12 of 13."""
    import mhacli

    result = mhacli.run("the cat sat on the mat and the dog sat on the log", weights="grammar")
    a = result.analysis
    stuck = a.collapsed()
    assert stuck
    said = " ".join([*narrate.cautions(a), narrate.closing_sentence(a)])
    for i in stuck:
        s = a.heads[i]
        if s.pattern_rows < s.pattern_of:
            assert f"{s.pattern_rows} of {s.pattern_of} rows" in said
            assert "every row" not in said
