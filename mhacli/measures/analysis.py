"""Measures that read attention weights: where a head looks, how spread, how different.

Functions of arrays only (they never recompute attention), shared by the
terminal, the figures, ``mha compare``, the quiz and the HTML page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.attention import evidence
from mhacli.attention.trace import freeze
from mhacli.grammar.grammar import Reading, read

if TYPE_CHECKING:
    from mhacli.attention.trace import Trace
    from mhacli.measures.view import AttentionView

Array = np.ndarray


def row_entropy(weights: Array) -> Array:
    """Shannon entropy in bits of every row of ``weights`` (..., N, N) -> (..., N); 0·log 0 = 0."""
    p = np.asarray(weights)
    if p.ndim == 3:
        # One head at a time: the temporaries stay (N, N), not (h, N, N) in float64
        # (at 5,000 tokens that is 0.4 GiB instead of 2.3 GiB on top of the trace).
        return np.stack([row_entropy(head) for head in p])
    p = p.astype(np.float64, copy=False)
    logs = np.log2(p, out=np.zeros_like(p), where=p > 0)
    logs *= p
    return -logs.sum(axis=-1)


def max_row_entropy(n_tokens: int, causal: bool) -> Array:
    """The uniform maximum of each row's entropy: log2 of how many keys that query may see."""
    visible = np.arange(1, n_tokens + 1) if causal else np.full(n_tokens, n_tokens)
    return np.log2(visible.astype(np.float64))


def js_divergence(p: Array, q: Array) -> Array:
    """Jensen–Shannon divergence in bits between matching rows of p and q (0 = identical, 1 = disjoint)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)

    def kl(a: Array, b: Array) -> Array:
        ratio = np.divide(a, b, out=np.ones_like(a), where=(a > 0) & (b > 0))
        return (a * np.log2(ratio)).sum(axis=-1)

    return np.maximum(0.5 * kl(p, m) + 0.5 * kl(q, m), 0.0)


def mean_pairwise_js(weights: Array) -> float:
    """Mean Jensen–Shannon divergence over all pairs of heads and all query rows (0 for one head)."""
    h = weights.shape[0]
    pairs = [(a, b) for a in range(h) for b in range(a + 1, h)]
    if not pairs:
        return 0.0
    return float(np.mean([js_divergence(weights[a], weights[b]).mean() for a, b in pairs]))


def focus(mean_entropy: float, max_entropy: float) -> float:
    """1 − entropy / maximum: 1 = every query on a single key, 0 = uniform."""
    return 1.0 if max_entropy == 0 else 1.0 - mean_entropy / max_entropy


# --------------------------------------------------------------------------
# The per-query measures, computed once per run: :func:`analyse`
# --------------------------------------------------------------------------

# The relations a head's per-query argmax can follow, in the order that breaks exact ties.
ITSELF, PREVIOUS, NEXT, TWO_BACK, FIRST, COPY, FIXED, NONE = (
    "itself", "previous token", "next token", "two back", "first token", "earlier copy", "fixed token", "none")
RELATIONS: tuple[str, ...] = (ITSELF, PREVIOUS, NEXT, TWO_BACK, FIRST, COPY, FIXED)
# The relations that name one key by position alone (the others depend on the tokens).
_POSITIONAL = (ITSELF, PREVIOUS, NEXT, TWO_BACK, FIRST)


@dataclass(frozen=True)
class Relation:
    """How well one head's per-query argmax follows one relation."""

    name: str  # one of RELATIONS
    rows: int  # counted rows whose top key is the relation's key
    of: int  # counted rows where the relation names a visible key (its support)
    key: int | None = None  # the position, for FIXED only

    @property
    def share(self) -> float:
        """rows / of (0 when the relation is defined nowhere)."""
        return self.rows / self.of if self.of else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "rows": self.rows, "of": self.of, "share": self.share}


