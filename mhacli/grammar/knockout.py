"""Head knockout: switch one head off and score the model against the grammar, relation by relation.

Head k is switched off by zeroing its output before W_o; O = Σ_i head_i (W_o^i)ᵀ, so that removes exactly its
contribution (a uniform head would still pass the mean of V). The card says where a head looks; the knockout says
what the model loses without it, on the card's held-out sentences and rows, through
:func:`mhacli.grammar.passes.forward`'s own pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mhacli.attention import evidence
from mhacli.attention.attention import merge_heads, project
from mhacli.grammar.card import CARD_SEED, CARD_SENTENCES, read_only
from mhacli.grammar.heldout import held_out

if TYPE_CHECKING:
    from mhacli.grammar.card import Card
    from mhacli.grammar.passes import Params
    from mhacli.grammar.model import TrainedModel

Array = np.ndarray


@dataclass(frozen=True)
class Knockout:
    """Held-out accuracy per card row with every head (``full``) and with each head switched off (``without``)."""

    rows: tuple[str, ...]  # (R,) the card's rows
    full: Array  # (R,) accuracy with every head
    without: Array  # (h, R) accuracy with head k's output zeroed before W_o
    queries: Array  # (R,) queries scored per row
    sentences: int
    seed: int
    # (h, R) each cost's 95 % bootstrap interval in points (:func:`bootstrap`: the held-out sentences resampled
    # with replacement, BOOTSTRAP times); None where not measured (a knockout built from its accuracies alone).
    low: Array | None = None
    high: Array | None = None

    # Derived once, when the knockout is made, so every surface reads the same numbers and words: (h, R) points of
    # accuracy each row loses without each head (negative: it gains), and where that is enough to say so
    # (evidence.KNOCKOUT_POINTS; the renderers read the verdict, they never compare against the threshold).
    cost: Array = field(init=False, repr=False, compare=False)
    matters: Array = field(init=False, repr=False, compare=False)
    points: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)  # (h, R) cost as printed
    # (h, R) whether a cost's verdict is at stake (worth a word, or its interval reaching the threshold), and its
    # 95 % bootstrap interval in the digits of evidence.points ("8.1 to 11.0"; "" where not measured)
    at_stake: Array = field(init=False, repr=False, compare=False)
    intervals: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("full", "without", "queries"):
            object.__setattr__(self, name, read_only(getattr(self, name), np.float64))
        if (self.low is None) != (self.high is None):
            raise ValueError("a knockout's interval needs both ends")
        if self.low is not None and self.high is not None:
            for name in ("low", "high"):
                end = read_only(getattr(self, name), np.float64)
                if end.shape != self.without.shape:
                    raise ValueError(f"a knockout's {name} must be (h, R) {self.without.shape}, got {end.shape}")
                object.__setattr__(self, name, end)
        cost = 100.0 * (self.full[None, :] - self.without)  # (h, R)
        object.__setattr__(self, "cost", read_only(cost, np.float64))
        object.__setattr__(self, "matters", read_only(cost >= evidence.KNOCKOUT_POINTS, bool))  # (h, R)
        # the digits that keep each printed cost on its verdict's side (9.64 is '9.6', never '10')
        object.__setattr__(self, "points", tuple(tuple(evidence.points(float(c)) for c in row) for row in cost))
        low, high = self.low, self.high
        reaches = np.zeros(cost.shape, bool) if high is None else high >= evidence.KNOCKOUT_POINTS  # (h, R)
        object.__setattr__(self, "at_stake", read_only((high is not None) & (self.matters | reaches), bool))
        object.__setattr__(self, "intervals", tuple(
            tuple("" if low is None or high is None else
                  f"{evidence.points(float(low[i, r]))} to {evidence.points(float(high[i, r]))}"
                  for r in range(cost.shape[1])) for i in range(cost.shape[0])))

    @property
    def heads(self) -> int:
        return int(self.without.shape[0])

    def to_dict(self) -> dict[str, Any]:
        return {"sentences": self.sentences, "seed": self.seed, "rows": list(self.rows),
                "queries": [int(n) for n in self.queries], "full": self.full.tolist(),
                "without": self.without.tolist(),
                **({} if self.low is None or self.high is None else
                   {"cost_low": self.low.tolist(), "cost_high": self.high.tolist(), "bootstrap": BOOTSTRAP})}


BOOTSTRAP = 1000  # resamples of the held-out sentences behind a cost's interval: ~0.05 CPU s on 2,000 sentences


def bootstrap(full: Array, without: Array, asked: Array, seed: int) -> tuple[Array, Array]:
    """The 95 % percentile bootstrap interval of each knockout cost, in points: ((h, R), (h, R)).

    ``full`` (R, S) right answers per row and sentence with every head, ``without`` (h, R, S) with each head off,
    ``asked`` (R, S) the row's queries per sentence.  Whole sentences are resampled (a sentence's queries are not
    independent of each other), BOOTSTRAP times with ``np.random.default_rng(seed)``; a cost is
    100 · (Σ full − Σ without) / Σ asked over each resample."""
    s = asked.shape[1]
    rng = np.random.default_rng(seed)
    times = rng.multinomial(s, np.full(s, 1.0 / s), size=BOOTSTRAP).astype(np.float64)  # (B, S)
    n = np.maximum(times @ asked.T, 1.0)  # (B, R)
    kept = times @ full.T  # (B, R)
    lost = (times @ without.reshape(-1, s).T).reshape(BOOTSTRAP, *without.shape[:2])  # (B, h·R) -> (B, h, R)
    cost = 100.0 * (kept[:, None, :] - lost) / n[:, None, :]  # (B, h, R)
    low, high = np.percentile(cost, [2.5, 97.5], axis=0)  # (h, R) each
    return low, high


def row_targets(targets: tuple[str, ...], rows: tuple[str, ...]) -> tuple[int, ...]:
    """Which readout answers each card row: its own relation's, or the referent's for a kind of referent."""
    return tuple(targets.index(r) if r in targets else targets.index("referent") for r in rows)


def query_targets(targets: tuple[str, ...], rows: tuple[str, ...], vocabulary: tuple[str, ...],
                  ids: Array) -> tuple[Array, ...]:
    """Which readout answers each card row at each query, (S, N) per row: :func:`row_targets`'s one readout, or
    for the referent of a model with a readout per kind, the readout of the query word's kind."""
    from mhacli.grammar.card import SUB_RELATIONS

    if "referent" in targets:
        return tuple(np.full(ids.shape, t) for t in row_targets(targets, rows))  # R × (S, N)
    by_kind = np.zeros(ids.shape, dtype=np.int64)  # (S, N): only the referent's queries are read from it
    for kind, words in SUB_RELATIONS.items():
        by_kind[np.isin(ids, [vocabulary.index(w) for w in words])] = targets.index(kind)
    return tuple(by_kind if r == "referent" else np.full(ids.shape, targets.index(r)) for r in rows)  # R × (S, N)


