"""Issues 45 and 47 on the views, the page and the notebook: a grouped model's attention labelled by its key/value
groups, the groups marked on the page, the page's model view, and a notebook display that fits one screen."""

from __future__ import annotations

import numpy as np
import pytest

import mhacli
from mhacli.attention.errors import UsageError
from mhacli.measures.view import from_attention
from mhacli.pipeline import paged, result_of
from mhacli.render.html import page_data

# `browser`: the worker's headless Chromium (tests/conftest.py; a stated skip without it)

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def weights(layers=2, heads=8, n=6, seed=0, causal=False):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(layers, heads, n, n)) * 2
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


# --- from_attention(kv_heads=g) --------------------------------------------------------------------------------
def test_kv_heads_labels_which_query_heads_share_a_group():
    view = from_attention(weights(), TOKENS, kv_heads=2)
    assert view.kv_heads == 2 and view.head_groups == (0, 0, 0, 0, 1, 1, 1, 1)
    assert "8 heads in 2 key/value groups over 6 tokens" in repr(view)
    assert view.at_layer(1).head_groups == view.head_groups  # another layer, the same groups
    plain = from_attention(weights(), TOKENS)
    assert plain.kv_heads == 8 and plain.head_groups == tuple(range(8))
    assert from_attention(weights(), TOKENS, kv_heads=8).key_value_heads is None  # g = h: the article's


@pytest.mark.parametrize("g", [0, 3, 16, -2])
def test_kv_heads_that_does_not_divide_h_is_refused_in_the_apis_words(g):
    with pytest.raises(UsageError) as got:
        from_attention(weights(), TOKENS, kv_heads=g)
    said = str(got.value)
    assert said.startswith(f"kv_heads {g} must divide the 8 heads") and "1, 2, 4, 8" in said


@pytest.mark.parametrize("g", [2.0, "2", True])
def test_kv_heads_must_be_a_whole_number(g):
    with pytest.raises(UsageError, match="kv_heads must be a whole number"):
        from_attention(weights(), TOKENS, kv_heads=g)


def test_the_figures_mark_the_groups_of_a_views_heads():
    from matplotlib.text import Text

    view = from_attention(weights(), TOKENS, kv_heads=2)
    texts = [t.get_text() for t in mhacli.heads_figure(view).findobj(Text)]
    assert [t.split(" · ")[0] for t in texts if t.startswith("group ")] == ["group 1"] * 4 + ["group 2"] * 4
    ticks = [t.get_text() for t in mhacli.model_figure(view).axes[0].get_xticklabels()]
    assert ticks[0] == "head 1\ngroup 1" and ticks[7] == "head 8\ngroup 2"
    plain = [t.get_text() for t in mhacli.model_figure(from_attention(weights(), TOKENS)).axes[0].get_xticklabels()]
    assert plain[0] == "head 1"


@pytest.mark.torch
def test_a_transformers_grouped_models_output_attentions_are_labelled_by_its_config():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=32, num_hidden_layers=2, vocab_size=50,
                                      attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    with torch.no_grad():
        out = model(torch.arange(6)[None], output_attentions=True)
    view = mhacli.from_attention(out.attentions, TOKENS, kv_heads=model.config.num_key_value_heads)
    assert view.n_layers == 2 and view.head_groups == (0, 0, 1, 1)
    assert page_data(paged(result_of(view, layers=True)))["groups"] == [0, 0, 1, 1]


# --- the page ------------------------------------------------------------------------------------------------
def test_the_page_carries_the_groups_of_a_run_and_of_a_view():
    run = mhacli.run("the cat sat on the mat", heads=4, d_model=16, kv_heads=2)
    data = page_data(paged(run))
    assert data["kv_heads"] == 2 and data["groups"] == [0, 0, 1, 1]
    plain = page_data(paged(mhacli.run("the cat sat on the mat", heads=4, d_model=16)))
    assert plain["kv_heads"] == 4 and plain["groups"] is None
    view = page_data(paged(result_of(from_attention(weights(1), TOKENS, kv_heads=4))))
    assert view["groups"] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_the_page_holds_every_layer_and_head_for_its_model_view():
    import base64
    import zlib

    w = weights(layers=3, heads=4, n=6)
    data = page_data(paged(result_of(from_attention(w, TOKENS), layers=True)))
    model = data["model"]
    assert model["shape"] == [3, 4, 6, 6] and model["block"] == 1
    levels = np.frombuffer(zlib.decompress(base64.b64decode(model["u8"])), np.uint8).reshape(3, 4, 6, 6)
    assert np.abs(levels / 255 - w).max() <= 0.5 / 255 + 1e-12
    one = page_data(paged(result_of(from_attention(w[:1], TOKENS), layers=True)))
    assert one["model"] is None  # one layer: its heads are the page itself
    shown_only = page_data(paged(result_of(from_attention(w, TOKENS))))  # a notebook display: one layer
    assert shown_only["model"] is None


