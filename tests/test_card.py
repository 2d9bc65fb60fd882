"""The report card, the names it gives, the knockout and the seed sweep (issue 28, items 1-3 and the sweep).

Names are checked against the evidence rule on property-generated cards, the Wilson interval against its
formula, the card and the knockout against slow per-sentence, per-head references, and ``mha train
--knockout / --seeds / --json`` through CliRunner against the shipped schema.  One small grammar model is
trained per module (60 steps: what it learned does not matter, only that every number is measured right).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from mhacli.cli.app import app
from mhacli.attention import evidence
from mhacli.grammar import grammar
from mhacli.measures import narrate
from mhacli.grammar.heldout import carded, held_out, report_card
from mhacli.grammar.card import (CARD_SEED, Card, disagreements, row_keys, rows,
                                 short_name, wilson)
from mhacli.grammar.knockout import knockout, logits_without, mismatches
from mhacli.grammar.sweep import sweep
from mhacli.grammar.tasks import get_task
from mhacli.grammar.passes import forward
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import TrainResult, train

runner = CliRunner()
FEW = 60  # sentences for the slow references


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    return carded(train(TrainConfig.for_task("grammar", steps=60, held_out=50)))


# ----------------------------------------------------------------------------- the interval


@given(st.integers(0, 5000), st.integers(1, 5000))
def test_wilson_matches_the_direct_formula(k: int, n: int) -> None:
    k = min(k, n)
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson(np.array(k), np.array(n))
    assert float(low) == pytest.approx(max(0.0, centre - half), abs=1e-12)
    assert float(high) == pytest.approx(min(1.0, centre + half), abs=1e-12)
    assert float(low) <= p + 1e-12 and p <= float(high) + 1e-12


def test_wilson_knows_nothing_of_an_empty_row_and_a_lot_of_a_large_one() -> None:
    low, high = wilson(np.array([0, 900]), np.array([0, 1000]))
    assert (low[0], high[0]) == (0.0, 1.0)
    assert 0.87 < low[1] < 0.9 < high[1] < 0.92  # ±1.9 points at n = 1,000


# ----------------------------------------------------------------------------- names follow the card


@st.composite
def cards(draw: st.DrawFn) -> Card:
    heads = draw(st.integers(1, 5))
    names = rows()
    queries = np.array(draw(st.lists(st.integers(0, 400), min_size=len(names), max_size=len(names))))
    hits = np.array([[draw(st.integers(0, int(n))) for _ in range(heads)] for n in queries])
    measured = draw(st.booleans())  # a card with its baselines, or one saved before them
    share = st.floats(0.0, 1.0, allow_nan=False)
    always = np.array(draw(st.lists(share, min_size=len(names) * heads, max_size=len(names) * heads)))
    offset = np.array(draw(st.lists(share, min_size=len(names), max_size=len(names))))
    repeats = tuple(draw(st.sampled_from([None, "subject", "object"])) if n in ("feeling", "place") else None
                    for n in names)
    return Card(rows=names, hits=hits.reshape(len(names), heads), queries=queries, sentences=100, seed=CARD_SEED,
                always=always.reshape(len(names), heads) if measured else None, offset=offset if measured else None,
                repeats=repeats if measured else ())


@settings(max_examples=200, deadline=None)
@given(cards())
def test_every_name_is_the_one_the_evidence_rule_gives_its_card(card: Card) -> None:
    """A head is named for the rows whose rate names it (evidence.card_word) and whose interval's lower end beats
    both baselines (evidence.beats), strongest lower end first, less the rows that only repeat a role it is named
    for; else "partly" its best partly row, else no clear relation. Its title is its name, its label starts so."""
    rate = card.hits / np.maximum(card.queries, 1)[:, None]
    low, _ = wilson(card.hits, np.broadcast_to(card.queries[:, None], card.hits.shape))

    def beaten(r: int, i: int) -> bool:
        return card.always is None or (evidence.beats(low[r, i], card.always[r, i])
                                       and evidence.beats(low[r, i], card.offset[r]))

    for i in range(card.heads):
        name, share = card.relation(i)
        title, label = card.title(i), card.label(i)
        assert title == name and label.startswith(title + " — ") and narrate.learned_title(label) == title
        named = [r for r in range(len(card.rows)) if rate[r, i] >= evidence.CARD_NAME_RATE and low[r, i] >= 0.5
                 and beaten(r, i)]
        partly = [r for r in range(len(card.rows)) if rate[r, i] >= evidence.NAME_SHARE and r not in named
                  and beaten(r, i)]
        own = [r for r in named if not (card.repeats[r] in card.rows
                                        and card.rows.index(card.repeats[r]) in named)]
        if named:
            assert name.split(" · ") == [card.rows[r] for r in sorted(own, key=lambda r: (-low[r, i], r))]
        elif partly:
            best = max(partly, key=lambda r: (low[r, i], -r))
            assert name == f"partly {card.rows[best]}" and f"a name needs {evidence.CARD_NAME_RATE:.0%}" in label
        else:
            assert name == evidence.NO_RELATION
        assert "% trained" not in title  # the name carries no number: one wording on every surface


@settings(max_examples=50, deadline=None)
@given(cards())
def test_a_card_survives_its_json_and_a_bad_one_is_refused(card: Card) -> None:
    again = Card.from_dict(json.loads(json.dumps(card.to_dict())))
    assert again.rows == card.rows and (again.hits == card.hits).all() and (again.queries == card.queries).all()
    with pytest.raises(ValueError):
        Card(rows=card.rows, hits=card.queries[:, None] + 1, queries=card.queries, sentences=1, seed=0)


def test_the_model_takes_its_names_and_labels_from_its_card(trained: TrainResult) -> None:
    model = trained.model
    assert model.card is not None and model.card.sentences == 2000
    assert model.relations == tuple(model.card.relation(i) for i in range(model.config.heads))
    assert model.labels == model.card.labels
    for cell in model.card.rate.ravel():
        assert 0.0 <= cell <= 1.0
    # cards of handed hits: a head the card names is named, whatever the model measured before
    hits = np.zeros_like(model.card.hits)
    hits[0, 0] = model.card.queries[0]
    named = replace(model, card=replace(model.card, hits=hits))
    assert named.relations[0] == ("subject", 1.0) and all(n == evidence.NO_RELATION for n, _ in named.relations[1:])


# ----------------------------------------------------------------------------- the card, measured


def test_the_card_counts_what_a_slow_per_sentence_reading_counts(trained: TrainResult) -> None:
    """Per sentence: the parse, the model's own attention, the evidence rule on every query row, one by one."""
    model = trained.model
    card = report_card(model, sentences=FEW, seed=5)
    ids, _, names = held_out(model, FEW, 5)
    pad = get_task("grammar").pad
    hits = np.zeros((len(names), model.config.heads), dtype=int)
    queries = np.zeros(len(names), dtype=int)
    for b in range(FEW):
        n = int((ids[b] != pad).sum())
        parse = grammar.parse([model.vocabulary[i] for i in ids[b, :n]])
        assert parse is not None
        weights = model.attention(ids[b:b + 1, :n])[0]  # (h, n, n): one sentence without its padding
        for r, name in enumerate(names):
            for q, k in row_keys(parse, name).items():
                queries[r] += 1
                for i in range(model.config.heads):
                    row = weights[i, q]
                    hits[r, i] += int(row.argmax() == k and evidence.picks(float(row.max()), n))
    assert (card.hits == hits).all() and (card.queries == queries).all()
    assert card.sentences == FEW and card.seed == 5


