"""The interactive page in a real headless Chromium, with the network cut off.

Needs Debian's ``chromium`` (``apt-get install -y chromium``) and Playwright's Python
package (``pip install playwright``; its bundled browsers are never downloaded, the
system Chromium is used).  Where either is missing, every test here is SKIPPED
with the reason, never passed.  Set ``MHA_CHROMIUM`` to use another Chromium binary.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from mhacli.attention.config import Config
from mhacli.attention.trace import run_tokens
from traced import run
from mhacli.render.html import page_data, write_html
from mhacli.attention.tokenize import label
from mhacli.pipeline import paged, result_of

def _paged(shown, max_tokens=None):
    """The result a page draws: ``shown`` measured once (every layer of a view), its window's measures made."""
    return paged(result_of(shown, layers=True), max_tokens)


SENTENCE = "The animal didn't cross the street because it was too tired"
# `browser`: one headless Chromium per worker (tests/conftest.py), shared with the other files that open a page.


@dataclass
class Opened:
    page: object
    trace: object
    path: Path
    requests: list = field(default_factory=list)
    blocked: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    dialogs: list = field(default_factory=list)


@pytest.fixture()
def open_page(browser, tmp_path):
    """Write a trace's page, open it via file:// with every non-file request aborted, and check on exit
    that nothing went to the network and nothing was logged as an error."""
    opened: list[Opened] = []
    contexts = []

    # Most tests read the page from query 0; the query a page opens on by itself has its own test.
    def _open(trace, viewport=(1280, 900), fragment: str = "#q=0") -> Opened:
        result = result_of(trace, layers=True)  # a view's page carries every layer's measures
        path = write_html(paged(result), tmp_path / f"page{len(opened)}.html")
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, offline=True,
                                  java_script_enabled=True)
        contexts.append(ctx)
        page = ctx.new_page()
        o = Opened(page, trace, path)

        def route(r):
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                o.blocked.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        page.on("request", lambda req: o.requests.append(req.url))
        page.on("console", lambda m: o.errors.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: o.errors.append(f"page error: {e}"))

        def dialog(d):
            o.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)
        page.goto(path.as_uri() + fragment)
        page.wait_for_selector("html[data-ready=true]", timeout=15000)
        opened.append(o)
        return o

    yield _open
    for o in opened:
        assert o.errors == [], o.errors
        assert o.blocked == [], f"the page tried the network: {o.blocked}"
        assert all(u.startswith("file://") for u in o.requests), o.requests
        assert o.dialogs == [], o.dialogs
    for ctx in contexts:
        ctx.close()


def cell_values(page, head: str) -> list[str]:
    return page.eval_on_selector_all(f'#qtable tbody td.v[data-head="{head}"]:not(.outside)',
                                     "els => els.map(e => e.textContent)")


def expected(values) -> list[str]:
    return [f"{round(float(x), 4):.4f}" for x in values]


def wait_table(page, q: int) -> None:
    page.wait_for_selector(f'#qtable[data-query="{q}"][data-complete="true"]', timeout=5000)


def current_query(page) -> int:
    return int(page.get_attribute("#qtable", "data-query"))


# ---------------------------------------------------------------------------


def test_every_head_toggle_and_every_token_is_there(open_page):
    t = run(SENTENCE, heads=4)
    o = open_page(t)
    p = o.page
    buttons = p.locator("#head-buttons button")
    assert buttons.count() == 4
    for i in range(4):
        b = buttons.nth(i)
        assert b.inner_text().strip() == f"Head {i + 1}"
        assert b.get_attribute("aria-pressed") == "true"
    assert p.get_attribute("#btn-all", "aria-pressed") == "true"
    assert p.get_attribute("#btn-avg", "aria-pressed") == "false"
    texts = p.eval_on_selector_all("#tokens .tok .tok-text", "els => els.map(e => e.textContent)")
    assert texts == list(t.tokens)
    assert p.locator('#tokens[role="listbox"] [role="option"]').count() == t.n_tokens
    assert p.locator("figure.hm:not(.off) canvas").count() == 4
    assert p.locator("#steptable tbody tr").count() == len(t.steps) + 1
    assert p.locator("#paramtable").inner_text().count(f"{t.parameters.total:,}") == 1
    assert "PyTorch" in p.inner_text("#avg-note") and "average_attn_weights=False" in p.inner_text("#avg-note")


