"""The numerical core: multi-head attention in numpy, returning every step.

Notation follows the article, weight layout follows PyTorch's
``nn.MultiheadAttention`` (``q = x @ W_q.T``; head i owns rows
i·d/h … (i+1)·d/h − 1 of W_q).  The article's per-head matrix is derived,
never stored twice: ``W_q^i = W_q[rows_i].T`` (d × d/h).

This module never prints, plots, reads files or touches global random state:
:func:`run` returns one frozen :class:`Trace` and renderers read it.  For
large inputs it spreads blocks of query rows over the cores with a few
threads of its own, holding BLAS to one thread per call meanwhile (see
:func:`attend_heads`); small inputs run in order on the calling thread.
"""

from __future__ import annotations

import hashlib
import math
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from mhacli.core.config import Config
from mhacli.core.errors import UsageError
from mhacli.core.steps import ParameterCount, Step, steps_for
from mhacli.core.tokenize import tokenize

Array = np.ndarray
T = TypeVar("T")


# --------------------------------------------------------------------------
# Inputs: toy embedding, positions, weights
# --------------------------------------------------------------------------


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


def init_weights(d_model: int, rng: np.random.Generator) -> tuple[Array, Array, Array, Array]:
    """W_q, W_k, W_v, W_o (each d×d, PyTorch layout), entries N(0, 1/d) so scores stay O(1)."""
    w = rng.standard_normal((4, d_model, d_model)) / np.sqrt(d_model)  # (4, d, d)
    return w[0], w[1], w[2], w[3]


# --------------------------------------------------------------------------
# The steps, one small function each
# --------------------------------------------------------------------------


def project(x: Array, w: Array) -> Array:
    """Linear projection in PyTorch's layout: x W^T."""
    return x @ w.T  # (N, d) @ (d, d) -> (N, d)


def head_weight(w: Array, i: int, heads: int) -> Array:
    """The article's W^i (d × d/h): rows i·d/h … (i+1)·d/h − 1 of a PyTorch weight, transposed."""
    d_k = w.shape[0] // heads
    return w[i * d_k : (i + 1) * d_k].T  # (d/h, d) -> (d, d/h)


def split_heads(m: Array, heads: int) -> Array:
    """Cut the columns of a full projection into h blocks: one per head."""
    n, d = m.shape
    return m.reshape(n, heads, d // heads).transpose(1, 0, 2)  # (N, d) -> (h, N, d/h)


def merge_heads(heads_out: Array) -> Array:
    """Concatenate the heads side by side: H = [head_1 … head_h]."""
    h, n, d_k = heads_out.shape
    return heads_out.transpose(1, 0, 2).reshape(n, h * d_k)  # (h, N, d/h) -> (N, d)


def attention_scores(q: Array, k: Array) -> Array:
    """S^i = Q^i K^iᵀ / √d_k; dividing keeps the scores' spread independent of the head width."""
    d_k = q.shape[-1]
    # math.sqrt, a Python float, keeps float32 scores float32 (a numpy float64 would widen them).
    return (q @ k.transpose(0, 2, 1)) / math.sqrt(d_k)  # (h, N, d/h) @ (h, d/h, N) -> (h, N, N)


def causal_mask(n_tokens: int) -> Array:
    """True where a query may NOT look (keys after it): PyTorch's boolean ``attn_mask`` polarity."""
    return np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)  # (N, N)


def apply_mask(scores: Array, blocked: Array) -> Array:
    """Blocked positions become −∞, so softmax gives them exactly zero weight."""
    return np.where(blocked, -np.inf, scores)  # (h, N, N)


def softmax(scores: Array) -> Array:
    """Row softmax, computed stably: subtracting the row max leaves the result unchanged but keeps exp() ≤ 1."""
    return softmax_into(scores, np.empty_like(scores))


def softmax_into(scores: Array, out: Array) -> Array:
    """Row softmax of ``scores`` written into ``out``: the same recipe, with no temporary of their size."""
    row_max = scores.max(axis=-1, keepdims=True)  # (..., 1)
    # A row with every key blocked has max −∞; use 0 there so it gives zeros, not NaN.
    row_max[~np.isfinite(row_max)] = 0.0
    np.subtract(scores, row_max, out=out)  # (..., N)
    np.exp(out, out=out)
    total = out.sum(axis=-1, keepdims=True)  # (..., 1)
    total[total == 0] = 1.0  # a fully blocked row is all zeros already
    # One division per row, then N multiplications: a division costs several multiplications.
    return np.multiply(out, 1.0 / total, out=out)


