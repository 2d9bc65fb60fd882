"""`mha train` with its two figures against `mha train --no-plots`, the same run, side by side.

Issue 18 asks for ≤ 1.3 ×. Runs the installed `mha` in real processes, interleaved (plots, no plots,
plots, …) so that a busy machine slows both alike, and prints each pair, the median ratio and the
BLAS kernel numpy uses. A measurement to read, not a test: python scripts/bench_train_figures.py [repeats]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(repeats: int = 3) -> None:
    import numpy  # noqa: F401 - loads the BLAS that threadpoolctl then reports
    from threadpoolctl import threadpool_info

    mha = str(Path(sys.executable).with_name("mha"))
    blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('threading_layer', '?')}, "
            f"{i.get('num_threads')} threads)" for i in threadpool_info() if i.get("user_api") == "blas"]
    print("BLAS:", "; ".join(blas) or "none found")
    with tempfile.TemporaryDirectory() as out:
        plots, bare = [], []
        for _ in range(repeats):
            plots.append(timed([mha, "train", "--out", out]))
            bare.append(timed([mha, "train", "--no-plots"]))
            print(f"with figures {plots[-1]:.2f} s   --no-plots {bare[-1]:.2f} s   ratio {plots[-1] / bare[-1]:.2f}")
    ratios = [p / b for p, b in zip(plots, bare)]
    print(f"median: with figures {statistics.median(plots):.2f} s, --no-plots {statistics.median(bare):.2f} s, "
          f"ratio {statistics.median(ratios):.2f} (target ≤ 1.3)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