@dataclass(frozen=True)
class HeadAnalysis:
    """One head: how spread its rows are, and the relation its per-query argmax follows."""

    head: int  # 0-based
    mean_entropy: float  # bits, mean over every query row
    max_entropy: float  # bits, mean over every query row of log2(visible keys)
    mean_top_weight: float  # mean over every query row of its largest weight
    pattern: str  # a name from RELATIONS, or NONE
    pattern_key: int | None  # the position, when pattern is FIXED
    pattern_rows: int  # counted rows that follow the pattern (0 for NONE)
    pattern_of: int  # the pattern's support: counted rows where it names a visible key (0 for NONE)
    counted_rows: int  # query rows that can choose (2 or more visible keys)
    tied_rows: int  # counted rows whose maximum is shared: they follow no relation
    best: Relation  # the strongest relation, named or not (for "closest: …" captions)
    relations: tuple[Relation, ...]  # every relation's evidence, in RELATIONS order
    outside_window: float | None = None  # mean mass of the shown rows on keys outside the window
    spread_rows: int = 0  # counted, untied rows whose top weight is too close to chance to pick it (evidence)

    @property
    def picked_rows(self) -> int:
        """Counted rows that pick a key: untied, and clear of chance by the evidence rule."""
        return self.counted_rows - self.tied_rows - self.spread_rows

    @property
    def near_chance(self) -> bool:
        """Most rows pick no key and the head is at most "spread": close to uniform (:mod:`evidence`)."""
        return evidence.near_chance(self.picked_rows, self.counted_rows, self.focus)

    @property
    def pattern_share(self) -> float:
        """pattern_rows / pattern_of; 0 for NONE."""
        return self.pattern_rows / self.pattern_of if self.pattern_of else 0.0

    @property
    def focus(self) -> float:
        """1 = every query on a single key, 0 = uniform."""
        return focus(self.mean_entropy, self.max_entropy)

    def describe(self) -> str:
        """A short phrase: sharp, focused, spread or nearly uniform."""
        return evidence.focus_word(self.focus)

    def relation(self, name: str) -> Relation:
        """This head's evidence for the relation called ``name``."""
        for r in self.relations:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"head": self.head + 1, "pattern": self.pattern, "pattern_key": self.pattern_key,
                "pattern_share": self.pattern_share, "pattern_rows": self.pattern_rows,
                "pattern_of": self.pattern_of, "counted_rows": self.counted_rows, "tied_rows": self.tied_rows,
                "mean_entropy_bits": self.mean_entropy, "max_entropy_bits": self.max_entropy,
                "focus": self.focus, "mean_top_weight": self.mean_top_weight,
                "spread_rows": self.spread_rows, "picked_rows": self.picked_rows, "near_chance": self.near_chance,
                "outside_window": self.outside_window}


@dataclass(frozen=True)
class ReadBack:
    """What each of the h heads brings back to each token, against the single head (same X and W).

    A query row blends value rows and mostly brings back its top key; a softmax row sums to 1, so one head cannot
    put most of its weight on two places, h heads can. Arrays are (h, N) or (N,), read-only.
    """

    head_keys: Array  # (h, N) int: each head's top key per query; −1 for a tied row
    head_weights: Array  # (h, N): the weight of that key (the row's maximum)
    single_keys: Array  # (N,) int: the single head's top key; −1 for a tied row
    single_weights: Array  # (N,): the single head's row maximum
    distinct: Array  # (N,) int: how many different keys the h heads pick (tied and spread rows left out)
    heads_mass: Array  # (N,): Σ over heads of their top weight (at most h)
    single_mass: Array  # (N,): the single head's weight on those distinct keys together (at most 1)
    counted: Array  # (N,) bool: rows that can choose (2 or more visible keys)

    @property
    def rows(self) -> int:
        """Counted rows."""
        return int(self.counted.sum())

    @property
    def rows_with_several(self) -> int:
        """Counted rows on which the heads bring back 2 or more different keys."""
        return int(((self.distinct >= 2) & self.counted).sum())

    def _mean(self, a: Array) -> float:
        return float(a[self.counted].mean()) if self.rows else 0.0

    @property
    def mean_distinct(self) -> float:
        """Mean number of different keys the heads bring back, over counted rows."""
        return self._mean(self.distinct.astype(np.float64))

    @property
    def mean_head_weight(self) -> float:
        """Mean over heads and counted rows of each head's top weight."""
        return float(self.head_weights[:, self.counted].mean()) if self.rows else 0.0

    @property
    def mean_heads_mass(self) -> float:
        """Mean over counted rows of Σ over heads of their top weight (at most h)."""
        return self._mean(self.heads_mass)

    @property
    def mean_single_weight(self) -> float:
        """Mean over counted rows of the single head's top weight."""
        return self._mean(self.single_weights)

    @property
    def mean_single_mass(self) -> float:
        """Mean over counted rows of the single head's weight on the heads' keys together."""
        return self._mean(self.single_mass)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "rows_with_several": self.rows_with_several,
                "mean_distinct": self.mean_distinct, "mean_head_weight": self.mean_head_weight,
                "mean_heads_mass": self.mean_heads_mass, "mean_single_weight": self.mean_single_weight,
                "mean_single_mass": self.mean_single_mass,
                "head_keys": self.head_keys.tolist(), "single_keys": self.single_keys.tolist()}


