"""mha compare: one head against h, and the two numbers that make the analogy concrete."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mhacli import notebook
from mhacli.measures.analysis import js_divergence, max_row_entropy, mean_pairwise_js, row_entropy
from mhacli.cli.app import app
from mhacli.measures.compare import single_head as _single_head
from mhacli.measures.compare import compare
from mhacli.attention.config import Config
from mhacli.attention.attention import multi_head_attention as attend
from mhacli.attention.embed import embed, positional_encoding, vocabulary
from mhacli.attention.trace import Trace
from traced import run

CAT = "the cat sat on the mat"


def rows(n: int, k: int):
    """Strategy: k probability rows over n keys."""
    def normalise(a: np.ndarray) -> np.ndarray:
        total = a.sum(-1, keepdims=True)
        return np.where(total > 1e-12, a / np.where(total > 1e-12, total, 1.0), 1.0 / n)

    return arrays(np.float64, (k, n), elements=st.floats(0, 1)).map(normalise)


def identical_heads_trace(text: str, heads: int, d_model: int, causal: bool = False) -> Trace:
    """A real run whose h heads share one weight block: every head computes the same attention."""
    tokens = tuple(text.split())
    rng = np.random.default_rng(3)
    d_k = d_model // heads
    block = [rng.standard_normal((d_k, d_model)) / np.sqrt(d_model) for _ in range(3)]
    w_q, w_k, w_v = (np.tile(b, (heads, 1)) for b in block)  # (d/h, d) -> (d, d): head i = same rows
    w_o = rng.standard_normal((d_model, d_model)) / np.sqrt(d_model)
    x = embed(tokens, d_model, 0) + positional_encoding(len(tokens), d_model)
    attention = attend(x, x, x, w_q, w_k, w_v, w_o, heads, causal)
    return Trace(config=Config(heads=heads, d_model=d_model, causal=causal), tokens=tokens,
                 token_ids=vocabulary(tokens)[1], X=x, W_q=w_q, W_k=w_k, W_v=w_v, W_o=w_o, **vars(attention))


# ---------------------------------------------------------------------------
# The numbers behave as stated
# ---------------------------------------------------------------------------


def test_identical_heads_have_divergence_zero():
    trace = identical_heads_trace(CAT, heads=4, d_model=16)
    assert np.array_equal(trace.weights[0], trace.weights[3])  # the construction works
    cmp = compare(trace, _single_head(trace))
    assert cmp.mean_pairwise_js == 0.0
    assert len({s.mean_entropy for s in cmp.heads}) == 1
    # and so does a causal run of identical heads
    trace = identical_heads_trace(CAT, heads=2, d_model=8, causal=True)
    assert compare(trace, _single_head(trace)).mean_pairwise_js == 0.0


def test_different_heads_have_positive_divergence():
    trace = run(CAT, heads=4, d_model=16)
    cmp = compare(trace, _single_head(trace))
    assert 0.0 < cmp.mean_pairwise_js <= 1.0
    pairs = [js_divergence(trace.weights[a], trace.weights[b]).mean()
             for a in range(4) for b in range(a + 1, 4)]
    assert cmp.mean_pairwise_js == pytest.approx(np.mean(pairs))


def test_one_head_has_no_pair_to_differ():
    trace = run(CAT, heads=1, d_model=16)
    assert compare(trace, _single_head(trace)).mean_pairwise_js == 0.0


def test_a_one_hot_row_has_entropy_zero_and_a_uniform_row_the_maximum():
    one_hot = np.eye(5)
    assert np.array_equal(row_entropy(one_hot), np.zeros(5))
    uniform = np.full((5, 5), 0.2)
    assert np.allclose(row_entropy(uniform), np.log2(5))
    assert np.allclose(max_row_entropy(5, causal=False), np.log2(5))
    assert np.allclose(max_row_entropy(4, causal=True), np.log2([1, 2, 3, 4]))


def test_designed_heads_that_pick_one_token_have_entropy_near_zero():
    """Designed weights follow hard rules (previous token, itself…): near one-hot rows."""
    trace = run(CAT, heads=4, d_model=16, weights="designed")
    cmp = compare(trace, _single_head(trace))
    for s in cmp.heads:
        assert s.mean_entropy < 0.2, s
        assert s.focus > 0.9
    assert cmp.mean_pairwise_js > 0.3  # heads built for different rules look at different places


def test_disjoint_heads_have_divergence_one_bit():
    a = np.eye(4)
    b = np.roll(np.eye(4), 1, axis=1)
    assert np.allclose(js_divergence(a, b), 1.0)
    assert mean_pairwise_js(np.stack([a, b])) == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(rows(n, 3), rows(n, 3))))
def test_js_is_symmetric_bounded_and_zero_on_itself(pq):
    p, q = pq
    d = js_divergence(p, q)
    assert np.all(d >= 0) and np.all(d <= 1 + 1e-12)
    assert np.allclose(d, js_divergence(q, p))
    assert np.allclose(js_divergence(p, p), 0.0)
    assert mean_pairwise_js(np.stack([p, p, p])) == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: rows(n, 4)))
def test_entropy_lies_between_zero_and_the_uniform_maximum(p):
    h = row_entropy(p)
    assert np.all(h >= -1e-12) and np.all(h <= np.log2(p.shape[1]) + 1e-9)


def test_compare_reports_the_single_head_at_full_width_and_each_head_at_d_over_h():
    trace = run(CAT, heads=4, d_model=16, causal=True)
    single = _single_head(trace)
    cmp = compare(trace, single)
    assert cmp.single.d_k == 16 and [s.d_k for s in cmp.heads] == [4] * 4
    assert cmp.single.mean_entropy == pytest.approx(row_entropy(single.weights[0]).mean())
    assert cmp.single.max_entropy == pytest.approx(np.log2(np.arange(1, 7)).mean())
    for i, s in enumerate(cmp.heads):
        assert s.mean_entropy == pytest.approx(row_entropy(trace.weights[i]).mean())
        assert "top_key" not in s.to_dict()  # the column sum is not reported any more
    with pytest.raises(ValueError):
        compare(trace, trace)


# ---------------------------------------------------------------------------
# The figure and the command
# ---------------------------------------------------------------------------


def test_compare_figure_draws_both_sides_and_the_numbers():
    trace = run(CAT, heads=4, d_model=16)
    single = _single_head(trace)
    cmp = compare(trace, single)
    fig = notebook.compare_figure(trace, single, cmp)
    from matplotlib.text import Text

    maps = [ax for ax in fig.axes if ax.images]  # the single head first, then the h heads, as drawn
    assert len(maps) == 1 + 4
    assert np.array_equal(np.ma.getdata(maps[0].images[0].get_array()), single.weights[0])
    for i, ax in enumerate(maps[1:]):
        assert np.array_equal(np.ma.getdata(ax.images[0].get_array()), trace.weights[i])
    assert any(f"{cmp.mean_pairwise_js:.3f} bits" in t.get_text() for t in fig.findobj(Text))
    chart = next(ax for ax in fig.axes if ax.get_xlabel() == "bits")  # the entropy bars
    widths = [p.get_width() for p in chart.patches]
    assert widths == pytest.approx([cmp.single.mean_entropy] + [s.mean_entropy for s in cmp.heads])


def test_compare_prints_both_numbers_and_saves_the_figure(compare_drawn):
    assert compare_drawn.argv == ("compare", CAT)  # conftest: the session's one compare run with --out (4 heads)
    output = compare_drawn.output
    trace = run(CAT, heads=4, d_model=16)
    cmp = compare(trace, _single_head(trace))
    assert f"{cmp.mean_pairwise_js:.3f} bits" in output
    assert f"{cmp.single.mean_entropy:.2f} b" in output
    for s in cmp.heads:
        assert f"{s.mean_entropy:.2f} b" in output
    assert compare_drawn.names() == ["single-vs-multi.png"]
    assert f"{compare_drawn.shown}/single-vs-multi.png" in output


def test_compare_json_holds_the_measured_numbers(runner, tmp_path):
    result = runner.invoke(app, ["compare", CAT, "--heads", "2", "--d-model", "8", "--causal",
                                 "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    trace = run(CAT, heads=2, d_model=8, causal=True)
    cmp = compare(trace, _single_head(trace))
    assert doc["mean_pairwise_js_bits"] == pytest.approx(cmp.mean_pairwise_js)
    assert doc["single_head"]["mean_entropy_bits"] == pytest.approx(cmp.single.mean_entropy)
    assert [h["mean_entropy_bits"] for h in doc["per_head"]] == pytest.approx(
        [s.mean_entropy for s in cmp.heads])
    assert doc["files"] == [] and doc["tokens"] == list(trace.tokens)
    # the per-query measures: each head's pattern, the single head's, and how often two heads agree
    w = np.asarray(trace.weights, dtype=np.float64)
    top = w.argmax(-1)  # (h, N)
    seen = np.arange(1, trace.n_tokens + 1)  # causal: row q sees q + 1 keys; row 0 only itself
    counted = seen >= 2
    # A row's top key counts only a quarter of the way from chance (1/seen) to certain (the evidence rule).
    picks = (w.max(-1) - 1 / seen) / (1 - 1 / np.maximum(seen, 2)) >= 0.25  # (h, N)
    agree = [[int((counted & picks[a] & picks[b] & (top[a] == top[b])).sum()) / counted.sum() for b in range(2)]
             for a in range(2)]
    np.testing.assert_allclose(doc["agreement"], agree)
    assert [h["pattern"] for h in doc["per_head"]] == [s.pattern for s in cmp.analysis.heads]
    assert doc["single_head"]["pattern"] == cmp.single_analysis.heads[0].pattern
    assert all(0 <= h["pattern_share"] <= 1 for h in doc["per_head"] + [doc["single_head"]])


def test_compare_svg_and_bad_options(runner, tmp_path):
    result = runner.invoke(app, ["compare", CAT, "-o", str(tmp_path), "--format", "svg"])
    assert result.exit_code == 0, result.output
    assert os.listdir(tmp_path) == ["single-vs-multi.svg"]
    result = runner.invoke(app, ["compare", CAT, "--heads", "3", "--no-plots"])
    assert result.exit_code == 2 and "not divisible" in result.output
    result = runner.invoke(app, ["compare", CAT, "--format", "gif"])
    assert result.exit_code == 2 and "png, svg, pdf" in result.output


def test_compare_json_reports_its_heads_and_their_mean_divergence(runner):
    """In-process (the installed script's way out is test_errors' and test_cli_conventions')."""
    out = runner.invoke(app, ["compare", CAT, "--heads", "4", "--json", "--no-plots"])
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["heads"] == 4 and 0 < doc["mean_pairwise_js_bits"] <= 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_compare_concludes_on_capacity_with_no_claim_that_flips_with_the_seed(runner, seed):
    """The read-back table and the capacity sentence; no 'spread their attention less' verdict."""
    from mhacli.measures.analysis import analyse
    from mhacli.measures.narrate import compare_conclusion

    result = runner.invoke(app, ["compare", "--sample", "paragraph", "--seed", str(seed), "--no-plots"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    trace = run((Path(__file__).resolve().parent.parent / "sample_texts" / "paragraph.txt").read_text().strip(),
                seed=seed)
    a = analyse(trace, _single_head(trace))
    assert " ".join(compare_conclusion(a).split()) in flat
    assert "spread their attention less" not in flat and "looks most at" not in flat
    assert "What each token brings back most" in flat
    from io import StringIO

    from rich.console import Console

    from mhacli.attention.tokenize import label
    from mhacli.render.compare import readback_table

    console = Console(file=StringIO(), width=200, color_system=None)
    console.print(readback_table(compare(trace, _single_head(trace))))
    lines = console.file.getvalue().splitlines()
    back = a.readback
    for p in range(12):  # each head's top token and the single head's, with its weight, row by row
        row = next(line for line in lines if line.strip().startswith(f"{label(trace.tokens[p], 8)} ({p})"))
        cells = [(back.head_keys[i, p], back.head_weights[i, p]) for i in range(a.num_heads)]
        cells.append((back.single_keys[p], back.single_weights[p]))
        expected = " ".join(f"{label(trace.tokens[k], 8) if k >= 0 else 'tie'} {w:.0%}" for k, w in cells)
        assert " ".join(row.split()).endswith(" ".join(expected.split())), (row, expected)