def test_the_held_out_sentences_are_drawn_once_and_no_reader_can_change_them(trained: TrainResult) -> None:
    """Every model of a sweep reads the card's sentences: held_out and tasks.fresh give every caller the same
    read-only arrays, equal to a fresh draw from the seed."""
    from mhacli.grammar.tasks import fresh

    model, task = trained.model, get_task("grammar")
    ids, keys, _ = held_out(model, FEW, 5)
    again = held_out(model, FEW, 5)
    assert again[0] is ids and again[1] is keys
    assert np.array_equal(ids, task.sample(np.random.default_rng(5), FEW, model.config.length)[0])
    for array in (ids, keys, *fresh(task, FEW, model.config.length, 5)):
        with pytest.raises(ValueError):
            array[(0,) * array.ndim] = 1


def test_the_card_rows_are_the_parse_and_the_word_classes() -> None:
    parse = grammar.parse("the queen saw the street because it was too wide".split())
    assert parse is not None
    assert row_keys(parse, "place") == {9: 4} and row_keys(parse, "feeling") == {} and row_keys(parse, "he/she") == {}
    parse = grammar.parse("the queen saw the boy because he was too scared".split())
    assert parse is not None
    assert row_keys(parse, "he/she") == {6: 4} and row_keys(parse, "feeling") == {}  # scared: both animate
    assert rows()[:len(grammar.RELATIONS)] == grammar.RELATIONS


