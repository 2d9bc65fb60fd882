"""A trained grammar model's report card: how often each head finds each relation's noun on fresh sentences.

A relation × head matrix of held-out hit rates (top key clear of chance, :mod:`mhacli.attention.evidence`, and the
noun the parse names), each with its 95 % Wilson interval; the referent also gets a row per kind of query (he/she,
feeling adjective, place adjective). A head is named only from its card, and only where it beats lookups that need
no query (Clark et al. 2019); :meth:`Card.name` is the one wording every surface prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from mhacli.attention import evidence
from mhacli.attention.trace import read_only
from mhacli.grammar import grammar

Array = np.ndarray

CARD_SENTENCES = 2000  # held-out sentences a card is measured on: an interval of about ±2 points at 90 %
CARD_SEED = 2017  # their rng's seed: fixed, and apart from the training seeds (0, 1, …) so no batch repeats
Z_95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval

# The referent's kinds of query, each by the words that ask it (grammar's word classes).
SUB_RELATIONS: dict[str, tuple[str, ...]] = {
    "he/she": ("he", "she"),
    "feeling": grammar.FEELS,
    "place": grammar.PLACE_STATES,
}
LONG_NAMES = {**grammar.RELATION_NAMES, "referent": "referent → the noun it is about",
              "he/she": "he/she → the noun it means", "feeling": "feeling adjective → the animate noun",
              "place": "place adjective → the place"}
SHORT_NAMES = {"subject": "subject", "object": "object", "referent": "referent", "he/she": "he/she → noun",
               "feeling": "feeling → noun", "place": "place adj → place"}
TITLE_SEPARATOR = " — "  # a head's label: its name, then the evidence
NAME_SEPARATOR = " · "  # between the rows a head is named for, strongest first
ROLES = ("subject", "object", "recipient")  # the nouns a sentence's roles name: the "always looks there" baselines


def rows() -> tuple[str, ...]:
    """The card's rows: every relation the grammar reads out, then the referent's kinds of query."""
    return grammar.RELATIONS + (tuple(SUB_RELATIONS) if "referent" in grammar.RELATIONS else ())


def row_keys(parse: grammar.Parse, row: str) -> dict[int, int]:
    """For one card row: each query position of the parse that has it, and the noun's position it points to."""
    if row in SUB_RELATIONS:
        words = SUB_RELATIONS[row]
        return {q: k for q, k in parse.keys("referent").items() if parse.tokens[q] in words}
    return parse.keys(row)


def short_name(row: str) -> str:
    """A row in a few words: ``subject``, ``he/she → noun``."""
    return SHORT_NAMES.get(row, row)


def long_name(row: str) -> str:
    """A row in words: ``verb → its subject``."""
    return LONG_NAMES.get(row, row)


def relation_words(name: str) -> str:
    """A head's relation as TrainedModel.relations holds it, as every surface says it: a card's name as it is
    (``subject · he/she``, ``partly recipient``: one wording), a relation measured without a card
    ("describes", "means") in the grammar's few words."""
    return name if name not in ("describes", "means") else grammar.SHORT_NAMES[name]


