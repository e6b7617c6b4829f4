"""Interference: what the calibrating process lost to others while it measured.

A timing says how fast a kernel is only if the process had its CPUs while it ran, and
relative speed cannot tell: a machine slow throughout looks steady against itself.
So calibration measures what the process lost, as Linux counts it:

- each thread's **run-queue wait** and **run time**: the second and first fields of
  ``/proc/self/task/<tid>/schedstat``, the nanoseconds a thread was runnable but had
  no CPU, and those it ran;
- each CPU's **steal time**: the eighth value of its ``/proc/stat`` line, the clock
  ticks a hypervisor gave its physical CPU to another guest (10 ms each, too coarse for
  one measurement; it is judged over a whole key, less the tick per CPU that reading a
  counter twice may gain for a sliver of steal);
- the **load average**, recorded beside them.

A thread also waits behind the process's own threads (a BLAS pool beside spinning
OpenMP workers): that is how the kernel runs in this process, not interference. So
the share **others took** is the threads' wait over their time, but at most the share
of the CPUs' time the process's own threads did not run. A measurement where others
took more than :data:`MAXIMUM_SHARE` is discarded and taken again once the machine is
quiet; a key whose CPUs were stolen more than that share of its time is measured again.
Whatever cannot be measured cleanly within its budget is withheld
(docs/calibration.md, Interference). A source the process cannot read (another system,
``/proc`` hidden) measures nothing and judges nothing clean or not.
"""

from __future__ import annotations

import math
import os
import time
import weakref
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from .._support.checks import fields_of

#: a measurement where others took more than this share is discarded; a key whose CPUs were
#: stolen more than this share of its time is measured again. Beside one busy process per
#: CPU the share is about half, as the scheduler shares each CPU between two runnable
#: threads; on a quiet machine the estimate stays below it (docs/calibration.md).
MAXIMUM_SHARE = 0.25
#: the seconds a clock tick of /proc/stat lasts
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class Counters:
    """A reading of the counters: when, the threads' waits, the CPUs' steal and the
    threads' run time so far (seconds); each None when it cannot be read."""

    clock: float
    waited: float | None
    stolen: float | None
    ran: float | None = None


@dataclass(frozen=True)
class Interference:
    """What a stretch of measuring lost: its length, the threads it ran on, their summed
    run-queue wait, the steal time of the CPUs and the process's run time (seconds; None
    where unreadable), how many CPUs it may use, and the load average at its end."""

    seconds: float
    threads: int
    waited: float | None
    stolen: float | None = None
    cpus: int = 1
    load: float | None = None
    ran: float | None = None

    @property
    def wait_share(self) -> float | None:
        """The threads' wait over the time they were runnable (waiting or running): 0 alone
        on the machine, about 0.5 beside one busy thread per CPU, however many of the
        threads ran. Without their run time, over ``threads`` threads' whole time."""
        if self.waited is None or self.seconds <= 0:
            return None
        waited = max(self.waited, 0.0)
        if self.ran is None:
            return waited / (self.seconds * self.threads)
        runnable = waited + max(self.ran, 0.0)
        return waited / runnable if runnable > 0 else 0.0

    @property
    def taken_share(self) -> float | None:
        """The share others took: the wait share, at most the share of the CPUs' time the
        process did not run (waits behind its own threads are its own)."""
        wait = self.wait_share
        if wait is None or self.ran is None:
            return wait
        return min(wait, max(0.0, 1.0 - self.ran / (self.seconds * self.cpus)))

    @property
    def steal_share(self) -> float | None:
        """The CPUs' stolen time over their time, less a clock tick per CPU: a counter
        read twice can gain a whole tick for a sliver of steal, which over a stretch of a
        few ticks would read as most of it."""
        if self.stolen is None or self.seconds <= 0:
            return None
        return max(self.stolen - self.cpus * _TICK, 0.0) / (self.seconds * self.cpus)

    @property
    def share(self) -> float | None:
        """The larger of what others took and what was stolen; None when neither could
        be read."""
        shares = [s for s in (self.taken_share, self.steal_share) if s is not None]
        return max(shares, default=None)

    def clean(self, limit: float = MAXIMUM_SHARE) -> bool:
        """Within ``limit``: what was not read counts as clean (it cannot be judged)."""
        share = self.share
        return share is None or share <= limit

    def describe(self) -> str:
        parts = []
        if self.taken_share is not None:
            parts.append(f"other processes took {self.taken_share:.0%} of its threads' time")
        if self.steal_share is not None and self.stolen:
            parts.append(f"{self.steal_share:.0%} of its CPUs' time was stolen")
        if self.load is not None:
            parts.append(f"load average {self.load:.2f}")
        return ", ".join(parts) or "not measured"

    def to_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "threads": self.threads, "waited": self.waited,
                "ran": self.ran, "stolen": self.stolen, "cpus": self.cpus, "load": self.load,
                "wait_share": self.wait_share, "taken_share": self.taken_share,
                "steal_share": self.steal_share}

    @classmethod
    def from_dict(cls, data: object) -> Interference:
        """What :meth:`to_dict` wrote; a ValueError names a field that is not."""
        fields = fields_of(data, {"seconds": float, "threads": int, "waited": float | None,
                                  "stolen": float | None, "cpus": int, "load": float | None,
                                  "ran": float | None})
        for name in ("threads", "cpus"):
            if fields[name] < 1:
                raise ValueError(f"{name!r} is {fields[name]}, not 1 or more")
        if not 0 <= fields["seconds"] < math.inf:
            raise ValueError(f"'seconds' is {fields['seconds']}, not a duration")
        return cls(**fields)