def test_a_card_needs_a_grammar_model() -> None:
    from mhacli.attention.errors import UsageError

    letters = train(TrainConfig(steps=2, held_out=4))
    assert carded(letters) is letters and letters.model.card is None
    with pytest.raises(UsageError, match="--task grammar"):
        report_card(letters.model)


# ----------------------------------------------------------------------------- disagreements on the sentence


def _parsed_with_weights(text: str, heads: int, seed: int) -> tuple[grammar.Parse, np.ndarray]:
    """A grammar sentence's parse and random attention over it, from flat to sharp: (h, N, N), rows sum to 1."""
    parse = grammar.parse(text.split())
    assert parse is not None
    n = len(parse.tokens)
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((heads, n, n)) * rng.choice([0.1, 3.0, 20.0])
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return parse, weights / weights.sum(-1, keepdims=True)


@settings(max_examples=100, deadline=None)
@given(cards(), st.integers(0, 2**32 - 1), st.sampled_from([
    "the animal didn't cross the street because it was too tired",
    "the animal didn't cross the street because it was too wide",
    "the queen saw the boy because he was too scared",
    "the king met the man because he was too angry"]))
def test_a_disagreement_is_said_exactly_where_a_named_head_misses_on_the_sentence(card: Card, seed: int,
                                                                                   text: str) -> None:
    parse, weights = _parsed_with_weights(text, card.heads, seed)
    n = len(parse.tokens)
    found = {(d.head, d.query): d for d in disagreements(card, parse, weights)}
    for i in range(card.heads):
        r, word = card.best(i)
        keys = row_keys(parse, card.rows[r]) if word != evidence.UNNAMED else {}
        for q, k in keys.items():
            hit = weights[i, q].argmax() == k and evidence.picks(float(weights[i, q].max()), n)
            assert ((i, q) in found) == (not hit)
        assert all(q in keys for (j, q) in found if j == i)
    lines = narrate.card_sentence_lines(card, parse, weights)
    for d in found.values():
        said = narrate.disagreement_sentence(d, parse)
        assert said in lines and said.startswith(f"head {d.head + 1}, ") and " in training" in said
        assert f"{math.floor(100 * d.weight + 0.5)}%" in said or f"{d.weight:.0%}" in said


def test_the_headline_disagreement_reads_as_the_issue_asks() -> None:
    parse = grammar.parse("the animal didn't cross the street because it was too tired".split())
    assert parse is not None
    hits = np.zeros((len(rows()), 2), dtype=int)
    queries = np.full(len(rows()), 100)
    hits[0, 1] = 95  # head 2: the subject in training
    card = Card(rows=rows(), hits=hits, queries=queries, sentences=100, seed=0)
    weights = np.full((2, 11, 11), 0.02)
    weights[:, :, 0] = 0.8  # every row mostly on "the"
    weights[1, 3] = 0.02
    weights[1, 3, 5] = 0.8  # head 2 from "cross": the object
    (said,) = narrate.card_sentence_lines(card, parse, weights)
    assert said == "head 2, subject in training, looks at the object “street” here (80% from “cross”), not the " \
                   "subject “animal”."


def test_a_named_head_whose_row_this_sentence_does_not_ask_is_said_so() -> None:
    parse = grammar.parse("the animal didn't cross the street because it was too tired".split())
    assert parse is not None
    names = rows()
    hits = np.zeros((len(names), 2), dtype=int)
    queries = np.full(len(names), 100)
    hits[names.index("place"), 0] = 99  # head 1: place adjective → place; "tired" is a feeling
    hits[0, 1] = 99  # head 2: the subject
    card = Card(rows=names, hits=hits, queries=queries, sentences=100, seed=0)
    weights = np.full((2, 11, 11), 1 / 11)
    weights[1, 3] = 0.01
    weights[1, 3, 1] = 0.9  # head 2 from "cross" on "animal"
    assert narrate.card_sentence_lines(card, parse, weights) == [
        "On this sentence head 2 finds the noun its card row names, clear of chance, at every query of it.",
        "This sentence has no query of head 1's row (place adj → place)."]