def test_hovering_a_token_shows_its_weights_for_every_head(open_page):
    t = run(SENTENCE, heads=4)
    p = open_page(t).page
    w = np.asarray(t.weights)
    for q in (t.tokens.index("it"), 0, t.n_tokens - 1):
        p.hover(f"#tok-{q}")
        wait_table(p, q)
        assert current_query(p) == q
        for h in range(4):
            assert cell_values(p, str(h)) == expected(w[h, q]), (q, h)
            # The bars under the tokens follow the same numbers (scaled to the tallest shown bar).
            scales = p.eval_on_selector_all(
                f'.tok-bars .bar[data-head="{h}"]',
                "els => els.map(e => parseFloat(/scaleY\\(([^)]*)\\)/.exec(e.style.transform)[1]))")
            np.testing.assert_allclose(scales, w[h, q] / w[:, q].max(), atol=2e-3)
        tops = p.locator("#tops li")
        assert tops.count() == 4
        for h in range(4):
            best = int(np.argmax(w[h, q]))
            assert f"\u201c{t.tokens[best]}\u201d {w[h, q, best]:.4f}" in tops.nth(h).inner_text()
        assert f"\u201c{t.tokens[q]}\u201d" in p.inner_text("#query-title")


def test_keyboard_alone_tab_then_arrows(open_page):
    t = run(SENTENCE, heads=4)
    p = open_page(t).page
    w = np.asarray(t.weights)
    for _ in range(20):
        p.keyboard.press("Tab")
        if p.evaluate("document.activeElement.classList.contains('tok')"):
            break
    else:
        pytest.fail("Tab never reached a token")
    assert p.evaluate("document.activeElement.id") == "tok-0"
    p.keyboard.press("ArrowRight")
    p.keyboard.press("ArrowRight")
    assert p.evaluate("document.activeElement.id") == "tok-2"
    wait_table(p, 2)
    assert cell_values(p, "1") == expected(w[1, 2])
    assert p.get_attribute("#tok-2", "aria-selected") == "true"
    p.keyboard.press("End")
    wait_table(p, t.n_tokens - 1)
    assert cell_values(p, "3") == expected(w[3, -1])
    p.keyboard.press("ArrowRight")  # stays on the last token
    assert p.evaluate("document.activeElement.id") == f"tok-{t.n_tokens - 1}"
    p.keyboard.press("Home")
    wait_table(p, 0)
    # Only one token is a tab stop (roving tabindex), so Tab leaves the sentence in one step.
    assert p.eval_on_selector_all(".tok", "els => els.filter(e => e.tabIndex === 0).length") == 1


def test_head_toggles_all_heads_and_average(open_page):
    t = run(SENTENCE, heads=4)
    p = open_page(t).page
    w = np.asarray(t.weights)
    b2 = p.locator('#head-buttons button[data-head="1"]')
    b2.click()
    assert b2.get_attribute("aria-pressed") == "false"
    assert p.get_attribute("#btn-all", "aria-pressed") == "false"
    assert not p.locator('figure.hm[data-head="1"]').is_visible()
    assert not p.locator('#qtable th[data-head="1"]').is_visible()
    assert p.locator("#tops li").count() == 3
    p.keyboard.press("2")  # the same head from the keyboard
    assert b2.get_attribute("aria-pressed") == "true"
    assert p.get_attribute("#btn-all", "aria-pressed") == "true"
    p.click("#btn-all")  # all off …
    assert p.locator('#head-buttons button[aria-pressed="true"]').count() == 0
    assert "No head" in p.inner_text("#tops")
    p.click("#btn-all")  # … and all on again
    assert p.locator('#head-buttons button[aria-pressed="true"]').count() == 4
    p.click("#btn-avg")
    assert p.get_attribute("#btn-avg", "aria-pressed") == "true"
    assert p.locator('figure.hm[data-head="avg"]').is_visible()
    q = t.tokens.index("it")
    p.hover(f"#tok-{q}")
    wait_table(p, q)
    assert cell_values(p, "avg") == expected(w.mean(axis=0)[q])
    assert "PyTorch" in p.inner_text('figure.hm[data-head="avg"] figcaption')


