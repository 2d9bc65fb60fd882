"""A trained model's layer before its first training step: "the same sentence before training".

Same task, shape and vocabulary as the trained model, with the parameters its training started from (its own
seed) and each head's relation measured as training measures it. Nothing was learned, and every surface says so
(:attr:`Untrained.caution`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mhacli.grammar.tasks import get_task
from mhacli.grammar.passes import forward, key_mask
from mhacli.grammar.model import TrainedModel, head_relations, sentence_relations
from mhacli.grammar.train import init_params


@dataclass(frozen=True)
class Untrained(TrainedModel):
    """A model's parameters at step 0: its heads' relations are measured, but nothing was trained."""

    weight_source = "untrained"  # what a run of it records as its weights (Config.weights): never "trained"

    @property
    def labels(self) -> tuple[str, ...]:
        """Each head's measured relation, said to be before training."""
        return tuple(f"before training: {name}" for name in super().labels)

    @property
    def caution(self) -> str:
        """The line every surface shows: these weights were never trained."""
        c = self.config
        return (f"untrained: the {c.task} model's own layer (d = {c.d_model}, {c.heads} heads) before its first "
                f"training step, as drawn at its seed {c.seed}; nothing here was learned")


def untrained(model: TrainedModel) -> Untrained:
    """``model``'s layer before training: the parameters its training started from, heads measured on held-out
    sentences as training measures them (:func:`~mhacli.grammar.train.train` draws them in this order)."""
    config = model.config
    task = get_task(config.task)
    rng = np.random.default_rng(config.seed)
    params = init_params(config, task, rng)
    ids, _, keys = task.sample(rng, config.held_out, config.length)  # (H, N), (T, H, N): the held-out draw
    weights = forward(params, ids, config.heads, config.causal, task.pad)["weights"]  # (H, h, N, N)
    blocked = key_mask(ids, config.causal, task.pad)  # what each held-out query could see: chance
    if task.sentences:
        from mhacli.grammar.grammar import HEAD_RELATIONS, head_keys

        relations = sentence_relations(weights, head_keys(ids, keys), HEAD_RELATIONS, blocked)
    else:
        relations = head_relations(weights, blocked)
    return Untrained(config=config, params=params, vocabulary=task.vocabulary, targets=task.targets,
                     relations=relations)
