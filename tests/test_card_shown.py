"""The report card's words and names, computed once by the pipeline (``CardShown``), and the renderers that only read
them (issue 30): every field is the card's own numbers put in words, and what a surface prints is that field."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import mhacli
from mhacli.attention import evidence
from mhacli.measures import narrate
from mhacli.grammar.card import Card, rows, short_name, wilson
from mhacli.models.shipped import chosen_note
from mhacli.pipeline import CardShown, card_shown
from mhacli.render.card import explain_card, knockout_report


def _card(hits: list[list[int]], queries: list[int]) -> Card:
    return Card(rows=rows()[:len(queries)], hits=np.array(hits), queries=np.array(queries), sentences=321, seed=7)


def _printed(parts: list, width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for part in parts:
        console.print(part)
    return console.file.getvalue()  # type: ignore[attr-defined]


@st.composite
def cards(draw: st.DrawFn) -> Card:
    """A card of 1 to 4 heads over 1 to 7 rows, any counts with hits at most the row's queries."""
    heads = draw(st.integers(1, 4))
    queries = draw(st.lists(st.integers(0, 400), min_size=1, max_size=len(rows())))
    hits = [[draw(st.integers(0, n)) for _ in range(heads)] for n in queries]
    return _card(hits, queries)


@settings(max_examples=60, deadline=None)
@given(cards())
def test_the_shown_card_is_the_cards_numbers_and_the_evidence_rule(card: Card) -> None:
    shown = card_shown(card)
    low, high = wilson(card.hits, np.broadcast_to(card.queries[:, None], card.hits.shape))
    rate = card.hits / np.maximum(card.queries, 1)[:, None]
    np.testing.assert_array_equal(shown.rate, rate)
    np.testing.assert_array_equal(shown.low, low)
    np.testing.assert_array_equal(shown.high, high)
    named = [[evidence.card_word(float(rate[r, i]), float(low[r, i])) == evidence.NAMED
              for i in range(card.heads)] for r in range(len(card.rows))]
    assert shown.named.tolist() == named  # rate ≥ 85 % with the interval's lower end ≥ 50 %
    assert shown.rows == tuple(short_name(r) for r in card.rows) and shown.queries == tuple(card.queries.tolist())
    assert shown.heads == card.heads and shown.labels == card.labels
    for array in (shown.rate, shown.low, shown.high, shown.named):
        assert not array.flags.writeable


def test_the_shown_card_says_how_it_was_measured() -> None:
    card = _card([[90, 10], [40, 1]], [100, 50])
    shown = card_shown(card)
    assert shown.caption == "measured in training on 321 held-out sentences drawn with rng seed 7"
    assert shown.heading == "Report card: held-out hit rate per relation and head (321 sentences)"
    assert shown.figure_title == "Report card: held-out hit rate (95% interval)"
    assert shown.rule == narrate.card_rule_sentence(card) and shown.caption in shown.rule
    assert shown.named.tolist() == [[True, False], [False, False]]  # 90/100 names; 40/50 = 80 % is only partly
    assert shown.sentence == () and shown.chosen is None  # no sentence given, no shipped model
    told = card_shown(card, heading="h", figure_title="f", chosen="c")
    assert (told.heading, told.figure_title, told.chosen) == ("h", "f", "c")


def test_the_renderers_print_the_fields_they_are_handed() -> None:
    """Planted words come out as planted: the table and its lines read the fields, they do not recompute them."""
    shown = card_shown(_card([[90, 10], [40, 1]], [100, 50]))
    planted = replace(shown, rows=("first row", "second row"), heading="HEADING", rule="RULE",
                      labels=("LABEL ONE", "LABEL TWO"), sentence=("ON THIS SENTENCE",), chosen="CHOSEN")
    text = _printed(explain_card(planted))
    for said in ("HEADING", "first row", "second row", "RULE", "head 1: LABEL ONE", "head 2: LABEL TWO",
                 "CHOSEN", "ON THIS SENTENCE"):
        assert said in text, said
    assert text.index("CHOSEN") < text.index("ON THIS SENTENCE")  # the seed's choice under the card, then here
    assert explain_card(None) == []


