"""The same attention steps for long texts: blocks of query rows, one thread per core.

Run on whole arrays, :func:`mhacli.attention.attention.attend` streams each
(h, N, N) array through memory several times on one core.  Here it runs on
blocks of query rows whose scores stay in the cache, one block per thread
(numpy's ufuncs and BLAS release the GIL), while BLAS itself is held to one
thread: two levels of threads on two cores would only fight.  Every block is
computed by the same calls whichever thread runs it, so the numbers do not
depend on the scheduling: same seed, same bits.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import numpy as np

from mhacli.attention.attention import Array, attend, attend_all, causal_mask

BLOCK_BYTES = 4 * 2**20  # scores of one block of rows; with its weights it stays in the L3 cache
PARALLEL_MIN = 2**20  # fewer score entries than this and starting threads costs more than it saves


def row_blocks(n_rows: int, size: int) -> list[slice]:
    """Consecutive slices of at most ``size`` rows covering 0 … n_rows − 1."""
    return [slice(r, min(r + size, n_rows)) for r in range(0, n_rows, size)]


def rows_per_block(heads: int, n_keys: int, itemsize: int, budget: int = BLOCK_BYTES) -> int:
    """How many query rows of every head's ``n_keys`` scores fit in ``budget`` bytes (at least one)."""
    return max(1, budget // (heads * n_keys * itemsize))


def single_threaded_blas() -> Any:
    """A context in which each BLAS call uses one thread (threadpoolctl, a declared dependency)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def attend_blocked(q: Array, k: Array, v: Array, causal: bool, cores: int = 1) -> tuple[Array, Array, Array]:
    """:func:`attend` on blocks of query rows, on ``cores`` threads when the job is large enough to pay.

    ``cores``: how many this process may run on (:func:`mhacli.io.host.cpu_count`, read by the caller)."""
    h, n, d_k = q.shape
    if h * n * n < PARALLEL_MIN or cores < 2:
        return attend_all(q, k, v, causal)
    scores = np.empty((h, n, n), dtype=q.dtype)  # (h, N, N)
    weights = np.empty((h, n, n), dtype=q.dtype)  # (h, N, N)
    heads_out = np.empty((h, n, d_k), dtype=q.dtype)  # (h, N, d/h)

    def block(rows: slice) -> None:
        blocked = causal_mask(rows.stop - rows.start, n, rows.start) if causal else None  # (B, N)
        s, w, o = attend(q[:, rows], k, v, blocked)  # (h, B, N), (h, B, N), (h, B, d/h)
        scores[:, rows], weights[:, rows], heads_out[:, rows] = s, w, o

    blocks = row_blocks(n, rows_per_block(h, n, q.itemsize))
    with single_threaded_blas(), ThreadPoolExecutor(cores, thread_name_prefix="mhacli") as pool:
        try:
            for _ in pool.map(block, blocks):  # re-raises a worker's exception here
                pass
        except BaseException:
            # On Ctrl-C, drop the blocks not yet started instead of computing them all first.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return scores, weights, heads_out
