"""Multi-head attention as the article writes it: one small function per step, then the whole in one screen.

Weights are in PyTorch's layout (``q = x @ W_q.T``; head i owns rows i·d/h … (i+1)·d/h − 1 of W_q); the
article's per-head matrix is derived from it, never stored twice: ``W_q^i = W_q[rows_i].T`` (d × d/h).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Array = np.ndarray


def project(x: Array, w: Array, b: Array | None = None) -> Array:
    """Linear projection in PyTorch's layout: x Wᵀ (+ b)."""
    out = x @ w.T  # (N, d) @ (d, d) -> (N, d); a grouped W_k (g·d/h, d) gives (N, g·d/h)
    if b is not None:
        out += b  # (N, d) + (d,)
    return out


def head_weight(w: Array, i: int, heads: int) -> Array:
    """The article's W^i (d × d/h): rows i·d/h … (i+1)·d/h − 1 of a PyTorch weight, transposed."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < heads:
        # a slice past the end is empty, not an error: head 5 of 2 would be a (d, 0) matrix without a word
        from mhacli.attention.errors import UsageError

        raise UsageError(f"head {i!r} is out of range: this run has {heads} head{'s' if heads != 1 else ''}, "
                         f"numbered 0 to {heads - 1} (0-based).")
    d_k = w.shape[0] // heads
    return w[i * d_k : (i + 1) * d_k].T  # (d/h, d) -> (d, d/h)


def split_heads(m: Array, heads: int) -> Array:
    """Cut the columns of a full projection into h blocks: one per head."""
    *lead, n, d = m.shape  # leading axes (a batch of sequences) pass through
    return np.swapaxes(m.reshape(*lead, n, heads, d // heads), -3, -2)  # (..., N, d) -> (..., h, N, d/h)


def rotary(m: Array, theta: float) -> Array:
    """Rotary positions (Su et al. 2021) as Llama writes them: dims m and m + d_h/2 of row p turn by p·θ^(−2m/d_h)."""
    *_, n, d_k = m.shape
    angle = np.arange(n)[:, None] * theta ** (-np.arange(0, d_k, 2) / d_k)  # (N, 1) * (d_h/2,) -> (N, d_h/2)
    cos, sin = np.cos(angle).astype(m.dtype), np.sin(angle).astype(m.dtype)  # (N, d_h/2), float32 stays float32
    a, b = m[..., : d_k // 2], m[..., d_k // 2 :]  # (..., N, d_h/2) twice
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)  # (..., N, d_h)


def attention_scores(q: Array, k: Array) -> Array:
    """S^i = Q^i K^iᵀ / √(d/h); dividing keeps the scores' spread independent of the head width."""
    scores = q @ np.swapaxes(k, -1, -2)  # (h, B, d/h) @ (h, d/h, N) -> (h, B, N)
    scores /= math.sqrt(q.shape[-1])  # a Python float keeps float32 scores float32
    return scores


def causal_mask(n_queries: int, n_keys: int | None = None, first_query: int = 0) -> Array:
    """True where a query may NOT look (keys after it): PyTorch's boolean ``attn_mask`` polarity.

    ``first_query`` places a block of query rows inside a longer text.
    """
    n_keys = n_queries if n_keys is None else n_keys
    rows = np.arange(first_query, first_query + n_queries)[:, None]  # (B, 1)
    return np.arange(n_keys)[None, :] > rows  # (B, N)


def apply_mask(scores: Array, blocked: Array) -> Array:
    """Blocked positions become −∞, so softmax gives them exactly zero weight (in place)."""
    np.copyto(scores, -np.inf, where=blocked)  # (h, B, N), blocked broadcast over heads
    return scores


def softmax(scores: Array) -> Array:
    """Row softmax, computed stably: subtracting the row max leaves the result unchanged but keeps exp() ≤ 1."""
    row_max = scores.max(axis=-1, keepdims=True)  # (..., 1)
    row_max[~np.isfinite(row_max)] = 0.0  # a row with every key blocked has max −∞: zeros, not NaN
    out = scores - row_max  # (..., N)
    np.exp(out, out=out)
    total = out.sum(axis=-1, keepdims=True)  # (..., 1)
    total[total == 0] = 1.0  # a fully blocked row is all zeros already
    out *= 1.0 / total  # one division per row, then N multiplications
    return out