@settings(max_examples=100, deadline=None)
@given(cards(), st.integers(0, 2**32 - 1), st.sampled_from([
    "the animal didn't cross the street because it was too tired",
    "the animal didn't cross the street because it was too wide",
    "the queen saw the boy because he was too scared"]))
def test_a_head_whose_row_is_not_asked_is_said_to_find_exactly_the_nouns_it_picks(card: Card, seed: int,
                                                                                  text: str) -> None:
    from mhacli.grammar.card import elsewhere

    parse, weights = _parsed_with_weights(text, card.heads, seed)
    n = len(parse.tokens)
    found = {(e.head, e.query): e for e in elsewhere(card, parse, weights)}
    for i in range(card.heads):
        r, word = card.best(i)
        idle = word != evidence.UNNAMED and not row_keys(parse, card.rows[r])
        for q in {q for row in card.rows for q in row_keys(parse, row)}:
            top = int(weights[i, q].argmax())
            nouns = [row for row in card.rows if row_keys(parse, row).get(q) == top]
            hit = idle and bool(nouns) and bool(evidence.picks(float(weights[i, q, top]), n))
            assert ((i, q) in found) == hit
            if hit:
                assert found[i, q].found == nouns[0] and found[i, q].key == top
    lines = narrate.card_sentence_lines(card, parse, weights) if any(
        card.best(i)[1] != evidence.UNNAMED for i in range(card.heads)) else []
    for e in found.values():
        said = narrate.elsewhere_sentence(e, parse)
        assert said in lines and said.startswith(f"head {e.head + 1}, ") and " in training, finds the " in said


def test_the_headline_says_what_a_head_named_for_an_unasked_row_does_here() -> None:
    parse = grammar.parse("the animal didn't cross the street because it was too tired".split())
    assert parse is not None
    names = rows()
    hits = np.zeros((len(names), 2), dtype=int)
    queries = np.full(len(names), 100)
    assert "recipient" in names  # the grammar's verbs of giving
    hits[names.index("recipient"), 0] = 99  # head 1: the recipient in training
    hits[1, 1] = 99  # head 2: the object
    card = Card(rows=names, hits=hits, queries=queries, sentences=100, seed=0)
    weights = np.full((2, 11, 11), 1 / 11)
    weights[:, 3] = 0.01
    weights[:, 3, 5] = 0.9  # both heads from "cross" on "street", the object
    lines = narrate.card_sentence_lines(card, parse, weights)
    assert lines[-1] == "head 1, recipient in training, finds the object noun “street” here (90% from “cross”)."


def test_disagreeing_agreeing_and_idle_heads_are_each_said() -> None:
    parse = grammar.parse("the queen saw the boy because he was too scared".split())
    assert parse is not None
    names = rows()
    hits = np.zeros((len(names), 3), dtype=int)
    queries = np.full(len(names), 100)
    hits[0, 0] = 99  # head 1: subject
    hits[1, 1] = 99  # head 2: object
    hits[names.index("feeling"), 2] = 99  # head 3: feeling adjective; "scared" fits both nouns: no such query
    card = Card(rows=names, hits=hits, queries=queries, sentences=100, seed=0)
    weights = np.full((3, 10, 10), 0.01)
    weights[:, :, 2] = 0.91  # every row on "saw": head 1 misses the subject "queen"
    weights[1, 2] = 0.01
    weights[1, 2, 4] = 0.91  # head 2 from "saw" on "boy", the object
    assert narrate.card_sentence_lines(card, parse, weights) == [
        "head 1, subject in training, looks at itself here (91% from “saw”), not the subject “queen”.",
        "On this sentence head 2 finds the noun its card row names, clear of chance, at every query of it.",
        "This sentence has no query of head 3's row (feeling → noun)."]


# ----------------------------------------------------------------------------- knockout


