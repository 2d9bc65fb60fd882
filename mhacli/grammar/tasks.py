"""Training tasks: random token sequences and, at every position, the tokens a model must name.

A task is a set of relations ("one place back", "one place ahead" …; outside the sequence, the boundary ``·``).
Attention is the only way between positions, so r relations need each query to look at r places: one head must
average them, r heads can each take one, the Transformer paper's argument for many heads made measurable.
``grammar`` reads out real English sentences instead. Randomness only from the Generator passed in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from mhacli.grammar import grammar
from mhacli.attention.errors import UsageError

Array = np.ndarray

WORDS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
BOUNDARY = "·"  # the answer when a relation points before the first or after the last token
VOCABULARY = (*WORDS, BOUNDARY)
# The grammar model's one token for every word it was not trained on (no alias to a known word: an alias
# would claim a meaning the word does not have).  Its embedding row is zero: it brings only its position.
UNKNOWN = "<unk>"


def _offset(shift: int) -> Callable[[Array], Array]:
    """The relation "the token ``shift`` places away" (negative = back), boundary outside the sequence."""

    def target(ids: Array) -> Array:
        b, n = ids.shape
        out = np.full((b, n), VOCABULARY.index(BOUNDARY), dtype=np.int64)  # (B, N)
        if shift < 0:
            out[:, -shift:] = ids[:, : n + shift]
        elif shift > 0:
            out[:, : n - shift] = ids[:, shift:]
        else:
            out[:] = ids
        return out

    return target


def _first(ids: Array) -> Array:
    """The relation "the first token of the sequence"."""
    return np.repeat(ids[:, :1], ids.shape[1], axis=1)  # (B, 1) -> (B, N)


# Every relation a task may use, by name; the head labels of a trained model use the same names.
RELATIONS: dict[str, Callable[[Array], Array]] = {
    "previous token": _offset(-1),
    "next token": _offset(1),
    "two back": _offset(-2),
    "first token": _first,
}

# Where each relation makes a query look (key position for query position i), for labelling heads.
RELATION_KEYS: dict[str, Callable[[int], int]] = {
    "previous token": lambda i: i - 1,
    "next token": lambda i: i + 1,
    "two back": lambda i: i - 2,
    "first token": lambda i: 0,
    "itself": lambda i: i,
}


@dataclass(frozen=True)
class Task:
    """A training task: a vocabulary and the relations to read out at every position."""

    name: str
    targets: tuple[str, ...]  # relation names, one readout each
    description: str
    vocabulary: tuple[str, ...] = VOCABULARY
    words: tuple[str, ...] = WORDS  # the tokens sequences are drawn from (the boundary is only an answer)
    # Training defaults where the task needs others than TrainConfig's (the grammar: wider, longer, gentler).
    defaults: tuple[tuple[str, object], ...] = ()
    sentences: bool = False  # real sentences of core.grammar (padded with the boundary), not random tokens
    # The grammar's referent read out by one readout per kind of query (he/she, feeling, place), not one for all
    # three: an experiment in training and scoring only (TrainConfig.split_referent), no relation a user sees.
    split_referent: bool = False

    @property
    def pad(self) -> int | None:
        """The id that fills a row after its sentence ends; such keys are masked (None: no padding)."""
        return self.vocabulary.index(BOUNDARY) if self.sentences else None

    def batch(self, rng: np.random.Generator, size: int, length: int) -> tuple[Array, Array]:
        """``size`` random sequences of ``length`` tokens (ids) and their targets, one row per relation."""
        ids, targets, _ = self.sample(rng, size, length)
        return ids, targets

    def sample(self, rng: np.random.Generator, size: int, length: int) -> tuple[Array, Array, Array]:
        """:meth:`batch` and, per relation, the key position each query's answer sits at (-1: none).

        For the grammar only queries with a key are scored (the boundary answers are not accuracy);
        for the positional tasks every answer is, the boundary ones included.
        """
        if self.sentences:
            drawn = grammar.generate(rng, size, length, pad=self.vocabulary.index(BOUNDARY))
            ids, keys = drawn.ids, drawn.keys  # (B, N), (4, B, N)
            if self.split_referent:
                keys = grammar.part_keys(ids, keys)  # (4, B, N) -> (6, B, N): the referent's kinds apart
            picked = np.take_along_axis(np.broadcast_to(ids, keys.shape), keys.clip(0), axis=-1)  # (T, B, N)
            return ids, np.where(keys >= 0, picked, self.vocabulary.index(BOUNDARY)), keys
        ids = rng.integers(0, len(self.words), size=(size, length))  # (B, N)
        targets = np.stack([RELATIONS[name](ids) for name in self.targets])  # (T, B, N)
        n = ids.shape[1]
        keys = np.stack([np.array([RELATION_KEYS[name](q) for q in range(n)]) for name in self.targets])  # (T, N)
        keys = np.where((keys >= 0) & (keys < n), keys, -1)
        return ids, targets, np.broadcast_to(keys[:, None, :], targets.shape)

    def by_referent_kind(self) -> "Task":
        """The same task with the grammar's referent read out by one readout per kind of referent."""
        if not self.sentences or "referent" not in self.targets:
            raise UsageError(f"only the grammar's referent can be split by kind, not the {self.name} task's "
                             "relations.", task=self.name)
        return replace(self, targets=SPLIT_TARGETS, split_referent=True)

    def relation_keys(self, keys: Array) -> Array:
        """The true keys of grammar.RELATIONS from :meth:`sample`'s: split kinds put back into one referent row."""
        if not self.split_referent:
            return keys  # (4, B, N)
        kinds = keys[len(grammar.RELATIONS) - 1:]  # (3, B, N): -1 except at its own kind's queries, so disjoint
        return np.concatenate([keys[:len(grammar.RELATIONS) - 1], kinds.max(axis=0)[None]])  # (4, B, N)

    def scored(self, keys: Array) -> Array:
        """Which answers count for accuracy: (T, B, N) booleans."""
        return keys >= 0 if self.sentences else np.ones(keys.shape, dtype=bool)