def weigh_values(weights: Array, v: Array) -> Array:
    """head_i = A^i V^i: each query's output is a weighted average of value rows."""
    return weights @ v  # (h, B, N) @ (h, N, d/h) -> (h, B, d/h)


def merge_heads(heads_out: Array) -> Array:
    """Concatenate the heads side by side: H = [head_1 … head_h]."""
    *lead, h, n, d_k = heads_out.shape  # leading axes (a batch of sequences) pass through
    return np.swapaxes(heads_out, -3, -2).reshape(*lead, n, h * d_k)  # (..., h, N, d/h) -> (..., N, d)


def attend(q: Array, k: Array, v: Array, blocked: Array | None) -> tuple[Array, Array, Array]:
    """Scores, weights and output of every head for some query rows: the article's steps 3 to 6."""
    scores = attention_scores(q, k)  # (h, B, N)
    if blocked is not None:
        apply_mask(scores, blocked)  # (h, B, N)
    weights = softmax(scores)  # (h, B, N)
    return scores, weights, weigh_values(weights, v)  # (h, B, N), (h, B, N), (h, B, d/h)


@dataclass(frozen=True)
class Attention:
    """Every intermediate of one multi-head attention, by the article's names (the head axis first).

    With g key/value heads (grouped-query attention) K and V hold one block per group, not per head.
    """

    Q: Array  # (h, N, d/h)
    K: Array  # (g, N, d/h)  g = h in the article
    V: Array  # (g, N, d/h)
    scores: Array  # (h, N, N) scaled, blocked keys at −∞
    weights: Array  # (h, N, N) A^i = softmax(S^i) per row
    heads: Array  # (h, N, d/h) head_i = A^i V^i
    concat: Array  # (N, d) H = [head_1 … head_h]
    output: Array  # (N, d) O = H W^Oᵀ
    mask: Array | None  # (N, N) True where a query may not look; None when not causal


def multi_head_attention(query: Array, key: Array, value: Array, w_q: Array, w_k: Array, w_v: Array,
                         w_o: Array, heads: int, causal: bool = False,
                         biases: dict[str, Array] | None = None, kv_heads: int | None = None,
                         rope_theta: float | None = None) -> Attention:
    """The article's multi-head attention, taking what Q, K and V are made from (as PyTorch's
    ``forward(query, key, value)``): X for all three in self-attention; the grammar model makes V from E alone.
    ``kv_heads`` g < h shares keys and values (W_k, W_v are (g·d/h, d); query head i reads group ⌊i / (h/g)⌋);
    ``rope_theta`` turns Q and K by position (Llama-style), never V."""
    b, g = biases or {}, heads if kv_heads is None else kv_heads
    if g < 1 or heads % g:
        raise ValueError(f"kv_heads {g} must divide heads {heads}")
    q = split_heads(project(query, w_q, b.get("b_q")), heads)  # (N, d) -> (h, N, d/h)   Q^i = X W_q^i
    k = split_heads(project(key, w_k, b.get("b_k")), g)  # (N, d) -> (g, N, d/h)         K^j = X W_k^j
    v = split_heads(project(value, w_v, b.get("b_v")), g)  # (N, d) -> (g, N, d/h)       V^j = X W_v^j
    if rope_theta is not None:
        q, k = rotary(q, rope_theta), rotary(k, rope_theta)  # (h, N, d/h), (g, N, d/h): positions in Q, K only
    mask = causal_mask(len(query)) if causal else None  # (N, N)
    shared = (k, v) if g == heads else (np.repeat(k, heads // g, axis=0), np.repeat(v, heads // g, axis=0))
    scores, weights, heads_out = attend(q, *shared, mask)  # K^j, V^j repeated: (g, N, d/h) -> (h, N, d/h)
    concat = merge_heads(heads_out)  # (h, N, d/h) -> (N, d)
    output = project(concat, w_o, b.get("b_o"))  # (N, d) -> (N, d)                    O = H W^Oᵀ
    return Attention(q, k, v, scores, weights, heads_out, concat, output, mask)