@dataclass(frozen=True)
class Analysis:
    """Every measure of one run, computed once by :func:`analyse`; renderers only read it."""

    tokens: tuple[str, ...]
    causal: bool
    kind: str  # the weights: "random", "designed", or another kind (e.g. "trained")
    rules: tuple[str, ...] | None  # designed (or learned) rule per head, if any
    heads: tuple[HeadAnalysis, ...]
    top_keys: Array  # (h, N) int: each head's top key per query row; −1 for a tied row
    counted: Array  # (N,) bool: rows with 2 or more visible keys
    agreement: Array  # (h, h): share of counted rows on which heads a and b pick the same top key
    agreement_rows: Array  # (h, h) int: those rows, counted
    js: Array  # (h, h): Jensen–Shannon divergence in bits, mean over every query row
    window: tuple[int, int] | None = None  # (start, stop) of the shown tokens, if windowed
    readback: ReadBack | None = None  # against the single head, when it was given
    mask: Array | None = None  # (N, N) bool, True = blocked (a causal run, a view's own mask); None: every key seen
    reading: Reading | None = None  # a grammar model's sentence: where each head looks from the parse's queries
    picked: Array | None = None  # (h, N) bool: rows whose top key clears chance by the evidence rule (untied)
    caution: str | None = None  # the model runs outside what it saw (longer text, unknown words): said everywhere
    outside_rows: Array | None = None  # (h, N): each shown row's weight on keys outside the window, if windowed
    average: Array | None = None  # (N, N): the weights averaged over heads (what PyTorch returns by default)
    mapped: tuple[tuple[str, str, str], ...] = ()  # a grammar model's --words: (word, class, read as), said everywhere

    def __post_init__(self) -> None:
        freeze(self)

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    @property
    def outside_average(self) -> Array:
        """(N,): each row's weight outside the window in the average over heads (zeros when not windowed)."""
        if self.outside_rows is None:
            return np.zeros(len(self.tokens))
        return np.asarray(self.outside_rows).mean(axis=0)

    @property
    def counted_rows(self) -> int:
        return int(self.counted.sum())

    @property
    def picked_keys(self) -> Array:
        """(h, N) int: each head's top key where the row picks it (:mod:`evidence`), else −1."""
        if self.picked is None:
            return self.top_keys
        return np.where(self.picked, self.top_keys, -1)

    @property
    def mean_chance(self) -> float:
        """Mean over counted rows of the uniform weight 1/v (v = the keys a row may see): chance for a top weight."""
        n = len(self.tokens)
        seen = (n - self.mask.sum(axis=1)) if self.mask is not None else np.full(n, n)
        rows = self.counted if self.counted.any() else np.ones(n, bool)
        return float(evidence.chance(seen[rows]).mean()) if n else 0.0

    @property
    def close_to_uniform(self) -> bool:
        """Every head near chance (:attr:`HeadAnalysis.near_chance`): no head follows anything."""
        return self.counted_rows > 0 and all(s.near_chance for s in self.heads)

    @property
    def mean_pairwise_js(self) -> float:
        """Mean of the JS matrix over pairs of different heads (0 for one head)."""
        h = self.num_heads
        if h < 2:
            return 0.0
        return float(self.js[np.triu_indices(h, 1)].mean())

    def pairs(self) -> list[tuple[int, int]]:
        """Pairs of heads (a < b), most agreeing first (then lowest JS, then head order)."""
        h = self.num_heads
        pairs = [(a, b) for a in range(h) for b in range(a + 1, h)]
        return sorted(pairs, key=lambda ab: (-self.agreement_rows[ab], self.js[ab], ab))

    def collapsed(self) -> list[int]:
        """Heads (0-based) that put their rows on one fixed token while the model runs outside what it saw
        (``caution``): a head stuck on one key there is a failure to generalise, not a pattern."""
        if self.caution is None:
            return []
        return [s.head for s in self.heads if s.pattern == FIXED]

    def patterns(self) -> list[tuple[str, int | None]]:
        """The distinct named patterns (name, fixed key), in head order; NONE and collapsed heads left out."""
        seen: list[tuple[str, int | None]] = []
        stuck = self.collapsed()
        for s in self.heads:
            p = (s.pattern, s.pattern_key)
            if s.pattern != NONE and s.head not in stuck and p not in seen:
                seen.append(p)
        return seen

    def showcase_queries(self, count: int = 3, start: int = 0, stop: int | None = None) -> tuple[int, ...]:
        """Queries that show the heads at their most different: most distinct top keys, then sharpest rows.

        For a magnifier slide without ``--query`` and the page's first query; counted rows only (all rows
        if none), and of those only the ones inside a window of tokens ``start … stop−1``.
        """
        keys = self.picked_keys
        h, n = keys.shape
        rows = [p for p in range(n) if self.counted[p]] or list(range(n))
        rows = [p for p in rows if start <= p < (n if stop is None else stop)]
        distinct = {p: len({int(k) for k in keys[:, p] if k >= 0}) for p in rows}
        tied = {p: int((keys[:, p] < 0).sum()) for p in rows}
        ranked = sorted(rows, key=lambda p: (-distinct[p], tied[p], p))
        if self.reading is not None:  # a parsed sentence: its own queries first (the verb, adjective, pronoun)
            parsed = [p for p in self.reading.queries if p in rows]
            ranked = parsed + [p for p in ranked if p not in parsed]
        return tuple(ranked[:count])

    def to_dict(self) -> dict[str, Any]:
        """The measures for ``--json``: ``head_summaries`` entries and ``agreement`` (h×h)."""
        out: dict[str, Any] = {
            "head_summaries": [s.to_dict() for s in self.heads],
            "agreement": self.agreement.tolist(),
            "js_divergence_bits": self.js.tolist(),
            "mean_pairwise_js_bits": self.mean_pairwise_js,
            "counted_rows": self.counted_rows,
            "close_to_uniform": self.close_to_uniform,
            "picked_keys": self.picked_keys.tolist(),
        }
        if self.caution is not None:
            out["caution"] = self.caution
        if self.window is not None:
            out["window"] = list(self.window)
        if self.readback is not None:
            out["readback"] = self.readback.to_dict()
        if self.reading is not None:
            out["grammar"] = self.reading.to_dict()
        return out