def test_heatmap_shows_exact_values_on_hover_and_keys(open_page):
    t = run(SENTENCE, heads=4)
    p = open_page(t).page
    w, s = np.asarray(t.weights), np.asarray(t.scores)
    canvas = p.locator('figure.hm[data-head="2"] canvas')
    canvas.scroll_into_view_if_needed()
    x0, y0, cell = (float(canvas.get_attribute(a)) for a in ("data-x0", "data-y0", "data-cell"))
    box = canvas.bounding_box()
    for q, k in ((1, 7), (9, 0), (10, 10)):  # (10, 10): the last cell of 11 tokens
        p.mouse.move(box["x"] + x0 + (k + 0.5) * cell, box["y"] + y0 + (q + 0.5) * cell)
        # The page redraws on the next animation frame: wait for it rather than read too early.
        p.wait_for_function("([sel, want]) => document.querySelector(sel).innerText.includes(want)",
                            arg=['figure.hm[data-head="2"] .hm-info', f"({k}):"], timeout=5000)
        info = p.inner_text('figure.hm[data-head="2"] .hm-info')
        assert f"({q}) \u2192 key" in info and f"({k}):" in info
        assert f"weight {w[2, q, k]:.4f}" in info and f"score {s[2, q, k]:.3f}" in info
        # Every other head shows the same query–key pair at once, for comparing heads.
        for h in (0, 1, 3):
            assert f"weight {w[h, q, k]:.4f}" in p.inner_text(f'figure.hm[data-head="{h}"] .hm-info')
    p.mouse.click(box["x"] + x0 + 0.5 * cell, box["y"] + y0 + 5.5 * cell)  # a click makes row 5 the query
    wait_table(p, 5)
    p.mouse.move(1, 1)  # the pointer leaves; from the keyboard the cursor starts on the query's diagonal
    canvas.focus()
    p.keyboard.press("ArrowRight")
    info = p.inner_text('figure.hm[data-head="2"] .hm-info')
    want = f"query \u201c{t.tokens[5]}\u201d (5) \u2192 key \u201c{t.tokens[6]}\u201d (6): weight {w[2, 5, 6]:.4f}"
    assert want in info
    p.keyboard.press("ArrowDown")
    p.keyboard.press("Enter")
    wait_table(p, 6)


def test_causal_masked_cells_are_shown_as_masked(open_page):
    t = run(SENTENCE, heads=2, d_model=8, causal=True)
    p = open_page(t).page
    q = 3
    p.hover(f"#tok-{q}")
    wait_table(p, q)
    for h in ("0", "1"):
        vals = cell_values(p, h)
        assert vals[: q + 1] == expected(np.asarray(t.weights)[int(h), q, : q + 1])
        assert vals[q + 1:] == ["masked"] * (t.n_tokens - q - 1)
    masked_chips = p.eval_on_selector_all(".tok.is-masked", "els => els.map(e => +e.dataset.i)")
    assert masked_chips == list(range(q + 1, t.n_tokens))
    assert p.locator("#causal").is_visible() and p.locator("#mask-legend").is_visible()
    canvas = p.locator('figure.hm[data-head="0"] canvas')
    canvas.scroll_into_view_if_needed()
    x0, y0, cell = (float(canvas.get_attribute(a)) for a in ("data-x0", "data-y0", "data-cell"))
    box = canvas.bounding_box()
    p.mouse.move(box["x"] + x0 + 5.5 * cell, box["y"] + y0 + 1.5 * cell)  # query 1, key 5: in the future
    assert "masked" in p.inner_text('figure.hm[data-head="0"] .hm-info')
    # The masked cells are painted grey, not with a weight colour.
    px = p.evaluate(f"""() => {{ const c = document.querySelector('figure.hm[data-head="0"] canvas');
        const d = window.devicePixelRatio || 1;
        return Array.from(c.getContext('2d').getImageData(Math.round(({x0} + 5.5 * {cell}) * d),
            Math.round(({y0} + 0.5 * {cell}) * d), 1, 1).data); }}""")
    r, g, b, _ = px
    assert max(r, g, b) - min(r, g, b) < 12  # grey (mask colour or hatch), not viridis


def test_script_tokens_are_shown_as_text_and_never_run(open_page):
    tokens = ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "</script><b>x</b>", "&amp;", "ok")
    t = run_tokens(tokens, Config(heads=2, d_model=8))
    o = open_page(t)
    p = o.page
    shown = p.eval_on_selector_all("#tokens .tok .tok-text", "els => els.map(e => e.textContent)")
    assert shown == [label(tok, 24) for tok in tokens]  # long tokens are shortened with …
    titles = p.eval_on_selector_all("#tokens .tok", "els => els.map(e => e.title)")
    assert [ti.rsplit("  (position", 1)[0] for ti in titles] == list(tokens)  # … and given whole on hover
    keys = p.eval_on_selector_all("#qtable tbody th.token-cell", "els => els.map(e => e.textContent)")
    assert keys == [label(tok, 24) for tok in tokens]
    assert p.locator("img").count() == 0 and p.locator("b >> text=x").count() == 0
    assert p.evaluate("document.scripts.length") == 2
    p.hover("#tok-0")
    wait_table(p, 0)
    assert p.title().startswith("mha: <script>alert(1)</script>")
    assert o.dialogs == []


