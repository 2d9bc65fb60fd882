"""The numbers ``mha demo`` shows beside its narration, computed once from a trace: the renderer only lays them out.

The lesson zooms in on one query (:func:`focus_query`) and shows, for it, each
head's top keys by score and by weight, what each head's output row is mostly
made of, and how every output column draws on the heads through W^O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mhacli.attention.evidence import TIE_MARGIN

if TYPE_CHECKING:
    from mhacli.attention.trace import Trace
    from mhacli.measures.compare import TrainedApart

Array = np.ndarray

TOP_KEYS = 3  # keys listed per head when the lesson zooms in on one query
DECODE_MAX_ROWS = 12  # tokens listed when the designed output is read back as words
SHARE_COLUMNS = 4  # output columns whose W^O shares are listed


@dataclass(frozen=True)
class TopValue:
    """What one head's output row for the query is mostly made of: the top key, its weight, how many tie."""

    key: int
    weight: float
    tied: int  # value rows sharing the top weight (1: a single "mostly")


@dataclass(frozen=True)
class Twin:
    """Two copies of one word: how far apart their E rows are, and their X = E + P rows."""

    first: int
    second: int
    e_apart: float  # max |E[first] − E[second]|
    x_apart: float  # ‖X[first] − X[second]‖


@dataclass(frozen=True)
class LessonNumbers:
    """Every number of the lesson beside its narration, for one query ``q``."""

    q: int
    score_keys: tuple[tuple[int, ...], ...]  # per head: the top keys of row q by score
    weight_keys: tuple[tuple[int, ...], ...]  # per head: the top keys of row q by weight
    row_sums: tuple[float, ...]  # per head: the sum of row q of the weights (1, as softmax makes it)
    values: tuple[TopValue, ...]  # per head: what head_i[q] is mostly made of
    w_o_shares: Array  # (columns, h): share of |W^O| each output column takes from each head's block
    e_columns: tuple[int, ...]  # the first non-zero columns of E (what the positions table shows)
    p_columns: tuple[int, ...]  # the first non-zero columns of P
    twin: Twin | None  # the first repeated word, if any
    decoded: tuple[tuple[str, ...], ...] | None  # designed weights: per token, the word each head brought back


def focus_query(tokens: tuple[str, ...]) -> int:
    """The query the lesson zooms in on: the second copy of the first repeated word, else the last word."""
    seen: set[str] = set()
    for p, t in enumerate(tokens):
        if t in seen:
            return p
        seen.add(t)
    words = [p for p, t in enumerate(tokens) if any(ch.isalnum() for ch in t)]
    return words[-1] if words else len(tokens) - 1


def top(row: Array, k: int) -> tuple[int, ...]:
    """The ``k`` largest entries' positions, largest first, ties in position order."""
    return tuple(int(j) for j in np.argsort(-np.asarray(row), kind="stable")[:k])


def top_value(row: Array) -> TopValue:
    """A weight row's top key and weight, and how many keys tie with it."""
    row = np.asarray(row, dtype=np.float64)
    j = int(np.argmax(row))
    return TopValue(j, float(row[j]), int((row >= row[j] - TIE_MARGIN).sum()))


def w_o_shares(w_o: Array, heads: int, columns: int = SHARE_COLUMNS) -> Array:
    """(columns, h): for the first output columns, the share of |W^O| taken from each head's block of H."""
    d = w_o.shape[0]
    dk = d // heads
    a = np.abs(np.asarray(w_o, dtype=np.float64))  # (d, d): output column j reads row j
    share = np.stack([a[:, i * dk : (i + 1) * dk].sum(axis=1) for i in range(heads)], axis=1)  # (d, h)
    share /= share.sum(axis=1, keepdims=True)
    return share[: min(columns, d)]


def nonzero_columns(m: Array | None, count: int) -> tuple[int, ...]:
    """The first ``count`` columns of ``m`` that are not all zero (the first ones if all are)."""
    if m is None:
        return ()
    used = [j for j in range(m.shape[1]) if np.any(m[:, j] != 0)]
    return tuple((used or list(range(m.shape[1])))[:count])


