"""Where the time of ``mha explain "the cat sat on the mat"`` with its figures goes, phase by phase.

``python -m mhacli.bench.figure_costs [ROUNDS]`` runs ROUNDS fresh processes; each
imports what ``mha explain`` draws with (typer and the command line aside: the
bench stays below the CLI), runs the trace and
saves every figure as :func:`mhacli.render.figures.save_figures` does for ``mha
explain`` (one ``HeadFigure`` updated per head, then the heads sheet, the
magnifiers with the single-head row, and the split), timing each phase in CPU
seconds (``time.process_time``: steadier than wall time on a shared machine) and
wall seconds.  It prints the medians as JSON.
This is the measurement behind the breakdown in docs/performance.md; ``mha
bench --startup`` measures the ratios themselves.
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
    from mhacli.core.compare import single_head
    from mhacli.core.trace import run

    mark("import mhacli.core")
    from mhacli.render.figures.save import (HeadFigure, build_heads, build_magnifiers, drawing, resolve_query,
                                            save, split_figure, token_view)
    from mhacli.render.labels import measure

    mark("import mhacli.render.figures, Agg")
    trace = run(SENTENCE)
    single = single_head(trace)  # the "1 head" row of magnifiers.png, as mha explain draws it
    analysis = measure(trace)
    view = token_view(trace.n_tokens, 40, resolve_query(trace.tokens, None))
    out = Path(out_dir)
    mark("trace")
    with drawing() as pen:
        per_head = HeadFigure(trace, view, pen, analysis)
        mark("build the per-head figure")
        for i in range(trace.num_heads):
            save(per_head.show(i), out / f"head-{i + 1}.png", "png", 150)
            mark(f"update and save head-{i + 1}.png")
        for name, build in (("heads", lambda: build_heads(trace, view, pen, analysis)),
                            ("magnifiers", lambda: build_magnifiers(trace, single, view, pen, analysis)),
                            ("split", lambda: split_figure(trace))):
            fig = build()
            mark(f"build {name}")
            save(fig, out / f"{name}.png", "png", 150)
            mark(f"save {name}.png")
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
