"""The two start-up ratios of issue 10, measured side by side in one run.

* first line: wall time until the first line of ``mha explain "the cat sat on the mat"``
  appears on stdout (read through a pipe), divided by the whole ``--no-plots`` run
  (target ≤ 1.1: drawing must not delay the walkthrough);
* figures: the whole ``mha explain "the cat sat on the mat"`` with all its figures,
  divided by a process that only imports numpy, matplotlib, rich and typer (target ≤ 2.2);
  reported against ``import matplotlib`` (the package alone, as the issue words it) and
  against ``import matplotlib.figure`` with ``rich.console`` (the baseline of
  ``mha bench --startup``, against which 0.1.0 measured 1.7).

Every command runs as ``sys.executable -m mhacli`` in a fresh process; the commands
are interleaved round by round (after one warm-up round) so a busy moment of the
machine hits them all alike, and the medians are compared.

Run it with ``python -m mhacli.bench.startup_ratios [REPEATS]``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SENTENCE = "the cat sat on the mat"
IMPORTS = "import numpy, matplotlib, rich, typer"  # the words: matplotlib's package alone
# What mha bench --startup and 0.1.0's 1.7x used: the modules a figure run really imports.
IMPORTS_FIGURE = "import numpy, matplotlib.figure, rich.console, typer"


def _env() -> dict[str, str]:
    return {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "100"}


def _run(argv: list[str]) -> tuple[float, float]:
    """Seconds until the first stdout line, and until the process has ended."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    first = time.perf_counter() - start
    proc.stdout.read()
    err = proc.stderr.read()
    code = proc.wait()
    total = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({code}): {err.decode(errors='replace')[-400:]}")
    return first, total


def blas() -> list[dict[str, Any]]:
    """Which BLAS numpy uses, as threadpoolctl reports it (empty when threadpoolctl is missing)."""
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]
    except ImportError:
        return []
    import numpy  # noqa: F401  - threadpoolctl only sees libraries already loaded

    return [{k: info.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer")}
            for info in threadpool_info()]


def measure_ratios(repeats: int) -> dict[str, Any]:
    """Median seconds of the three commands over ``repeats`` interleaved rounds, and the two ratios."""
    out = Path(tempfile.mkdtemp(prefix="mha-startup-ratios-"))
    mha = [sys.executable, "-m", "mhacli"]
    commands = {
        "explain": [*mha, "explain", SENTENCE, "--out", str(out)],
        "no_plots": [*mha, "explain", SENTENCE, "--no-plots"],
        "imports": [sys.executable, "-c", IMPORTS],
        "imports_figure": [sys.executable, "-c", IMPORTS_FIGURE],
    }
    first: list[float] = []
    total: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for round_ in range(repeats + 1):  # round 0 warms the disk and font caches
            for name, argv in commands.items():
                head, whole = _run(argv)
                if round_:
                    total[name].append(whole)
                    if name == "explain":
                        first.append(head)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    med = {name: statistics.median(times) for name, times in total.items()}
    first_line = statistics.median(first)
    return {
        "repeats": repeats,
        "seconds": {"first_line": first_line, **med},
        "first_line_over_no_plots": first_line / med["no_plots"],
        "explain_over_imports": med["explain"] / med["imports"],
        "explain_over_imports_figure": med["explain"] / med["imports_figure"],
        "targets": {"first_line_over_no_plots": 1.1, "explain_over_imports": 2.2},
        "blas": blas(),
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    print(json.dumps(measure_ratios(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2))
