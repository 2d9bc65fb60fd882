"""A model's held-out accuracy: the one number every surface prints for it.

The mean over the relations the model reads out of each relation's share of right answers, on the card's
held-out sentences. Over relations, not answers, so a common relation cannot hide a rare one the model fails.
The training loop's own accuracy (its progress bar) is another number, never shown as the model's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from mhacli.grammar.card import CARD_SEED, CARD_SENTENCES, read_only

if TYPE_CHECKING:
    from mhacli.grammar.model import TrainedModel
    from mhacli.grammar.train import TrainResult

Array = np.ndarray

DEFINITION = "held-out accuracy, mean over relations"  # the one name of the number, wherever it is printed


def percent(x: float) -> str:
    """The one way a held-out accuracy is printed: a percentage with one decimal, ``73.4%``."""
    return f"{100 * x:.1f}%"


@dataclass(frozen=True)
class Score:
    """A model's held-out accuracy, relation by relation, and their mean (:attr:`accuracy`)."""

    relations: tuple[str, ...]  # (T,) the relations the model reads out, in its readouts' order
    by_relation: Array  # (T,) share of right answers at each relation's queries
    queries: Array  # (T,) queries scored per relation
    sentences: int
    seed: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_relation", read_only(self.by_relation, np.float64))
        object.__setattr__(self, "queries", read_only(self.queries, np.int64))

    @property
    def accuracy(self) -> float:
        """THE held-out accuracy: the mean over relations."""
        return float(self.by_relation.mean())

    def caption(self) -> str:
        """``held-out accuracy, mean over relations: 73.4% (2,000 sentences, rng seed 2017)``."""
        return f"{DEFINITION}: {percent(self.accuracy)} ({self.sentences:,} sentences, rng seed {self.seed})"

    def to_dict(self) -> dict[str, Any]:
        return {"definition": DEFINITION, "accuracy": self.accuracy, "sentences": self.sentences, "seed": self.seed,
                "relation_accuracy": dict(zip(self.relations, self.by_relation.tolist())),
                "queries": dict(zip(self.relations, (int(n) for n in self.queries)))}


