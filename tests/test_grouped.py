"""Grouped-query attention (issue 45): h query heads share g key/value heads, against a slow per-head loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhacli.attention.attention import multi_head_attention
from mhacli.attention.config import Config
from mhacli.attention.errors import UsageError
from mhacli.attention.trace import run_tokens

TOKENS = tuple("the cat sat on the mat".split())


def slow_grouped(x, w_q, w_k, w_v, w_o, heads, kv_heads, causal):
    """Per query head, per query, per key, with Python floats: head i reads rows of group ⌊i/(h/g)⌋ of W_k, W_v."""
    n, d = x.shape
    d_k = d // heads
    weights = np.zeros((heads, n, n))
    outs = []
    for i in range(heads):
        j = i * kv_heads // heads  # the group, written differently from the core's i // (h/g)
        q = x @ w_q[i * d_k:(i + 1) * d_k].T
        k = x @ w_k[j * d_k:(j + 1) * d_k].T
        v = x @ w_v[j * d_k:(j + 1) * d_k].T
        head = np.zeros((n, d_k))
        for r in range(n):
            visible = range(r + 1) if causal else range(n)
            s = {c: sum(q[r, m] * k[c, m] for m in range(d_k)) / math.sqrt(d_k) for c in visible}
            top = max(s.values())
            z = sum(math.exp(val - top) for val in s.values())
            for c, val in s.items():
                weights[i, r, c] = math.exp(val - top) / z
                head[r] += weights[i, r, c] * v[c]
        outs.append(head)
    concat = np.concatenate(outs, axis=1)
    return weights, concat, concat @ w_o.T


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (6, 3), (6, 2), (8, 4)]),
       st.integers(1, 6), st.integers(1, 3), st.booleans(), st.integers(0, 2**32 - 1))
def test_grouped_attention_equals_a_slow_per_head_loop(hg, n, width, causal, seed):
    h, g = hg
    d = h * width
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w_q, w_o = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    w_k, w_v = rng.standard_normal((g * width, d)), rng.standard_normal((g * width, d))
    got = multi_head_attention(x, x, x, w_q, w_k, w_v, w_o, h, causal, kv_heads=g)
    weights, concat, output = slow_grouped(x, w_q, w_k, w_v, w_o, h, g, causal)
    assert got.Q.shape == (h, n, width) and got.K.shape == got.V.shape == (g, n, width)
    np.testing.assert_allclose(got.weights, weights, atol=1e-12)
    np.testing.assert_allclose(got.concat, concat, atol=1e-12)
    np.testing.assert_allclose(got.output, output, atol=1e-12)


def test_heads_of_one_group_read_the_same_keys_and_values():
    t = run_tokens(TOKENS, Config(heads=4, d_model=16, seed=3, kv_heads=2))
    assert t.W_k.shape == t.W_v.shape == (8, 16) and t.K.shape == (2, 6, 4)
    assert t.head_groups == (0, 0, 1, 1)
    # heads 0 and 1 share K^1 and V^1, but their own queries make their weights differ
    _, wk0, wv0 = t.head_weights(0)
    _, wk1, wv1 = t.head_weights(1)
    _, wk2, _ = t.head_weights(2)
    assert np.array_equal(wk0, wk1) and np.array_equal(wv0, wv1) and not np.array_equal(wk0, wk2)
    assert not np.allclose(t.weights[0], t.weights[1])
    assert t.split_equals_direct() < 1e-12


def test_kv_heads_h_is_the_article_byte_for_byte():
    plain = run_tokens(TOKENS, Config(heads=4, d_model=16, seed=5, causal=True))
    same = run_tokens(TOKENS, Config(heads=4, d_model=16, seed=5, causal=True, kv_heads=4))
    for name in ("W_q", "W_k", "W_v", "W_o", "K", "V", "weights", "output"):
        assert getattr(plain, name).tobytes() == getattr(same, name).tobytes(), name
    assert same.config.to_dict() == plain.config.to_dict() and "kv_heads" not in plain.config.to_dict()
    assert Config(heads=4, d_model=16, kv_heads=1).to_dict()["kv_heads"] == 1


@pytest.mark.parametrize("g", [0, 3, 5, -1, True, 2.0])
def test_kv_heads_must_divide_heads(g):
    with pytest.raises(UsageError):
        Config(heads=4, d_model=16, kv_heads=g)


def test_multi_query_reads_one_key_and_value_head():
    t = run_tokens(TOKENS, Config(heads=4, d_model=16, seed=1, kv_heads=1))
    assert t.K.shape == (1, 6, 4) and set(t.head_groups) == {0}
    np.testing.assert_allclose(t.weights.sum(axis=-1), 1.0, atol=1e-12)


# --- through the run: explain, compare, demo, the API --------------------------------------------------
def _mha(*args: str):
    from typer.testing import CliRunner

    from mhacli.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_explain_json_carries_the_groups_and_validates():
    import json

    from schema_check import validate

    got = _mha("explain", "the cat sat on the mat", "--heads", "4", "--d-model", "16", "--kv-heads", "2",
               "--json", "--no-plots")
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    validate(doc, "trace")
    assert doc["config"]["kv_heads"] == 2
    assert np.asarray(doc["arrays"]["K"]).shape == (2, 6, 4) and np.asarray(doc["arrays"]["W_v"]).shape == (8, 16)
    steps = {s["key"]: s for s in doc["steps"]}
    assert steps["key"]["groups"] == steps["value"]["groups"] == 2 and "groups" not in steps["query"]
    assert steps["key"]["madds"] == 6 * 16 * 2 * 4  # N · d · g · d/h
    d, h, g = 16, 4, 2
    assert doc["parameters"]["total"] == 2 * d * d * (h + g) // h and doc["parameters"]["mha_total"] == 4 * d * d
    assert doc["parameters"]["equal"] is False


def test_kv_heads_h_prints_what_the_article_layer_prints():
    plain = _mha("explain", "the cat sat", "--heads", "2", "--d-model", "8", "--json", "--no-plots")
    same = _mha("explain", "the cat sat", "--heads", "2", "--d-model", "8", "--kv-heads", "2", "--json", "--no-plots")
    assert plain.exit_code == same.exit_code == 0 and plain.stdout == same.stdout


def test_the_walkthrough_says_who_reads_which_group_and_what_sharing_saves():
    got = _mha("explain", "the cat sat on the mat", "--heads", "4", "--d-model", "16", "--kv-heads", "2",
               "--no-plots")
    assert got.exit_code == 0, got.output
    text = " ".join(got.stdout.split())
    assert "g = 2" in text and "Keys (×2)" in text and "K^j = X W_k^j" in text and "S^i = Q^i K^jᵀ" in text
    assert "K^1, V^1 by heads 1–2; K^2, V^2 by heads 3–4" in text
    assert "1,536 multiply-adds instead of 2 · N · d² = 3,072" in text  # 2·g·N·d·d/h = 2·2·6·16·4
    assert "2 · 16² · (1 + 2/4) = 768" in text and "4 · 16² = 1,024" in text
    assert "Same number of parameters: NO" in text and "75% of the article's 1,024" in text


@pytest.mark.parametrize("args", [["--kv-heads", "3"], ["--kv-heads", "0"], ["--kv-heads", "8"],
                                  ["--kv-heads", "2", "--weights", "designed"],
                                  ["--kv-heads", "2", "--weights", "trained"]])
def test_bad_kv_heads_is_one_line_and_exit_2(args):
    got = _mha("explain", "the cat sat on the mat", "--heads", "4", "--no-plots", *args)
    assert got.exit_code == 2, got.output
    assert "kv-heads" in got.stderr and len(got.stderr.strip().splitlines()) == 1 and "Traceback" not in got.output


def test_compare_and_demo_take_kv_heads():
    got = _mha("compare", "the cat sat on the mat", "--heads", "4", "--kv-heads", "1", "--json", "--no-plots")
    assert got.exit_code == 0, got.output
    demo = _mha("demo", "the cat sat on the mat", "--heads", "4", "--kv-heads", "2", "--no-pause")
    assert demo.exit_code == 0, demo.output
    assert "Shared keys and values, fewer parameters" in demo.stdout


def test_the_api_and_the_single_head_read_the_same_keys_written_out_per_head():
    import mhacli
    from mhacli.measures.compare import single_head

    result = mhacli.run("the cat sat on the mat", heads=4, d_model=16, kv_heads=2)
    t = result.trace
    assert t.K.shape == (2, 6, 4) and result.split_diff == 0.0
    one = single_head(t)
    # the one wide head's keys are the grouped keys written out once per head: K^1 K^1 K^2 K^2 side by side
    np.testing.assert_array_equal(np.asarray(one.K[0]), np.concatenate([t.K[0], t.K[0], t.K[1], t.K[1]], axis=1))


def test_heads_and_magnifiers_name_the_group_of_each_head(tmp_path, monkeypatch):
    import importlib

    from matplotlib.text import Text

    import mhacli
    from mhacli.pipeline import shown

    save_module = importlib.import_module("mhacli.render.figures.save")
    texts: dict[str, list[str]] = {}
    monkeypatch.setattr(save_module, "save", lambda fig, path, fmt, dpi: texts.setdefault(
        path.name, [t.get_text() for t in fig.findobj(Text)]))
    result = mhacli.run("the cat sat on the mat", heads=4, d_model=16, kv_heads=2)
    save_module.save_figures(shown(result), tmp_path)
    heads = [t for t in texts["heads.png"] if t.startswith("group ")]
    assert [t.split(" · ")[0] for t in heads] == ["group 1", "group 1", "group 2", "group 2"]
    magnified = [t.splitlines()[0] for t in texts["magnifiers.png"] if t.startswith("group ")]
    assert magnified == ["group 1", "group 1", "group 2", "group 2"]
    plain = mhacli.run("the cat sat on the mat", heads=4, d_model=16)
    texts.clear()
    save_module.save_figures(shown(plain), tmp_path)
    assert not any(t.startswith("group ") for t in texts["heads.png"] + texts["magnifiers.png"])


def test_a_saved_grouped_run_loads_and_verifies(tmp_path):
    from mhacli.io.export import load_trace

    path = tmp_path / "g.npz"
    got = _mha("explain", "the cat sat on the mat", "--heads", "4", "--d-model", "16", "--kv-heads", "2",
               "--causal", "--quiet", "--no-plots", "--save-npz", str(path))
    assert got.exit_code == 0, got.output
    loaded = load_trace(path)
    assert loaded.kv_heads == 2 and loaded.K.shape == (2, 6, 4) and loaded.config.to_dict()["kv_heads"] == 2
    checked = _mha("verify", str(path), "--json")
    assert checked.exit_code == 0, checked.output
    import json

    doc = json.loads(checked.stdout)
    assert doc["ok"] is True and {c["array"] for c in doc["checks"]} >= {"K", "V", "weights", "output"}


@pytest.mark.torch
@pytest.mark.parametrize("g", [1, 2, 4])
def test_grouped_attention_equals_pytorchs_sdpa_with_enable_gqa(g):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    if "enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""):
        pytest.skip("this PyTorch's scaled_dot_product_attention has no enable_gqa (PyTorch 2.5 added it)")
    t = run_tokens(TOKENS, Config(heads=4, d_model=16, seed=2, causal=True, kv_heads=g))
    q, k, v = (torch.from_numpy(np.array(a))[None] for a in (t.Q, t.K, t.V))  # (1, h or g, N, d/h), float64
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)[0].numpy()  # (h, N, d/h)
    np.testing.assert_allclose(t.heads, out, atol=1e-12, rtol=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.data())
def test_the_parameter_panel_counts_what_mha_shapes_counts(h, width, data):
    from mhacli.attention.kv import Sharing
    from mhacli.attention.steps import ParameterCount

    g = data.draw(st.sampled_from([k for k in range(1, h + 1) if h % k == 0]))
    d = h * width
    pc = ParameterCount(d, h, g)
    assert pc.total == 2 * d * d + 2 * d * g * width == Sharing(d, h, g, width).parameters
    assert pc.mha_total == 4 * d * d and pc.equal == (g == h)


def test_llama_2_70b_attention_parameters():
    from mhacli.attention.steps import ParameterCount

    pc = ParameterCount(8192, 64, 8)
    assert round(pc.total / 1e6, 1) == 151.0 and round(pc.mha_total / 1e6, 1) == 268.4  # the figures


def test_split_figure_outlines_each_key_value_block_in_its_first_readers_colour():
    """split.png with g < h: W_k^j and W_v^j are outlined in the colour of the first head that reads them (group 2
    of 4 heads in 2 groups is read by heads 3 and 4: head 3's colour, never head 2's), and the split's title says
    K and V are cut into g blocks."""
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle
    from matplotlib.text import Text

    from mhacli.render import theme
    from mhacli.render.figures.split import split_figure

    trace = run_tokens(TOKENS, Config(heads=4, d_model=16, kv_heads=2))
    fig = split_figure(trace)
    for name in ("W_k", "W_v"):
        ax = next(a for a in fig.axes if a.get_title().startswith(name))
        edges = [r.get_edgecolor() for r in ax.patches if isinstance(r, Rectangle) and not r.get_fill()]
        assert edges == [to_rgba(theme.head_color(0)), to_rgba(theme.head_color(2))], name
    texts = [t.get_text() for t in fig.findobj(Text)]
    assert any("W_k and W_v into g = 2" in t for t in texts)
    assert not any("likewise K^i and V^i" in t for t in texts)