class InterferenceSource(Protocol):
    """Where interference is read from: the process itself, or a test's script.

    ``reading(steal)`` takes the counters now (the steal time only when asked: it is
    judged over whole keys); ``since(before, threads)`` what was lost since ``before``.
    """

    def reading(self, steal: bool = False) -> Counters: ...

    def since(self, before: Counters, threads: int) -> Interference: ...


class ProcessInterference:
    """This process's interference, from ``/proc``: the waits of all its threads (those
    of other pools only wait while runnable, so idle ones add nothing) and the steal time
    of the CPUs it may run on. The threads' files stay open: opening one costs more than
    reading it, and a reading brackets every measurement."""

    def __init__(self, cpus: Collection[int] | None = None, *,
                 proc: str | os.PathLike[str] = "/proc") -> None:
        self._proc = os.fspath(proc)
        self._tasks = os.path.join(self._proc, "self", "task")
        self._cpus = frozenset(cpus if cpus is not None else _affinity())
        self._files: dict[str, int] = {}
        weakref.finalize(self, _close, self._files)

    def reading(self, steal: bool = False) -> Counters:
        clock, threads = time.perf_counter(), self._threads()
        ran, waited = (None, None) if threads is None else threads
        return Counters(clock, waited, self._stolen() if steal else None, ran)

    def since(self, before: Counters, threads: int) -> Interference:
        after = self.reading(steal=before.stolen is not None)
        return Interference(
            after.clock - before.clock, threads, _difference(before.waited, after.waited),
            _difference(before.stolen, after.stolen), max(len(self._cpus), 1), _load(),
            _difference(before.ran, after.ran))

    def _threads(self) -> tuple[float, float] | None:
        """The run time and wait of all the process's threads so far."""
        try:
            names = set(os.listdir(self._tasks))
        except OSError:
            return None
        for ended in self._files.keys() - names:
            os.close(self._files.pop(ended))
        ran = waited = 0
        for name in names:
            thread_ran, thread_waited = self._schedstat(name)
            ran, waited = ran + thread_ran, waited + thread_waited
        return ran / 1e9, waited / 1e9

    def _schedstat(self, name: str) -> tuple[int, int]:
        """A thread's run time and wait in nanoseconds; 0 when it ended since the listing.
        A file that fails is opened again once: its id may belong to a new thread now."""
        for _ in range(2):
            try:
                if name not in self._files:
                    self._files[name] = os.open(os.path.join(self._tasks, name, "schedstat"),
                                                os.O_RDONLY)
                fields = os.pread(self._files[name], 64, 0).split()
                return int(fields[0]), int(fields[1])
            except (OSError, ValueError, IndexError):
                if name in self._files:
                    os.close(self._files.pop(name))
        return 0, 0

    def _stolen(self) -> float | None:
        try:
            with open(os.path.join(self._proc, "stat"), "rb") as stream:
                lines = stream.read(1 << 20).split(b"\n")
        except OSError:
            return None
        total, found = 0, False
        for line in lines:
            fields = line.split()
            if not fields or not fields[0].startswith(b"cpu") or fields[0] == b"cpu":
                continue
            try:
                cpu = int(fields[0][3:])
                if cpu in self._cpus and len(fields) > 8:
                    total += int(fields[8])
                    found = True
            except ValueError:
                continue
        return total * _TICK if found else None


def _close(files: dict[str, int]) -> None:
    for descriptor in files.values():
        os.close(descriptor)
    files.clear()


def _difference(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _affinity() -> Iterable[int]:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(
        os.cpu_count() or 1)


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@dataclass(frozen=True)
class KeyInterference:
    """What one key's calibration lost: how many measurements were kept, the shares others
    took of those discarded, the largest share among those kept, and over the whole key
    (steal time included, when it could be read) what it lost in all."""

    kept: int
    discarded: tuple[float, ...]
    worst_kept: float | None
    whole: Interference | None

    def stolen(self, limit: float = MAXIMUM_SHARE) -> bool:
        """Whether the key's CPUs were stolen beyond ``limit`` over its whole time."""
        share = None if self.whole is None else self.whole.steal_share
        return share is not None and share > limit

    def describe(self) -> str:
        parts = [f"{self.kept} measurements kept"]
        if self.discarded:
            parts.append(f"{len(self.discarded)} discarded (other processes took "
                         f"{min(self.discarded):.0%} to {max(self.discarded):.0%} of their "
                         f"threads' time)")
        if self.whole is not None:
            parts.append(f"over the key: {self.whole.describe()}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {"kept": self.kept, "discarded": list(self.discarded),
                "worst_kept": self.worst_kept,
                "whole": None if self.whole is None else self.whole.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> KeyInterference:
        """What :meth:`to_dict` wrote; a ValueError names a field that is not."""
        fields = fields_of(data, {"kept": int, "discarded": list, "worst_kept": float | None,
                                  "whole": dict | None})
        if not all(isinstance(s, int | float) and not isinstance(s, bool)
                   and 0 <= s <= 1 for s in fields["discarded"]):
            raise ValueError("'discarded' holds something other than shares from 0 to 1")
        whole = fields["whole"]
        return cls(fields["kept"], tuple(map(float, fields["discarded"])),
                   fields["worst_kept"], None if whole is None else Interference.from_dict(whole))