@functools.lru_cache(maxsize=8)
def fresh(task: Task, size: int, length: int, seed: int) -> tuple[Array, Array, Array]:
    """:meth:`Task.sample` from ``default_rng(seed)``, drawn once per process and read-only: the held-out
    sentences of the card's seed, which every model of a sweep (its card, score and knockout) reads alike."""
    drawn = task.sample(np.random.default_rng(seed), size, length)  # (S, N), (T, S, N), (T, S, N)
    for array in drawn:
        array.flags.writeable = False
    return drawn


# The readouts of a split referent, named as the report card's rows for the referent's kinds of query
# (core.card.SUB_RELATIONS), in the order of grammar.part_keys.
SPLIT_TARGETS = (*grammar.RELATIONS[:-1], "he/she", "feeling", "place")

TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("neighbours", ("previous token", "next token"),
             "at every position, name the token before it and the token after it"),
        Task("relations", ("two back", "previous token", "next token", "first token"),
             "at every position, name the tokens two back, one back and one ahead, and the first token"),
        Task("grammar", grammar.RELATIONS,
             "English sentences: at the verb name its subject, its object and (after a verb of giving) its "
             "recipient, at a predicate adjective the noun it describes, at he/she the noun it means",
             vocabulary=(*grammar.WORDS, BOUNDARY, UNKNOWN), words=grammar.WORDS, sentences=True,
             defaults=(("d_model", 32), ("steps", 3000), ("lr", 0.01), ("length", grammar.LONGEST),
                       ("word_values", True), ("scored_loss", True), ("head_concentration", 0.01),
                       ("head_overlap", 0.05))),
    )
}


def get_task(name: str) -> Task:
    """The task called ``name``; an unknown name is a usage error listing the tasks."""
    if name in TASKS:
        return TASKS[name]
    from mhacli.attention.messages import shown

    raise UsageError(f"unknown {{task:name}} {shown(name)}; choose one of: {', '.join(TASKS)}.", task=name)


def task_name(value: str) -> str:
    """``mha train --task`` by :func:`mhacli.attention.checks.chosen` (an unknown one is refused by the task's own
    check, as typed)."""
    from mhacli.attention.checks import chosen

    return str(chosen(value, tuple(TASKS)))
