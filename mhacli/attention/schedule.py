"""Blocks of query rows and one BLAS thread: how the attention's steps are spread over the cores where that pays
(``mha bench --blocked``'s output-only path, mhacli/bench/baselines.py) and how training holds numpy to one thread.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any


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
