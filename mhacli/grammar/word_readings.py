"""How a trained grammar model should read a student's mapped word, measured (``scripts/measure_words.py``).

On the report card's held-out sentences with one noun per sentence replaced, :func:`mapped_scores` scores
each reading of :data:`mhacli.grammar.words.READINGS`: the class's centroid, one fixed stand-in, a free stand-in
(the one :mod:`mhacli.grammar.words` keeps).  Apart from :mod:`mhacli.grammar.words` because it runs the model and
scores the card: the parse and the mapping need neither, and the model's own module reads the mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.grammar.words import CLASSES, NOUN_CLASSES, STAND_INS, WordMap

if TYPE_CHECKING:
    from mhacli.grammar.model import TrainedModel

Array = np.ndarray


def centroid(embedding: Array, vocabulary: Sequence[str], cls: str) -> Array:
    """The mean of the model's embedding rows of the class's words: (V, d) -> (d,)."""
    index = {w: i for i, w in enumerate(vocabulary)}
    rows = [index[w] for w in CLASSES[cls]]
    return embedding[rows].mean(axis=0)  # (k, d) -> (d,)


def extended_table(embedding: Array, vocabulary: Sequence[str], words: WordMap) -> Array:
    """E with one row per mapped word after the vocabulary's: (V, d) -> (V + m, d), row V + j the centroid of
    word j's class."""
    added = [centroid(embedding, vocabulary, cls) for _, cls in words.pairs]  # m × (d,)
    return np.concatenate([embedding, np.array(added).reshape(len(added), embedding.shape[1])])  # (V + m, d)


@dataclass(frozen=True)
class MappedScores:
    """On the card's held-out sentences with one noun per sentence read another way: each card cell's hit
    rate and each card row's accuracy, for the real words and for each reading (:data:`READINGS`)."""

    rows: tuple[str, ...]  # (R,) the card's rows
    readings: tuple[str, ...]  # ("words", "centroid", "stand-in"): the sentences as drawn, then each reading
    rate: Array  # (K, R, h) hit rates (heldout.report_card's rule)
    accuracy: Array  # (K, R) readout accuracy per row
    replaced: Array  # (R,) queries of each row that point at the replaced noun
    sentences: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows), "readings": list(self.readings), "rate": self.rate.tolist(),
                "accuracy": self.accuracy.tolist(), "replaced": self.replaced.tolist(),
                "sentences": self.sentences, "seed": self.seed}


def _replaced_nouns(keys: Array, rows: Sequence[str], rng: np.random.Generator) -> Array:
    """(S,) one noun position per sentence, drawn among its subject, object and recipient."""
    nouns = np.stack([keys[rows.index(r)].max(axis=-1) for r in ("subject", "object", "recipient")])  # (3, S)
    have = nouns >= 0  # (3, S): a sentence without a recipient has two nouns
    pick = np.floor(rng.random(keys.shape[1]) * have.sum(axis=0)).astype(np.int64)  # (S,) which of its nouns
    order = np.argsort(~have, axis=0, kind="stable")  # (3, S): the present nouns first
    return np.take_along_axis(nouns, np.take_along_axis(order, pick[None], axis=0), axis=0)[0]  # (S,)


def _class_of_ids(vocabulary: Sequence[str]) -> Array:
    """(V,) each word's noun class index in NOUN_CLASSES, -1 for a word that is no noun."""
    of = np.full(len(vocabulary), -1, dtype=np.int64)
    for c, cls in enumerate(NOUN_CLASSES):
        for w in CLASSES[cls]:
            of[list(vocabulary).index(w)] = c
    return of


def _free_stand_ins(ids: Array, at: Array, cls: Array, vocabulary: Sequence[str]) -> Array:
    """(S,) per sentence the first word of the replaced noun's class that the sentence does not hold (nor the
    replaced noun itself, so that every sentence is read with another word than the one it was drawn with)."""
    index = {w: i for i, w in enumerate(vocabulary)}
    out = np.empty(len(ids), dtype=np.int64)
    for b, row in enumerate(ids):
        held = set(row.tolist())
        out[b] = next(index[w] for w in CLASSES[NOUN_CLASSES[cls[b]]] if index[w] not in held)
    return out


def mapped_scores(model: "TrainedModel", sentences: int = 2000, seed: int = 2017) -> MappedScores:
    """Replace one noun per held-out sentence by its class's centroid, or by the class's stand-in word
    (:data:`STAND_INS`), and score the card's rule and the readout on each; an answer about the replaced noun
    counts when the readout names a word of its class not elsewhere in the sentence."""
    from mhacli.grammar.card import card_hits
    from mhacli.grammar.heldout import held_out
    from mhacli.grammar.knockout import row_targets
    from mhacli.grammar.passes import forward

    ids, keys, rows = held_out(model, sentences, seed)  # (S, N), (R, S, N)
    rng = np.random.default_rng(seed + 1)
    at = _replaced_nouns(keys, rows, rng)  # (S,)
    s = np.arange(ids.shape[0])
    class_of = _class_of_ids(model.vocabulary)  # (V,)
    cls = class_of[ids[s, at]]  # (S,) the replaced noun's class
    v = len(model.vocabulary)
    c = model.config
    table = extended_table(model.params["embedding"], model.vocabulary,
                           WordMap(tuple((f"<{n}>", n) for n in NOUN_CLASSES)))  # (V + 5, d)
    stand = np.array([list(model.vocabulary).index(STAND_INS[n]) for n in NOUN_CLASSES])  # (5,)
    variants = {"words": ids, "centroid": ids.copy(), "stand-in": ids.copy(), "free stand-in": ids.copy()}
    variants["centroid"][s, at] = v + cls
    variants["stand-in"][s, at] = stand[cls]
    variants["free stand-in"][s, at] = _free_stand_ins(ids, at, cls, model.vocabulary)
    targets = row_targets(model.targets, rows)
    others = (class_of[ids] >= 0) & (np.arange(ids.shape[1]) != at[:, None])  # (S, N): the other nouns
    on_replaced = keys == at[None, :, None]  # (R, S, N): queries that point at the replaced noun
    rates, accs = [], []
    for name, variant in variants.items():
        params = {**dict(model.params), "embedding": table}
        cache = forward(params, variant, c.heads, c.causal, _pad(model), c.word_values)
        hits, queries = card_hits(cache["weights"], keys)  # (R, h), (R,): the card's rule
        rates.append(hits / np.maximum(queries, 1)[:, None])  # (R, h)
        asked = keys >= 0  # (R, S, N)
        acc = []
        for r, t in enumerate(targets):
            said = cache["logits"][..., t, :].argmax(axis=-1)  # (S, N)
            truth = np.take_along_axis(ids, keys[r].clip(0), axis=-1)  # (S, N)
            exact = said == truth
            if name != "words":  # about the replaced noun: a word of its class that is no other noun there
                other = (said[:, :, None] == np.where(others, ids, -1)[:, None, :]).any(axis=-1)  # (S, N)
                fits = (class_of[said] == cls[:, None]) & ~other
                exact = np.where(on_replaced[r], fits, exact)
            acc.append(float(exact[asked[r]].mean()) if asked[r].any() else 0.0)
        accs.append(acc)
    return MappedScores(rows=rows, readings=tuple(variants), rate=np.array(rates), accuracy=np.array(accs),
                        replaced=(on_replaced & (keys >= 0)).sum(axis=(1, 2)), sentences=sentences, seed=seed)


def _pad(model: "TrainedModel") -> int | None:
    from mhacli.grammar.tasks import get_task

    return get_task(model.config.task).pad