def _slow_logits_without(params: dict, ids: np.ndarray, heads: int, off: int | None, pad: int,
                         word_values: bool) -> np.ndarray:
    """An explicit per-sentence, per-head loop: O = Σ_{i ≠ off} head_i (W_o^i)ᵀ, then each readout; the values
    from E alone for a model trained so (the grammar's), from X = E + P otherwise."""
    d = params["W_q"].shape[0]
    dk = d // heads
    b, n = ids.shape
    t, v, _ = params["readout"].shape
    logits = np.zeros((b, n, t, v))
    for s in range(b):
        x = params["embedding"][ids[s]] + params["positions"][:n]  # (N, d)
        x_v = params["embedding"][ids[s]] if word_values else x  # (N, d)
        seen = ids[s] != pad  # (N,)
        out = np.zeros((n, d))
        for i in range(heads):
            if i == off:
                continue
            rows_i = slice(i * dk, (i + 1) * dk)
            q = x @ params["W_q"][rows_i].T  # (N, d/h)
            k = x @ params["W_k"][rows_i].T
            val = x_v @ params["W_v"][rows_i].T
            scores = q @ k.T / math.sqrt(dk)  # (N, N)
            scores[:, ~seen] = -np.inf
            a = np.exp(scores - scores.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            out += (a @ val) @ params["W_o"][:, rows_i].T  # head i's share of O
        for j in range(t):
            logits[s, :, j] = out @ params["readout"][j].T
    return logits


def test_knockout_agrees_with_a_slow_per_head_loop(trained: TrainResult) -> None:
    model = trained.model
    params = dict(model.params)
    task = get_task("grammar")
    ids, _, _ = held_out(model, 12, 3)
    assert model.config.word_values  # the grammar's values come from E alone: the slow loop below must agree
    cache = forward(params, ids, model.config.heads, model.config.causal, task.pad, model.config.word_values)
    # with every head on, the recomposed logits are the forward's own: a change to forward shows here
    np.testing.assert_allclose(logits_without(params, cache["heads"], None), cache["logits"], atol=1e-10)
    for off in range(model.config.heads):
        fast = logits_without(params, cache["heads"], off)
        slow = _slow_logits_without(params, ids, model.config.heads, off, task.pad, model.config.word_values)
        np.testing.assert_allclose(fast, slow, atol=1e-8)


def test_knockout_scores_each_row_as_the_readout_answers_it(trained: TrainResult) -> None:
    model = trained.model
    knock = knockout(model, sentences=FEW, seed=9)
    ids, keys, names = held_out(model, FEW, 9)
    params = dict(model.params)
    pad = get_task("grammar").pad
    for off in [None, *range(model.config.heads)]:
        logits = _slow_logits_without(params, ids, model.config.heads, off, pad, model.config.word_values)
        for r, name in enumerate(names):
            t = model.targets.index(name if name in model.targets else "referent")
            asked = keys[r] >= 0
            truth = np.take_along_axis(ids, keys[r].clip(0), axis=-1)
            acc = float((logits[..., t, :].argmax(-1) == truth)[asked].mean()) if asked.any() else 0.0
            got = knock.full[r] if off is None else knock.without[off, r]
            assert got == pytest.approx(acc)
    assert knock.cost.shape == (model.config.heads, len(names))


def test_a_knockout_cost_carries_a_bootstrap_interval_over_whole_sentences(trained: TrainResult) -> None:
    """Each cost's 95 % interval is the percentile bootstrap of a slow loop over resampled sentences, holds the
    cost, and travels in to_dict; the same seed gives the same interval."""
    from mhacli.grammar.knockout import BOOTSTRAP, bootstrap

    knock = knockout(trained.model, sentences=FEW, seed=9)
    assert knock.low is not None and knock.high is not None
    assert (knock.low <= knock.cost + 1e-9).all() and (knock.cost <= knock.high + 1e-9).all()
    data = knock.to_dict()
    assert data["cost_low"] == knock.low.tolist() and data["bootstrap"] == BOOTSTRAP
    rng = np.random.default_rng(1)
    asked = rng.integers(0, 3, (2, 40)).astype(float)
    full = np.minimum(asked, rng.integers(0, 3, (2, 40)))
    without = np.minimum(asked[None], rng.integers(0, 3, (3, 2, 40)))
    low, high = bootstrap(full, without, asked, 5)
    times = np.random.default_rng(5).multinomial(40, np.full(40, 1 / 40), size=BOOTSTRAP)
    slow = np.empty((BOOTSTRAP, 3, 2))
    for b in range(BOOTSTRAP):
        pick = np.repeat(np.arange(40), times[b])  # the resample, sentence by sentence
        n = np.maximum(asked[:, pick].sum(axis=1), 1)
        slow[b] = 100 * (full[:, pick].sum(axis=1) - without[:, :, pick].sum(axis=2)) / n
    np.testing.assert_allclose(low, np.percentile(slow, 2.5, axis=0), atol=1e-9)
    np.testing.assert_allclose(high, np.percentile(slow, 97.5, axis=0), atol=1e-9)


def test_a_cost_whose_interval_reaches_across_the_threshold_says_so() -> None:
    """A cost printed as worth a word (12) whose interval reaches below 10 is said to; a settled one is not."""
    from mhacli.grammar.knockout import Knockout

    names = rows()
    card = Card(rows=names, hits=np.zeros((len(names), 1), dtype=np.int64), queries=np.full(len(names), 100),
                sentences=100, seed=0)
    without = np.ones((1, len(names)))
    without[0, 0], without[0, 1] = 0.88, 0.5
    low, high = 100 * (1 - without) - 4, 100 * (1 - without) + 4  # subject 8 to 16, object 46 to 54
    knock = Knockout(rows=names, full=np.ones(len(names)), without=without, queries=np.full(len(names), 100),
                     sentences=100, seed=0, low=low, high=high)
    said = [narrate.mismatch_sentence(m) for m in mismatches(card, knock)]
    assert "costs subject 12 points (95% interval 8 to 16, which reaches below 10)" in said[0]
    assert "costs object 50 points (95% interval 46 to 54)," in said[1]


def test_mismatches_are_said_where_card_and_knockout_part() -> None:
    from mhacli.grammar.knockout import Knockout

    names = rows()
    hits = np.zeros((len(names), 2), dtype=int)
    queries = np.full(len(names), 100)
    hits[0, 0] = 95  # head 1 named subject
    card = Card(rows=names, hits=hits, queries=queries, sentences=100, seed=0)
    full = np.ones(len(names))
    without = np.ones((2, len(names)))
    without[1, 1] = 0.5  # head 2 off costs the object 50 points, though nothing names it there
    found = mismatches(card, Knockout(rows=names, full=full, without=without, queries=queries, sentences=100, seed=0))
    assert {(m.head, m.row, m.named) for m in found} == {(0, "subject", True), (1, "object", False)}
    said = [narrate.mismatch_sentence(m) for m in found]
    assert "head 1 is known by subject (95% trained), yet switching it off costs subject only 0 points" in said[0]
    assert said[1].startswith("switching off head 2 costs object 50 points")


@given(st.lists(st.integers(0, 100), min_size=2 * 7, max_size=2 * 7),
       st.lists(st.floats(0.0, 1.0), min_size=2 * 7, max_size=2 * 7))
def test_the_clean_knockout_check_is_the_target_read_off_the_card_and_the_costs(rates: list[int],
                                                                               left: list[float]) -> None:
    """A named head meets the target when its row loses ≥ 30 points and no row outside its names (and the
    referent, for a part of it) loses more than 5; a slow reading of the same numbers agrees."""
    from mhacli.grammar.knockout import OTHER_POINTS, OWN_POINTS, PARTS_OF, Knockout, clean

    names = rows()
    hits = np.array(rates).reshape(len(names), 2)
    queries = np.full(len(names), 100)
    card = Card(rows=names, hits=hits, queries=queries, sentences=100, seed=0)
    without = np.array(left).reshape(2, len(names))
    knock = Knockout(rows=names, full=np.ones(len(names)), without=without, queries=queries, sentences=100, seed=0)
    found = {c.head: c for c in clean(card, knock)}
    for i in range(2):
        best, word = card.best(i)
        assert (i in found) == (word == "named")
        if i not in found:
            continue
        own = {names[r] for r in range(len(names)) if card.named(r, i)}
        own |= {whole for whole, parts in PARTS_OF.items() if own & set(parts)}
        cost = 100 * (1 - without[i])
        met = cost[best] >= OWN_POINTS and all(cost[r] <= OTHER_POINTS for r in range(len(names))
                                               if names[r] not in own)
        assert found[i].met == met and found[i].row == names[best] and found[i].own == cost[best]


# ----------------------------------------------------------------------------- renderers and figures


def test_the_card_table_fits_80_and_40_columns(trained: TrainResult) -> None:
    from mhacli.pipeline import card_shown
    from mhacli.render.card import card_report, knockout_report, sweep_report

    card = trained.model.card
    assert card is not None
    knock = knockout(trained.model, sentences=FEW, seed=1)
    swept = sweep([[trained], [trained]])
    shown = card_shown(card)
    for width in (80, 40):
        console = Console(file=__import__("io").StringIO(), width=width, color_system=None)
        for part in [*card_report(shown), *knockout_report(card_shown(card, knock=knock), knock),
                     *sweep_report(swept)]:
            console.print(part)
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert max(len(line) for line in text.splitlines()) <= width
        assert "…" not in text
        for i in range(card.heads):
            assert f"{math.floor(100 * card.rate[0, i] + 1e-9)}%" in text


def test_the_card_figure_shows_the_card_at_a_readable_size(trained: TrainResult, tmp_path: Path) -> None:
    from mhacli.pipeline import card_shown
    from mhacli.render.figures.card import card_figure, sweep_figure

    card = trained.model.card
    assert card is not None
    fig = card_figure(card_shown(card))
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), card.rate)
    assert [t.get_text() for t in ax.get_yticklabels()] == [short_name(r) for r in card.rows]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"head {i + 1}" for i in range(card.heads)]
    dpi = fig.get_dpi()
    texts = [t for a in fig.axes for t in (*a.texts, *a.get_xticklabels(), *a.get_yticklabels())]
    assert texts and min(t.get_fontsize() for t in texts) * dpi / 72 >= 10  # pixels at the saved size
    swept = sweep([[trained], [replace(trained, relation_accuracy=(1.0,) * len(trained.relation_accuracy))]])
    bars = sweep_figure(swept).axes[0].patches
    np.testing.assert_allclose([b.get_height() for b in bars], swept.gap)
    fig.savefig(tmp_path / "card.png")
    assert (tmp_path / "card.png").stat().st_size > 5000


