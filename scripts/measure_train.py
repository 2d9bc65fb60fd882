"""Measure issue 11's targets: held-out accuracy for 1, 2 and 4 heads on seeds 0, 1, 2, and the seconds.

    python scripts/measure_train.py [--task neighbours] [--steps N] ...

Prints one line per run and a summary table; not a test (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import time

from mhacli.core.train import TrainConfig, train


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="neighbours")
    parser.add_argument("--heads", default="1,2,4")
    parser.add_argument("--seeds", default="0,1,2")
    for name in ("d_model", "steps", "batch", "length"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--positions", default=None)
    args = parser.parse_args()
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("d_model", "steps", "batch", "length", "lr", "positions") and v is not None}
    heads = [int(h) for h in args.heads.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    table: dict[int, list[float]] = {h: [] for h in heads}
    for seed in seeds:
        for h in heads:
            config = TrainConfig.for_task(args.task, heads=h, seed=seed, **overrides)
            start = time.perf_counter()
            result = train(config)
            wall = time.perf_counter() - start
            table[h].append(result.accuracy)
            relations = ", ".join(f"{name} {share:.0%}" for name, share in result.model.relations)
            per = " ".join(f"{t} {a:.1%}" for t, a in zip(result.model.targets, result.relation_accuracy))
            print(f"seed {seed} heads {h}: accuracy {result.accuracy:.2%} ({per}) loss {result.loss:.3f} "
                  f"parameters {result.parameters} train {result.seconds:.2f} s wall {wall:.2f} s [{relations}]",
                  flush=True)
    print(f"\n{args.task}, {overrides or 'defaults'}: held-out accuracy")
    print("heads | " + " | ".join(f"seed {s}" for s in seeds))
    for h in heads:
        print(f"{h:5d} | " + " | ".join(f"{a:6.1%}" for a in table[h]))


if __name__ == "__main__":
    main()
