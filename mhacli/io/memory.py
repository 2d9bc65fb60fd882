"""How much memory this machine can spare for one run. Linux overcommits, so a run that does not fit is often
killed without a word: refusing up front, by plan, is the only way to answer with a message."""

from __future__ import annotations

import os

from mhacli.attention.numbers import whole_number


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            value = handle.read().strip()
    except OSError:
        return None
    return whole_number(value)


def _meminfo_bytes(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_limit_bytes() -> int:
    """The most one run may plan to use: 3/4 of physical memory, less if a cgroup or rlimit says so."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 8 * 2**30
    limits = [int(total * 0.75)]
    available = _meminfo_bytes("MemAvailable")
    if available:
        limits.append(int(available * 0.9))
    for cgroup in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        value = _read_int(cgroup)
        if value and value < total:
            limits.append(int(value * 0.9))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
            limits.append(int(soft * 0.9))
    except (ImportError, ValueError, OSError):  # pragma: no cover - non-POSIX
        pass
    return min(limits)


__all__ = ["memory_limit_bytes"]
