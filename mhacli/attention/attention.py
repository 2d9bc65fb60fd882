"""Multi-head attention, one small function per step of the article.

Notation follows the article; the weight layout follows PyTorch's
``nn.MultiheadAttention`` (``q = x @ W_q.T``; head i owns rows
i·d/h … (i+1)·d/h − 1 of W_q).  The article's per-head matrix is derived,
never stored twice: ``W_q^i = W_q[rows_i].T`` (d × d/h).

:func:`multi_head_attention` runs the steps in order on whole arrays.  For a
long text the same functions run on blocks of query rows, spread over the
cores (:mod:`mhacli.attention.schedule`); nothing here is written twice.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

Array = np.ndarray


def project(x: Array, w: Array, b: Array | None = None) -> Array:
    """Linear projection in PyTorch's layout: x Wᵀ (+ b)."""
    out = x @ w.T  # (N, d) @ (d, d) -> (N, d)
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


def attention_scores(q: Array, k: Array) -> Array:
    """S^i = Q^i K^iᵀ / √(d/h); dividing keeps the scores' spread independent of the head width."""
    d_k = q.shape[-1]
    # math.sqrt, a Python float, keeps float32 scores float32 (a numpy float64 would widen them).
    scores = q @ np.swapaxes(k, -1, -2)  # (h, B, d/h) @ (h, d/h, N) -> (h, B, N)
    scores /= math.sqrt(d_k)  # in place: no second (h, B, N) array
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


def softmax(scores: Array, out: Array | None = None) -> Array:
    """Row softmax, computed stably: subtracting the row max leaves the result unchanged but keeps exp() ≤ 1."""
    out = np.empty_like(scores) if out is None else out
    row_max = scores.max(axis=-1, keepdims=True)  # (..., 1)
    # A row with every key blocked has max −∞; use 0 there so it gives zeros, not NaN.
    row_max[~np.isfinite(row_max)] = 0.0
    np.subtract(scores, row_max, out=out)  # (..., N)
    np.exp(out, out=out)
    total = out.sum(axis=-1, keepdims=True)  # (..., 1)
    total[total == 0] = 1.0  # a fully blocked row is all zeros already
    # One division per row, then N multiplications: a division costs several multiplications.
    return np.multiply(out, 1.0 / total, out=out)  # (..., N)


def weigh_values(weights: Array, v: Array) -> Array:
    """head_i = A^i V^i: each query's output is a weighted average of value rows."""
    return weights @ v  # (h, B, N) @ (h, N, d/h) -> (h, B, d/h)


def merge_heads(heads_out: Array) -> Array:
    """Concatenate the heads side by side: H = [head_1 … head_h]."""
    *lead, h, n, d_k = heads_out.shape  # leading axes (a batch of sequences) pass through
    return np.swapaxes(heads_out, -3, -2).reshape(*lead, n, h * d_k)  # (..., h, N, d/h) -> (..., N, d)


def attend(q: Array, k: Array, v: Array, blocked: Array | None) -> tuple[Array, Array, Array]:
    """Scores, weights and output of every head for some query rows: steps 3 to 6 of the article."""
    scores = attention_scores(q, k)  # (h, B, N)
    if blocked is not None:
        apply_mask(scores, blocked)  # (h, B, N)
    weights = softmax(scores)  # (h, B, N)
    return scores, weights, weigh_values(weights, v)  # (h, B, N), (h, B, N), (h, B, d/h)


def attend_all(q: Array, k: Array, v: Array, causal: bool) -> tuple[Array, Array, Array]:
    """:func:`attend` for every query row at once, with the causal mask when asked."""
    n = q.shape[1]
    return attend(q, k, v, causal_mask(n) if causal else None)


Attender = Callable[[Array, Array, Array, bool], "tuple[Array, Array, Array]"]


def multi_head_attention(
    x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int, causal: bool,
    biases: dict[str, Array] | None = None, attender: Attender = attend_all, x_v: Array | None = None,
) -> dict[str, Array | None]:
    """Multi-head attention of x (N, d) with PyTorch-layout weights; every intermediate by name.

    ``attender`` runs steps 3 to 6 (scores … weighted values); :mod:`mhacli.attention.schedule`
    passes one that takes the query rows a block at a time on every core.  ``x_v``: what the values are
    made from when it is not x (a model trained with values from the word embeddings alone: V = E W_vᵀ).
    """
    b = biases or {}
    n = x.shape[0]
    q = split_heads(project(x, w_q, b.get("b_q")), heads)  # (N, d) -> (h, N, d/h)
    k = split_heads(project(x, w_k, b.get("b_k")), heads)  # (N, d) -> (h, N, d/h)
    v = split_heads(project(x if x_v is None else x_v, w_v, b.get("b_v")), heads)  # (N, d) -> (h, N, d/h)
    mask = causal_mask(n) if causal else None  # (N, N)
    scores, weights, heads_out = attender(q, k, v, causal)  # (h, N, N), (h, N, N), (h, N, d/h)
    concat = merge_heads(heads_out)  # (h, N, d/h) -> (N, d)
    output = project(concat, w_o, b.get("b_o"))  # (N, d) -> (N, d)
    return {"Q": q, "K": k, "V": v, "scores": scores, "weights": weights,
            "heads": heads_out, "concat": concat, "output": output, "mask": mask}