def test_each_card_cell_shows_the_baselines_its_name_must_beat(trained: TrainResult) -> None:
    """Beside each cell's rate and interval, in the terminal table and card.png: ``vs A/O``, the head's always-looks-
    there baseline and the row's best offset, in whole percent rounded down like the rates and the labels."""
    from mhacli.pipeline import card_shown
    from mhacli.render.card import card_table
    from mhacli.render.figures.card import card_figure

    card = trained.model.card
    assert card is not None and card.always is not None and card.offset is not None
    shown = card_shown(card)
    console = Console(file=__import__("io").StringIO(), width=200, color_system=None)
    console.print(card_table(shown))
    table = console.file.getvalue()  # type: ignore[attr-defined]
    cells = [t.get_text() for t in card_figure(shown).axes[0].texts]
    for r in range(len(card.rows)):
        for i in range(card.heads):
            said = f"vs {math.floor(100 * card.always[r, i] + 1e-9)}/{math.floor(100 * card.offset[r] + 1e-9)}"
            assert shown.bases[r][i] == said and said in table
            assert cells[r * card.heads + i].splitlines()[-1] == said
    assert "always looks there / best offset" in shown.outline and "always looks there / best offset" in shown.rule
    assert "always looks there" in card.label(0)  # and the label says them in words, the same digits
    low = card.evidence(0, 0)
    assert f"always looks there {math.floor(100 * card.always[0, 0] + 1e-9)}%" in low