def visible_keys(n_tokens: int, causal: bool, mask: Array | None = None) -> Array:
    """(N, N) bool: True where query row q may look at key k (the mask's complement)."""
    if mask is not None:
        return ~np.asarray(mask, dtype=bool)
    if causal:
        return np.tril(np.ones((n_tokens, n_tokens), dtype=bool))
    return np.ones((n_tokens, n_tokens), dtype=bool)


def top_keys(weights: Array, tolerance: float = evidence.TIE_MARGIN) -> tuple[Array, Array]:
    """Each row's top key and weight, (..., N) -> (...,) each; the key is −1 where 2+ keys tie within ``tolerance``."""
    w = np.asarray(weights)
    if w.ndim == 3:  # one head at a time: no (h, N, N) temporaries
        parts = [top_keys(head, tolerance) for head in w]
        return np.stack([k for k, _ in parts]), np.stack([m for _, m in parts])
    w = w.astype(np.float64, copy=False)
    keys = np.argmax(w, axis=-1)  # (N,)
    best = np.take_along_axis(w, keys[..., None], axis=-1)  # (N, 1)
    tied = (w >= best - tolerance).sum(axis=-1) > 1  # (N,)
    return np.where(tied, -1, keys), best[..., 0]


def _relation_targets(tokens: Sequence[str], visible: Array) -> dict[str, Array]:
    """For the single-key relations, the key each row names: (N,) int, −1 where undefined or masked."""
    n = len(tokens)
    p = np.arange(n)
    targets = {ITSELF: p.copy(), PREVIOUS: p - 1, NEXT: np.where(p + 1 < n, p + 1, -1), TWO_BACK: p - 2,
               FIRST: np.zeros(n, int)}
    for name, t in targets.items():
        ok = t >= 0
        ok[ok] = visible[p[ok], t[ok]]
        targets[name] = np.where(ok, t, -1)
    return targets


