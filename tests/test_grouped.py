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
    assert [t.group(i) for i in range(4)] == [0, 0, 1, 1]
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
    assert t.K.shape == (1, 6, 4) and {t.group(i) for i in range(4)} == {0}
    np.testing.assert_allclose(t.weights.sum(axis=-1), 1.0, atol=1e-12)