def test_a_large_model_views_thumbnails_average_blocks_to_stay_small():
    from mhacli.render.html import MODEL_BUDGET, model_data

    view = from_attention(weights(layers=24, heads=16, n=64, seed=3), [f"t{i}" for i in range(64)])
    model = model_data(view, 64)
    layers, heads, t, _ = model["shape"]
    assert (layers, heads) == (24, 16) and model["block"] > 1 and layers * heads * t * t <= MODEL_BUDGET


# --- the page in a headless browser ---------------------------------------------------------------------------
NOTEBOOK_SCREEN = 950  # px: a 1080p screen less the browser's and the notebook's own bars


def _browser_page(browser, html: str, tmp_path, viewport):
    path = tmp_path / "page.html"
    path.write_text(html, encoding="utf-8")
    ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, offline=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri() + "#q=0")
    page.wait_for_selector("html[data-ready=true]", timeout=15000)
    return ctx, page, errors


@pytest.mark.parametrize(("layers", "heads", "n", "g"), [(12, 12, 40, None), (12, 12, 40, 4), (1, 32, 100, None),
                                                         (2, 4, 200, 2)])
def test_a_notebook_display_fits_one_1080p_screen(browser, tmp_path, layers, heads, n, g):
    """A GPT-2-sized display was about 1,280 px tall: more than a 1080p screen shows of a notebook."""
    from mhacli.notebook import display_page
    from mhacli.render.html import render_html

    view = from_attention(weights(layers, heads, n, seed=5, causal=True), [f"Ġt{i}" for i in range(n)], kv_heads=g)
    html = render_html(paged(result_of(view)), packed=True)
    ctx, page, errors = _browser_page(browser, html, tmp_path, (1000, 300))  # short: the height is the content's
    try:
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height <= NOTEBOOK_SCREEN, height
        assert page.locator("figure.hm:visible").count() == 1 and errors == []
    finally:
        ctx.close()
    if (layers, heads, n) == (12, 12, 40):
        assert len(display_page(view).encode()) <= 150_000


def test_a_runs_notebook_display_fits_one_screen_its_steps_a_click_away(browser, tmp_path):
    """A run's display was 1,296 px tall: its steps and parameters under the maps."""
    from mhacli.render.html import render_html

    run = mhacli.run("the cat sat on the mat because it was tired", heads=4, kv_heads=2)
    ctx, page, errors = _browser_page(browser, render_html(paged(run), packed=True), tmp_path, (1000, 300))
    try:
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height <= NOTEBOOK_SCREEN and page.is_hidden("#steptable"), height
        page.click("#steps-open")
        assert page.is_visible("#steptable") and page.get_attribute("#steps-open", "aria-expanded") == "true"
        assert "768 parameters" in page.text_content("#param-verdict") and errors == []
    finally:
        ctx.close()


def test_the_page_marks_the_heads_of_each_group_and_shows_every_layer_and_head(browser, tmp_path):
    from mhacli.render.html import render_html

    view = from_attention(weights(12, 12, 40, seed=5, causal=True), [f"t{i}" for i in range(40)], kv_heads=4)
    ctx, page, errors = _browser_page(browser, render_html(paged(result_of(view, layers=True))), tmp_path,
                                      (1280, 900))
    try:
        boxes = page.eval_on_selector_all("#head-buttons .kvgroup", "els => els.map(e => e.querySelectorAll("
                                          "'button').length + ' ' + e.querySelector('.kvname').textContent)")
        assert boxes == ["3 group 1", "3 group 2", "3 group 3", "3 group 4"]
        assert "g = 4 key/value groups" in page.text_content("#config-line")
        assert "heads 1\u20133 read group 1" in page.text_content("#groups-note")
        assert page.text_content('figure.hm[data-head="4"] .group') == "group 2"
        page.wait_for_selector("html[data-model=ready]", timeout=5000)
        assert page.locator("#model-grid canvas").count() == 144
        assert page.eval_on_selector_all("#model-grid .mg", "els => els.map(e => e.textContent)") == [
            f"group {j}" for j in range(1, 5)]
        box, bar = page.locator("#model").bounding_box(), page.locator("#toolbar").bounding_box()
        assert box["height"] + bar["height"] <= 900, (box, bar)  # every layer and head on one screen, under the bar
        page.locator('#model-grid canvas[data-layer="7"][data-head="5"]').click()
        page.wait_for_selector("html[data-layer='7']")
        assert page.eval_on_selector_all('#head-buttons button[aria-pressed="true"]',
                                         "els => els.map(e => e.dataset.head)") == ["5"]
        page.locator("#model").screenshot(path=str(tmp_path / "model-view.png"))
        assert errors == []
    finally:
        ctx.close()



def test_a_grouped_runs_page_says_which_claim_still_holds(browser, tmp_path):
    """The page said 'splitting into heads changes the shape of the work, not its size' beside 'NO' for g < h."""
    from mhacli.render.html import render_html

    run = mhacli.run("the cat sat on the mat", heads=4, d_model=16, kv_heads=2)
    ctx, page, errors = _browser_page(browser, render_html(paged(run)), tmp_path, (1280, 900))
    try:
        verdict = page.text_content("#param-verdict")
        assert "not its size" not in verdict and "768 parameters, 75% of the article\u2019s 1,024" in verdict
        assert "2 \u00b7 16\u00b2 \u00b7 (1 + 2/4) = 768" in page.text_content("#paramtable")
        assert page.eval_on_selector_all("figure.hm .group", "els => els.map(e => e.textContent)") == [
            "group 1", "group 1", "group 2", "group 2"]
        assert errors == []
    finally:
        ctx.close()