def _head_relations(keys: Array, tokens: Sequence[str], ids: Array, visible: Array, counted: Array,
                    targets: dict[str, Array]) -> tuple[Relation, ...]:
    """Evidence for every relation in one head from its top keys (N,)."""
    n = len(tokens)
    p = np.arange(n)
    out = []
    for name in _POSITIONAL:
        t = targets[name]
        defined = counted & (t >= 0)
        out.append(Relation(name, int((defined & (keys == t)).sum()), int(defined.sum())))
    # An earlier copy: a key before the query holding the same token (visible, as every earlier key is
    # unless a custom mask hides it).
    first: dict[int, int] = {}
    first_seen = np.array([first.setdefault(int(t), q) for q, t in enumerate(ids)], dtype=int)  # (N,)
    has_copy = counted & (first_seen < p)
    safe = np.clip(keys, 0, None)
    follows_copy = has_copy & (keys >= 0) & (keys < p) & (ids[safe] == ids) & visible[p, safe]
    out.append(Relation(COPY, int(follows_copy.sum()), int(has_copy.sum())))
    # One fixed token: the key (other than the first, which FIRST names) with the best share.
    support = (counted[:, None] & visible).sum(axis=0)  # (N,): counted rows that can see key k
    picks = np.bincount(keys[counted & (keys >= 1)], minlength=n)  # (N,): counted rows whose top key is k
    best = Relation(FIXED, 0, 0, None)
    for k in np.flatnonzero(picks):
        cand = Relation(FIXED, int(picks[k]), int(support[k]), int(k))
        if _supported(cand, counted) and (cand.share, cand.rows) > (best.share, best.rows):
            best = cand
    out.append(best)
    return tuple(out)


def _supported(r: Relation, counted: Array) -> bool:
    """A relation can be named only where it is defined on at least half of the counted rows."""
    return r.of > 0 and 2 * r.of >= int(counted.sum())


def _pick(relations: Sequence[Relation], counted: Array) -> tuple[Relation, bool]:
    """The strongest relation (share, then rows, then RELATIONS order) and whether it is named (evidence.named)."""
    ranked = sorted((r for r in relations if _supported(r, counted)),
                    key=lambda r: (-r.share, -r.rows, RELATIONS.index(r.name)))
    if not ranked:
        return Relation(NONE, 0, 0), False
    best = ranked[0]
    return best, best.rows > 0 and evidence.named(best.share)


def outside_rows(weights: Array, start: int, stop: int) -> Array:
    """(h, N): each query row's weight on keys outside the window start … stop−1 (0 for rows outside it)."""
    w = np.asarray(weights, dtype=np.float64)  # (h, N, N)
    out = np.zeros(w.shape[:2])
    shown = w[:, start:stop, :]  # (h, W, N)
    out[:, start:stop] = shown.sum(axis=-1) - shown[:, :, start:stop].sum(axis=-1)
    return out


def outside_window(rows: Array, start: int, stop: int) -> Array:
    """(h,): mean over the shown query rows start … stop−1 of their weight outside the window (``rows``:
    :func:`outside_rows`)."""
    return rows[:, start:stop].mean(axis=-1) if stop > start else np.zeros(rows.shape[0])


def windowed(analysis: Analysis, weights: Array, start: int, stop: int) -> Analysis:
    """``analysis`` measured for the shown tokens ``start … stop−1`` of a picture: each head's mass outside them.

    The analysis itself when everything is shown or it was made for that window already."""
    if (start == 0 and stop >= len(analysis.tokens)) or analysis.window == (start, stop):
        return analysis
    rows = outside_rows(weights, start, stop)  # (h, N)
    outside = outside_window(rows, start, stop)  # (h,)
    heads = tuple(replace(s, outside_window=float(outside[s.head])) for s in analysis.heads)
    return replace(analysis, heads=heads, window=(start, stop), outside_rows=rows)


def _readback(keys: Array, top: Array, picked: Array, single: Array, counted: Array) -> ReadBack:
    """:class:`ReadBack` from the heads' top keys/weights (h, N), which of them pick (h, N), and the single
    head's weights (N, N).  Only picked keys count as brought back (:mod:`evidence`)."""
    single = np.asarray(single, dtype=np.float64)
    s_keys, s_top = top_keys(single)
    n = keys.shape[1]
    distinct = np.zeros(n, int)
    single_mass = np.zeros(n)
    for p in range(n):
        found = sorted({int(k) for k, ok in zip(keys[:, p], picked[:, p]) if k >= 0 and ok})
        distinct[p] = len(found)
        single_mass[p] = float(single[p, found].sum()) if found else 0.0
    return ReadBack(head_keys=keys, head_weights=top, single_keys=s_keys, single_weights=s_top,
                    distinct=distinct, heads_mass=top.sum(axis=0), single_mass=single_mass, counted=counted)


