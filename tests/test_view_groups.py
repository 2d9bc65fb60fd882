"""Issues 45 and 47 on the views, the page and the notebook: a grouped model's attention labelled by its key/value
groups, the groups marked on the page, the page's model view, and a notebook display that fits one screen."""

from __future__ import annotations

import numpy as np
import pytest

import mhacli
from mhacli.attention.errors import UsageError
from mhacli.measures.view import from_attention

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
