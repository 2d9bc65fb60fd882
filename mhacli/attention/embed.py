"""The input X = E[tokens] + P: a toy embedding, sinusoidal positions, and random weights.

Every number here comes from a seed through ``np.random.default_rng`` (the token
table from a SHA-256 of the token, never Python's ``hash``), so the same text and
seed give the same bits on any machine and in any process.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

Array = np.ndarray


def token_seed(token: str, seed: int) -> int:
    """A stable 64-bit seed for one token string (sha256, never Python's ``hash``)."""
    digest = hashlib.sha256(f"mhacli-embedding\x00{seed}\x00{token}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def vocabulary(tokens: Sequence[str]) -> tuple[list[str], Array]:
    """Distinct tokens in order of first appearance, and each token's id in that list."""
    index: dict[str, int] = {}
    ids = [index.setdefault(t, len(index)) for t in tokens]
    return list(index), np.asarray(ids, dtype=np.int64)


def embed(tokens: Sequence[str], d_model: int, seed: int) -> Array:
    """Toy embedding E[tokens]: one N(0, 1) vector per distinct token string, same in any sentence."""
    vocab, ids = vocabulary(tokens)
    table = np.stack(
        [np.random.default_rng(token_seed(t, seed)).standard_normal(d_model) for t in vocab]
    )  # (V, d)
    return table[ids]  # (V, d) -> (N, d)


def positional_encoding(n_tokens: int, d_model: int) -> Array:
    """Sinusoidal positions (Vaswani et al.): P[p, 2j] = sin(p/10000^(2j/d)), P[p, 2j+1] = cos(...)."""
    pos = np.arange(n_tokens)[:, None]  # (N, 1)
    j = np.arange(0, d_model, 2)[None, :]  # (1, ceil(d/2))
    angle = pos / np.power(10000.0, j / d_model)  # (N, ceil(d/2))
    p = np.empty((n_tokens, d_model))  # (N, d)
    p[:, 0::2] = np.sin(angle)
    p[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return p


def init_weights(d_model: int, rng: np.random.Generator,
                 kv_rows: int | None = None) -> tuple[Array, Array, Array, Array]:
    """W_q, W_k, W_v, W_o (each d×d, PyTorch layout), entries N(0, 1/d) so scores stay O(1).

    ``kv_rows`` (g·d/h, when g key/value heads are shared) draws W_k and W_v at (g·d/h, d) instead.
    """
    if kv_rows is None or kv_rows == d_model:
        w = rng.standard_normal((4, d_model, d_model)) / np.sqrt(d_model)  # (4, d, d)
        return w[0], w[1], w[2], w[3]
    w_q, w_k, w_v, w_o = (rng.standard_normal((rows, d_model)) / np.sqrt(d_model)
                          for rows in (d_model, kv_rows, kv_rows, d_model))  # (d, d), (g·d/h, d) twice, (d, d)
    return w_q, w_k, w_v, w_o