def analyse(trace: Trace | AttentionView, single: Trace | None = None,
            window: int | tuple[int, int] | None = None, *, parse: Any = None,
            mapped: tuple[tuple[str, str, str], ...] = ()) -> Analysis:
    """Every measure of ``trace`` (or an attention view), once; ``single``: the same run as one head; ``window``: the
    tokens a view shows (W for the first W, or (start, stop)). Rows with one visible key are not counted; a tied or
    spread row picks no key (:mod:`mhacli.attention.evidence`). ``parse``, ``mapped``: what a grammar model
    read in the sentence (:meth:`~mhacli.grammar.model.TrainedModel.sentence`), kept with the measures. Relations,
    support, share, pattern, agreement and JS are defined in docs/reading-heatmaps.md ("The measures, defined").
    """
    weights = np.asarray(trace.weights)  # (h, N, N)
    h, n, _ = weights.shape
    config = getattr(trace, "config", None)  # an attention view has no config: only its weights
    causal = bool(config.causal if config is not None else trace.causal)
    kind = str(config.weights if config is not None else trace.kind)
    tokens = tuple(trace.tokens)
    visible = visible_keys(n, causal, trace.mask)  # (N, N)
    counted = visible.sum(axis=1) >= 2  # (N,)
    vocab: dict[str, int] = {}
    ids = np.array([vocab.setdefault(t, len(vocab)) for t in tokens], dtype=int)  # (N,)
    keys, top = top_keys(weights)  # (h, N), (h, N)
    picked = (keys >= 0) & evidence.picks(top, visible.sum(axis=1))  # (h, N): rows that clear chance
    chosen = np.where(picked, keys, -1)  # (h, N): what the relations and the agreement read
    entropy = row_entropy(weights)  # (h, N)
    ceiling = float(max_row_entropy(n, causal).mean()) if trace.mask is None else float(
        np.log2(np.maximum(visible.sum(axis=1), 1)).mean())
    span: tuple[int, int] | None = None
    outside: Array | None = None
    rows_out: Array | None = None
    if window is not None:
        span = (0, min(int(window), n)) if isinstance(window, int) else (int(window[0]), int(window[1]))
        rows_out = outside_rows(weights, *span)  # (h, N)
        outside = outside_window(rows_out, *span)  # (h,)
    targets = _relation_targets(tokens, visible)
    heads = []
    for i in range(h):
        relations = _head_relations(chosen[i], tokens, ids, visible, counted, targets)
        best, named = _pick(relations, counted)
        # A head close to chance is named by nothing, however its few clear rows line up (:mod:`evidence`).
        named = named and not evidence.near_chance(int((counted & picked[i]).sum()), int(counted.sum()),
                                                   focus(float(entropy[i].mean()), ceiling))
        heads.append(HeadAnalysis(
            head=i, mean_entropy=float(entropy[i].mean()), max_entropy=ceiling,
            mean_top_weight=float(top[i].mean()),
            pattern=best.name if named else NONE, pattern_key=best.key if named else None,
            pattern_rows=best.rows if named else 0, pattern_of=best.of if named else 0,
            counted_rows=int(counted.sum()), tied_rows=int((counted & (keys[i] < 0)).sum()),
            best=best, relations=relations,
            outside_window=None if outside is None else float(outside[i]),
            spread_rows=int((counted & (keys[i] >= 0) & ~picked[i]).sum())))
    agreement_rows = np.zeros((h, h), int)
    js = np.zeros((h, h))
    for a in range(h):
        for b in range(a, h):
            same = int((counted & picked[a] & picked[b] & (chosen[a] == chosen[b])).sum())
            agreement_rows[a, b] = agreement_rows[b, a] = same
            if b > a:
                js[a, b] = js[b, a] = float(js_divergence(weights[a], weights[b]).mean())
    total = int(counted.sum())
    agreement = agreement_rows / total if total else np.zeros((h, h))
    back = None
    if single is not None:
        if single.num_heads != 1 or tuple(single.tokens) != tokens:
            raise ValueError("single must be the same tokens run as one head (compare.single_head)")
        back = _readback(keys, top, picked, np.asarray(single.weights[0]), counted)
    rules = tuple(trace.rules) if trace.rules else None
    blocked = None if (trace.mask is None and not causal) else ~visible
    return Analysis(tokens=tokens, causal=causal, kind=kind, rules=rules,
                    heads=tuple(heads), top_keys=keys, counted=counted, agreement=agreement,
                    agreement_rows=agreement_rows, js=js, window=span, readback=back, mask=blocked,
                    reading=None if parse is None else read(parse, weights), picked=picked,
                    outside_rows=rows_out, average=np.asarray(weights, dtype=np.float64).mean(axis=0),
                    mapped=tuple(mapped))
