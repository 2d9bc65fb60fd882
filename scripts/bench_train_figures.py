"""`mha train` with its figures against `mha train --no-plots`, the same run, side by side.

Issue 29 asks for ≤ 1.3 ×. Runs `python -m mhacli` in real processes, interleaved (plots, no plots,
plots, …) so that a busy machine slows both alike, and prints each pair's wall and CPU seconds (user +
sys of the child), the median ratios and the BLAS kernel numpy uses. ``--against DIR`` runs a second
source tree (a folder holding another ``mhacli/``, e.g. ``git archive main mhacli | tar -x -C DIR``) in
the same rounds, so a change is measured against the code it replaces. A measurement to read, not a test:

    python scripts/bench_train_figures.py [repeats] [--task grammar] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def timed(args: list[str], path: str | None) -> tuple[float, float]:
    """Wall and CPU seconds (user + sys) of one process and its children; ``path``: a source tree put first
    on its PYTHONPATH."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mhacli", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repeats", nargs="?", type=int, default=3)
    parser.add_argument("--task", default=None, help="mha train --task (default: the command's own)")
    parser.add_argument("--against", default=None, metavar="DIR", help="another source tree, run in the same rounds")
    options = parser.parse_args()

    import numpy  # noqa: F401 - loads the BLAS that threadpoolctl then reports
    from threadpoolctl import threadpool_info

    blas = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '?')} "
            f"({i.get('threading_layer', '?')}, {i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    print("BLAS:", "; ".join(blas) or "none found")
    task = ["--task", options.task] if options.task else []
    trees: list[tuple[str, str | None]] = [("this", None)]
    if options.against:
        trees.append(("against", os.path.abspath(options.against)))
    with tempfile.TemporaryDirectory() as out:
        runs: dict[str, dict[str, list[tuple[float, float]]]] = {n: {"plots": [], "bare": []} for n, _ in trees}
        for _ in range(options.repeats):
            for name, path in trees:
                plots = timed(["train", *task, "--out", out], path)
                bare = timed(["train", *task, "--no-plots"], path)
                runs[name]["plots"].append(plots)
                runs[name]["bare"].append(bare)
                print(f"{name:8} with figures {plots[0]:5.2f} s ({plots[1]:5.2f} CPU)   --no-plots {bare[0]:5.2f} s "
                      f"({bare[1]:5.2f} CPU)   ratio {plots[0] / bare[0]:.2f} wall, {plots[1] / bare[1]:.2f} CPU",
                      flush=True)
    for name, _ in trees:
        plots, bare = runs[name]["plots"], runs[name]["bare"]
        wall = statistics.median(p[0] / b[0] for p, b in zip(plots, bare))
        cpu = statistics.median(p[1] / b[1] for p, b in zip(plots, bare))
        extra = statistics.median(p[1] - b[1] for p, b in zip(plots, bare))
        print(f"{name:8} median: with figures {statistics.median(p[0] for p in plots):.2f} s, --no-plots "
              f"{statistics.median(b[0] for b in bare):.2f} s, ratio {wall:.2f} wall, {cpu:.2f} CPU "
              f"(figures {extra:.2f} CPU s; target ≤ 1.3)")


if __name__ == "__main__":
    main()
