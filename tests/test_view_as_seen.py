"""Your model's attention as the model saw it (issue 47): tokens read, padding masked, direction not taken on trust."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mhacli
from mhacli.attention.errors import UsageError
from mhacli.attention.tokenize import readable
from mhacli.pipeline import result_of


@pytest.mark.parametrize(("tokens", "shown"), [
    (["<|endoftext|>", "The", "Ġcat", "Ċ", "ĊĊ", "Ġcaf", "Ã©", "Ġ"], ("<|endoftext|>", "The", "cat", "↵", "↵↵", "caf",
                                                                     "é", "␣")),  # GPT-2's bytes, é in two
    (["[CLS]", "play", "##ing", "[SEP]"], ("[CLS]", "play", "-ing", "[SEP]")),  # WordPiece
    (["▁the", "▁cat", "s", "▁"], ("the", "cat", "s", "␣")),  # SentencePiece
    (["low</w>", "er</w>"], ("low", "er")),
    (["Ġ", "日本"], ("Ġ", "日本")),  # '日' is no byte-level character: a text's own 'Ġ' beside it stays
])
def test_a_tokenizer_s_markers_are_read_as_the_text_they_stand_for(tokens, shown):
    assert readable(tokens) == shown


@given(st.lists(st.text(st.characters(blacklist_categories=("Zs", "Cc", "Zl", "Zp")), min_size=1)
                .filter(lambda t: "▁" not in t and not t.startswith("##") and not t.endswith("</w>")
                        and not any(256 <= ord(c) < 324 for c in t)), min_size=1, max_size=6))
def test_tokens_without_markers_are_kept_as_they_are(tokens):
    assert readable(tokens) == tuple(tokens)


def _uniform(n: int, heads: int = 2) -> np.ndarray:
    return np.full((heads, n, n), 1 / n)


def test_a_view_shows_readable_tokens_in_its_figures_and_page_and_raw_ones_on_request():
    """The page and the figures showed 'Ġcat' and '▁the' as they came; BertViz cleans them by default."""
    tokens = ["Ġthe", "Ġcat", "Ċ"]
    view = mhacli.from_attention(_uniform(3), tokens)
    assert view.tokens == ("the", "cat", "↵")
    figure = mhacli.head_figure(view, 0)
    ticks = [t.get_text() for ax in figure.axes for t in ax.get_xticklabels() if t.get_text()]
    assert "cat" in ticks and not any("Ġ" in t for t in ticks), ticks
    page = mhacli.html_page(view)
    data = json.loads(re.search(r'id="mha-data">(.*?)</script>', page, re.S).group(1))
    assert data["tokens"] == ["the", "cat", "↵"]
    assert mhacli.from_attention(_uniform(3), tokens, raw_tokens=True).tokens == tuple(tokens)
    with pytest.raises(UsageError, match="raw_tokens must be"):
        mhacli.from_attention(_uniform(3), tokens, raw_tokens="yes")


def _padded_weights(rng: np.random.Generator, keep: np.ndarray, causal: bool = False) -> np.ndarray:
    """(L=2, B=1, h=2, N, N) softmax weights as Hugging Face returns them: -inf on padded keys."""
    n = keep.size
    scores = rng.normal(size=(2, 1, 2, n, n))
    scores[..., ~keep] = -np.inf
    if causal:
        scores[..., np.triu(np.ones((n, n), bool), 1)] = -np.inf
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def test_padded_keys_are_drawn_masked_and_left_out_of_every_measure():
    """Keys padded by attention_mask were drawn as weight 0 and counted as keys a query could see."""
    keep = np.array([True, True, True, True, False, False])
    w = _padded_weights(np.random.default_rng(0), keep)
    tokens = ["[CLS]", "the", "cat", "[SEP]", "[PAD]", "[PAD]"]
    view = mhacli.from_attention(tuple(w), tokens, attention_mask=keep.astype(int)[None])
    assert np.array_equal(view.mask, ~(keep[None, :] & keep[:, None]))
    analysis = result_of(view).analysis
    assert np.array_equal(analysis.mask, view.mask) and analysis.heads[0].counted_rows == 4
    alone = result_of(mhacli.from_attention(w[:, 0, :, :4, :4], tokens[:4])).analysis  # the same, unpadded
    assert [h.pattern for h in analysis.heads] == [h.pattern for h in alone.heads]
    page = mhacli.html_page(view)
    data = json.loads(re.search(r'id="mha-data">(.*?)</script>', page, re.S).group(1))
    assert [row[4] for row in data["mask"]] == [1] * 6  # each query's padded key hatched, as in the figures


@pytest.mark.parametrize(("mask", "said"), [
    (np.array([1, 1, 0]), "must be 1 for each token and 0 for padding, one per position ((N,) or (batch, N) for "
                          "N = 4), got shape (3,)."),
    (np.array([1, 2, 1, 1]), "with values other than 0 and 1"),
    (np.zeros(4, int), "marks every position as padding"),
    (np.array([1, 0, 1, 1]), "attention_mask marks position 1 as padding, but head"),
])
def test_an_attention_mask_that_does_not_fit_the_weights_is_one_line(mask, said):
    with pytest.raises(UsageError) as caught:
        mhacli.from_attention(_uniform(4), list("abcd"), attention_mask=mask)
    assert said in str(caught.value)


def test_causal_weights_drawn_over_every_key_get_a_note():
    """causal=False on GPT-2's weights was accepted and the hatching disappeared, without a note."""
    w = np.tril(np.ones((4, 4)))
    w /= w.sum(-1, keepdims=True)
    view = mhacli.from_attention(np.stack([w, w]), list("abcd"), causal=False)
    said = ("causal=False, though no query gives any weight to a later key (a causal model's weights): drawn over "
            "every key as asked, the later keys' zeros are ones the model never computed")
    assert view.mask is None and result_of(view).analysis.caution == said
    assert said in mhacli.html_page(view)
    assert mhacli.from_attention(np.stack([w, w]), list("abcd")).note is None  # found causal: drawn so, no note
    assert mhacli.from_attention(_uniform(4), list("abcd"), causal=False).note is None