def weigh_values(weights: Array, v: Array) -> Array:
    """head_i = A^i V^i: each query's output is a weighted average of value rows."""
    return weights @ v  # (h, N, N) @ (h, N, d/h) -> (h, N, d/h)


# --------------------------------------------------------------------------
# The same steps, fast: blocks of query rows, in place, on every core
# --------------------------------------------------------------------------
#
# The functions above are the article's steps on whole arrays.  Run as written
# at N = 4096 they spend half their time on the softmax's (h, N, N) temporaries
# (scores − max, exp, the division), each streamed through memory on one core.
# The path below does the same arithmetic on one block of query rows of one
# head at a time: the block's scores are made by one matrix product, masked,
# turned into weights in place while still in cache, and multiplied by V.
# Blocks are independent, so one thread per core takes them in turn (numpy's
# ufuncs and BLAS release the GIL) while BLAS itself is held to one thread:
# two levels of threads on two cores would only fight.  Every block is computed
# by the same calls whichever thread runs it, so the numbers do not depend on
# the scheduling: same seed, same bits.

_BLOCK_BYTES = 4 * 2**20  # scores of one block of rows; with its weights it stays in the L3 cache
_PARALLEL_MIN = 2**20  # fewer score entries than this and starting threads costs more than it saves


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask, not the whole machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def rows_per_block(n_keys: int, itemsize: int, budget: int = _BLOCK_BYTES) -> int:
    """How many query rows of ``n_keys`` scores fit in ``budget`` bytes (at least one)."""
    return max(1, budget // (n_keys * itemsize))


def row_blocks(n_rows: int, size: int) -> list[slice]:
    """Consecutive slices of at most ``size`` rows covering 0 … n_rows − 1."""
    return [slice(r, min(r + size, n_rows)) for r in range(0, n_rows, size)]


def scale_queries(q: Array) -> Array:
    """Q/√d_k once per run: dividing the (N, d/h) queries is N/(d/h) times less work than the scores."""
    d_k = q.shape[-1]
    # Written into a C-ordered array so each head's rows lie together (q itself may be a strided view).
    return np.divide(q, math.sqrt(d_k), out=np.empty(q.shape, dtype=q.dtype))  # (h, N, d/h)


def score_rows(q_scaled: Array, k: Array, out: Array) -> Array:
    """S = (Q/√d_k) Kᵀ for some query rows, written into ``out``."""
    return np.matmul(q_scaled, k.T, out=out)  # (B, d/h) @ (d/h, N) -> (B, N)


def mask_rows(scores: Array, first_row: int) -> Array:
    """Causal mask on rows first_row …: keys after the query become −∞, in place."""
    b, n = scores.shape
    later = np.arange(n) > np.arange(first_row, first_row + b)[:, None]  # (B, N) True = blocked
    np.copyto(scores, -np.inf, where=later)
    return scores


def attend_rows(q_scaled: Array, k: Array, v: Array, first_row: int, causal: bool,
                scores: Array, weights: Array, heads_out: Array) -> None:
    """Score, mask, softmax and weigh values for a block of query rows of one head, into the given arrays."""
    score_rows(q_scaled, k, out=scores)  # (B, d/h) @ (d/h, N) -> (B, N)
    if causal:
        mask_rows(scores, first_row)
    softmax_into(scores, weights)  # (B, N) -> (B, N), while the block is in cache
    np.matmul(weights, v, out=heads_out)  # (B, N) @ (N, d/h) -> (B, d/h)


def single_threaded_blas() -> AbstractContextManager[object] | None:
    """A context in which each BLAS call uses one thread, or None when threadpoolctl is missing."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    return threadpool_limits(limits=1, user_api="blas")


Runner = Callable[[Callable[[T], None], Sequence[T]], None]


def in_order(task: Callable[[T], None], items: Sequence[T]) -> None:
    """The :data:`Runner` of small jobs: every item on this thread, one after the other."""
    for item in items:
        task(item)


@contextmanager
def shared_work(entries: int) -> Iterator[Runner]:
    """A :data:`Runner` for a job of ``entries`` scores: one thread per core when that pays, else in order.

    BLAS is held to one thread for the whole job, matrix products included:
    BLAS threads woken by one call keep spinning for a while after it, and
    would take the cores away from the blocks that follow.
    """
    workers = cpu_count()
    limit = single_threaded_blas() if workers > 1 and entries >= _PARALLEL_MIN else None
    if limit is None:
        yield in_order
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mhacli")

    def on_pool(task: Callable[[T], None], items: Sequence[T]) -> None:
        for _ in pool.map(task, items):  # re-raises a worker's exception here
            pass

    try:
        with limit:
            yield on_pool
    finally:
        # On Ctrl-C, drop the blocks not yet started instead of computing them all first.
        pool.shutdown(wait=True, cancel_futures=True)


def project_rows(x: Array, w: Array, run: Runner = in_order) -> Array:
    """x Wᵀ (PyTorch layout) with the rows of x shared among the workers."""
    n = x.shape[0]
    out = np.empty((n, w.shape[0]), dtype=x.dtype)  # (N, d)

    def block(rows: slice) -> None:
        np.matmul(x[rows], w.T, out=out[rows])  # (B, d) @ (d, d) -> (B, d)

    parts = 1 if run is in_order else 4 * cpu_count()  # in order: one product, as project() makes it
    run(block, row_blocks(n, max(1, -(-n // parts))))
    return out


def head_blocks(heads: int, n: int, itemsize: int) -> list[tuple[int, slice]]:
    """Every (head, block of query rows) pair: the independent units of work."""
    size = rows_per_block(n, itemsize)
    return [(i, rows) for i in range(heads) for rows in row_blocks(n, size)]


def attend_heads(q: Array, k: Array, v: Array, causal: bool,
                 run: Runner = in_order) -> tuple[Array, Array, Array]:
    """Scores, weights and output of every head, keeping all (h, N, N) weights as the trace needs."""
    h, n, d_k = q.shape
    q_scaled = scale_queries(q)  # (h, N, d/h)
    k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)  # (h, N, d/h): each head's rows together
    scores = np.empty((h, n, n), dtype=q.dtype)  # (h, N, N)
    weights = np.empty((h, n, n), dtype=q.dtype)  # (h, N, N)
    heads_out = np.empty((h, n, d_k), dtype=q.dtype)  # (h, N, d/h)

    def block(item: tuple[int, slice]) -> None:
        i, rows = item
        attend_rows(q_scaled[i, rows], k[i], v[i], rows.start, causal,
                    scores[i, rows], weights[i, rows], heads_out[i, rows])

    run(block, head_blocks(h, n, q.itemsize))
    return scores, weights, heads_out


def attention_output(x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int,
                     causal: bool) -> Array:
    """Multi-head attention's output O (N, d) alone: weights made a block at a time, memory ∝ N·block, not N²."""
    n = x.shape[0]
    with shared_work(heads * n * n) as run:
        q = scale_queries(split_heads(project_rows(x, w_q, run), heads))  # (N, d) -> (h, N, d/h), ÷ √d_k
        k = np.ascontiguousarray(split_heads(project_rows(x, w_k, run), heads))  # (N, d) -> (h, N, d/h)
        v = np.ascontiguousarray(split_heads(project_rows(x, w_v, run), heads))  # (N, d) -> (h, N, d/h)
        heads_out = np.empty(q.shape, dtype=q.dtype)  # (h, N, d/h)

        def block(item: tuple[int, slice]) -> None:
            i, rows = item
            scores = np.empty((rows.stop - rows.start, n), dtype=q.dtype)  # (B, N), dropped after the block
            weights = np.empty_like(scores)  # (B, N)
            attend_rows(q[i, rows], k[i], v[i], rows.start, causal, scores, weights, heads_out[i, rows])

        run(block, head_blocks(heads, n, q.itemsize))
        return project_rows(merge_heads(heads_out), w_o, run)  # (h, N, d/h) -> (N, d) -> (N, d)


# --------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------


def _frozen(a: Array) -> Array:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class Trace:
    """Every intermediate of one multi-head attention run, read-only."""

    config: Config
    tokens: tuple[str, ...]
    token_ids: Array  # (N,) vocabulary id per token
    X: Array  # (N, d) input to attention, positions included
    W_q: Array  # (d, d) PyTorch layout
    W_k: Array  # (d, d)
    W_v: Array  # (d, d)
    W_o: Array  # (d, d)
    Q: Array  # (h, N, d/h)
    K: Array  # (h, N, d/h)
    V: Array  # (h, N, d/h)
    scores: Array  # (h, N, N) scaled, masked with −∞
    weights: Array  # (h, N, N) row-softmax of scores
    heads: Array  # (h, N, d/h)
    concat: Array  # (N, d)
    output: Array  # (N, d)
    mask: Array | None = None  # (N, N) True = blocked; None when not causal
    embeddings: Array | None = None  # (N, d) E[tokens]; None when loaded from an npz
    positions: Array | None = None  # (N, d) P (zeros with --no-positions); None when loaded
    rules: tuple[str, ...] | None = None  # per-head rule names, for designed weights
    source: str | None = None  # the npz file this trace was loaded from, if any

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray) and value.flags.writeable:
                object.__setattr__(self, name, _frozen(value))

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_heads(self) -> int:
        return self.config.heads

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def d_k(self) -> int:
        return self.config.d_k

    @property
    def steps(self) -> list[Step]:
        return steps_for(self.n_tokens, self.d_model, self.num_heads, self.config.causal)

    @property
    def parameters(self) -> ParameterCount:
        return ParameterCount(self.d_model, self.num_heads)

    def head_weights(self, i: int) -> tuple[Array, Array, Array]:
        """The article's W_q^i, W_k^i, W_v^i (each d × d/h) for head i (0-based)."""
        h = self.num_heads
        return head_weight(self.W_q, i, h), head_weight(self.W_k, i, h), head_weight(self.W_v, i, h)

    def split_equals_direct(self) -> float:
        """Largest |X W_q^i − (X W_qᵀ)[:, block i]| over heads and Q, K, V: the article's claim, checked."""
        worst = 0.0
        for w in (self.W_q, self.W_k, self.W_v):
            full = split_heads(project(self.X, w), self.num_heads)  # (h, N, d/h)
            for i in range(self.num_heads):
                direct = self.X @ head_weight(w, i, self.num_heads)  # (N, d) @ (d, d/h) -> (N, d/h)
                worst = max(worst, float(np.max(np.abs(direct - full[i]), initial=0.0)))
        return worst


