"""Contention: whether a run's threads wait for CPUs that other threads hold, and so how
many threads the next runs' parallel regions get.

A region ends when its slowest thread does. Beside a thread pool that spins
(a BLAS library's, an onnxruntime session's) or any busy thread, a worker of
ours can queue behind it for a time slice (docs/kernels.md, "Beside other
thread pools"). Linux counts that time: the second field of
``/proc/self/task/<tid>/schedstat`` is the nanoseconds a thread was runnable
but waited for a CPU. Every ``interval`` seconds at most, a session reads it
for the calling thread and its OpenMP workers before and after one run. A run
on ``t`` threads whose threads waited a ``t``-th of its time or more would
have been as fast on one thread fewer; after two such readings running,
regions get one thread fewer, down to one. ``probe`` seconds after the last
reading that waited, a run tries all threads again, and they stay unless its
threads wait as much. Each probe that waits doubles the time to the next, up
to ``BACKOFF`` times ``probe``: a neighbour that holds the CPUs for long costs
a probe's wait every few seconds, not twice a second.

Only waits within a run count: between runs, an OpenMP worker spinning for
the next region queues behind a neighbour's threads at no cost to anyone.
The workers are the calling thread's OpenMP pool, which libgomp keeps from one
region to the next: a region of libgomp's own (``GOMP_parallel``, found
through the compiled kernels so that it is the runtime they use) asks each
worker its thread id. A run that may take the BLAS path counts the BLAS
library's workers too: the threads that ran a BLAS product of the run's
thread count. Where the waits or the workers cannot be known (another
system, ``/proc`` hidden, kernels built without OpenMP), regions get the
threads asked for.

A probe is skipped, at no cost, while the machine's runnable threads
(``/proc/loadavg``) leave fewer CPUs free than the probe would use: beside
neighbours that stay, the threads stay reduced, and once they leave the next
probe comes within ``probe`` seconds (docs/kernels.md, "On a busy host").

Waits say that a run's threads queued, not that fewer threads would have been faster:
beside busy processes a run's threads may queue a little at every run and still finish
in half the time one thread takes. So a reading also keeps how long the run took, per
thread count and per work (a session's inputs' shapes, which the session names): a run
whose time, with its count's last runs (their median), was at most ``FASTER`` times that
of the same work on fewer threads (the median of its ``RECENT`` last readings there) keeps
its threads whatever its waits, and a probe goes ahead beside neighbours when the work on
fewer threads took longer than ``1 / FASTER`` times its time on all of them, or when no
probe has run for ``BACKOFF`` periods.

Whether the threads a neighbour takes cost a run more than they give depends on the
work: a run shorter than a time slice waits a slice for a worker that lost its CPU,
a long product gets its share of both CPUs. So each work keeps its own count, probes
and times. A work first read while the threads are reduced starts on the count the
last work that waited (or ran without waits) settled on, and once it has a time there
and none on all threads, its next reading probes all of them, beside neighbours too: a
work the reduction costs is found at its third reading, not after ``BACKOFF`` periods.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass

from .._support.checks import is_non_negative_number

Workers = Callable[[int], Collection[int] | None]
#: the machine's runnable threads now, the caller's included (None: unknown)
Runnable = Callable[[], int | None]
#: a clock time no reading is due before
_NEVER = 2 ** 63
#: the longest time between probes, in ``probe`` periods
BACKOFF = 16
#: a run that took at most this share of its work's time on fewer threads was faster
FASTER = 0.9
#: the works whose times a contention keeps, the oldest forgotten first
WORKS = 64
#: the readings per work and thread count whose median time stands for that count: a run
#: that waited a time slice for a CPU is not the count's pace, nor one that ran alone
RECENT = 8
#: what :meth:`Contention.statistics` counts
COUNTS = ("readings", "waited", "faster", "probes", "probes_waited", "probes_skipped")


class _Work:
    """One work's reduction, probes and recent times per thread count (None: a run that
    names no work, whose times are not kept)."""

    __slots__ = ("named", "fewer", "stalled", "probing", "settled", "next_probe", "probed",
                 "backoff", "times", "read")

    def __init__(self, named: bool, fewer: int, now: int, next_probe: int) -> None:
        self.named, self.fewer, self.read = named, fewer, now
        self.stalled = False  # whether the last reading's run waited
        self.probing = False
        self.settled = 0  # ``fewer`` before a probe, to return to when the probe waits
        self.next_probe, self.probed = next_probe, now
        self.backoff = 1  # ``probe`` periods to the next probe
        self.times: dict[int, tuple[int, ...]] = {}  # its last RECENT readings' nanoseconds

    def threads(self, wanted: int) -> int:
        return _reduced(wanted, self.fewer)

    def pace(self, threads: int) -> int | None:
        """Nanoseconds on ``threads``: the median of the last ``RECENT`` readings there
        (None: none yet), which neither a run that lost its CPU for a time slice nor one
        that had the machine to itself moves."""
        times = self.times.get(threads)
        return None if times is None else _median(times)

    def untried(self, wanted: int) -> bool:
        """Whether the work has a time on its reduced count and none on all threads."""
        return (self.named and self.pace(wanted) is None
                and self.pace(self.threads(wanted)) is not None)


@dataclass(frozen=True)
class _Reading:
    """One run's reading: its pool (the caller first), when it began, their waits then."""

    pool: tuple[int, ...]
    threads: int
    wanted: int
    began: int
    waits: int
    work: _Work
    #: the first run of a probe, whose workers may have slept since the last run on all
    #: threads: the probe's next reading judges it
    waking: bool


