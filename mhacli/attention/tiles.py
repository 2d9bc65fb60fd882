"""Attention in tiles: softmax(Q Kᵀ / √d_k) V computed one block of B keys at a time, never holding N×N.

As in FlashAttention (Dao et al. 2022), each query row keeps its running maximum m, the sum l of exp(score − m)
and the weighted sum of values; a block with a larger maximum rescales them by exp(m_old − m_new). After the
last block, sum / l is the softmax's output to round-off, with only N×B scores ever held.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mhacli.attention.errors import UsageError

Array = np.ndarray


@dataclass(frozen=True)
class BlockStep:
    """What one block of keys did to one query row's running softmax."""

    block: int  # 0-based
    first_key: int
    last_key: int  # inclusive
    block_max: float  # the largest score of this block (−inf when causal masking hides it all)
    running_max: float  # m after this block
    rescale: float  # exp(m_old − m_new), by which the sums so far were multiplied (0 for the first block)
    running_sum: float  # l after this block: Σ exp(score − m) over the keys seen


@dataclass(frozen=True)
class Tiled:
    """Attention computed in tiles, with one query row's record and the scores held at once."""

    output: Array  # (N, d_v)
    block: int  # B
    query: int
    steps: tuple[BlockStep, ...]  # the query row's running max, rescale and running sum, block by block
    held: int  # score entries held at once: N×B
    full: int  # what the whole computation holds: N×N

    def check(self, full_output: Array, tolerance: float) -> Check:
        """The largest |tiled − full| over every output number, against ``tolerance``."""
        return Check(float(np.max(np.abs(self.output - full_output))), tolerance)


@dataclass(frozen=True)
class Check:
    """Tiled against full: the largest difference, and the round-off allowed for the run's float type."""

    difference: float
    tolerance: float

    @property
    def same(self) -> bool:
        return self.difference <= self.tolerance


def _online_step(q: Array, k: Array, v: Array, m: Array, row_sum: Array, acc: Array, first_key: int,
                 causal: bool) -> tuple[Array, Array, Array, Array, Array]:
    """One block of keys: its scores, then m, l (``row_sum``) and the weighted sum rescaled to the new maximum."""
    n, d_k = q.shape[-2:]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)  # (N, d_k) @ (d_k, B) -> (N, B)
    if causal:
        later = np.arange(first_key, first_key + k.shape[-2])[None, :] > np.arange(n)[:, None]  # (N, B)
        s = np.where(later, -np.inf, s)  # a later key is never seen: weight exp(−inf) = 0
    block_max = s.max(-1)  # (N, B) -> (N,)
    m_new = np.maximum(m, block_max)  # (N,)
    shift = np.where(np.isneginf(m_new), 0.0, m_new)  # a row that has seen no key yet: keep exp() free of nan
    rescale = np.exp(m - shift)  # (N,) exp(m_old − m_new): 0 before the first visible key
    p = np.exp(s - shift[..., None])  # (N, B), every entry ≤ 1
    row_sum = row_sum * rescale + p.sum(-1)  # (N,) l, as Dao et al. call it
    acc = acc * rescale[..., None] + p @ v  # (N, d_v) + (N, B) @ (B, d_v)
    return m_new, row_sum, acc, block_max, rescale


def attention_in_tiles(q: Array, k: Array, v: Array, block: int, causal: bool = False, query: int = 0) -> Tiled:
    """softmax(Q Kᵀ / √d_k) V for one head (q, k: (N, d_k), v: (N, d_v)), ``block`` keys at a time.

    Returns the output and, for row ``query``, each block's running max, rescale and running sum.
    """
    n = q.shape[0]
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= n:
        raise UsageError(f"{{block:name}} must be from 1 to N = {n:,} keys, got {block!r}.", block=block)
    if not 0 <= query < n:
        raise UsageError(f"{{query:name}} must be a position from 0 to {n - 1:,}, got {query!r}.", query=query)
    m = np.full(n, -np.inf, dtype=q.dtype)  # (N,) running row max
    row_sum = np.zeros(n, dtype=q.dtype)  # (N,) l: running sum of exp(score − m)
    acc = np.zeros((n, v.shape[-1]), dtype=q.dtype)  # (N, d_v) running weighted sum of values
    steps = []
    for i, start in enumerate(range(0, n, block)):
        stop = min(start + block, n)
        m, row_sum, acc, block_max, rescale = _online_step(q, k[start:stop], v[start:stop], m, row_sum, acc, start,
                                                            causal)
        steps.append(BlockStep(i, start, stop - 1, float(block_max[query]), float(m[query]),
                               float(rescale[query]), float(row_sum[query])))
    return Tiled(acc / row_sum[:, None], block, query, tuple(steps), n * block, n * n)  # (N, d_v) / (N, 1)


def tiled_attention(q: Array, k: Array, v: Array, block: int, causal: bool = False) -> Array:
    """The output of :func:`attention_in_tiles` alone: (N, d_v)."""
    return attention_in_tiles(q, k, v, block, causal).output