# --------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------


def attend(
    x: Array, w_q: Array, w_k: Array, w_v: Array, w_o: Array, heads: int, causal: bool
) -> dict[str, Array]:
    """Multi-head attention of x (N, d) with PyTorch-layout weights; every intermediate by name."""
    n = x.shape[0]
    with shared_work(heads * n * n) as run:
        q = split_heads(project_rows(x, w_q, run), heads)  # (N, d) -> (h, N, d/h)
        k = split_heads(project_rows(x, w_k, run), heads)  # (N, d) -> (h, N, d/h)
        v = split_heads(project_rows(x, w_v, run), heads)  # (N, d) -> (h, N, d/h)
        scores, weights, heads_out = attend_heads(q, k, v, causal, run)  # (h, N, N) ×2, (h, N, d/h)
        concat = merge_heads(heads_out)  # (N, d)
        output = project_rows(concat, w_o, run)  # (N, d)
    return {"Q": q, "K": k, "V": v, "scores": scores, "weights": weights,
            "heads": heads_out, "concat": concat, "output": output,
            "mask": causal_mask(n) if causal else None}


def run_tokens(tokens: Sequence[str], config: Config) -> Trace:
    """Run multi-head attention over given tokens under ``config``."""
    tokens = tuple(tokens)
    if not tokens:
        raise UsageError("the text has no tokens to attend over; give at least one word.")
    config.check_fits(len(tokens))
    dtype = np.dtype(config.dtype)
    n, d = len(tokens), config.d_model
    _, ids = vocabulary(tokens)
    rules: tuple[str, ...] | None = None
    if config.weights == "designed":
        from mhacli.core.designed import design

        built = design(tokens, config)
        e, p = built.embeddings, built.positions
        w_q, w_k, w_v, w_o = built.w_q, built.w_k, built.w_v, built.w_o
        rules = tuple(built.rules)
    else:
        e = embed(tokens, d, config.seed)  # (N, d)
        p = positional_encoding(n, d) if config.positions else np.zeros((n, d))  # (N, d)
        w_q, w_k, w_v, w_o = init_weights(d, np.random.default_rng(config.seed))
    e, p = e.astype(dtype), p.astype(dtype)
    w_q, w_k, w_v, w_o = (w.astype(dtype) for w in (w_q, w_k, w_v, w_o))
    x = e + p  # (N, d)
    parts = attend(x, w_q, w_k, w_v, w_o, config.heads, config.causal)
    for name in ("scores", "weights"):
        # Fresh arrays nobody else holds: frozen where they are, so the trace does not copy (h, N, N) twice.
        parts[name].setflags(write=False)
    return Trace(config=config, tokens=tokens, token_ids=ids, embeddings=e, positions=p, X=x,
                 W_q=w_q, W_k=w_k, W_v=w_v, W_o=w_o, rules=rules, **parts)


def run(text: str, **options: object) -> Trace:
    """Tokenize ``text`` and run multi-head attention; options are :class:`Config` fields.

    >>> trace = run("the cat sat on the mat", heads=4)
    >>> trace.weights.shape
    (4, 6, 6)
    """
    config = Config(**options)  # type: ignore[arg-type]
    tokens = tokenize(text, config.tokenizer)
    if not tokens:
        raise UsageError(
            f"the text has no tokens under the {config.tokenizer!r} tokenizer; give some words."
        )
    return run_tokens(tokens, config)