def test_screenshot_is_not_blank(open_page, tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    t = run(SENTENCE, heads=4)
    p = open_page(t).page
    p.hover(f"#tok-{t.tokens.index('it')}")
    png = p.screenshot(full_page=True)
    img = np.asarray(PIL.open(io.BytesIO(png)).convert("RGB"), dtype=np.float64)
    assert img.shape[1] == 1280 and img.shape[0] > 900
    assert img.std() > 20
    colours = {tuple(c) for c in img[::7, ::7].reshape(-1, 3).astype(int)}
    assert len(colours) > 200  # heatmaps and head colours, not a few flat areas
    # The heatmaps really are drawn: sample the middle of each canvas.
    variances = p.eval_on_selector_all("figure.hm:not(.off) canvas", """els => els.map(c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let s = 0, s2 = 0, n = 0;
        for (let i = 0; i < d.length; i += 16) { s += d[i]; s2 += d[i] * d[i]; n++; }
        return s2 / n - (s / n) ** 2; })""")
    assert len(variances) == 4 and min(variances) > 100


def test_two_hundred_tokens_stay_usable_and_longer_texts_say_they_are_windowed(open_page):
    words = "the cat sat on the mat because it was warm and the dog ran after a ball".split()
    t = run(" ".join(words[i % len(words)] for i in range(250)), heads=4, d_model=16)
    p = open_page(t).page
    note = p.inner_text("#window-note")
    assert "250 tokens" in note and "first 200" in note
    assert p.locator("#tokens .tok").count() == 200
    q = 150
    p.hover(f"#tok-{q}")
    wait_table(p, q)
    w = np.asarray(t.weights)
    assert cell_values(p, "3") == expected(w[3, q, :200])
    outside = p.inner_text('#qtable td.outside[data-head="3"]')
    assert outside == f"{w[3, q, 200:].sum():.4f}"
    assert p.inner_text('#qtable tfoot td[data-head="3"]') == "1.000"


def test_phone_width_has_no_sideways_scroll_and_large_type_grows(open_page):
    t = run(SENTENCE, heads=8, d_model=16)
    p = open_page(t, viewport=(375, 740)).page
    assert p.evaluate("document.documentElement.scrollWidth") <= 375
    small = p.evaluate("parseFloat(getComputedStyle(document.documentElement).fontSize)")
    p.click("#btn-large")
    assert p.get_attribute("#btn-large", "aria-pressed") == "true"
    large = p.evaluate("parseFloat(getComputedStyle(document.documentElement).fontSize)")
    assert large >= small * 1.25
    assert p.evaluate("document.documentElement.scrollWidth") <= 375


def test_url_fragment_picks_the_query_and_large_type(open_page):
    t = run(SENTENCE, heads=2, d_model=8)
    p = open_page(t, fragment="#q=9&large").page
    assert current_query(p) == 9
    assert p.get_attribute("#btn-large", "aria-pressed") == "true"


def test_designed_rules_are_shown_per_head(open_page):
    t = replace(run(SENTENCE, heads=2, d_model=8), rules=("previous token", "<same> & word"))
    p = open_page(t).page
    assert "rule: previous token" in p.inner_text('figure.hm[data-head="0"] figcaption')
    assert "rule: <same> & word" in p.inner_text('figure.hm[data-head="1"] figcaption')
    assert re.search(r"previous token", p.inner_text("#sumtable"))
    assert "rule" in p.inner_text("#sumtable thead")


def test_without_a_fragment_the_page_opens_where_the_heads_differ_most(open_page):
    t = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed")
    p = open_page(t, fragment="").page
    start = page_data(_paged(t))["start_query"]
    assert current_query(p) == start != 0
    tops = {int(np.argmax(t.weights[i, start])) for i in range(4)}
    assert len(tops) == 4  # four heads, four different tokens in focus, as on the magnifier slide


@pytest.mark.parametrize(("fragment", "query"), [
    ("#q=%E0%A4%A", None),  # a malformed escape: decodeURIComponent would throw
    ("#%=1&q=3", 3),  # a malformed key beside a good setting
    ("#__proto__=1&constructor=2&q=2", 2),  # keys that would reach Object.prototype
    ("#q=99999999999999999999999", None),  # a number past any sentence
    ("#q=-5&large=%ZZ", None),  # a negative position; a malformed value of a known key
    ("#q=1e3", None),  # not a plain position
    ("#q=%F0%9F%98%80&q=4", None),  # an emoji, then a second q (the first one counts)
    ("#" + "q=1&" * 3000, 1),  # a fragment far longer than any real one
])
@pytest.mark.slow
def test_every_part_of_the_url_is_untrusted(open_page, fragment, query):
    t = run(SENTENCE, heads=2, d_model=8)
    p = open_page(t, fragment=fragment).page  # open_page fails on any page error or console error
    texts = p.eval_on_selector_all("#tokens .tok .tok-text", "els => els.map(e => e.textContent)")
    assert texts == list(t.tokens)  # the tokens are still drawn
    # None: the fragment is ignored, so the page opens on its own choice of query.
    assert current_query(p) == (page_data(_paged(t))["start_query"] if query is None else query)
    assert p.evaluate("({}).polluted === undefined && Object.prototype.q === undefined")


def test_a_view_with_layers_has_a_layer_picker_and_no_invented_steps(open_page, tmp_path):
    from mhacli.measures.view import from_attention

    t = run("the dog saw the cat and the cat saw the dog", heads=4, weights="designed", causal=True)
    rng = np.random.default_rng(0)
    s = np.where(np.triu(np.ones((11, 11), bool), 1), -np.inf, rng.standard_normal((3, 4, 11, 11)))
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    w[1] = t.weights
    view = from_attention(w, t.tokens, layer_names=["embed", "block 1", "block 2"], layer=1)
    o = open_page(view)
    page = o.page
    assert page.is_visible("#layer-select") and page.input_value("#layer-select") == "1"
    assert page.is_hidden("#steps") and page.is_visible("#weights-only")
    assert "softmax" not in page.text_content("#qtable-note")  # no scores were given, none are named
    assert "Attention from your model, layer 1 of 0–2 (block 1)" in page.text_content("#weights-line")
    patterns = page.eval_on_selector_all("#sumtable td.pattern", "els => els.map(e => e.textContent)")
    assert patterns == ["previous token", "an earlier copy of its word", "first token", "itself"]
    wait_table(page, 0)
    assert cell_values(page, "0") == expected(w[1][0, 0, :1]) + ["masked"] * 10
    page.select_option("#layer-select", "2")
    page.wait_for_selector("html[data-layer='2']")
    assert "layer 2 of 0–2" in page.text_content("#weights-line")
    page.click("#tok-5")
    wait_table(page, 5)
    assert cell_values(page, "2")[:6] == expected(w[2][2, 5, :6])
    page.screenshot(path=str(tmp_path / "view.png"), full_page=True)
    ran = open_page(t).page  # a run of the tool has one layer: no picker, and its steps
    assert ran.is_hidden("#layer-group") and ran.is_hidden("#layer-sep") and ran.is_visible("#steps")
    assert ran.is_hidden("#weights-only")


def test_a_notebook_display_shows_one_head_and_reaches_every_head_from_the_keyboard(browser, tmp_path):
    """A GPT-2-sized display was 9,000 px tall (every head drawn), and keys 1-9 left heads 10-12 without a key."""
    import mhacli
    from mhacli.render.html import render_html

    rng = np.random.default_rng(5)
    scores = rng.normal(size=(12, 40, 40)) * 2
    w = np.exp(scores - scores.max(-1, keepdims=True))
    view = mhacli.from_attention(w / w.sum(-1, keepdims=True), [f"t{i}" for i in range(40)])
    path = tmp_path / "display.html"
    path.write_text(render_html(paged(result_of(view)), packed=True), encoding="utf-8")
    full = write_html(paged(result_of(view)), tmp_path / "full.html")
    ctx = browser.new_context(viewport={"width": 1000, "height": 800}, offline=True)
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        heights = []
        for opened in (full, path):
            page.goto(opened.as_uri() + "#q=0")
            page.wait_for_selector("html[data-ready=true]", timeout=15000)
            heights.append(page.evaluate("document.documentElement.scrollHeight"))

        def shown() -> list[str]:
            return page.eval_on_selector_all('#head-buttons button[aria-pressed="true"]', "els => els.map(e => "
                                             "e.dataset.head)")

        assert shown() == ["0"] and page.locator("figure.hm:visible").count() == 1
        for head in range(1, 12):
            page.keyboard.press("]")
            assert shown() == [str(head)], head
        page.keyboard.press("]")
        assert shown() == ["0"]
        page.keyboard.press("[")
        assert shown() == ["11"]
        assert errors == []
        assert heights[1] <= 1400 and heights[1] < heights[0] / 2, heights  # one head, the long tables boxed
    finally:
        ctx.close()