class Contention:
    """The threads a run's regions get: fewer than asked while their threads wait for CPUs.

    ``tasks`` is the directory of the process's threads; ``workers(threads)``
    gives the thread ids of the calling thread's OpenMP pool for a region of
    ``threads`` (None: unknown, which turns the reduction off), ``blas(threads)``
    those of the BLAS library's pool for a product on ``threads``, asked once
    ``blas_used()`` says a product has used the library (by default: one of kerneltune's
    in this process; with a ``blas`` of your own, at once); ``runnable()``
    counts the machine's runnable threads (None: unknown, every due probe runs);
    ``clock`` is a monotonic clock in nanoseconds. ``fewer`` is the most threads fewer than
    asked any work's regions get now, and ``next_reading`` the clock's time of the next
    reading: a session calls :meth:`start` only when either says so, which
    keeps a small run's cost a comparison.
    """

    def __init__(self, interval: float = 0.01, probe: float = 0.5, *,
                 tasks: str | os.PathLike[str] = "/proc/self/task",
                 workers: Workers | None = None, blas: Workers | None = None,
                 blas_used: Callable[[], bool] | None = None,
                 runnable: Runnable | None = None,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        for name, value in (("interval", interval), ("probe", probe)):
            if not is_non_negative_number(value):
                raise ValueError(f"Contention: {name} must be a number of seconds >= 0, got "
                                 f"{value!r}")
        self.interval, self.probe = interval, probe
        self._tasks = os.fspath(tasks)
        self._workers = openmp_workers if workers is None else workers
        self._blas = blas_workers if blas is None else blas
        # the BLAS pool is looked for once a product of ours has used the library: before,
        # its workers ran nothing of ours, and looking takes threadpoolctl's import and scan
        # of the loaded libraries (about 10 ms) from a first run that may never use BLAS
        self._blas_used = blas_used or (blas_used_here if blas is None else lambda: True)
        self._runnable = runnable or machine_runnable
        # /proc/loadavg counts the machine's runnable threads: weighed against the CPUs
        # only when the process may run on all of them
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        self._cpus = cpus if cpus and (runnable or cpus == os.cpu_count()) else None
        self.clock = clock
        self._files: dict[int, int] = {}  # tid: its schedstat, kept open
        weakref.finalize(self, _close, self._files)
        self._reset()
        # a child of fork has none of the parent's threads, and maybe a lock held at the fork
        if hasattr(os, "register_at_fork"):
            reference = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (c := reference()) and c._reset())

    def _reset(self) -> None:
        _close(self._files)
        self.enabled = True
        self.fewer = 0
        self.next_reading = 0
        self._lock = threading.Lock()
        self._readings: dict[int, _Reading] = {}  # per calling thread id
        self._works: dict[Hashable, _Work] = {}  # the least recently read first
        # what a work not read yet starts with: the count the neighbours last left
        self._settled_fewer = 0
        self._pools: dict[tuple[int, int, bool], tuple[int, ...]] = {}
        # the BLAS library's pool is the process's, whichever thread calls: asked once per count
        self._blas_pools: dict[int, Collection[int]] = {}
        self._counts = dict.fromkeys(COUNTS, 0)

    def start(self, wanted: int, blas: bool = False, work: Hashable = None) -> tuple[int, bool]:
        """The threads for a run that asks for ``wanted`` (``blas``: whose steps may run on
        the BLAS library's threads), and whether its waits are being read: then
        :meth:`finish` ends the reading after the run. ``work`` names what the run computes
        (None: nothing to compare), so that its times on each thread count are compared."""
        now = self.clock()
        if now < self.next_reading or not self._lock.acquire(blocking=False):
            return self._threads(wanted, work), False
        try:
            self.next_reading = now + int(self.interval * 1e9)
            state = self._work(work, now)
            waking = bool(state.fewer) and not state.probing and (
                now >= state.next_probe or state.untried(wanted))
            if waking:
                self._probe(state, wanted, now)
                waking = state.probing
            threads = state.threads(wanted)
            # the workers of this run's regions: idle ones may spin, at no cost to the run
            pool = self._pool(threads, blas)
            waits = None if pool is None else self._waits(pool)
            if waits is None:
                return self._threads(wanted, work), False
            self._readings[pool[0]] = _Reading(pool, threads, wanted, now, waits, state,
                                               waking)
            self._counts["readings"] += 1
            return threads, True
        finally:
            self._lock.release()

    def _work(self, work: Hashable, now: int) -> _Work:
        """``work``'s state, made on its first reading; the least recently read of more
        than ``WORKS`` is forgotten."""
        state = self._works.pop(work, None)
        if state is None:
            if len(self._works) >= WORKS:
                del self._works[next(iter(self._works))]
            state = _Work(work is not None, self._settled_fewer, now,
                          now + int(self.probe * 1e9))
        state.read = now
        self._works[work] = state
        return state

    def _probe(self, work: _Work, wanted: int, now: int) -> None:
        """All threads for this run, unless the runnable threads leave too few CPUs free,
        the work's pace on all threads is not ``FASTER`` than on the fewer (nor untried),
        and a probe ran within the longest time between probes (which refreshes the paces
        compared).

        The runnable threads beyond this run's own (which may all be running or spinning)
        are the neighbours'."""
        runnable = None if self._cpus is None else self._runnable()
        fewer, every = work.pace(work.threads(wanted)), work.pace(wanted)
        costly = work.untried(wanted) or (
            fewer is not None and every is not None and every < FASTER * fewer)
        stale = now - work.probed >= BACKOFF * self.probe * 1e9
        if not (costly or stale) and runnable is not None and (
                self._cpus - max(0, runnable - work.threads(wanted)) < wanted):
            self._counts["probes_skipped"] += 1
            work.next_probe = now + int(self.probe * 1e9)
            return
        self._counts["probes"] += 1
        work.settled, work.fewer, work.probing, work.probed = work.fewer, 0, True, now

    def statistics(self) -> dict[str, int]:
        """What the readings found so far: runs read, those that waited, those that waited
        but were faster than on fewer threads, probes run, probes that waited and probes
        skipped, and ``fewer`` now."""
        return {**self._counts, "fewer": self.fewer}

    def finish(self) -> None:
        """End the reading :meth:`start` began for the calling thread's run."""
        if not self._lock.acquire(blocking=False):
            return  # another thread is reading: this reading is dropped
        try:
            reading = self._readings.pop(threading.get_native_id(), None)
            waits = None if reading is None else self._waits(reading.pool)
            if waits is None or reading.waking:
                return
            now, work = self.clock(), reading.work
            waited, ran = waits - reading.waits, now - reading.began
            if work.named:
                work.times[reading.threads] = (*work.times.get(reading.threads, ()),
                                               ran)[-RECENT:]
            stalled = reading.threads > 1 and waited > 0 and waited * reading.threads >= ran
            faster = stalled and self._faster(work, reading.threads)
            self._counts["faster"] += faster  # a run whose waits take no thread
            if stalled and not faster:
                self._waited(reading, now)
            else:
                if work.probing:
                    work.backoff = 1
                work.stalled = work.probing = False
                if not stalled:  # the neighbours, if any, left this count alone
                    self._settled_fewer = work.fewer
            # a work not read for a probe period holds no session's runs back: read again,
            # its probe is due
            recent = now - int(self.probe * 1e9)
            self.fewer = max((self._settled_fewer, *(
                state.fewer for state in self._works.values() if state.read >= recent)))
        finally:
            self._lock.release()

    @staticmethod
    def _faster(work: _Work, threads: int) -> bool:
        """Whether ``work``'s pace on ``threads``, the run just kept included, is at most
        ``FASTER`` times its pace on fewer threads: one run that lost a time slice among
        faster ones keeps the count."""
        typical = work.pace(threads)
        paces = (work.pace(count) for count in range(1, threads))
        return typical is not None and any(
            pace is not None and typical <= FASTER * pace for pace in paces)

    def _waited(self, reading: _Reading, now: int) -> None:
        """A run that would have been as fast on a thread fewer."""
        self._counts["waited"] += 1
        work = reading.work
        if work.probing:
            self._counts["probes_waited"] += 1
            work.fewer, work.probing, work.stalled = work.settled, False, False
            work.backoff = min(2 * work.backoff, BACKOFF)
        elif work.stalled:  # twice running: a lone wait is the machine's noise
            work.fewer, work.stalled = min(work.fewer + 1, reading.wanted - 1), False
        else:
            work.stalled = True
        self._settled_fewer = work.fewer
        work.next_probe = now + int(work.backoff * self.probe * 1e9)

    def _disable(self) -> None:
        """Regions get the threads asked for, and sessions ask no more."""
        self.enabled, self.fewer, self.next_reading = False, 0, _NEVER
        self._works.clear()
        self._settled_fewer = 0

    def _threads(self, wanted: int, work: Hashable) -> int:
        state = self._works.get(work)
        return _reduced(wanted, self._settled_fewer if state is None else state.fewer)

    def _pool(self, threads: int, blas: bool) -> tuple[int, ...] | None:
        """The calling thread, then its OpenMP workers for ``threads`` and with ``blas`` the
        BLAS library's (asked once, after a product has used the library)."""
        caller = threading.get_native_id()
        blas = blas and threads > 1 and self._blas_used()
        pool = self._pools.get((caller, threads, blas))
        if pool is None:
            self._forget_ended()
            try:
                workers = self._workers(threads) if threads > 1 else ()
                if workers is not None and blas:
                    if threads not in self._blas_pools:
                        self._blas_pools[threads] = self._blas(threads) or ()
                    workers = {*workers, *self._blas_pools[threads]}
            except Exception:  # whatever goes wrong here may cost speed, never a run
                workers = None
            if workers is None:
                self._disable()
                return None
            pool = self._pools[caller, threads, blas] = (caller,
                                                         *sorted(set(workers) - {caller}))
        return pool

    def _forget_ended(self) -> None:
        """Drop the pools of calling threads that ended, and close their files."""
        ended = {key for key in self._pools
                 if not os.path.exists(os.path.join(self._tasks, str(key[0])))}
        for key in ended:
            del self._pools[key]
        kept = {tid for pool in self._pools.values() for tid in pool}
        for tid in self._files.keys() - kept:
            os.close(self._files.pop(tid))

    def _waits(self, pool: tuple[int, ...]) -> int | None:
        """The nanoseconds ``pool``'s threads have waited for a CPU in all; None when one of
        them cannot be read."""
        waits = 0
        for tid in pool:  # the caller first: if its file cannot be read, nothing can
            wait = self._read(tid)
            if wait is None:
                if tid == pool[0]:
                    self._disable()
                else:  # a worker that ended (or an ended thread whose id it has): ask again
                    self._pools = {k: v for k, v in self._pools.items() if v != pool}
                    self._blas_pools = {n: w for n, w in self._blas_pools.items()
                                        if tid not in w}
                return None
            waits += wait
        return waits

    def _read(self, tid: int) -> int | None:
        """``tid``'s wait in nanoseconds, or None when it cannot be read (it ended). The file
        stays open, as opening it costs more than reading it; one that fails is opened again,
        in case the id now belongs to another thread."""
        for _ in range(2):
            descriptor = self._files.get(tid)
            if descriptor is None:
                try:
                    descriptor = os.open(os.path.join(self._tasks, str(tid), "schedstat"),
                                         os.O_RDONLY)
                except OSError:
                    return None
                self._files[tid] = descriptor
            try:
                return int(os.pread(descriptor, 64, 0).split()[1])
            except (OSError, ValueError, IndexError):
                os.close(self._files.pop(tid))
        return None


