"""The interactive page without a browser: self-contained, data equal to the trace, safe escaping, CLI.

The browser tests (hover, keys, screenshot) are in tests/test_html_browser.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhacli.measures.analysis import analyse
from mhacli.pipeline import paged, result_of
from mhacli.render import theme
from mhacli.cli.app import app
from mhacli.attention.attention import causal_mask
from mhacli.attention.trace import run_tokens
from traced import run
from mhacli.attention.config import Config
from mhacli.render.html import (DATA_PLACEHOLDER, DEFAULT_MAX_TOKENS, embed_json, page_data, render_html,
                         template, write_html)
from mhacli.attention.tokenize import label

def _paged(shown, max_tokens=None):
    """The result a page draws: ``shown`` measured once (every layer of a view), its window's measures made."""
    return paged(result_of(shown, layers=True), max_tokens)


SENTENCE = "The animal didn't cross the street because it was too tired"
NASTY = ("</script><script>alert(1)</script>", "<!--", "<b>bold</b>", "&amp;", "a\u2028b\u2029c",
         "]]>", "\"quoted\"", "'single'", "\\u003c", "</SCRIPT >", "\U0001F600")
DATA_RE = re.compile(r'<script type="application/json" id="mha-data">(.*?)</script>', re.S)


def data_of(page: str) -> dict:
    """The JSON the page embeds, parsed the way the browser's JSON.parse would."""
    blocks = DATA_RE.findall(page)
    assert len(blocks) == 1
    return json.loads(blocks[0])


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch):
    """Run CLI commands from an empty folder, so anything they write by default lands there."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def quiet(runner) -> list[str]:
    """--no-plots where explain makes figures by default: these tests are about the page."""
    return ["--no-plots"] if "--no-plots" in runner.invoke(app, ["explain", "--help"]).output else []


def long_text(n: int) -> str:
    words = "the cat sat on the mat because it was warm and the dog ran after a ball".split()
    return " ".join(words[i % len(words)] for i in range(n))


# ---------------------------------------------------------------------------
# Self-contained: nothing is fetched from anywhere
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_page_is_self_contained(causal):
    shown = run(SENTENCE, heads=4, causal=causal)
    page = render_html(_paged(shown))
    lower = page.lower()
    for needle in ("http://", "https://", "//cdn", "@import", "<link", "url(", "<iframe", "<img",
                   "fetch(", "xmlhttprequest", "websocket", "importscripts", "sourcemappingurl"):

        assert needle not in lower, needle
    # No src= at all: every script and style is inline.
    assert re.search(r"\bsrc\s*=", lower) is None
    # A content security policy forbids any request even if something slipped through.
    assert "default-src 'none'" in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert page.startswith("<!DOCTYPE html>")


def test_template_never_parses_data_as_markup():
    text = template()
    assert text.count(DATA_PLACEHOLDER) == 1
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "setTimeout(\"", "javascript:"):
        assert sink not in text, sink


def test_template_ships_as_package_data():
    from importlib import resources

    assert (resources.files("mhacli.render") / "templates" / "page.html").is_file()


# ---------------------------------------------------------------------------
# The embedded data is the trace
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("heads,d_model,causal", [(1, 8, False), (4, 16, False), (4, 16, True), (8, 16, True)])
def test_data_equals_the_trace(heads, d_model, causal):
    t = run(SENTENCE, heads=heads, d_model=d_model, seed=3, causal=causal)
    d = data_of(render_html(_paged(t)))
    assert d["tokens"] == list(t.tokens)
    assert d["labels"] == [label(tok, 24) for tok in t.tokens]
    assert d["heads"] == heads and d["n_tokens"] == t.n_tokens
    w = np.array(d["weights"])
    assert w.shape == t.weights.shape
    np.testing.assert_allclose(w, t.weights, atol=0.5e-4 + 1e-12)
    np.testing.assert_allclose(np.array(d["average"]), np.asarray(t.weights).mean(axis=0), atol=0.5e-4 + 1e-12)
    scores = np.array([[[np.nan if x is None else x for x in row] for row in m] for m in d["scores"]])
    finite = np.isfinite(t.scores)
    np.testing.assert_array_equal(np.isfinite(scores), finite)
    np.testing.assert_allclose(scores[finite], np.asarray(t.scores)[finite], atol=0.5e-3 + 1e-12)
    assert d["colors"] == [theme.head_color(i) for i in range(heads)]
    assert d["colors"][: min(heads, 8)] == list(theme.HEAD_COLORS[: min(heads, 8)])
    assert d["steps"] == [s.to_dict() for s in t.steps]
    assert d["total_madds"] == sum(s.madds for s in t.steps)
    assert d["parameters"]["total"] == t.parameters.total
    assert d["parameters"]["multi_head_qkv"] == d["parameters"]["single_head_qkv"]
    assert d["config"] == t.config.to_dict()
    assert d["causal"] is causal
    if causal:
        np.testing.assert_array_equal(np.array(d["mask"], dtype=bool), causal_mask(t.n_tokens))
        assert any(step["key"] == "mask" for step in d["steps"])
    else:
        assert d["mask"] is None
    assert d["window"] == {"start": 0, "stop": t.n_tokens, "total": t.n_tokens,
                           "max_tokens": DEFAULT_MAX_TOKENS, "windowed": False}
    np.testing.assert_array_equal(np.array(d["outside"]), 0.0)


def test_rules_are_embedded_when_present():
    t = run(SENTENCE, heads=4)
    assert data_of(render_html(_paged(t)))["rules"] is None
    ruled = dataclasses.replace(t, rules=("previous token", "next token", "same word", "first token"))
    d = data_of(render_html(_paged(ruled)))
    assert d["rules"] == ["previous token", "next token", "same word", "first token"]


def test_page_of_a_loaded_trace_names_its_source(tmp_path):
    from mhacli.io.export import load_trace, save_npz

    npz = save_npz(run(SENTENCE, heads=2, d_model=8, causal=True), tmp_path / "t.npz")
    loaded = load_trace(npz)
    d = data_of(render_html(_paged(loaded)))
    assert d["source"] == str(npz)
    np.testing.assert_allclose(np.array(d["weights"]), loaded.weights, atol=0.5e-4 + 1e-12)
    assert d["mask"] is not None


def test_long_text_is_windowed_and_says_what_it_left_out():
    t = run(long_text(250), heads=2, d_model=8)
    d = page_data(_paged(t))
    assert d["window"] == {"start": 0, "stop": 200, "total": 250, "max_tokens": 200, "windowed": True}
    assert len(d["tokens"]) == 200 and d["n_tokens"] == 250
    w, out = np.array(d["weights"]), np.array(d["outside"])
    assert w.shape == (2, 200, 200) and out.shape == (2, 200)
    np.testing.assert_allclose(w, np.asarray(t.weights)[:, :200, :200], atol=0.5e-4 + 1e-12)
    # Inside plus outside is the whole softmax row: nothing silently vanishes.
    np.testing.assert_allclose(np.asarray(t.weights)[:, :200, :200].sum(-1) + out, 1.0, atol=1e-4)
    assert out.min() > 0
    np.testing.assert_allclose(np.array(d["outside_average"]), out.mean(axis=0), atol=1e-4)


def test_max_tokens_must_be_positive():
    with pytest.raises(ValueError):
        shown = run("a b c")
        _paged(shown, max_tokens=0)


def test_heatmap_colours_come_from_the_theme():
    matplotlib = pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    shown = run("a b")
    d = page_data(_paged(shown))
    # One palette: the page interpolates the theme's anchors, exactly as the terminal grid does …
    assert d["cmap"] == {"name": theme.HEATMAP_CMAP, "stops": list(theme.HEATMAP_ANCHORS)}
    assert d["mask_color"] == theme.MASK_COLOR and d["hatch_color"] == theme.HATCH_COLOR
    # … and those anchors are the figures' colour map, sampled evenly.
    cmap = matplotlib.colormaps[theme.HEATMAP_CMAP]
    expected = [to_hex(cmap(x)) for x in np.linspace(0, 1, len(d["cmap"]["stops"]))]
    assert [s.lower() for s in d["cmap"]["stops"]] == expected


# ---------------------------------------------------------------------------
# Escaping: no token can become markup
# ---------------------------------------------------------------------------


def test_hostile_tokens_stay_data():
    t = run_tokens(NASTY, Config(heads=2, d_model=8))
    page = render_html(_paged(t))
    assert page.count("</script>") == 2  # only the page's own two script elements close
    assert "<script>alert" not in page and "<!--" not in page.split("<body>", 1)[1]
    assert "<b>bold" not in page
    assert "\u2028" not in page and "\u2029" not in page
    # The markup characters stay data; a line or paragraph separator is spelled out, as everywhere on the page.
    from mhacli.attention.messages import printable

    assert data_of(page)["tokens"] == [printable(t) for t in NASTY] and data_of(page)["tokens"][0] == NASTY[0]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                    max_leaves=12))
def test_embed_json_round_trips_without_markup_characters(value):
    text = embed_json(value)
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == value


# ---------------------------------------------------------------------------
# Writing the file
# ---------------------------------------------------------------------------


def test_write_html_is_atomic_and_replaces(tmp_path):
    target = tmp_path / "page.html"
    target.write_text("old")
    shown = run(SENTENCE)
    out = write_html(_paged(shown), target)
    assert out == target
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]  # no temp file left behind
    assert oct(target.stat().st_mode & 0o777) == "0o644"


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def test_explain_html_writes_the_page_and_lists_it(runner, in_tmp):
    target = in_tmp / "page.html"
    r = runner.invoke(app, ["explain", SENTENCE, "--heads", "4", "--html", str(target), *quiet(runner)])
    assert r.exit_code == 0, r.output
    assert "Wrote:" in r.stdout and str(target) in r.stdout
    d = data_of(target.read_text(encoding="utf-8"))
    np.testing.assert_allclose(np.array(d["weights"]), run(SENTENCE, heads=4).weights, atol=0.5e-4 + 1e-12)


def test_explain_html_with_json_keeps_stdout_pure(runner, in_tmp):
    target = in_tmp / "page.html"
    r = runner.invoke(app, ["explain", "the cat sat", "--json", "--html", str(target), *quiet(runner)])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)
    assert str(target) in r.stderr and target.is_file()


def test_explain_html_target_checked_before_any_work(runner, in_tmp):
    npz, out = in_tmp / "t.npz", in_tmp / "figs"
    r = runner.invoke(app, ["explain", SENTENCE, "--save-npz", str(npz), "--html", str(in_tmp / "no" / "p.html")])
    assert r.exit_code == 2
    assert "--html" in r.stderr and "does not exist" in r.stderr
    r = runner.invoke(app, ["explain", SENTENCE, "--html", str(in_tmp)])
    assert r.exit_code == 2 and "--html" in r.stderr and "folder" in r.stderr
    # Refused before computing, so nothing at all was written: no npz, no figures.
    assert sorted(p.name for p in in_tmp.rglob("*")) == ["cwd"]
    assert not npz.exists() and not out.exists()


def test_html_window_is_200_tokens_unless_max_tokens_is_given(runner, in_tmp):
    text, small = long_text(230), ["--heads", "2", "--d-model", "8", *quiet(runner)]
    r = runner.invoke(app, ["explain", text, *small, "--html", str(in_tmp / "a.html")])
    assert r.exit_code == 0, r.output
    assert data_of((in_tmp / "a.html").read_text(encoding="utf-8"))["window"]["stop"] == 200
    r = runner.invoke(app, ["explain", text, *small, "--max-tokens", "12", "--html", str(in_tmp / "b.html")])
    assert r.exit_code == 0, r.output
    w = data_of((in_tmp / "b.html").read_text(encoding="utf-8"))["window"]
    assert w["stop"] == 12 and w["total"] == 230 and w["windowed"]


def test_show_html_from_a_saved_trace(runner, in_tmp):
    npz, page = in_tmp / "t.npz", in_tmp / "t.html"
    r = runner.invoke(app, ["explain", SENTENCE, "--causal", "--save-npz", str(npz), *quiet(runner)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", str(npz), "--html", str(page), *quiet(runner)])
    assert r.exit_code == 0, r.output
    assert "Wrote:" in r.stdout and str(page) in r.stdout
    d = data_of(page.read_text(encoding="utf-8"))
    assert d["causal"] and d["source"] == str(npz)
    r = runner.invoke(app, ["show", str(npz), "--html", str(in_tmp / "missing" / "t.html")])
    assert r.exit_code == 2 and "--html" in r.stderr


def test_a_causal_page_is_written_where_named_from_another_folder(runner, in_tmp):
    """In-process, from in_tmp/cwd (the installed script's way out is test_errors' and test_cli_conventions')."""
    target = in_tmp / "page.html"
    p = runner.invoke(app, ["explain", SENTENCE, "--heads", "4", "--causal", "--html", str(target), *quiet(runner)],
                      env={"COLUMNS": "80"})
    assert p.exit_code == 0, p.stderr
    assert str(target) in p.stdout
    d = data_of(target.read_text(encoding="utf-8"))
    assert d["heads"] == 4 and d["causal"]


def test_docs_snippet_reads_the_page_back(tmp_path):
    """docs/html.md shows how to read the numbers out of a page; that snippet must keep working."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "html.md"
    snippet = re.search(r"```python\n(.*?)```", docs.read_text(encoding="utf-8"), re.S).group(1)
    t = run(SENTENCE, heads=4)
    write_html(_paged(t), tmp_path / "animal.html")
    p = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    token, row = p.stdout.strip().split(" ", 1)
    assert token == "it" == t.tokens[7]
    np.testing.assert_allclose(json.loads(row), t.weights[0, 7], atol=0.5e-4 + 1e-12)


# ---------------------------------------------------------------------------
# The measures, the weights' label, and an attention view with layers
# ---------------------------------------------------------------------------


def test_summaries_are_the_per_query_measures_and_the_page_names_its_weights():

    t = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed")
    d = data_of(render_html(_paged(t)))
    a = analyse(t)
    for sm, s in zip(d["summaries"], a.heads):
        assert (sm["pattern"], sm["pattern_rows"], sm["pattern_of"]) == (s.pattern, s.pattern_rows, s.pattern_of)
        assert sm["pattern_share"] == pytest.approx(s.pattern_share) and sm["pattern_share"] >= 0.9
    assert len({sm["pattern"] for sm in d["summaries"]}) == 4  # four heads, four relations
    assert d["weights_label"].startswith("designed weights: head 1, previous token")
    shown = run(SENTENCE)
    label = data_of(render_html(_paged(shown)))["weights_label"]
    assert label == "random weights: these patterns mean nothing yet"
    hidden = data_of(render_html(_paged(t), hide_rules=True))
    assert hidden["rules"] is None and all(sm["pattern"] is None for sm in hidden["summaries"])
    embedded = json.dumps(hidden)  # the template explains every relation; the data names none
    assert not any(rule in embedded for rule in t.rules + ("itself", "previous token", "first token"))


def _layers(causal: bool = False) -> np.ndarray:
    rng = np.random.default_rng(7)
    s = rng.standard_normal((3, 2, 6, 6)) * 2
    if causal:
        s = np.where(np.triu(np.ones((6, 6), bool), 1), -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def test_a_view_page_has_its_weights_every_layer_and_nothing_invented():
    from mhacli.measures.view import from_attention

    w = _layers(causal=True)
    view = from_attention(w, "the cat sat on the mat".split(), layer_names=["a", "b", "c"], layer=1)
    result = result_of(view, layers=True)  # the page's layer picker reads every layer's analysis
    d = data_of(render_html(paged(result)))
    assert d["kind"] == "view" and d["layer"] == 1 and d["layer_names"] == ["a", "b", "c"]
    for key in ("config", "scores", "steps", "parameters", "split_equals_direct_max_diff"):
        assert d[key] is None, key
    np.testing.assert_allclose(np.array(d["weights"]), w[1], atol=0.5e-4 + 1e-12)
    assert d["causal"] is True and d["mask"] is not None
    assert len(d["layers"]) == 3
    for k, layer in enumerate(d["layers"]):
        np.testing.assert_allclose(np.array(layer["weights"]), w[k], atol=0.5e-4 + 1e-12)
        np.testing.assert_allclose(np.array(layer["average"]), w[k].mean(axis=0), atol=0.5e-4 + 1e-12)
        a = analyse(view.at_layer(k))
        assert [sm["pattern"] for sm in layer["summaries"]] == [s.pattern for s in a.heads]
        assert layer["weights_label"] == f"attention from your model, layer {k} of 0–2 ({'abc'[k]})"
    # A picture too big for every layer keeps the shown one only, and says so in the picker.
    from mhacli.render import html as page_module

    small = page_module.LAYERS_BUDGET
    try:
        page_module.LAYERS_BUDGET = 10
        assert page_data(_paged(view))["layers"] is None
    finally:
        page_module.LAYERS_BUDGET = small
    shown = from_attention(w[0], view.tokens)
    assert data_of(render_html(_paged(shown)))["layers"] is None  # one layer: no picker


def _grammar_page(hide_rules: bool) -> dict:
    from mhacli.pipeline import prepare

    result = prepare("the animal didn't cross the street because it was too tired", weights="grammar").run()
    return data_of(render_html(paged(result), hide_rules=hide_rules)), result


def test_a_grammar_run_gets_a_parse_section_with_every_heads_look():
    """The page's parse section: from each parsed word, every head's top key and its weight on the noun, read
    from the run's reading; the template draws it."""
    data, result = _grammar_page(False)
    reading = result.analysis.reading
    t = result.trace.tokens
    rows = data["parse"]["rows"]
    assert [(r["query"], r["relation"], r["key"]) for r in rows] == [(k.query, k.relation, k.key)
                                                                      for k in reading.looks]
    for r, look in zip(rows, reading.looks):
        assert r["tops"] == [label(t[k], 24) for k in look.top]
        assert r["weights"] == [pytest.approx(w, abs=1e-4) if k == look.key else None
                                for k, w in zip(look.top, look.weight)]
    assert "subject: animal" in data["parse"]["said"]
    page = template()
    assert 'id="parse"' in page and "D.parse.rows" in page
    assert data_of(render_html(_paged(run("the cat sat on the mat"))))["parse"] is None


def test_the_hidden_parse_section_names_no_relation_and_marks_no_noun():
    data, result = _grammar_page(True)
    rows = data["parse"]["rows"]
    assert len(rows) == len(result.analysis.reading.queries)  # one row a word: "cross" once
    assert all(r["relation"] is None and r["noun"] is None and r["weights"] is None for r in rows)
    assert data["parse"]["said"] is None and data["rules"] is None


def test_measured_labels_are_never_called_rules():
    """A trained model's head names are measured in training: the page calls them that, a designed head's a
    rule, and the template takes the word from the data instead of writing "rule:" itself."""
    data, _ = _grammar_page(False)
    assert data["rules"] and data["rules_word"] == "measured in training"
    designed = run("the cat sat on the mat", weights="designed")
    assert data_of(render_html(_paged(designed)))["rules_word"] == "rule"
    assert '"rule: "' not in template() and "D.rules_word" in template()