def params_digest(params: Mapping[str, Array]) -> str:
    """The parameters' fingerprint that a model's recorded measures are kept for (names, shapes, float64 bytes)."""
    digest = hashlib.sha256()
    for name in sorted(params):
        value = np.asarray(params[name], dtype=np.float64)
        digest.update(f"{name}{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _kept(model: "TrainedModel", name: str, sentences: int, seed: int) -> Any:
    """``model``'s recorded measure ``name`` if it was made on these sentences and on these very parameters
    (None: measure it; a model given other parameters keeps no stale record)."""
    recorded = getattr(model, "recorded", {})
    entry = recorded.get(name)
    if not isinstance(entry, dict) or (entry.get("sentences"), entry.get("seed")) != (sentences, seed):
        return None
    return entry if recorded.get("params") == params_digest(model.params) else None


def kept_score(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Score | None:
    """The :func:`score` ``model`` recorded for these sentences, or None (an edited record raises)."""
    kept = _kept(model, "score", sentences, seed)
    if kept is None:
        return None
    return Score(relations=tuple(model.targets), by_relation=np.array([float(kept["relation_accuracy"][r])
                                                                      for r in model.targets]),
                 queries=np.array([int(kept["queries"][r]) for r in model.targets]), sentences=sentences, seed=seed)


def kept_crowd(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Crowd | None:
    """The :func:`crowd` ``model`` recorded for these sentences, or None (an edited record raises)."""
    kept = _kept(model, "crowd", sentences, seed)
    if kept is None:
        return None
    found = Crowd(accuracy=np.array(kept["accuracy"], dtype=np.float64), queries=np.array(kept["queries"],
                                                                                          dtype=np.int64))
    if found.accuracy.shape != (3,) or found.queries.shape != (3,):
        raise ValueError("a crowd is three accuracies and three counts")
    return found


def record(model: "TrainedModel") -> dict[str, Any]:
    """``model``'s held-out measures as a file keeps them: its :func:`score` (and :func:`crowd`, for a grammar
    model), for the parameters its digest names (:func:`mhacli.models.trained.load_trained` checks it)."""
    out: dict[str, Any] = {"params": params_digest(model.params), "score": score(model).to_dict()}
    if model.sentences:
        c = crowd(model)
        out["crowd"] = {"sentences": CARD_SENTENCES, "seed": CARD_SEED, **c.to_dict()}
    return out


def score(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Score:
    """``model``'s held-out accuracy over ``sentences`` fresh sequences drawn with ``seed`` (the card's); read
    from the model's record when it has one for these sentences."""
    kept = kept_score(model, sentences, seed)
    if kept is not None:
        return kept
    from mhacli.grammar.passes import scored_readout
    from mhacli.grammar.tasks import fresh

    task = model.config.the_task()
    ids, targets, keys = fresh(task, sentences, model.config.length, seed)  # (S, N), (T, S, N), (T, S, N)
    asked = task.scored(keys)  # (T, S, N): the answers that count

    # Each readout at the positions it is asked at only (the same logits, row by row, as reading out every word
    # at every position), so a relation's accuracy is over its asked answers.
    logits = scored_readout(model.forward(ids, logits=False)["out"], model.params["readout"], asked)  # T × (M_t, V)
    by_relation = np.array([(said.argmax(axis=-1) == targets[t][asked[t]]).mean() if asked[t].any() else 0.0
                            for t, said in enumerate(logits)])
    return Score(relations=tuple(model.targets), by_relation=by_relation, queries=asked.sum(axis=(1, 2)),
                 sentences=sentences, seed=seed)


def measured(result: "TrainResult") -> "TrainResult":
    """A training run as every surface reports it: a grammar model named by its report card
    (:func:`mhacli.grammar.heldout.carded`), and the run's accuracy (and each relation's) its :func:`score`."""
    from mhacli.grammar.heldout import carded

    result = carded(result)
    s = score(result.model)
    model = replace(result.model, recorded={"params": params_digest(result.model.params), "score": s.to_dict()})
    return replace(result, model=model, accuracy=s.accuracy, relation_accuracy=tuple(float(a) for a in s.by_relation))


def by_relation(single: Score, heads: Score) -> tuple[tuple[str, float, float], ...]:
    """(relation, one model's accuracy, the other's) for each relation both read out, when there are several."""
    b = dict(zip(heads.relations, heads.by_relation.tolist()))
    if len(single.relations) < 2:
        return ()
    return tuple((r, float(a), float(b[r])) for r, a in zip(single.relations, single.by_relation) if r in b)


@dataclass(frozen=True)
class Crowd:
    """A grammar model's accuracy at the verb (subject, object, recipient), split by how many of the sentence's
    nouns share the class (animate, place, thing) of the noun asked for: where one query must tell apart two or
    three nouns that only their roles distinguish."""

    accuracy: Array  # (3,) for one, two and three nouns of that class
    queries: Array  # (3,) queries of each

    def __post_init__(self) -> None:
        object.__setattr__(self, "accuracy", read_only(self.accuracy, np.float64))
        object.__setattr__(self, "queries", read_only(self.queries, np.int64))

    def to_dict(self) -> dict[str, Any]:
        return {"nouns_of_the_class": [1, 2, 3], "accuracy": self.accuracy.tolist(),
                "queries": [int(n) for n in self.queries]}


def crowd(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Crowd:
    """``model``'s verb accuracy on the card's held-out sentences, by nouns of the asked noun's class (1, 2, 3);
    read from the model's record when it has one for these sentences."""
    kept = kept_crowd(model, sentences, seed)
    if kept is not None:
        return kept
    from mhacli.grammar import grammar
    from mhacli.grammar.card import ROLES
    from mhacli.grammar.heldout import held_out
    from mhacli.grammar.knockout import query_targets

    ids, keys, names = held_out(model, sentences, seed)  # (S, N), (R, S, N)
    answers = model.forward(ids)["logits"].argmax(axis=-1)  # (S, N, T, V) -> (S, N, T)
    targets = query_targets(model.targets, names, model.vocabulary, ids)  # R × (S, N)
    kinds = ("animate", "place", "thing")
    of = np.array([kinds.index(grammar.noun_class(w)) if w in grammar.NOUNS else -1 for w in model.vocabulary])
    places = np.stack([keys[names.index(r)].max(axis=-1) for r in ROLES])  # (3, S): each role's noun, -1 if none
    classes = np.where(places >= 0, of[np.take_along_axis(ids, places.clip(0).T, axis=-1).T], -2)  # (3, S)
    right, asked_at = np.zeros(3), np.zeros(3, dtype=np.int64)
    for role in ROLES:
        r = names.index(role)
        asked = keys[r] >= 0  # (S, N): the verb
        truth = np.take_along_axis(ids, keys[r].clip(0), axis=-1)  # (S, N): the noun at the true key
        said = np.take_along_axis(answers, targets[r][..., None], axis=-1)[..., 0]  # (S, N)
        count = (classes[:, :, None] == of[truth][None]).sum(axis=0)  # (S, N): nouns of the asked noun's class
        for c in (1, 2, 3):
            at = asked & (count == c)
            right[c - 1] += (said == truth)[at].sum()
            asked_at[c - 1] += at.sum()
    return Crowd(accuracy=right / np.maximum(asked_at, 1), queries=asked_at)


CONTROL_FILE = "grammar-control.json"  # in mhacli/data, written by scripts/measure_control.py


@dataclass(frozen=True)
class Control:
    """The one-vs-many control: the shipped grammar pair's training (same config, same seed) with positions put
    back into the values (``word_values=False``: V = X W_v, X = E + P), measured as the shipped pair is (the one
    held-out accuracy and the verb's split by nouns of a class), and kept only beside the pair it was measured
    with (``beside``: the shipped pair's accuracies when it was measured)."""

    single: float  # held-out accuracy of the lone head, values from X
    heads: float  # of the h heads, values from X
    head_count: int
    crowd: Crowd  # the lone head's verb accuracy by nouns of a class, values from X
    seed: int
    command: str  # how it was measured
    measured: str  # when (UTC date)
    beside: tuple[float, float]  # the shipped pair's (lone, h heads) accuracies it was measured beside

    @property
    def gap(self) -> float:
        """Points the h heads gain over the lone head with positions in the values."""
        return 100 * (self.heads - self.single)

    def to_dict(self) -> dict[str, Any]:
        return {"values": "X = E + P (positions in the values)", "single": self.single, "heads": self.heads,
                "head_count": self.head_count, "gap_points": self.gap, "by_nouns_of_a_class": self.crowd.to_dict(),
                "seed": self.seed, "command": self.command, "measured": self.measured,
                "beside": list(self.beside)}


def control(single: float, heads: float) -> Control | None:
    """The shipped grammar pair's control (:class:`Control`), when it was measured beside a pair of exactly these
    held-out accuracies (``single``, ``heads``: :func:`score`'s); else None, so a retrained pair is never shown
    beside an older pair's control."""
    import json
    from importlib import resources

    try:
        data = json.loads((resources.files("mhacli.data") / CONTROL_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    beside = (float(data["beside"][0]), float(data["beside"][1]))
    if abs(beside[0] - single) > 1e-12 or abs(beside[1] - heads) > 1e-12:
        return None
    split = data["by_nouns_of_a_class"]
    return Control(single=float(data["single"]), heads=float(data["heads"]), head_count=int(data["head_count"]),
                   crowd=Crowd(accuracy=np.array(split["accuracy"]), queries=np.array(split["queries"])),
                   seed=int(data["seed"]), command=str(data["command"]), measured=str(data["measured"]),
                   beside=beside)