def _reduced(wanted: int, fewer: int) -> int:
    """The threads of a run that asks for ``wanted`` with ``fewer`` taken: at least one."""
    return wanted - fewer if fewer < wanted else 1


def _median(times: tuple[int, ...]) -> int:
    return sorted(times)[len(times) // 2]


def _close(files: dict[int, int]) -> None:
    for descriptor in files.values():
        os.close(descriptor)
    files.clear()


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


def blas_used_here() -> bool:
    """Whether a product of the library has used numpy's BLAS in this process."""
    from ..kernels import blas

    return blas.used()


def blas_workers(threads: int, tasks: str = "/proc/self/task") -> frozenset[int] | None:
    """The thread ids of the BLAS library's pool in a product on ``threads``.

    The threads, the caller aside, whose CPU time grew during each of two BLAS products
    of that count: a thread of the process that ran through both by chance is counted too,
    which may take a thread where nothing needed it, never give one too many.
    """
    import numpy as np

    from ..kernels import blas

    matrix = np.ones((BLAS_PRODUCT, BLAS_PRODUCT), np.float32)
    found: set[int] | None = None
    for _ in range(2):
        before = _cpu_times(tasks)
        blas.matmul(matrix, matrix, threads)
        after = _cpu_times(tasks)
        if before is None or after is None:
            return None
        ran = {tid for tid, time_ in after.items() if time_ > before.get(tid, time_)}
        found = ran if found is None else found & ran
    return frozenset(found - {threading.get_native_id()})


#: the side of the square product :func:`blas_workers` runs: large enough for every thread
BLAS_PRODUCT = 256


def thread_cpu_time(tid: int) -> int:
    """Thread ``tid``'s CPU time in nanoseconds, through its CPU clock: up to date for a
    thread running now, where schedstat's run time waits for the scheduler's next tick.
    OSError for a thread that ended."""
    # Linux's clock id of a thread's CPU time: ~tid << 3 | per-thread | scheduler
    return time.clock_gettime_ns(~tid << 3 | 6)


def _cpu_times(tasks: str) -> dict[int, int] | None:
    """Each thread's CPU time in nanoseconds (:func:`thread_cpu_time`)."""
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    times = {}
    for name in names:
        try:
            times[int(name)] = thread_cpu_time(int(name))
        except (OSError, ValueError, OverflowError):
            continue  # a thread that ended meanwhile
    return times


def machine_runnable(path: str = "/proc/loadavg") -> int | None:
    """The machine's runnable threads now: the fourth field of ``/proc/loadavg``, before
    the slash (None where it cannot be read). Read at a probe only, so opened each time."""
    try:
        with open(path, "rb") as file:
            return int(file.read(128).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


#: what every session reads unless given another (or None)
default_contention = Contention()
