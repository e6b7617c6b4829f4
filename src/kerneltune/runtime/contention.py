"""Contention: whether a parallel region's threads wait for CPUs that other threads hold, and
so how many threads the next regions get.

A region ends when its slowest thread does. Beside a thread pool that spins
(a BLAS library's, an onnxruntime session's) or any busy thread, a worker of
ours can queue behind it for a time slice (docs/kernels.md, "Beside other
thread pools"). Linux counts that time: the second field of
``/proc/self/task/<tid>/schedstat`` is the nanoseconds a thread was runnable
but waited for a CPU. Every ``interval`` seconds at most, a run reads it for
the calling thread and its OpenMP workers. When they waited ``stall`` seconds
or more since each of the last two readings, regions get one thread fewer,
down to one; every ``probe`` seconds they try all their threads again, and
keep them unless a thread waits.

The workers are the calling thread's OpenMP pool, which libgomp keeps from one
region to the next: a region of libgomp's own (``GOMP_parallel``, found
through the compiled kernels so that it is the runtime they use) asks each
worker its thread id. Where the waits or the workers cannot be known (another
system, ``/proc`` hidden, kernels built without OpenMP), regions get the
threads asked for.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Collection

Workers = Callable[[int], Collection[int] | None]


class Contention:
    """The threads a region gets: fewer than asked while regions' threads wait for CPUs.

    ``tasks`` is the directory of the process's threads; ``workers(threads)``
    gives the thread ids of the calling thread's OpenMP pool for a region of
    ``threads`` (None: unknown, which turns the reduction off); ``clock`` is a
    monotonic clock in nanoseconds.
    """

    def __init__(self, interval: float = 0.01, stall: float = 0.001, probe: float = 0.5, *,
                 tasks: str | os.PathLike[str] = "/proc/self/task",
                 workers: Workers | None = None, clock: Callable[[], int] = time.monotonic_ns):
        self.interval, self.stall, self.probe = interval, stall, probe
        self._tasks = os.fspath(tasks)
        self._workers = openmp_workers if workers is None else workers
        self._clock = clock
        self._sampling = threading.Lock()
        self._next = 0
        self._fewer = 0
        self._settled = 0  # ``fewer`` before a probe, to return to when the probe waits
        self._probing = False
        self._stalled = False  # whether the last reading found a wait
        self._next_probe = 0
        self.enabled = True
        self._pools: dict[tuple[int, int], frozenset[int]] = {}
        self._waited: dict[int, int] = {}

    @property
    def fewer(self) -> int:
        """How many threads fewer than asked regions get now."""
        return self._fewer

    def threads(self, wanted: int) -> int:
        """The threads for a region that asks for ``wanted``."""
        if self._clock() >= self._next:
            self._sample(wanted)
        return wanted - self._fewer if self._fewer < wanted else 1

    def _sample(self, wanted: int) -> None:
        if not self._sampling.acquire(blocking=False):
            return  # another thread is reading: its answer serves this region too
        try:
            now = self._clock()
            self._next = now + int(self.interval * 1e9)
            waited = self._waits(wanted) if self.enabled else None
            if waited is None:
                self.enabled, self._fewer = False, 0
            elif waited >= self.stall * 1e9:
                if self._probing:
                    self._fewer, self._probing = self._settled, False
                elif self._stalled:  # twice running: a lone wait is the machine's noise
                    self._fewer = min(self._fewer + 1, wanted - 1)
                self._stalled, self._next_probe = True, now + int(self.probe * 1e9)
            else:
                self._stalled = False
                if self._probing:
                    self._probing = False
                elif self._fewer and now >= self._next_probe:
                    self._settled, self._fewer, self._probing = self._fewer, 0, True
        finally:
            self._sampling.release()

    def _waits(self, wanted: int) -> int | None:
        """Nanoseconds the calling thread and its pool waited for a CPU since their last
        reading; None when they cannot be known."""
        caller = threading.get_native_id()
        pool = self._pools.get((caller, wanted))
        if pool is None:
            workers = self._workers(wanted)
            if workers is None:
                return None
            pool = self._pools[caller, wanted] = frozenset(workers) | {caller}
        waited = 0
        for tid in pool:
            wait = self._read(tid)
            if wait is None:
                if tid == caller:
                    return None
                # a worker of an ended thread whose id the caller now has: ask again next time
                del self._pools[caller, wanted]
                return 0
            waited += wait - self._waited.get(tid, wait)
            self._waited[tid] = wait
        return waited

    def _read(self, tid: int) -> int | None:
        """``tid``'s wait in nanoseconds, or None when it cannot be read (it ended)."""
        try:
            descriptor = os.open(os.path.join(self._tasks, str(tid), "schedstat"), os.O_RDONLY)
        except OSError:
            return None
        try:
            return int(os.read(descriptor, 64).split()[1])
        except (OSError, ValueError, IndexError):
            return None
        finally:
            os.close(descriptor)


def openmp_workers(threads: int) -> frozenset[int] | None:
    """The thread ids of the calling thread's OpenMP pool in a region of ``threads``.

    A region of libgomp's own runs a Python callback on every thread of the
    team. None where the kernels have no OpenMP runtime of that interface.
    """
    from ..kernels.variants import load_module

    try:
        kernels = ctypes.CDLL(load_module("unary").__file__,
                              mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        parallel = kernels.GOMP_parallel
    except (OSError, AttributeError, ImportError):
        return None
    seen: list[int] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
        lambda _: seen.append(threading.get_native_id()))
    parallel.argtypes = [type(callback), ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    parallel.restype = None
    parallel(callback, None, threads, 0)
    return frozenset(seen) - {threading.get_native_id()}


#: what every session reads unless given another (or None)
default_contention = Contention()
