"""Access counters of a registry: snapshots, lookups and resolutions, exact without a lock.

:meth:`~kerneltune.KernelTuningRegistry.access_counts` reads them; a test asks them
whether a session resolved its kernels once or on every run.
"""

from __future__ import annotations

import threading

from .resolution import AccessCounts


class Counters:
    """Per-thread tallies summed on read.

    Each thread only ever increments its own list, so counting takes no lock
    on the resolution path and stays exact with any number of threads; the
    lock only guards the list of tallies when a thread first counts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tallies: list[list[int]] = []

    def _tally(self) -> list[int]:
        try:
            return self._local.tally
        except AttributeError:
            tally = self._local.tally = [0, 0, 0]
            with self._lock:
                self._tallies.append(tally)
            return tally

    def snapshot(self) -> None:
        self._tally()[0] += 1

    def lookup(self) -> None:
        self._tally()[1] += 1

    def resolution(self) -> None:
        """A resolution is also a lookup of its key."""
        tally = self._tally()
        tally[1] += 1
        tally[2] += 1

    def read(self) -> AccessCounts:
        with self._lock:
            tallies = list(self._tallies)
        return AccessCounts(*(sum(t[i] for t in tallies) for i in range(3)))