# --- the smaller items: --raw-tokens, the quiz's help, the messages, one size formatter ------------------------
def _mha(*args: str):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_mha_show_reads_markers_by_default_and_keeps_them_with_raw_tokens(tmp_path):
    import json

    path = tmp_path / "gpt2.npz"
    np.savez(path, weights=weights(1, 4, 4), tokens=np.array(["Ġthe", "Ġcat", "Ċ", "Ġsat"]), kv_heads=np.array(2))
    read = json.loads(_mha("show", str(path), "--json").stdout)
    assert read["tokens"] == ["the", "cat", "\u21b5", "sat"] and read["kv_heads"] == 2
    raw = _mha("show", str(path), "--json", "--raw-tokens")
    assert raw.exit_code == 0, raw.output
    assert json.loads(raw.stdout)["tokens"] == ["Ġthe", "Ġcat", "Ċ", "Ġsat"]
    assert from_attention(weights(1, 4, 4), ["Ġthe", "Ġcat", "Ċ", "Ġsat"], raw_tokens=True).tokens[0] == "Ġthe"


def test_raw_tokens_on_a_saved_run_is_one_line_naming_what_it_is_for(tmp_path):
    saved = tmp_path / "run.npz"
    assert _mha("explain", "the cat sat", "--save-npz", str(saved), "--no-plots", "--quiet").exit_code == 0
    got = _mha("show", str(saved), "--raw-tokens", "--no-plots")
    assert got.exit_code == 2 and "--raw-tokens" in got.stderr and len(got.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("option", [["--raw-tokens"], ["--layer", "1"], ["--batch-index", "0"]])
def test_an_attention_file_s_option_on_a_missing_file_says_the_file_is_missing(tmp_path, option):
    """The file's kind is known only once it is read: a missing file is said as such, not called a saved run."""
    got = _mha("show", str(tmp_path / "missing.npz"), *option, "--no-plots")
    assert got.exit_code == 2 and "does not exist" in got.stderr and "saved run" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1


def test_a_grouped_views_file_keeps_its_groups(tmp_path):
    from mhacli.models.attention_file import load_attention, save_attention

    path = tmp_path / "v.npz"
    save_attention(from_attention(weights(2, 8), TOKENS, kv_heads=4), path)
    assert load_attention(path).head_groups == (0, 0, 1, 1, 2, 2, 3, 3)
    np.savez(path, weights=weights(1, 8), tokens=np.array(TOKENS), kv_heads=np.array(3))
    got = _mha("show", str(path), "--no-plots")
    assert got.exit_code == 2 and "its 'kv_heads' 3 must divide its 8 heads" in got.stderr, got.stderr


def test_the_quizs_help_names_its_questions_on_g_and_the_cache():
    import re

    text = re.sub(r"\s+", " ", _mha("quiz", "--help").stdout)
    assert "--kv-heads g" in text and "KV cache" in text and "mha quiz --heads 4 --kv-heads 2" in text


@pytest.mark.parametrize("command", ["compare", "quiz", "explain", "demo"])
def test_the_hint_for_unquoted_text_names_the_command_typed(command):
    got = _mha(command, "the", "cat", "extra")
    assert got.exit_code == 2 and f'e.g. mha {command} "the cat sat on the mat"' in got.stderr


@pytest.mark.parametrize("value", ["0", "-2"])
def test_shapes_kv_heads_below_one_is_told_to_divide_heads(value):
    got = _mha("shapes", "--heads", "8", "--kv-heads", value)
    assert got.exit_code == 2 and f"--kv-heads {value} must divide --heads 8" in got.stderr, got.stderr


def _old_binary_size(n: int) -> str:
    """render/kv.binary_size before it became human_bytes(n, digits=3): its numbers must not change."""
    value, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{n:,} bytes" if unit == "bytes" else f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"


def test_one_size_formatter_prints_what_both_printed():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from mhacli.attention.config import human_bytes
    from mhacli.render.kv import binary_size

    # Llama 2 70B's cache (issue 45): 320 KiB and 2.5 MiB per token, 1.25 GiB and 10 GiB for 4,096 tokens
    assert [binary_size(n) for n in (327_680, 2_621_440, 1_342_177_280, 10_737_418_240)] == [
        "320 KiB", "2.5 MiB", "1.25 GiB", "10 GiB"]
    assert human_bytes(1_342_177_280) == "1.2 GiB" and human_bytes(512) == "512 bytes"

    @settings(max_examples=300, deadline=None)
    @given(st.integers(min_value=0, max_value=2**59))
    def same(n):
        assert binary_size(n) == _old_binary_size(n)

    same()
    assert binary_size(2**60) == "1 EiB"  # was "1,024 PiB": past a PiB the units go on, as human_bytes's do
