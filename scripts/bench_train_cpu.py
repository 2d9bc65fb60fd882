"""CPU seconds of whole ``mha train`` processes, two code trees side by side, in interleaved rounds.

    python scripts/bench_train_cpu.py OLD_TREE NEW_TREE [ROUNDS] [--sweep] [--knockout] [--sweep-plots]

Each round runs ``mha train --task grammar`` (with its figures) from each tree in a fresh process, the order
alternating from round to round, and reads the CPU seconds (user + system, the kernel's account of the
finished child) and the wall seconds; ``--sweep`` adds ``--seeds 0-4 --compare 1,4 --no-plots`` and
``--knockout`` adds ``--knockout`` (figures on, as the plain training), each from the same trees in the same rounds.  Prints per-round ratios
(new ÷ old, and each command ÷ the plain training of its own tree), their medians and ranges, and the BLAS
kernel (threadpoolctl).  ``--sweep-plots`` runs the sweep with its figures (into a temporary ``--out``), as a
teacher runs it.  ``--extras-new-only`` runs the sweep and the knockout from the new tree alone
(each round still times both trees' plain training): the ratios to one training are then the new tree's.  Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {"train": ["train", "--task", "grammar"],
            "sweep": ["train", "--task", "grammar", "--seeds", "0-4", "--compare", "1,4", "--no-plots"],
            "knockout": ["train", "--task", "grammar", "--knockout"]}


def run(tree: str, argv: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds of ``python -m mhacli ARGV`` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": tree, "MPLBACKEND": "Agg"}
    with tempfile.TemporaryDirectory() as out:
        extra = [] if "--no-plots" in argv else ["--out", out]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        # cwd: `python -m` puts the working directory ahead of PYTHONPATH, so started from inside a tree, both
        # sides would run that tree's code; the child starts in its own empty folder.
        subprocess.run([sys.executable, "-m", "mhacli", *argv, *extra], env=env, check=True, cwd=out,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (range {min(values):.2f}–{max(values):.2f})"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    old, new = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 5
    names = ["train"] + [n for n in ("sweep", "knockout") if f"--{n}" in sys.argv]
    if "--sweep-plots" in sys.argv:
        COMMANDS["sweep"] = [a for a in COMMANDS["sweep"] if a != "--no-plots"]
    import numpy  # noqa: F401  (threadpoolctl names the BLAS numpy loaded)
    from threadpoolctl import threadpool_info

    blas = [f"{b['internal_api']} {b.get('version')} ({b.get('architecture')} kernel)" for b in threadpool_info()]
    cpu: dict[str, dict[str, list[float]]] = {t: {n: [] for n in names} for t in ("old", "new")}
    wall: dict[str, dict[str, list[float]]] = {t: {n: [] for n in names} for t in ("old", "new")}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name in names:
            for label, tree in order:
                if name != "train" and label == "old" and "--extras-new-only" in sys.argv:
                    continue
                c, w = run(tree, COMMANDS[name])
                cpu[label][name].append(c)
                wall[label][name].append(w)
                print(f"round {r + 1} {label} {name}: {c:.2f} CPU s, {w:.2f} s", file=sys.stderr, flush=True)
    print(f"BLAS: {'; '.join(blas)}; load average {os.getloadavg()[0]:.1f}")
    for name in names:
        print(f"{name}: mha {' '.join(COMMANDS[name])}")
        ran = [label for label in ("old", "new") if cpu[label][name]]
        for label in ran:
            print(f"  {label}: CPU s {summary(cpu[label][name])}; wall s {summary(wall[label][name])}")
        if len(ran) == 2:
            ratios = [n / o for n, o in zip(cpu["new"][name], cpu["old"][name])]
            print(f"  new ÷ old, per round, CPU: {summary(ratios)}")
        if name != "train":
            for label in ran:
                per = [c / t for c, t in zip(cpu[label][name], cpu[label]["train"])]
                print(f"  {label}: ÷ its own train, per round, CPU: {summary(per)}")
    print(json.dumps({"blas": blas, "cpu": cpu, "wall": wall}))


if __name__ == "__main__":
    main()