def wilson(hits: Array, n: Array, z: float = Z_95) -> tuple[Array, Array]:
    """The Wilson score interval of hits / n (lower, upper); (0, 1) where n is 0 (nothing is known)."""
    k = np.asarray(hits, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    safe = np.maximum(m, 1.0)
    p = k / safe
    centre = (p + z * z / (2 * safe)) / (1 + z * z / safe)
    half = z / (1 + z * z / safe) * np.sqrt(p * (1 - p) / safe + z * z / (4 * safe * safe))
    low = np.where(m > 0, np.clip(centre - half, 0.0, 1.0), 0.0)
    high = np.where(m > 0, np.clip(centre + half, 0.0, 1.0), 1.0)
    return low, high


def whole_percent(x: float) -> int:
    """A share in whole percent, never rounded up into a threshold it did not reach: 84.7 % is 84 (every card
    number is printed so: cells, intervals, baselines)."""
    return math.floor(100 * x + 1e-9)


def _pct(x: float) -> str:
    return f"{whole_percent(x)}%"


@dataclass(frozen=True)
class Card:
    """Held-out hit rates, relation × head, with their 95 % intervals: what each head does, measured."""

    rows: tuple[str, ...]  # (R,) relation rows (:func:`rows`)
    hits: Array  # (R, h) queries whose top key, clear of chance, is the relation's noun
    queries: Array  # (R,) queries of each relation over the sentences
    sentences: int  # held-out sentences measured
    seed: int  # the rng seed they were drawn with
    # The baselines a lookup must beat (Clark et al. 2019), measured on the same sentences (None: not measured):
    always: Array | None = None  # (R, h) the rate of looking where the head looks from *every* query row
    offset: Array | None = None  # (R,) the best fixed positional offset's rate
    repeats: tuple[str | None, ...] = ()  # (R,) the role every query of a row points to, when it is another row's

    def __post_init__(self) -> None:
        if self.always is not None and self.offset is not None:
            object.__setattr__(self, "always", read_only(self.always, np.float64))
            object.__setattr__(self, "offset", read_only(self.offset, np.float64))
        object.__setattr__(self, "repeats", tuple(self.repeats) or (None,) * len(self.rows))
        hits = np.asarray(self.hits, dtype=np.int64)
        queries = np.asarray(self.queries, dtype=np.int64)
        if hits.ndim != 2 or hits.shape[0] != len(self.rows) or queries.shape != (len(self.rows),):
            raise ValueError(f"a card of {len(self.rows)} rows needs hits (R, h) and queries (R,), got "
                             f"{hits.shape} and {queries.shape}")
        if (hits < 0).any() or (hits > queries[:, None]).any():
            raise ValueError("a card's hits must lie between 0 and its queries")
        object.__setattr__(self, "hits", read_only(hits))
        object.__setattr__(self, "queries", read_only(queries))
        low, high = wilson(hits, np.broadcast_to(queries[:, None], hits.shape))  # 2 × (R, h), once: every word reads it
        object.__setattr__(self, "_interval", (read_only(low), read_only(high)))

    @property
    def heads(self) -> int:
        return int(self.hits.shape[1])

    @property
    def rate(self) -> Array:
        """(R, h) hit rates; 0 for a row with no query."""
        return self.hits / np.maximum(self.queries, 1)[:, None]  # (R, h)

    @property
    def interval(self) -> tuple[Array, Array]:
        """(R, h) lower and upper ends of each cell's 95 % Wilson interval (computed once, read-only)."""
        return self._interval  # type: ignore[attr-defined,no-any-return]

    def named(self, row: int, head: int) -> bool:
        """Does the card name ``head`` for ``row`` (evidence.card_word)?"""
        return self.word(row, head) == evidence.NAMED

    def baseline(self, row: int, head: int) -> float | None:
        """The better of a cell's two baselines (always looks there, best offset), or None when not measured."""
        if self.always is None or self.offset is None:
            return None
        return max(float(self.always[row, head]), float(self.offset[row]))

    def word(self, row: int, head: int) -> str:
        """evidence.NAMED, PARTLY or UNNAMED for one cell: the rate's word (evidence.card_word), kept only when the
        interval's lower end beats both baselines (evidence.beats); else UNNAMED."""
        low, _ = self.interval
        said = evidence.card_word(float(self.rate[row, head]), float(low[row, head]))
        base = self.baseline(row, head)
        if said != evidence.UNNAMED and base is not None and not evidence.beats(float(low[row, head]), base):
            return evidence.UNNAMED
        return said

    def same_as(self, row: int, head: int) -> str | None:
        """The role a named row only repeats, when the head is named for that role too (``place`` -> ``object``)."""
        role = self.repeats[row]
        if role is None or role not in self.rows or self.word(row, head) != evidence.NAMED:
            return None
        return role if self.named(self.rows.index(role), head) else None

    def ranked(self, head: int) -> list[int]:
        """The rows a head is named for, strongest evidence (the interval's lower end) first, less those that only
        repeat a role it is named for."""
        low, _ = self.interval
        named = [r for r in range(len(self.rows)) if self.named(r, head) and self.same_as(r, head) is None]
        return sorted(named, key=lambda r: (-low[r, head], r))

    def best(self, head: int) -> tuple[int, str]:
        """The row a head is known by and what it earns there: named before partly, then the highest lower end."""
        order = {evidence.NAMED: 0, evidence.PARTLY: 1, evidence.UNNAMED: 2}
        low, _ = self.interval
        r = min(range(len(self.rows)), key=lambda i: (order[self.word(i, head)], -low[i, head], i))
        return r, self.word(r, head)

    def name(self, head: int) -> str:
        """THE name of a head, the one wording every surface prints: its named rows, strongest first
        (``subject · he/she``), ``partly recipient``, or ``no clear relation``."""
        named = self.ranked(head)
        if named:
            return NAME_SEPARATOR.join(self.rows[r] for r in named)
        r, word = self.best(head)
        return f"partly {self.rows[r]}" if word == evidence.PARTLY else evidence.NO_RELATION

    def relation(self, head: int) -> tuple[str, float]:
        """(name, rate of its strongest row) as TrainedModel.relations holds it."""
        r, _ = self.best(head)
        return self.name(head), float(self.rate[r, head])

    def title(self, head: int) -> str:
        """A head in a few words: its :meth:`name`."""
        return self.name(head)

    def evidence(self, row: int, head: int) -> str:
        """One cell in words: ``verb → its subject on 1,996 of 2,000 held-out queries (95% interval 99%–100%;
        always looks there 98%, best offset 41%)``."""
        low, high = self.interval
        base = "" if self.always is None or self.offset is None else (
            f"; always looks there {_pct(self.always[row, head])}, best offset {_pct(self.offset[row])}")
        return (f"{long_name(self.rows[row])} on {int(self.hits[row, head]):,} of {int(self.queries[row]):,} "
                f"held-out queries (95% interval {_pct(low[row, head])}–{_pct(high[row, head])}{base})")

    def label(self, head: int) -> str:
        """The name, then the evidence: each named row's rate, queries, interval and baselines, what a name needs,
        and the rows that only repeat a role (``place → object: the same as the object head``)."""
        named = self.ranked(head)
        if named:
            detail = "; ".join(self.evidence(r, head) for r in named)
        else:
            r, word = self.best(head)
            detail = (f"{self.evidence(r, head)}: a name needs {_pct(evidence.CARD_NAME_RATE)} and both baselines "
                      "beaten" if word == evidence.PARTLY else f"at most {self.evidence(r, head)}")
        same = [f"{self.rows[r]} → {self.same_as(r, head)}: the same as the {self.same_as(r, head)} head"
                for r in range(len(self.rows)) if self.same_as(r, head)]
        return self.name(head) + TITLE_SEPARATOR + detail + "".join(f"; {s}" for s in same)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.label(i) for i in range(self.heads))

    def caption(self) -> str:
        """What the card was measured on, in one line."""
        return f"measured in training on {self.sentences:,} held-out sentences drawn with rng seed {self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON numbers: rows, queries, hits, rates and intervals, and what names each head earns."""
        low, high = self.interval
        return {"sentences": self.sentences, "seed": self.seed, "rows": list(self.rows),
                "queries": [int(n) for n in self.queries], "hits": self.hits.tolist(),
                "rate": self.rate.tolist(), "low": low.tolist(), "high": high.tolist(),
                "heads": [{"head": i + 1, "relation": self.relation(i)[0], "title": self.title(i)}
                          for i in range(self.heads)],
                **({} if self.always is None or self.offset is None else
                   {"always": self.always.tolist(), "offset": self.offset.tolist(), "repeats": list(self.repeats)})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Card":
        """The card of :meth:`to_dict` (rates and intervals are recomputed from the counts, never trusted)."""
        measured = "always" in data and "offset" in data
        return cls(rows=tuple(str(r) for r in data["rows"]), hits=np.array(data["hits"], dtype=np.int64),
                   queries=np.array(data["queries"], dtype=np.int64), sentences=int(data["sentences"]),
                   seed=int(data["seed"]), always=np.array(data["always"], dtype=np.float64) if measured else None,
                   offset=np.array(data["offset"], dtype=np.float64) if measured else None,
                   repeats=tuple(None if r is None else str(r) for r in data.get("repeats", ())))


def picked_keys(weights: Array) -> Array:
    """(B, h, N): each query's most-weighted key where its weight clears chance (:mod:`evidence`), else −1.

    Chance is over the keys a query could see: a masked key has weight exactly 0 after the −∞ mask."""
    looked = weights.argmax(axis=-1)  # (B, h, N)
    top = np.take_along_axis(weights, looked[..., None], axis=-1)[..., 0]  # (B, h, N)
    seen = (weights > 0).sum(axis=-1)  # (B, h, N)
    return np.where(evidence.picks(top, seen), looked, -1)


def baselines(looked: Array, keys: Array, names: tuple[str, ...],
              real: Array) -> tuple[Array, Array, tuple[str | None, ...]]:
    """Per card row, what a lookup that needs no query would score (Clark et al. 2019, "What does BERT look at?").

    ``looked`` (S, h, N) picked keys (-1: spread); ``keys`` (R, S, N) true keys; ``real`` (S, N) the words. Returns
    (R, h) "always looks there" rates for the role nouns, (R,) the best fixed offset's rate, (R,) each row's fixed role.
    """
    roles = np.stack([keys[names.index(r)].max(axis=-1) for r in ROLES])  # (3, S): each role's noun, -1 if none
    there = (looked[None] == roles[:, :, None, None]) & real[None, :, None, :] & (roles >= 0)[:, :, None, None]
    rows_seen = (real[None, :, None, :] & (roles >= 0)[:, :, None, None]).sum(axis=(1, 3))  # (3, h)
    looks = there.sum(axis=(1, 3)) / np.maximum(rows_seen, 1)  # (3, h): how often each head picks each role
    asked = keys >= 0  # (R, S, N)
    n = np.maximum(asked.sum(axis=(1, 2)), 1)  # (R,)
    role_share = np.stack([((keys == roles[p][None, :, None]) & asked).sum(axis=(1, 2)) / n
                           for p in range(len(ROLES))], axis=1)  # (R, 3): where each row's noun is, by role
    always = role_share @ looks  # (R, 3) @ (3, h) -> (R, h)
    query = np.arange(keys.shape[-1])  # (N,)
    offset = np.array([np.bincount((keys[r] - query)[asked[r]] + keys.shape[-1]).max() / n[r] if asked[r].any()
                       else 0.0 for r in range(len(names))])  # (R,)
    repeats = tuple(next((ROLES[p] for p in range(len(ROLES)) if role_share[r, p] == 1.0 and ROLES[p] != name),
                         None) for r, name in enumerate(names))
    return always, offset, repeats


def card_hits(weights: Array, keys: Array) -> tuple[Array, Array]:
    """The card's rule on (S, h, N, N) weights and (R, S, N) true keys: per row and head, the queries whose top
    key, clear of chance, is the row's noun, (R, h); and the queries each row asks, (R,)."""
    looked = picked_keys(weights)  # (S, h, N): top key where clear of chance, else -1
    asked = keys >= 0  # (R, S, N)
    hit = (looked[None] == keys[:, :, None, :]) & asked[:, :, None, :]  # (R, S, h, N)
    return hit.sum(axis=(1, 3)), asked.sum(axis=(1, 2))  # (R, h), (R,)


@dataclass(frozen=True)
class Disagreement:
    """A head the card names (or partly names) for a relation that does not find its noun on one sentence."""

    head: int  # 0-based
    row: str  # the card row the head is known by
    word: str  # evidence.NAMED or PARTLY
    name: str  # the head's name (Card.name): how every surface calls it
    query: int  # the query of that relation on the sentence
    key: int  # the noun the parse says it points to
    top: int  # the head's most-weighted key from the query
    weight: float  # its weight there
    picked: bool  # whether that weight clears chance (else the row is spread)


def _sized(card: Card, weights: Array) -> int:
    """N, once the weights (h, N, N) are known to be the card's heads'."""
    h, n, _ = weights.shape
    if h != card.heads:
        raise ValueError(f"the card has {card.heads} heads, the weights {h}")
    return int(n)


def _looked(weights: Array, head: int, query: int, n: int, causal: bool) -> tuple[int, float, bool]:
    """Head ``head``'s top key from ``query``, its weight, and whether that weight clears chance."""
    row = weights[head, query]  # (N,)
    top = int(row.argmax())
    return top, float(row[top]), bool(evidence.picks(float(row[top]), query + 1 if causal else n))


@dataclass(frozen=True)
class Elsewhere:
    """A named head whose own row the sentence does not ask, finding another row's noun there instead."""

    head: int  # 0-based
    row: str  # the card row the head is known by
    word: str  # evidence.NAMED or PARTLY
    name: str  # the head's name (Card.name): how every surface calls it
    found: str  # the card row whose noun it finds on this sentence
    query: int
    key: int  # that noun's position
    weight: float  # the head's weight on it, clear of chance


def elsewhere(card: Card, parse: grammar.Parse, weights: Array, causal: bool = False) -> tuple[Elsewhere, ...]:
    """Named heads whose own row this sentence does not ask, seen finding another row's noun instead
    (the first row, in the card's order, whose noun its top key is): ``head 2 … finds the object “street” here``.
    """
    n = _sized(card, weights)
    out = []
    for i in range(card.heads):
        r, word = card.best(i)
        if word == evidence.UNNAMED or row_keys(parse, card.rows[r]):
            continue  # unnamed, or its own row is asked here (disagreements() checks that)
        done: set[int] = set()
        for other in card.rows:
            for q, k in sorted(row_keys(parse, other).items()):
                top, weight, picked = _looked(weights, i, q, n, causal)
                if q in done or top != k or not picked:
                    continue
                done.add(q)
                out.append(Elsewhere(i, card.rows[r], word, card.name(i), other, q, k, weight))
    return tuple(out)


def disagreements(card: Card, parse: grammar.Parse, weights: Array,
                  causal: bool = False) -> tuple[Disagreement, ...]:
    """Where a head's training name and what it does on this sentence part: ``weights`` is the run's (h, N, N).

    A head named (or partly named) for a row disagrees at a query of that row when its top key there is not
    clear of chance (:func:`mhacli.attention.evidence.picks`) or is not the parse's noun.
    """
    n = _sized(card, weights)
    out = []
    for i in range(card.heads):
        r, word = card.best(i)
        if word == evidence.UNNAMED:
            continue
        for q, k in sorted(row_keys(parse, card.rows[r]).items()):
            top, weight, picked = _looked(weights, i, q, n, causal)
            if picked and top == k:
                continue
            out.append(Disagreement(i, card.rows[r], word, card.name(i), q, k, top, weight, picked))
    return tuple(out)
