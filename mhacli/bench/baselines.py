"""What ``mha bench`` times the core against, apart from the product: ``--blocked``'s output alone, the core's
matrix products alone (its floor), a numpy loop over heads, PyTorch's ``multi_head_attention_forward``.
"""

from __future__ import annotations

import importlib.util
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from mhacli.attention.attention import (Attention, attend, attention_scores, causal_mask, merge_heads,
                                       multi_head_attention, project, split_heads)
from mhacli.attention.schedule import PARALLEL_MIN, row_blocks, rows_per_block, single_threaded_blas
from mhacli.io.host import cpu_count

Array = np.ndarray
Weights = tuple[Array, Array, Array, Array]


def core_attention(x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int,
                   causal: bool) -> Attention:
    """The attention as a trace runs it: the article's steps on whole arrays."""
    return multi_head_attention(x, x, x, w_q, w_k, w_v, w_o, heads, causal)


def _on_blocks(work: Callable[[slice], None], n: int, heads: int, itemsize: int) -> None:
    """Run ``work`` on blocks of query rows: one thread per core when the job pays for threads."""
    blocks = row_blocks(n, rows_per_block(heads, n, itemsize))
    if heads * n * n < PARALLEL_MIN or cpu_count() < 2:
        for rows in blocks:
            work(rows)
        return
    with single_threaded_blas(), ThreadPoolExecutor(cpu_count(), thread_name_prefix="mhacli-bench") as pool:
        for _ in pool.map(work, blocks):  # re-raises a worker's exception here
            pass


def _heads_qkv(x: Array, w_q: Array, w_k: Array, w_v: Array, heads: int) -> tuple[Array, Array, Array, Array]:
    """Q, K, V split into heads, and the empty (h, N, d/h) the heads' outputs fill."""
    q, k, v = (split_heads(project(x, w), heads) for w in (w_q, w_k, w_v))  # (N, d) -> (h, N, d/h) each
    return q, k, v, np.empty(q.shape, dtype=q.dtype)


def output_only_blocked(x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int,
                        causal: bool) -> Array:
    """The output O (N, d) alone: each block of rows' scores and weights are dropped once used."""
    n = x.shape[0]
    q, k, v, heads_out = _heads_qkv(x, w_q, w_k, w_v, heads)

    def block(rows: slice) -> None:
        blocked = causal_mask(rows.stop - rows.start, n, rows.start) if causal else None  # (B, N)
        heads_out[:, rows] = attend(q[:, rows], k, v, blocked)[2]  # (h, B, d/h)

    _on_blocks(block, n, heads, q.itemsize)
    return project(merge_heads(heads_out), w_o)  # (h, N, d/h) -> (N, d) -> (N, d)


def matmuls_only(x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int, keep: bool) -> Array:
    """The core's own matrix products, same blocks and threads, with no mask and no softmax."""
    n = x.shape[0]
    q, k, v, heads_out = _heads_qkv(x, w_q, w_k, w_v, heads)
    scores = np.empty((heads, n, n), dtype=q.dtype) if keep else None  # (h, N, N), as the trace keeps

    def block(rows: slice) -> None:
        s = attention_scores(q[:, rows], k)  # (h, B, d/h) @ (h, d/h, N) -> (h, B, N)
        heads_out[:, rows] = s @ v  # (h, B, N) @ (h, N, d/h) -> (h, B, d/h)
        if scores is not None:
            scores[:, rows] = s

    _on_blocks(block, n, heads, q.itemsize)
    return project(merge_heads(heads_out), w_o)  # (N, d)


def numpy_per_head(x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int, causal: bool) -> Array:
    """The straightforward numpy version: one head at a time, whole (N, N) arrays and their temporaries."""
    n, d = x.shape
    d_k = d // heads
    outs = []
    for i in range(heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        q, k, v = x @ w_q[rows].T, x @ w_k[rows].T, x @ w_v[rows].T  # (N, d/h) each
        s = q @ k.T / math.sqrt(d_k)  # (N, N)
        if causal:
            s = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, s)
        e = np.exp(s - s.max(axis=1, keepdims=True))  # (N, N)
        outs.append(e / e.sum(axis=1, keepdims=True) @ v)  # (N, N) @ (N, d/h) -> (N, d/h)
    return np.concatenate(outs, axis=1) @ w_o.T  # (N, d)


def torch_available() -> bool:
    """Whether PyTorch can be imported here (it is never required)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except ValueError:  # sys.modules["torch"] is None: an import of torch would fail
        return False


def torch_calls(x: Array, w: Weights, heads: int, causal: bool) -> dict[str, Callable[[], object]]:
    """PyTorch's multi_head_attention_forward on the same X and weights, same threads; {} without torch."""
    from mhacli.models.torch_import import torch_or_none

    torch = torch_or_none()  # guarded: under a memory limit importing torch would abort the process
    if torch is None:
        return {}
    F = torch.nn.functional
    torch.set_num_threads(cpu_count())
    n, d = x.shape
    xt = torch.from_numpy(x)[:, None, :]  # (N, 1, d): PyTorch's (L, batch, E)
    in_proj = torch.from_numpy(np.concatenate(w[:3]))  # (3d, d)
    w_o = torch.from_numpy(np.ascontiguousarray(w[3]))  # (d, d)
    mask = torch.from_numpy(causal_mask(n)) if causal else None  # True = blocked, as here

    def forward(need_weights: bool) -> Callable[[], object]:
        def call() -> object:
            with torch.inference_mode():
                return F.multi_head_attention_forward(
                    xt, xt, xt, d, heads, in_proj, None, None, None, False, 0.0, w_o, None,
                    training=False, need_weights=need_weights, attn_mask=mask,
                    average_attn_weights=False)
        return call

    return {"torch": forward(False), "torch_weights": forward(True)}
