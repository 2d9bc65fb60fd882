"""The numerical core: multi-head attention in numpy, returning every step.

Notation follows the article, weight layout follows PyTorch's
``nn.MultiheadAttention`` (``q = x @ W_q.T``; head i owns rows
i·d/h … (i+1)·d/h − 1 of W_q).  The article's per-head matrix is derived,
never stored twice: ``W_q^i = W_q[rows_i].T`` (d × d/h).

This module never prints, plots, reads files or touches global random state:
:func:`run` returns one frozen :class:`Trace` and renderers read it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mhacli.config import Config
from mhacli.errors import UsageError
from mhacli.steps import ParameterCount, Step, steps_for
from mhacli.tokenize import tokenize

Array = np.ndarray


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
    return (q @ k.transpose(0, 2, 1)) / np.sqrt(d_k)  # (h, N, d/h) @ (h, d/h, N) -> (h, N, N)


def causal_mask(n_tokens: int) -> Array:
    """True where a query may NOT look (keys after it): PyTorch's boolean ``attn_mask`` polarity."""
    return np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)  # (N, N)


def apply_mask(scores: Array, blocked: Array) -> Array:
    """Blocked positions become −∞, so softmax gives them exactly zero weight."""
    return np.where(blocked, -np.inf, scores)  # (h, N, N)


def softmax(scores: Array) -> Array:
    """Row softmax, computed stably: subtracting the row max leaves the result unchanged but keeps exp() ≤ 1."""
    row_max = scores.max(axis=-1, keepdims=True)  # (h, N, 1)
    # A row with every key blocked has max −∞; use 0 there so it gives zeros, not NaN.
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.exp(scores - row_max)  # (h, N, N)
    total = e.sum(axis=-1, keepdims=True)  # (h, N, 1)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def weigh_values(weights: Array, v: Array) -> Array:
    """head_i = A^i V^i: each query's output is a weighted average of value rows."""
    return weights @ v  # (h, N, N) @ (h, N, d/h) -> (h, N, d/h)


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
    q = split_heads(project(x, w_q), heads)  # (N, d) -> (h, N, d/h)
    k = split_heads(project(x, w_k), heads)  # (N, d) -> (h, N, d/h)
    v = split_heads(project(x, w_v), heads)  # (N, d) -> (h, N, d/h)
    scores = attention_scores(q, k)  # (h, N, N)
    blocked = causal_mask(n) if causal else None
    if blocked is not None:
        scores = apply_mask(scores, blocked)
    weights = softmax(scores)  # (h, N, N)
    heads_out = weigh_values(weights, v)  # (h, N, d/h)
    concat = merge_heads(heads_out)  # (N, d)
    output = project(concat, w_o)  # (N, d)
    return {"Q": q, "K": k, "V": v, "scores": scores, "weights": weights,
            "heads": heads_out, "concat": concat, "output": output, "mask": blocked}


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
        from mhacli.designed import design

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