def first_twin(trace: Trace) -> Twin | None:
    """The first word that appears twice, with how far apart its two E rows and X rows are."""
    if trace.embeddings is None:
        return None
    e, x = np.asarray(trace.embeddings), np.asarray(trace.X)
    first: dict[str, int] = {}
    for i, t in enumerate(trace.tokens):
        if t in first:
            a = first[t]
            return Twin(a, i, float(np.abs(e[a] - e[i]).max()), float(np.linalg.norm(x[a] - x[i])))
        first.setdefault(t, i)
    return None


def lesson_numbers(trace: Trace, query: int | None = None) -> LessonNumbers:
    """Every number of the lesson for ``query`` (default: :func:`focus_query`), computed once."""
    q = focus_query(trace.tokens) if query is None else query
    k = min(TOP_KEYS, trace.n_tokens)
    scores = np.asarray(trace.scores, dtype=np.float64)  # (h, N, N)
    weights = np.asarray(trace.weights, dtype=np.float64)  # (h, N, N)
    decoded = None
    if trace.config.weights == "designed" and trace.rules and trace.embeddings is not None:
        from mhacli.attention.designed import decode_output

        found = decode_output(np.asarray(trace.output), np.asarray(trace.embeddings), trace.tokens, trace.num_heads)
        decoded = tuple(tuple(found[p]) for p in range(min(trace.n_tokens, DECODE_MAX_ROWS)))
    e = np.asarray(trace.embeddings) if trace.embeddings is not None else None
    p = np.asarray(trace.positions) if trace.positions is not None else None
    return LessonNumbers(
        q=q,
        score_keys=tuple(top(scores[i, q], k) for i in range(trace.num_heads)),
        weight_keys=tuple(top(weights[i, q], k) for i in range(trace.num_heads)),
        row_sums=tuple(float(weights[i, q].sum()) for i in range(trace.num_heads)),
        values=tuple(top_value(weights[i, q]) for i in range(trace.num_heads)),
        w_o_shares=w_o_shares(np.asarray(trace.W_o), trace.num_heads),
        e_columns=nonzero_columns(e, 4), p_columns=nonzero_columns(p, 4),
        twin=first_twin(trace), decoded=decoded)


# --- One head against many, trained apart: the lesson's last step and one-vs-many.png -----------------------

#: The grammar pair's sentence: the famous one from the attention literature, a sentence of the grammar.
GRAMMAR_SENTENCE = "the animal didn't cross the street because it was too tired"
#: The letters pair's sequence: twelve letters (the task's length), every relation has a different answer.
LETTERS_SEQUENCE = "d a c f b e h a j g i c"


@dataclass(frozen=True)
class TrainedPair:
    """One shipped pair (one head trained alone, h heads trained together) on one text: what the two reached
    (:class:`~mhacli.measures.compare.TrainedApart`, as ``mha compare`` reads it) and their weights on the text."""

    apart: TrainedApart
    tokens: tuple[str, ...]
    single_weights: Array  # (N, N): the lone head's weights on ``tokens``
    heads_weights: Array  # (h, N, N): each of the h heads' weights on ``tokens``

    @property
    def heads(self) -> int:
        return int(self.heads_weights.shape[0])

    @property
    def single_entropy(self) -> float:
        """Bits, mean over the lone head's rows: how focused it is."""
        from mhacli.measures.analysis import row_entropy

        return float(row_entropy(self.single_weights).mean())

    @property
    def heads_entropy(self) -> tuple[float, ...]:
        """Bits, mean over each of the h heads' rows."""
        from mhacli.measures.analysis import row_entropy

        return tuple(float(e) for e in row_entropy(self.heads_weights).mean(axis=-1))


def trained_pair(alone: Any, alone_metrics: dict[str, Any], heads: Any, heads_metrics: dict[str, Any],
                 tokens: tuple[str, ...]) -> TrainedPair:
    """``alone`` and ``heads`` (trained models, 1 and h heads, one task) on ``tokens``, with their records."""
    from mhacli.measures.compare import trained_apart

    apart = trained_apart(alone, alone_metrics, heads, heads_metrics)
    single_w = np.asarray(alone.attention(alone.ids(tokens)[None]), dtype=np.float64)[0, 0]  # (N, N)
    heads_w = np.asarray(heads.attention(heads.ids(tokens)[None]), dtype=np.float64)[0]  # (h, N, N)
    return TrainedPair(apart, tuple(tokens), single_w, heads_w)