def logits_without(params: "Params", heads_out: Array, head: int | None) -> Array:
    """logits with head ``head``'s output zeroed before W_o (None: every head on): (B, h, N, d/h) -> (B, N, T, V)."""
    from mhacli.grammar.passes import readout

    kept = np.array(heads_out, copy=True)  # (B, h, N, d/h)
    if head is not None:
        kept[:, head] = 0.0  # (B, N, d/h) of head k: its share of O goes, the others' stay
    out = project(merge_heads(kept), params["W_o"])  # (B, h, N, d/h) -> (B, N, d) -> (B, N, d)
    return readout(out, params["readout"])  # (B, N, T, V)


def row_accuracy(logits: Array, ids: Array, keys: Array, targets: tuple[Array, ...]) -> Array:
    """(R,) share of each row's queries whose readout (``targets[r]``, (S, N)) names the token at the row's true
    key."""
    right, asked = row_counts(logits, ids, keys, targets)  # (R, S) each
    total = asked.sum(axis=1)  # (R,)
    return np.where(total > 0, right.sum(axis=1) / np.maximum(total, 1), 0.0)


def row_counts(logits: Array, ids: Array, keys: Array, targets: tuple[Array, ...]) -> tuple[Array, Array]:
    """Per row and sentence, (R, S) each: the queries whose readout (``targets[r]``, (S, N)) names the token at
    the row's true key, and the queries asked."""
    # Every readout's answer once, then each row picks its readout's: the same answers (argmax of a picked
    # readout is the picked argmax) for one pass over the logits instead of a gather of them per row.
    answers = logits.argmax(axis=-1)  # (S, N, T, V) -> (S, N, T)
    right = np.zeros((len(targets), ids.shape[0]))  # (R, S)
    for r, t in enumerate(targets):
        asked = keys[r] >= 0  # (S, N)
        truth = np.take_along_axis(ids, keys[r].clip(0), axis=-1)  # (S, N): the noun at each true key
        said = np.take_along_axis(answers, t[..., None], axis=-1)[..., 0]  # (S, N, T) -> (S, N)
        right[r] = ((said == truth) & asked).sum(axis=-1)
    return right, (keys >= 0).sum(axis=-1).astype(np.float64)  # (R, S), (R, S)


