"""The numerical core against a slow, obvious reference, and the article's claims as properties."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mhacli
from mhacli.attention.config import Config
from mhacli.attention.attention import head_weight, split_heads
from mhacli.attention.embed import embed
from mhacli.attention.trace import run_tokens
from traced import run
from mhacli.attention.errors import UsageError
from mhacli.attention.steps import ParameterCount, steps_for

SENTENCE = "The animal didn't cross the street because it was too tired"


def slow_attention(x, w_q, w_k, w_v, w_o, heads, causal):
    """Per head, per query, per key, with Python floats: the obvious way, sharing nothing with the core."""
    n, d = x.shape
    d_k = d // heads
    weights = np.zeros((heads, n, n))
    outs = []
    for i in range(heads):
        wq_i = w_q[i * d_k:(i + 1) * d_k].T  # the article's W_q^i, d × d/h
        wk_i = w_k[i * d_k:(i + 1) * d_k].T
        wv_i = w_v[i * d_k:(i + 1) * d_k].T
        q, k, v = x @ wq_i, x @ wk_i, x @ wv_i
        head = np.zeros((n, d_k))
        for r in range(n):
            visible = range(r + 1) if causal else range(n)
            s = {c: sum(q[r, j] * k[c, j] for j in range(d_k)) / math.sqrt(d_k) for c in visible}
            top = max(s.values())
            z = sum(math.exp(val - top) for val in s.values())
            for c, val in s.items():
                weights[i, r, c] = math.exp(val - top) / z
                head[r] += weights[i, r, c] * v[c]
        outs.append(head)
    concat = np.concatenate(outs, axis=1)
    return weights, concat, concat @ w_o.T


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads,d_model", [(1, 8), (2, 8), (4, 16), (8, 16), (3, 12)])
def test_core_matches_slow_reference(heads, d_model, causal):
    t = run(SENTENCE, heads=heads, d_model=d_model, seed=7, causal=causal)
    weights, concat, output = slow_attention(np.asarray(t.X), t.W_q, t.W_k, t.W_v, t.W_o, heads, causal)
    np.testing.assert_allclose(t.weights, weights, atol=1e-12)
    np.testing.assert_allclose(t.concat, concat, atol=1e-12)
    np.testing.assert_allclose(t.output, output, atol=1e-12)


def test_shapes_follow_the_article():
    t = run("the cat sat on the mat", heads=4, d_model=16)
    n, d, h, dk = 6, 16, 4, 4
    assert t.X.shape == (n, d)
    for name in ("W_q", "W_k", "W_v", "W_o"):
        assert getattr(t, name).shape == (d, d)
    for name in ("Q", "K", "V", "heads"):
        assert getattr(t, name).shape == (h, n, dk)
    assert t.scores.shape == t.weights.shape == (h, n, n)
    assert t.concat.shape == t.output.shape == (n, d)
    wq_i, wk_i, wv_i = t.head_weights(2)
    assert wq_i.shape == wk_i.shape == wv_i.shape == (d, dk)


def test_trace_is_read_only():
    t = run("the cat sat on the mat")
    with pytest.raises(ValueError):
        t.weights[0, 0, 0] = 1.0
    with pytest.raises(AttributeError):
        t.tokens = ("x",)  # type: ignore[misc]


def test_same_word_same_vector_in_any_sentence():
    a = run("the cat sat", seed=3)
    b = run("a dog and the cat", seed=3)
    np.testing.assert_array_equal(a.embeddings[1], b.embeddings[4])  # "cat"
    np.testing.assert_array_equal(a.embeddings[0], b.embeddings[3])  # "the"
    assert not np.array_equal(embed(["cat"], 16, 3), embed(["cat"], 16, 4))


def test_repeated_tokens_share_vocabulary_id():
    t = run("the cat sat on the mat")
    assert list(t.token_ids) == [0, 1, 2, 3, 0, 4]


def test_positions_on_and_off():
    on = run("the the the", positions=True)
    off = run("the the the", positions=False)
    assert np.array_equal(off.X[0], off.X[1])  # no positions: identical rows
    assert not np.array_equal(on.X[0], on.X[1])
    np.testing.assert_allclose(on.X - on.embeddings, on.positions)
    np.testing.assert_allclose(on.positions[0, 0::2], 0.0)  # sin(0)
    np.testing.assert_allclose(on.positions[0, 1::2], 1.0)  # cos(0)


def test_causal_masks_future_with_minus_infinity():
    t = run(SENTENCE, causal=True)
    upper = np.triu(np.ones((t.n_tokens, t.n_tokens), dtype=bool), 1)
    assert np.all(np.isneginf(t.scores[:, upper]))
    assert np.all(t.weights[:, upper] == 0.0)
    np.testing.assert_array_equal(t.mask, upper)
    np.testing.assert_allclose(t.weights[:, 0, 0], 1.0)


def test_softmax_of_fully_masked_row_is_zero_not_nan():
    from mhacli.attention.attention import softmax

    s = np.array([[[-np.inf, -np.inf], [0.0, 1.0]]])
    w = softmax(s)
    assert np.all(np.isfinite(w))
    np.testing.assert_array_equal(w[0, 0], [0.0, 0.0])
    assert w[0, 1].sum() == pytest.approx(1.0)


def test_softmax_is_stable_for_huge_scores():
    from mhacli.attention.attention import softmax

    w = softmax(np.array([[[1000.0, 1001.0, -1000.0]]]))
    assert np.all(np.isfinite(w))
    assert w[0, 0].sum() == pytest.approx(1.0)


def test_empty_text_is_a_usage_error():
    with pytest.raises(UsageError, match="no tokens"):
        run("  ...  ".replace(".", " "))
    with pytest.raises(UsageError):
        run_tokens([], Config())


def test_lazy_package_attributes():
    from mhacli.pipeline import Run, run as pipeline_run

    assert mhacli.run is pipeline_run and mhacli.Run is Run  # the one pipeline: weights, config, trace, analysis
    result = mhacli.run("the cat sat", heads=2)
    assert result.trace.weights.shape == run("the cat sat", heads=2).weights.shape
    assert result.weights is result.trace.weights  # `trace = mhacli.run(...)` reads through to the trace
    assert result.analysis.num_heads == 2 and result.config is result.trace.config
    assert mhacli.Config is Config
    with pytest.raises(AttributeError):
        mhacli.nothing_here  # noqa: B018


# --- properties (hypothesis) ------------------------------------------------

words = st.lists(st.sampled_from(["the", "cat", "sat", "on", "mat", "it", "was", ",", "tired", "a"]),
                 min_size=1, max_size=12)
sizes = st.sampled_from([(1, 1), (1, 4), (2, 4), (4, 8), (2, 6), (3, 9), (4, 16), (8, 16)])


@settings(max_examples=40, deadline=None)
@given(tokens=words, size=sizes, seed=st.integers(0, 2**32), causal=st.booleans(),
       positions=st.booleans())
def test_attention_invariants(tokens, size, seed, causal, positions):
    heads, d = size
    t = run_tokens(tokens, Config(heads=heads, d_model=d, seed=seed, causal=causal, positions=positions))
    n = len(tokens)
    # rows of every A^i are probabilities
    assert np.all(np.isfinite(t.weights)) and np.all(t.weights >= 0)
    np.testing.assert_allclose(t.weights.sum(-1), 1.0, atol=1e-12)
    if causal:
        assert np.all(t.weights[:, np.triu(np.ones((n, n), dtype=bool), 1)] == 0)
    # the article: building Q^i directly equals splitting the full Q
    for w, full in ((t.W_q, t.Q), (t.W_k, t.K), (t.W_v, t.V)):
        for i in range(heads):
            np.testing.assert_allclose(t.X @ head_weight(w, i, heads), full[i], atol=1e-12)
    assert t.split_equals_direct() < 1e-12
    # heads side by side make the concat
    np.testing.assert_array_equal(split_heads(np.asarray(t.concat), heads), t.heads)


@settings(max_examples=60, deadline=None)
@given(d_k=st.integers(1, 64), heads=st.integers(1, 32))
def test_parameter_counts_equal(d_k, heads):
    d = d_k * heads
    p = ParameterCount(d_model=d, heads=heads)
    assert p.single_head_qkv == p.multi_head_qkv == 3 * d * d
    assert p.equal and p.total == 4 * d * d


@settings(max_examples=20, deadline=None)
@given(tokens=words, seed=st.integers(0, 2**63 - 1))
def test_same_seed_same_trace(tokens, seed):
    a = run_tokens(tokens, Config(seed=seed))
    b = run_tokens(tokens, Config(seed=seed))
    for name in ("X", "W_q", "W_o", "scores", "weights", "output"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_steps_table_counts():
    steps = {s.key: s for s in steps_for(6, 16, 4, causal=False)}
    assert "mask" not in steps
    assert steps["query"].madds == 6 * 16 * 16
    assert steps["scores"].madds == 4 * 6 * 6 * 4
    assert steps["weighted"].madds == 4 * 6 * 6 * 4
    assert steps["output"].madds == 6 * 16 * 16
    assert steps["query"].shape == "N×d/h" and steps["query"].shape_numeric == "6×4"
    assert steps["concat"].shape_numeric == "6×16"
    assert "mask" in {s.key for s in steps_for(6, 16, 4, causal=True)}


# a second salt in a second process is the slow tier's (issue 46.5)
@pytest.mark.parametrize("hashseed", ["0", pytest.param("12345", marks=pytest.mark.slow)])
def test_deterministic_across_processes(tmp_path, hashseed):
    """Python's str hash is salted per process; the embedding must not depend on it."""
    code = ("import sys, numpy as np, mhacli; t = mhacli.run('the cat sat on the mat', seed=5); "
            "np.save(sys.argv[1], np.concatenate([t.X.ravel(), t.output.ravel()]))")
    out = tmp_path / f"run-{hashseed}.npy"
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=env)
    here = run("the cat sat on the mat", seed=5)
    np.testing.assert_array_equal(np.load(out), np.concatenate([here.X.ravel(), here.output.ravel()]))


def test_the_step_table_says_what_ran():
    """No P in the formula when positions are off; the biases in it when your own weights have them."""
    plain = {s.key: s.formula for s in run("the cat sat", heads=2).steps}
    assert plain["embed"] == "X = E[tokens] + P" and plain["query"] == "Q^i = X W_q^i"
    off = {s.key: s.formula for s in run("the cat sat", heads=2, positions=False).steps}
    assert off["embed"] == "X = E[tokens]"
    rng = np.random.default_rng(0)
    sd = {"in_proj_weight": rng.standard_normal((24, 8)), "in_proj_bias": rng.standard_normal(24),
          "out_proj.weight": rng.standard_normal((8, 8)), "out_proj.bias": rng.standard_normal(8)}
    own = {s.key: s.formula for s in mhacli.run("the cat sat", heads=2, weights=sd).trace.steps}
    assert own["query"] == "Q^i = X W_q^i + b_q^i" and own["output"] == "O = H W^Oᵀ + b_o"


def test_every_public_name_is_listed_and_loads():
    assert set(dir(mhacli)) == set(mhacli.__all__)
    for name in mhacli.__all__[1:]:  # every public name but __version__
        assert getattr(mhacli, name).__name__ == name
