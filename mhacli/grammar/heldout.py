"""A trained grammar model measured on fresh held-out sentences: the sentences and their keys, then its card.

The card itself (:class:`~mhacli.grammar.card.Card`, its rows, intervals, baselines and names) is data in
:mod:`mhacli.grammar.card`; this module runs a model to fill one. Knockout and the score read the same sentences.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from mhacli.attention.errors import UsageError
from mhacli.grammar import grammar
from mhacli.grammar.card import (CARD_SEED, CARD_SENTENCES, Array, Card, baselines, card_hits, picked_keys, row_keys,
                                 rows)

if TYPE_CHECKING:
    from mhacli.grammar.model import TrainedModel
    from mhacli.grammar.tasks import Task
    from mhacli.grammar.train import TrainResult


def held_out(model: "TrainedModel", sentences: int,
             seed: int) -> tuple[Array, Array, tuple[str, ...]]:
    """Fresh sentences for a grammar model: ids (S, N), each card row's true keys (R, S, N; -1: none), rows."""
    from mhacli.attention.checks import kind_name
    from mhacli.grammar.tasks import get_task

    if not (hasattr(model, "forward") and hasattr(getattr(model, "config", None), "task")):  # a run, a trace, a path
        raise UsageError(f"a report card and a knockout take a trained model: model, _ = "
                         f"mhacli.models.trained.load_trained('model.npz') (written by mha train --save), got "
                         f"{kind_name(model)}.")
    task = get_task(model.config.task)
    if not task.sentences:
        raise UsageError(f"a report card scores heads against the grammar's parse: train with --task grammar "
                         f"(this model learned {task.name}).")
    if isinstance(sentences, bool) or not isinstance(sentences, numbers.Integral) or sentences < 1:
        raise UsageError(f"a report card needs at least 1 sentence, got {sentences!r}.")
    sentences = int(sentences)  # numpy's whole numbers too (np.int64(5)), as every other count of the API
    return _parsed(task, model.vocabulary, sentences, model.config.length, seed)


@functools.lru_cache(maxsize=8)
def _parsed(task: "Task", vocabulary: tuple[str, ...], sentences: int, length: int,
            seed: int) -> tuple[Array, Array, tuple[str, ...]]:
    """:func:`held_out`'s sentences and keys, drawn and parsed once per process and read-only: the card, the
    score, the knockout and ``--words`` of every model of a sweep read the same sentences (the card's seed)."""
    from mhacli.grammar.tasks import fresh

    ids = fresh(task, sentences, length, seed)[0]  # (S, N)
    names = rows()
    keys = np.full((len(names), *ids.shape), -1, dtype=np.int64)  # (R, S, N)
    for b, row_ids in enumerate(ids):
        tokens = [vocabulary[i] for i in row_ids if i != task.pad]
        parse = grammar.parse(tokens)
        if parse is None:  # the task drew a sentence its own grammar does not parse: a bug, said plainly
            raise RuntimeError(f"the grammar task drew a sentence its parser refuses: {' '.join(tokens)}")
        for r, name in enumerate(names):
            for q, k in row_keys(parse, name).items():
                keys[r, b, q] = k
    keys.flags.writeable = False
    return ids, keys, names


def carded(result: "TrainResult", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> "TrainResult":
    """A training run whose grammar model carries its report card (so its heads are named by it); any other
    task's run as it is."""
    from mhacli.grammar.tasks import get_task

    if not get_task(result.config.task).sentences:
        return result
    return replace(result, model=replace(result.model, card=report_card(result.model, sentences, seed)))


def report_card(model: "TrainedModel", sentences: int = CARD_SENTENCES, seed: int = CARD_SEED) -> Card:
    """The card of a trained grammar model over ``sentences`` fresh sentences drawn with ``seed``."""
    from mhacli.grammar.tasks import get_task

    ids, keys, names = held_out(model, sentences, seed)  # (S, N), (R, S, N)
    weights = model.attention(ids)  # (S, h, N, N): the model's own forward
    hits, queries = card_hits(weights, keys)  # (R, h), (R,)
    real = ids != get_task(model.config.task).pad  # (S, N): the query rows of every sentence
    always, offset, repeats = baselines(picked_keys(weights), keys, names, real)
    return Card(rows=names, hits=hits, queries=queries, sentences=int(sentences), seed=seed, always=always,
                offset=offset, repeats=repeats)
