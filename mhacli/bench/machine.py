"""What the numbers were measured on (processor, cores, numpy's BLAS and its kernel, the load): the same layer
runs twice as fast with another BLAS kernel, and a load of 4 on two cores halves everything.
"""

from __future__ import annotations

import os
import platform

import numpy as np

from mhacli.io.host import cpu_count, numpy_blas


def cpu_model() -> str:
    """The processor's name from /proc/cpuinfo (or what the platform module knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_info() -> list[dict[str, object]]:
    """numpy's BLAS: library, version, kernel ("architecture"), threads."""
    keep = ("internal_api", "version", "architecture", "num_threads", "threading_layer")
    return [{k: lib.get(k) for k in keep} for lib in numpy_blas()]


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the system has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def machine_info(with_torch: bool = True) -> dict[str, object]:
    """What the numbers were measured on (PyTorch's version only when it is installed and asked for)."""
    info: dict[str, object] = {
        "cores": cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
        "numpy": np.__version__, "blas": blas_info(), "load_average": load_average(),
    }
    if with_torch:
        from mhacli.bench.baselines import torch_available
        from mhacli.models.torch_import import torch_or_none

        torch = torch_or_none() if torch_available() else None  # guarded: under ulimit -v its import aborts
        if torch is not None:
            info["torch"] = torch.__version__
            info["torch_threads"] = torch.get_num_threads()
    return info


def blas_line(machine: dict[str, object]) -> str:
    """numpy's BLAS in words: ``openblas 0.3.31 (SkylakeX kernel, pthreads, 2 threads)``."""
    blas: list[dict[str, object]] = machine.get("blas") or []  # type: ignore[assignment]
    if not blas:
        return "BLAS unknown (threadpoolctl sees none)"
    parts = []
    for lib in blas:
        extras = [f"{lib['architecture']} kernel" if lib.get("architecture") else "",
                  str(lib.get("threading_layer") or ""), f"{lib.get('num_threads')} threads"]
        parts.append(f"{lib['internal_api']} {lib['version']} ({', '.join(e for e in extras if e)})")
    return "; ".join(parts)


def machine_line(machine: dict[str, object]) -> str:
    """The machine in one line, for the tables' notes and the figure."""
    parts = [f"{machine['cores']} cores", str(machine["cpu"]), f"numpy {machine['numpy']}", blas_line(machine)]
    if "torch" in machine:
        threads = machine['torch_threads']
        parts.append(f"torch {machine['torch']} ({threads} thread{'s' if threads != 1 else ''})")
    load: list[float] | None = machine.get("load_average")  # type: ignore[assignment]
    if load:
        parts.append("load " + " ".join(f"{v:.1f}" for v in load))
    return " · ".join(parts)