# ----------------------------------------------------------------------------- the saved model carries its card


def test_the_saved_model_carries_its_card(trained: TrainResult, tmp_path: Path) -> None:
    from mhacli.models.trained import load_trained, save_trained

    path = save_trained(trained, tmp_path / "g.npz")
    model, metrics = load_trained(path)
    assert model.card is not None and (model.card.hits == trained.model.card.hits).all()  # type: ignore[union-attr]
    assert model.labels == trained.model.labels and metrics["card"]["sentences"] == 2000


def test_a_file_whose_card_does_not_fit_its_model_is_refused(trained: TrainResult, tmp_path: Path) -> None:
    from mhacli.attention.errors import UsageError
    from mhacli.models.trained import load_trained, trained_arrays

    arrays = trained_arrays(trained)
    metrics = json.loads(str(arrays["metrics"]))
    metrics["card"]["hits"] = [row[:1] for row in metrics["card"]["hits"]]  # one head where the model has 4
    np.savez(tmp_path / "bad.npz", **{**arrays, "metrics": np.array(json.dumps(metrics))})
    with pytest.raises(UsageError, match="report card has 1 heads, the model 4"):
        load_trained(tmp_path / "bad.npz")
    metrics["card"] = {"rows": 3}
    np.savez(tmp_path / "bad.npz", **{**arrays, "metrics": np.array(json.dumps(metrics))})
    with pytest.raises(UsageError, match="is not one"):
        load_trained(tmp_path / "bad.npz")


