"""The figures of two source trees of mhacli, drawn side by side on the same input, in CPU seconds.

Each round draws every figure ``mha explain`` draws for each input (the cat sentence with 4 heads,
the animal sentence with the grammar weights, 40 words with 8 heads), each input in a fresh process
(``time.process_time`` around ``save_figures``), once per tree, in an order that alternates from
round to round, with ``PYTHONPATH`` set to the tree (and the tree as the working folder); it prints each round's CPU seconds, the medians
per figure, their ratios, the BLAS kernel and the load average. A measurement to read, not a test:

    python scripts/figures_side_by_side.py ROUNDS OLD_TREE NEW_TREE [NAME=VALUE ...] [--only=cat,animal]

A tree is a folder holding an ``mhacli`` package (``git archive COMMIT mhacli | tar -x -C DIR``).
``NAME=VALUE`` pairs go into both processes' environment (switches of a tree under test); ``--only`` draws
only the inputs named.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile


INPUTS = {  # name: (text, options of prepare)
    "cat": ("the cat sat on the mat", {"heads": 4}),
    "animal": ("The animal didn't cross the street because it was too tired", {"weights": "grammar"}),
    "w40": (" ".join(f"w{i % 13}" for i in range(40)), {"heads": 8}),
}

CHILD = """
import json, sys, time
from pathlib import Path
import numpy, matplotlib.figure
from mhacli.pipeline import prepare, shown
from mhacli.render.figures.save import save_figures
text, options, out = json.loads(sys.argv[1])
result = shown(prepare(text, **options).run(single=True))  # as mha explain draws them (the "1 head" row too)
clock = [time.process_time()]
phases = {}
def mark(path):
    now = time.process_time()
    phases["draw " + path.name] = now - clock[0]
    clock[0] = now
save_figures(result, Path(out), on_saved=mark)
print(json.dumps(phases))
"""


def once(tree: str, out: str, extra: dict[str, str], only: list[str]) -> dict[str, float]:
    """CPU seconds of every figure of every input, each input in a fresh process drawing with ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree, "MPLBACKEND": "Agg", **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    phases: dict[str, float] = {}
    for name, (text, options) in INPUTS.items():
        if only and name not in only:
            continue
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([text, options, out])], env=env,
                              capture_output=True, text=True, check=True, cwd=tree)
        phases.update({f"{name} {k}": v for k, v in json.loads(proc.stdout).items()})
    return phases


def main(rounds: int, trees: list[str], extra: dict[str, str], only: list[str]) -> None:
    import numpy  # noqa: F401 - loads the BLAS that threadpoolctl then reports
    from threadpoolctl import threadpool_info

    blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')} kernel, "
            f"{i.get('threading_layer')}, {i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    print("BLAS:", "; ".join(blas) or "none found", "· load before:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as out:
        for tree in trees:  # warm-up: bytecode and font caches
            once(tree, out, extra, only)
        for r in range(rounds):
            for tree in (trees if r % 2 == 0 else trees[::-1]):
                runs[tree].append(once(tree, out, extra, only))
            print(f"round {r + 1}: " + "   ".join(
                f"{tree}: {sum(v for k, v in runs[tree][-1].items() if ' draw ' in k):.2f} s" for tree in trees))
    names = [k for k in runs[trees[0]][0] if ' draw ' in k]
    print(f"{'median CPU s':34}" + "".join(f"{t[-14:]:>16}" for t in trees) + "     ratio")
    for name in names + ["all figures"]:
        med = [statistics.median(sum(v for k, v in run.items() if ' draw ' in k) if name == "all figures"
                                 else run[name] for run in runs[t]) for t in trees]
        print(f"{name:34}" + "".join(f"{m:16.3f}" for m in med) + f"{med[-1] / med[0]:10.2f}")
    print("load after:", " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    args = sys.argv[1:]
    only = [name for a in args if a.startswith("--only=") for name in a[len("--only="):].split(",")]
    args = [a for a in args if not a.startswith("--only=")]
    main(int(args[0]), [a for a in args[1:] if "=" not in a], dict(a.split("=", 1) for a in args[1:] if "=" in a),
         only)
