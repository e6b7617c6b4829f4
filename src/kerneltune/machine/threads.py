"""The thread policy: how many threads a kernel, a session or a calibration may use.

One rule everywhere: by default, the CPUs this process may run on (its
affinity mask, which containers and ``taskset`` narrow), and an explicit count
is an int of at least 1.
"""

from __future__ import annotations

import os

from .._support.checks import is_count


def affinity() -> frozenset[int]:
    """The CPU ids this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def available_threads() -> int:
    """The CPUs this process may run on: the default thread count."""
    return len(affinity())


def thread_count(threads: int | None) -> int:
    """``threads`` checked, or :func:`available_threads` when None."""
    if threads is None:
        return available_threads()
    if not is_count(threads, minimum=1):
        raise ValueError(f"threads must be an int >= 1 (bool is not accepted), got {threads!r}")
    return int(threads)