# ----------------------------------------------------------------------------- the command


FAST = ["--task", "grammar", "--steps", "5", "--batch", "8"]


def test_train_prints_the_card_and_knockout_side_by_side() -> None:
    result = runner.invoke(app, ["train", *FAST, "--knockout", "--no-plots"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Where each head looks (report card) and what switching it off costs (knockout)" in out
    assert "h1" in out and "looks" in out and "off" in out
    assert "Card and knockout agree" in out or "switching off head" in out or "is known by" in out


@pytest.mark.slow
def test_train_json_carries_card_knockout_and_sweep_and_follows_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from mhacli.io.schemas import schema

    result = runner.invoke(app, ["train", *FAST, "--knockout", "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("train"))
    (run,) = document["runs"]
    card = Card.from_dict(run["card"])
    assert run["relations"] == [{"relation": n, "share": s} for n, s in
                                (card.relation(i) for i in range(card.heads))]
    assert len(run["knockout"]["without"]) == 4 and run["knockout"]["disagreements"]
    result = runner.invoke(app, ["train", *FAST, "--seeds", "0-1", "--compare", "1,2", "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("train"))
    swept = document["sweep"]
    assert swept["seeds"] == [0, 1] and swept["heads"] == [1, 2] and len(document["runs"]) == 4
    for k, seed in enumerate((0, 1)):
        by = {r["heads"]: np.mean(list(r["relation_accuracy"].values())) for r in document["runs"]
              if r["seed"] == seed}
        assert swept["gap_points"][k] == pytest.approx(100 * (by[2] - by[1]))


@pytest.mark.slow
def test_the_seed_sweep_prints_its_table_spread_and_figure(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", *FAST, "--seeds", "0,3", "--compare", "1,2", "--out", str(tmp_path)],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "Over 2 seeds, 2 heads are" in result.output and "mean" in result.output
    assert (tmp_path / "sweep.png").stat().st_size > 5000 and not (tmp_path / "training.png").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--seeds", "4-1"], "--seeds takes seeds as a range or a list"),
    (["--seeds", "0-99999999999"], "--seeds takes at most 20 seeds"),
    (["--seeds", "a"], "--seeds takes seeds as a range or a list"),
    (["--seeds", "0-1", "--compare", "1,2", "--save", "m.npz"], "--save keeps one model"),
    (["--seeds", "0-1"], "--seeds sets head counts side by side on every seed: add --compare"),
])
def test_bad_sweep_options_are_one_line_and_exit_2(args: list[str], said: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", *FAST, "--no-plots", *args])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output


def test_knockout_needs_the_grammar() -> None:
    result = runner.invoke(app, ["train", "--steps", "3", "--knockout", "--no-plots"])
    assert result.exit_code == 2 and "--knockout scores heads against the grammar's parse" in result.output


def test_explain_shows_a_carded_model_its_card_once(trained: TrainResult, tmp_path: Path) -> None:
    from mhacli.models.trained import save_trained

    path = save_trained(trained, tmp_path / "g.npz")
    text = "The animal didn't cross the street because it was too tired"
    result = runner.invoke(app, ["explain", text, "--weights", str(path), "--no-plots"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert result.output.count("The model's report card, measured in training on 2,000 held-out sentences") == 1
    assert "not on this sentence" in result.output
    hidden = runner.invoke(app, ["explain", text, "--weights", str(path), "--no-plots", "--hide-rules"])
    assert hidden.exit_code == 0 and "report card" not in hidden.output