def knockout(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Knockout:
    """Each card row's held-out accuracy with every head, and with each head switched off in turn."""
    ids, keys, names = held_out(model, sentences, seed)  # (S, N), (R, S, N)
    params = dict(model.params)
    cache = model.forward(ids)  # the model's own forward: values from E alone where it was so trained
    targets = query_targets(model.targets, names, model.vocabulary, ids)  # R × (S, N)
    right, asked = row_counts(cache["logits"], ids, keys, targets)  # (R, S) each
    off = np.stack([row_counts(logits_without(params, cache["heads"], k), ids, keys, targets)[0]
                    for k in range(model.config.heads)])  # (h, R, S)
    total = np.maximum(asked.sum(axis=1), 1)  # (R,)
    low, high = bootstrap(right, off, asked, seed)  # (h, R) each: the costs' 95 % intervals
    return Knockout(rows=names, full=right.sum(axis=1) / total, without=off.sum(axis=2) / total,
                    queries=asked.sum(axis=1), sentences=int(sentences), seed=seed, low=low, high=high)


@dataclass(frozen=True)
class Mismatch:
    """Where the card (where a head looks) and the knockout (what the model loses without it) disagree."""

    head: int  # 0-based
    row: str
    named: bool  # True: the card names (or partly names) the head for the row, yet switching it off costs little
    rate: float  # the head's card hit rate on the row
    cost: float  # points the row loses without the head
    interval: str = ""  # its 95 % bootstrap interval as printed (Knockout.interval), "" when not measured
    unsettled: bool = False  # the interval reaches across evidence.KNOCKOUT_POINTS: the verdict rests on the draw


def _costs(card: "Card", knock: Knockout) -> Array:
    """(h, R) the knockout's costs, once the card and the knockout are known to measure the same rows and heads."""
    if card.rows != knock.rows or card.heads != knock.heads:
        raise ValueError("the card and the knockout measure different rows or heads")
    return knock.cost  # (h, R)


def mismatches(card: "Card", knock: Knockout) -> tuple[Mismatch, ...]:
    """Each head the card names for a row whose knockout costs it under evidence.KNOCKOUT_POINTS, and each row
    a head's knockout costs that much though the card does not name the head for it."""
    cost = _costs(card, knock)  # (h, R)
    out = []
    for i in range(card.heads):
        best, word = card.best(i)
        for r, row in enumerate(card.rows):
            known = r == best and word != evidence.UNNAMED
            repeated = card.repeats[r] in card.rows and card.named(card.rows.index(card.repeats[r]), i)
            if (known != evidence.matters(float(cost[i, r])) and (known or card.word(r, i) == evidence.UNNAMED)
                    and not repeated):  # a row that only repeats a role the head is named for is that role's
                across = (knock.low is not None and knock.high is not None
                          and evidence.matters(float(knock.low[i, r])) != evidence.matters(float(knock.high[i, r])))
                out.append(Mismatch(i, row, known, float(card.rate[r, i]), float(cost[i, r]), knock.intervals[i][r],
                                    across))
    return tuple(out)


# Issue 28's target for a clean knockout: switching off a named head costs the relation it is named for at least
# OWN_POINTS and every relation the card does not name it for at most OTHER_POINTS.
OWN_POINTS = 30.0
OTHER_POINTS = 5.0
PARTS_OF = {"referent": ("he/she", "feeling", "place")}  # a row that holds others: it loses what they lose


@dataclass(frozen=True)
class Clean:
    """One named head's knockout against the target: its own row's cost, and the worst other row's."""

    head: int  # 0-based
    row: str  # the row the card names it for (its best)
    own: float  # points its row loses without it
    other: str  # the row not named for it that loses most ("" when every row is named for it)
    other_cost: float  # points that row loses
    # the two costs' 95 % bootstrap intervals (low, high) in points; None where the knockout has none
    own_interval: tuple[float, float] | None = None
    other_interval: tuple[float, float] | None = None

    @property
    def met(self) -> bool:
        return self.own >= OWN_POINTS and self.other_cost <= OTHER_POINTS

    @property
    def settled(self) -> bool | None:
        """Does the verdict hold over both intervals (met at their worst ends, or missed at their best), or None
        where there are no intervals: a verdict that flips inside them rests on the sentences drawn."""
        if self.own_interval is None or self.other_interval is None:
            return None
        if self.met:
            return self.own_interval[0] >= OWN_POINTS and self.other_interval[1] <= OTHER_POINTS
        return self.own_interval[1] < OWN_POINTS or self.other_interval[0] > OTHER_POINTS


def clean(card: "Card", knock: Knockout) -> tuple[Clean, ...]:
    """Each head the card names: what switching it off costs its row and the worst row it is not named for.

    A row the card also names the head for is its own too; so is a row holding one of those (the referent,
    which holds he/she, feeling and place: it loses their queries).
    """
    cost = _costs(card, knock)  # (h, R)
    out = []
    for i in range(card.heads):
        best, word = card.best(i)
        if word != evidence.NAMED:
            continue
        own = {card.rows[r] for r in range(len(card.rows)) if card.named(r, i)}
        own |= {card.rows[r] for r in range(len(card.rows)) if card.repeats[r] in own}  # it only repeats that role
        own |= {whole for whole, parts in PARTS_OF.items() if own & set(parts)}
        others = [r for r, row in enumerate(card.rows) if row not in own]
        worst = max(others, key=lambda r: (cost[i, r], -r)) if others else -1
        ends = None if knock.low is None or knock.high is None else (knock.low[i], knock.high[i])  # (R,) each
        out.append(Clean(i, card.rows[best], float(cost[i, best]), card.rows[worst] if worst >= 0 else "",
                         float(cost[i, worst]) if worst >= 0 else 0.0,
                         None if ends is None else (float(ends[0][best]), float(ends[1][best])),
                         None if ends is None else ((float(ends[0][worst]), float(ends[1][worst])) if worst >= 0
                                                    else (0.0, 0.0))))
    return tuple(out)
