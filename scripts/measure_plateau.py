"""Does stopping on a held-out plateau keep the card, the names and the one-vs-many gap?

    python scripts/measure_plateau.py --seeds 0-4 --patience 5 --check-every 100 [--cap-only]

Trains the grammar's defaults with 1 and 4 heads on every seed (each head count's seeds as one stack, as
``mha train --seeds`` does), with the plateau rule (``TrainConfig.patience``) and, unless ``--plateau-only``, without
it, and prints per seed: the steps each run trained, the one held-out accuracy (mean over relations on the card's
2,000 sentences) of 1 and 4 heads, the gap in points and the 4-head card's name of each head; then the gap's
mean and sd and the CPU seconds of each training.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(seeds: list[int], patience: int, check_every: int) -> tuple[list[list], float]:
    from mhacli.grammar.score import measured
    from mhacli.grammar.model import TrainConfig
    from mhacli.grammar.train import train_many

    configs = [TrainConfig.for_task("grammar", seed=s, heads=h, patience=patience, check_every=check_every)
               for s in seeds for h in (1, 4)]
    start = cpu()
    results = [measured(r) for r in train_many(configs)]
    return [results[2 * i:2 * i + 2] for i in range(len(seeds))], cpu() - start


def report(label: str, by_seed: list[list], seconds: float) -> None:
    print(f"## {label}: {seconds:.1f} CPU s (training and cards)")
    gaps = []
    for one, four in by_seed:
        gap = 100 * (four.accuracy - one.accuracy)
        gaps.append(gap)
        names = "; ".join(four.model.card.name(i) for i in range(four.heads))
        steps = [r.stopped or r.config.steps for r in (one, four)]
        print(f"seed {one.config.seed}: steps {steps[0]:,} / {steps[1]:,}; 1 head {one.accuracy:.1%}, "
              f"4 heads {four.accuracy:.1%}, gap {gap:+.1f}; 4-head names: {names}")
    sd = statistics.stdev(gaps) if len(gaps) > 1 else 0.0
    print(f"gap mean {statistics.mean(gaps):+.1f}, sd {sd:.1f}, from {min(gaps):+.1f} to {max(gaps):+.1f}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--check-every", type=int, default=100)
    parser.add_argument("--plateau-only", action="store_true")
    a = parser.parse_args()
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    report(f"plateau: patience {a.patience}, a check every {a.check_every} steps", *run(seeds, a.patience,
                                                                                        a.check_every))
    if not a.plateau_only:
        report("every step (the cap)", *run(seeds, 0, a.check_every))


if __name__ == "__main__":
    main()
