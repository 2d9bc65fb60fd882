"""A seed sweep: the same head counts trained on several seeds, and how far one seed's gap is from another's.

One seed's gap is an anecdote: the sweep trains every head count once per seed (as one stack) and reports each
one's held-out accuracy, the gap between the most and the fewest heads in points, and its spread over seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mhacli.grammar.card import read_only

if TYPE_CHECKING:
    from mhacli.grammar.train import TrainResult

Array = np.ndarray


@dataclass(frozen=True)
class Sweep:
    """Held-out accuracy per seed and head count, relation by relation."""

    task: str
    seeds: tuple[int, ...]  # (S,)
    heads: tuple[int, ...]  # (H,) head counts, in the order trained
    targets: tuple[str, ...]  # (T,) the relations read out
    relation_accuracy: Array  # (S, H, T)

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation_accuracy", read_only(self.relation_accuracy, np.float64))

    @property
    def accuracy(self) -> Array:
        """(S, H) mean over relations."""
        return self.relation_accuracy.mean(axis=-1)  # (S, H, T) -> (S, H)

    @property
    def gap(self) -> Array:
        """(S,) points the most heads' mean is above the fewest heads' (negative: below)."""
        most, fewest = int(np.argmax(self.heads)), int(np.argmin(self.heads))
        return 100.0 * (self.accuracy[:, most] - self.accuracy[:, fewest])  # (S,)

    @property
    def spread(self) -> dict[str, float]:
        """The gap over seeds: mean, standard deviation (0 for one seed), smallest and largest."""
        g = self.gap
        return {"mean": float(g.mean()), "sd": float(g.std(ddof=1)) if g.size > 1 else 0.0,
                "min": float(g.min()), "max": float(g.max())}

    @property
    def accuracy_spread(self) -> dict[str, Array]:
        """Each head count's mean over relations across the seeds: mean, smallest and largest, (H,) each."""
        a = self.accuracy  # (S, H)
        return {"mean": a.mean(axis=0), "min": a.min(axis=0), "max": a.max(axis=0)}

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "seeds": list(self.seeds), "heads": list(self.heads), "targets": list(self.targets),
                "mean_accuracy": self.accuracy.tolist(), "relation_accuracy": self.relation_accuracy.tolist(),
                "gap_points": self.gap.tolist(), "spread": self.spread}


def sweep(runs: Sequence[Sequence["TrainResult"]]) -> Sweep:
    """The sweep of ``runs[s][h]``: seed s's run of head count h (every seed the same head counts, same task)."""
    if not runs or not runs[0]:
        raise ValueError("a sweep needs at least one seed and one head count")
    first = runs[0]
    heads = tuple(r.config.heads for r in first)
    if any(tuple(r.config.heads for r in seed) != heads for seed in runs):
        raise ValueError("every seed of a sweep trains the same head counts")
    acc = np.array([[r.relation_accuracy for r in seed] for seed in runs])  # (S, H, T)
    return Sweep(task=first[0].config.task, seeds=tuple(seed[0].config.seed for seed in runs), heads=heads,
                 targets=first[0].model.targets, relation_accuracy=acc)


@dataclass(frozen=True)
class KvSweep:
    """Held-out accuracy (the card's 2,000 sentences) per seed and key/value head count g, relation by relation:
    does sharing keys and values cost the layer anything?"""

    task: str
    heads: int  # h query heads, the same for every g
    d_model: int
    seeds: tuple[int, ...]  # (S,)
    kv_heads: tuple[int, ...]  # (G,) g key/value heads, in the order asked
    parameters: tuple[int, ...]  # (G,) trained numbers of each g's model
    targets: tuple[str, ...]  # (T,)
    relation_accuracy: Array  # (S, G, T)

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation_accuracy", read_only(self.relation_accuracy, np.float64))

    @property
    def accuracy(self) -> Array:
        """(S, G) mean over relations."""
        return self.relation_accuracy.mean(axis=-1)

    @property
    def spread(self) -> dict[str, Array]:
        """Each g's accuracy over the seeds: mean, standard deviation (0 for one seed), smallest, largest; (G,) each."""
        a = self.accuracy  # (S, G)
        sd = a.std(axis=0, ddof=1) if a.shape[0] > 1 else np.zeros(a.shape[1])
        return {"mean": a.mean(axis=0), "sd": sd, "min": a.min(axis=0), "max": a.max(axis=0)}

    def attention_parameters(self, g: int) -> int:
        """W_q, W_k, W_v, W_o with g key/value heads: 2d² + 2·d·g·d/h (4d² when g = h)."""
        d = self.d_model
        return 2 * d * d + 2 * d * g * (d // self.heads)

    def to_dict(self) -> dict[str, Any]:
        s = self.spread
        return {"task": self.task, "heads": self.heads, "seeds": list(self.seeds), "kv_heads": list(self.kv_heads),
                "parameters": list(self.parameters),
                "attention_parameters": [self.attention_parameters(g) for g in self.kv_heads],
                "targets": list(self.targets), "mean_accuracy": self.accuracy.tolist(),
                "relation_accuracy": self.relation_accuracy.tolist(),
                "spread": {k: v.tolist() for k, v in s.items()}}


def kv_sweep(runs: Sequence[Sequence["TrainResult"]]) -> KvSweep:
    """The key/value sweep of ``runs[s][j]``: seed s's run with the j-th key/value head count (same h, same task)."""
    from mhacli.grammar.train import count_parameters

    if not runs or not runs[0]:
        raise ValueError("a key/value sweep needs at least one seed and one g")
    first = runs[0]
    acc = np.array([[r.relation_accuracy for r in seed] for seed in runs])  # (S, G, T)
    return KvSweep(task=first[0].config.task, heads=first[0].config.heads, d_model=first[0].config.d_model,
                   seeds=tuple(seed[0].config.seed for seed in runs),
                   kv_heads=tuple(r.config.groups for r in first),
                   parameters=tuple(count_parameters(r.config) for r in first),
                   targets=first[0].model.targets, relation_accuracy=acc)
