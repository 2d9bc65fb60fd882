"""Measure the training targets: held-out accuracy per relation for each head count and seed, and the seconds.

    python scripts/measure_train.py [--task grammar] [--heads 1,4] [--seeds 0-4] [--word-values 0|1] ...

Prints one line per run and a summary table; on the grammar also what each head follows on fresh sentences
(the share of each relation's queries whose top key, clear of chance, is the relation's noun) and the lone
head's gap per seed.  Not a test (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mhacli.grammar import grammar
from mhacli.grammar.tasks import get_task
from mhacli.grammar.passes import key_mask
from mhacli.grammar.model import TrainConfig, _picked_argmax
from mhacli.grammar.train import TrainResult, train

NAMED = 0.85  # a head named for a relation on the card (issue 28)


def seeds_of(text: str) -> list[int]:
    """``0-4`` or ``0,2,3``."""
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def hit_rates(result: TrainResult, sentences: int = 2000) -> np.ndarray:
    """(h, R): each head's share of each :data:`grammar.PART_RELATIONS` query whose top key is its noun."""
    task = get_task(result.config.task)
    ids, _, keys = task.sample(np.random.default_rng(10_000 + result.config.seed), sentences, result.config.length)
    looked = _picked_argmax(result.model.attention(ids), key_mask(ids, False, task.pad))  # (B, h, N)
    parts = grammar.part_keys(ids, keys)  # (R, B, N)
    return np.array([[float(np.mean(looked[:, i][parts[r] >= 0] == parts[r][parts[r] >= 0]))
                      for r in range(len(parts))] for i in range(result.config.heads)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="neighbours")
    parser.add_argument("--heads", default="1,2,4")
    parser.add_argument("--seeds", default="0,1,2")
    for name in ("d_model", "steps", "batch", "length", "word_values"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--positions", default=None)
    parser.add_argument("--schedule", default=None)
    args = parser.parse_args()
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("d_model", "steps", "batch", "length", "lr", "positions", "schedule") and v is not None}
    if args.word_values is not None:
        overrides["word_values"] = bool(args.word_values)
    heads = [int(h) for h in args.heads.split(",")]
    seeds = seeds_of(args.seeds)
    table: dict[int, list[float]] = {h: [] for h in heads}
    means: dict[int, list[float]] = {h: [] for h in heads}
    for seed in seeds:
        for h in heads:
            config = TrainConfig.for_task(args.task, heads=h, seed=seed, **overrides)
            start = time.perf_counter()
            result = train(config)
            wall = time.perf_counter() - start
            table[h].append(result.accuracy)
            means[h].append(float(np.mean(result.relation_accuracy)))
            relations = ", ".join(f"{name} {share:.0%}" for name, share in result.model.relations)
            per = " ".join(f"{t} {a:.1%}" for t, a in zip(result.model.targets, result.relation_accuracy))
            print(f"seed {seed} heads {h}: accuracy {result.accuracy:.2%} ({per}) loss {result.loss:.3f} "
                  f"parameters {result.parameters} train {result.seconds:.2f} s wall {wall:.2f} s [{relations}]",
                  flush=True)
            if get_task(args.task).sentences:
                rates = hit_rates(result)
                for i, row in enumerate(rates):
                    named = [r for r, v in zip(grammar.PART_RELATIONS, row) if v >= NAMED]
                    cells = " ".join(f"{r} {v:4.0%}" for r, v in zip(grammar.PART_RELATIONS, row))
                    print(f"    head {i + 1}: {cells}   named: {', '.join(named) or '-'}", flush=True)
    print(f"\n{args.task}, {overrides or 'defaults'}: held-out accuracy (mean over relations)")
    print("heads | " + " | ".join(f"seed {s}" for s in seeds))
    for h in heads:
        print(f"{h:5d} | " + " | ".join(f"{a:6.1%} ({m:6.1%})" for a, m in zip(table[h], means[h])))
    if 1 in means and len(heads) > 1:
        most = max(heads)
        gaps = [100 * (b - a) for a, b in zip(means[1], means[most])]
        print(f"gap of the lone head (points, mean over relations) against {most} heads: "
              + ", ".join(f"{g:.1f}" for g in gaps)
              + f"; mean {np.mean(gaps):.1f}, spread {min(gaps):.1f} to {max(gaps):.1f}; "
              f"{sum(g >= 15 for g in gaps)} of {len(gaps)} seeds at 15 or more")


if __name__ == "__main__":
    main()
