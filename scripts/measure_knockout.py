"""Measure issue 28's knockout target beside the others, per seed: train, card, knockout, one JSON line a run.

    python scripts/measure_knockout.py --seeds 0-4 [--scored-loss 1] [--head-sparsity 0.01] [--head-dropout 0.5]
        [--head-concentration 0.01] [--split-referent 1] ...

For each run: held-out accuracy per relation, the card's names, the knockout cost (points, head × row) and,
per named head, its own row's cost and the worst other row's (``mhacli.grammar.knockout.clean``); ``row_accuracy``:
held-out accuracy per card row on the card's sentences (for one head too), the same rows whatever the readouts.
Not a test (it trains for minutes); the numbers in docs/training.md's lever tables come from it.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from mhacli.grammar.heldout import carded
from mhacli.grammar.knockout import clean, knockout
from mhacli.grammar.model import TrainConfig
from mhacli.grammar.train import train


def seeds_of(text: str) -> list[int]:
    """``0-4`` or ``0,2,3``."""
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--schedule", default=None)
    parser.add_argument("--scored-loss", type=int, default=None)
    parser.add_argument("--head-sparsity", type=float, default=None)
    parser.add_argument("--head-dropout", type=float, default=None)
    parser.add_argument("--head-concentration", type=float, default=None)
    parser.add_argument("--split-referent", type=int, default=None)
    parser.add_argument("--head-overlap", type=float, default=None)
    args = parser.parse_args()
    options = {"steps": args.steps, "lr": args.lr, "schedule": args.schedule,
               "scored_loss": None if args.scored_loss is None else bool(args.scored_loss),
               "head_sparsity": args.head_sparsity, "head_dropout": args.head_dropout,
               "head_concentration": args.head_concentration, "head_overlap": args.head_overlap,
               "split_referent": None if args.split_referent is None else bool(args.split_referent)}
    for seed in seeds_of(args.seeds):
        config = TrainConfig.for_task("grammar", heads=args.heads, seed=seed, **options)
        result = carded(train(config))
        model = result.model
        line = {"seed": seed, "heads": args.heads, "options": {k: v for k, v in options.items() if v is not None},
                "seconds": round(result.seconds, 1), "targets": list(model.targets),
                "accuracy": [round(100 * a, 1) for a in result.relation_accuracy]}
        knock = knockout(model)
        line["row_accuracy"] = dict(zip(knock.rows, np.round(100 * knock.full, 1).tolist()))
        if model.card is not None and args.heads > 1:
            line["names"] = [model.card.title(i) for i in range(args.heads)]
            line["card"] = np.round(100 * model.card.rate, 1).tolist()  # (R, h) hit rates, %
            line["rows"] = list(knock.rows)
            line["cost"] = np.round(knock.cost, 1).tolist()
            line["clean"] = [{"head": c.head + 1, "row": c.row, "own": round(c.own, 1), "other": c.other,
                              "other_cost": round(c.other_cost, 1), "met": c.met, "settled": c.settled,
                              "own_interval": c.own_interval, "other_interval": c.other_interval}
                             for c in clean(model.card, knock)]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