# ---------------------------------------------------------------------------
# Views that fit: one layer per notebook display, every layer and head in one figure
# ---------------------------------------------------------------------------

def _gpt2_sized(causal: bool = True) -> mhacli.AttentionView:
    """12 layers × 12 heads over 40 tokens, as GPT-2's outputs.attentions for a sentence or two."""
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(12, 12, 40, 40)) * 2
    if causal:
        scores[..., np.triu(np.ones((40, 40), bool), 1)] = -np.inf
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return mhacli.from_attention(w / w.sum(-1, keepdims=True), [f"Ġtok{i}" for i in range(40)])


def _page_data(display: str) -> dict:
    import html

    page = html.unescape(re.search(r'srcdoc="(.*?)"', display, re.S).group(1))
    return json.loads(re.search(r'id="mha-data">(.*?)</script>', page, re.S).group(1))


def test_a_gpt2_sized_notebook_display_holds_its_layer_alone_within_150_kb():
    """Each display embedded every layer (671 kB), and display(view.at_layer(L)) all of them again."""
    view = _gpt2_sized()
    for layer in (0, 7):
        display = view.at_layer(layer)._repr_html_()
        assert len(display.encode()) <= 150_000, len(display.encode())
        data = _page_data(display)
        assert data["layer"] == layer and not data.get("layers") and data["in_notebook"] is True
        assert data["tokens"][:2] == ["tok0", "tok1"]
    written = mhacli.html_page(view)  # a page written to a file keeps every layer and every head shown
    data = json.loads(re.search(r'id="mha-data">(.*?)</script>', written, re.S).group(1))
    assert "in_notebook" not in data and len(data["layers"]) == 12


def test_the_model_figure_shows_every_layer_and_head_on_one_scale():
    from mhacli.render.figures.model_view import gap

    view = _gpt2_sized()
    figure = mhacli.model_figure(view)
    (ax,) = figure.axes
    image, shade = (im.get_array() for im in ax.get_images())
    n, g = 40, gap(40)
    for layer, head in ((0, 0), (5, 11), (11, 3)):
        block = image[layer * (n + g):layer * (n + g) + n, head * (n + g):head * (n + g) + n]
        later = np.triu(np.ones((n, n), bool), 1)
        assert np.array_equal(np.ma.getdata(block)[~later], view.layers[layer, head][~later])
        assert np.array_equal(np.ma.getmaskarray(block), later)  # masked cells masked, and drawn in the mask colour
        assert np.all(shade[layer * (n + g):layer * (n + g) + n, head * (n + g):head * (n + g) + n][later][:, 3] == 1)
    assert np.ma.getmaskarray(image)[n:n + g].all()  # the gap between two layers is blank
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"head {i + 1}" for i in range(12)]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"layer {i}" for i in range(12)]
    assert "12 layers (0–11) × 12 heads, 40 tokens" in figure.texts[0].get_text()
    assert len(figure._repr_png_()) > 10_000


def test_the_model_figure_of_a_run_is_its_one_layer():
    result = mhacli.run("the cat sat on the mat", heads=4)
    figure = mhacli.model_figure(result)
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["layer 0"]
    with pytest.raises(UsageError, match="expected a run"):
        mhacli.model_figure("the cat")


def test_an_attention_file_keeps_its_attention_mask_and_mha_show_masks_the_padding(tmp_path):
    from typer.testing import CliRunner

    from mhacli.cli.app import app
    from mhacli.models.attention_file import load_attention, save_attention

    keep = np.array([True, True, True, False])
    w = _padded_weights(np.random.default_rng(6), keep)[:, 0]  # (L, h, N, N)
    view = mhacli.from_attention(w, ["a", "b", "c", "[PAD]"], attention_mask=keep.astype(int))
    save_attention(view, tmp_path / "mine.npz")
    back = load_attention(tmp_path / "mine.npz", layer=1)
    assert np.array_equal(back.padded, ~keep) and back.layer == 1 and back.source == str(tmp_path / "mine.npz")
    result = CliRunner().invoke(app, ["show", str(tmp_path / "mine.npz"), "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    assert [h["counted_rows"] for h in json.loads(result.stdout)["head_summaries"]] == [3, 3]
