"""Where the time of ``mha explain "the cat sat on the mat"`` with its figures goes: ``python -m
mhacli.bench.figure_costs [ROUNDS]`` prints each phase's median CPU and wall seconds over fresh processes as JSON.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SENTENCE = "the cat sat on the mat"


def one_process(out_dir: str) -> dict[str, list[float]]:
    """Every phase's (cpu, wall) seconds in this process: call it in a fresh interpreter."""
    phases: dict[str, list[float]] = {}
    clock = [time.process_time(), time.perf_counter()]

    def mark(name: str) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        phases[name] = [cpu - clock[0], wall - clock[1]]
        clock[:] = [cpu, wall]

    import numpy  # noqa: F401
    import rich.console  # noqa: F401

    mark("import numpy, rich.console")
    import matplotlib.figure  # noqa: F401

    mark("import matplotlib.figure")
    from mhacli.pipeline import prepare, shown

    mark("import mhacli.pipeline")
    from mhacli.render.figures.save import save_figures

    mark("import mhacli.render.figures, Agg")
    result = prepare(SENTENCE).run(single=True)  # the "1 head" row of magnifiers.png, as mha explain draws it
    result = shown(result)  # the figures' windows, as mha explain chooses them
    mark("trace")
    # save_figures itself, as mha explain calls it: each phase ends when a file is written (the first
    # per-head file also pays for building the figure that every head then updates).
    save_figures(result, Path(out_dir), on_saved=lambda path: mark(f"draw and save {path.name}"))
    return phases


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """Median CPU and wall seconds of every phase over ``rounds`` fresh processes (after one warm-up)."""
    from mhacli.io.cleanup import temporary_folder

    from mhacli.bench.startup import child_env

    env = child_env()  # as mha bench --startup times its commands
    runs: list[dict[str, list[float]]] = []
    with temporary_folder("mha-figure-costs-") as folder:
        for round_ in range(rounds + 1):
            proc = subprocess.run([sys.executable, "-m", "mhacli.bench.figure_costs", "--once", str(folder)],
                                  capture_output=True, text=True, env=env, check=True)
            if round_:
                runs.append(json.loads(proc.stdout))
    return {name: {"cpu": statistics.median(r[name][0] for r in runs),
                   "wall": statistics.median(r[name][1] for r in runs)} for name in runs[0]}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:
        print(json.dumps(one_process(sys.argv[2])))
    else:
        print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2))