@pytest.mark.parametrize("width", [80, 40])
def test_the_shown_card_fits_the_console(width: int) -> None:
    shown = card_shown(_card([[90, 10], [40, 1]], [100, 50]), chosen="The shipped model is seed 0 of seeds 0–4.")
    text = _printed(explain_card(shown), width)
    assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
    for r in range(2):
        for i in range(2):
            assert f"{math.floor(100 * shown.rate[r, i] + 1e-9)}%" in text


def test_the_knockout_report_reads_the_rows_and_the_rule_it_is_handed() -> None:
    from mhacli.grammar.knockout import Knockout

    shown = card_shown(_card([[90, 10], [40, 1]], [100, 50]))
    knock = Knockout(rows=rows()[:2], full=np.array([0.9, 0.5]), without=np.array([[0.2, 0.5], [0.9, 0.4]]),
                     queries=np.array([100, 50]), sentences=10, seed=1)
    assert card_shown(_card([[90, 10], [40, 1]], [100, 50]), knock=knock).knockout == tuple(
        narrate.knockout_sentences(_card([[90, 10], [40, 1]], [100, 50]), knock))
    planted = replace(shown, rows=("first row", "second row"), rule="RULE", knockout=("SAID",))
    text = _printed(knockout_report(planted, knock))
    assert all(said in text for said in ("first row", "second row", "RULE", "SAID"))
    assert "−70" in text  # head 1 off costs the first row 90 − 20 points


def test_the_card_figure_draws_the_fields_it_is_handed() -> None:
    from matplotlib.patches import Rectangle

    from mhacli.render.figures.card import card_figure

    shown = replace(card_shown(_card([[90, 10], [40, 1]], [100, 50])), rows=("first row", "second row"),
                    figure_title="TITLE", caption="CAPTION", outline="OUTLINE", named=np.array([[False, True],
                                                                                                 [True, False]]))
    fig = card_figure(shown)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), shown.rate)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["first row", "second row"]
    from matplotlib.text import Text

    assert ax.get_title(loc="left") == "TITLE" and "CAPTION;\nOUTLINE" in [t.get_text() for t in fig.findobj(Text)]
    outlined = sorted((round(p.get_x() + 0.47), round(p.get_y() + 0.47)) for p in ax.patches
                      if isinstance(p, Rectangle) and not p.get_fill())
    assert outlined == [(0, 1), (1, 0)]  # (head, row) of each planted name


def test_a_grammar_run_carries_its_card_on_this_sentence() -> None:
    """``mha explain --weights grammar``'s card is on the run: its sentence lines are narrate's for this parse and
    these weights, and the shipped model's seed choice is said; any other model's run has no card."""
    from mhacli.pipeline import prepare

    prepared = prepare("the cat chased the dog", weights="grammar")
    result = prepared.run()
    card = prepared.model.card  # type: ignore[union-attr]
    shown = result.card
    assert isinstance(shown, CardShown) and result.parse is not None and card is not None
    assert shown.sentence == tuple(narrate.card_sentence_lines(card, result.parse, result.trace.weights,
                                                               bool(result.config.causal)))
    assert shown.chosen == chosen_note("grammar", result.config.seed) and shown.chosen is not None
    assert shown.heading == f"The model's report card, {card.caption()}, not on this sentence"
    assert shown.labels == card.labels
    assert mhacli.run("the cat chased the dog", heads=4).card is None


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_every_word_of_the_card_figure_lies_inside_it(heads: int) -> None:
    """card.png of a one- or two-head run clipped its title and caption at both edges: it is as wide as its
    words need, and they wrap to it."""
    from mhacli.render.figures.card import card_figure

    shown = card_shown(_card([[90] * heads, [40] * heads], [100, 50]))
    assert "321" in shown.caption  # the card's own sentence count, said in the caption the figure wraps
    fig = card_figure(shown)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    box = fig.bbox
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent"))
             if t.get_text() and t.get_visible()]
    assert any("held-out" in t.get_text() for t in texts)
    for t in texts:
        e = t.get_window_extent(renderer)
        assert box.x0 - 0.5 <= e.x0 and e.x1 <= box.x1 + 0.5 and box.y0 - 0.5 <= e.y0 and e.y1 <= box.y1 + 0.5, \
            f"{t.get_text()!r} at {e} leaves the figure {box}"
    for word in ("held-out", "outlined"):  # wrapped between words, never dropped
        assert word in " ".join(" ".join(t.get_text().split()) for t in texts)
