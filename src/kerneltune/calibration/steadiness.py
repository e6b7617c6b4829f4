"""Whether the machine held still while calibration measured it.

A serial/parallel crossover moves with the machine's parallel speed, and on a
shared host that speed can move by a third within a minute while nothing in
the calibrating process changes (a neighbour loads the core under the second
vCPU, the host moves it). No search can repeat what the machine does not, so
a batch for more than one thread watches: a kernel library registers a probe
(a fixed call timed serially and on the calibrated thread count), and the
batch runs each selected library's probe before its first key, between keys
every :data:`PROBE_INTERVAL` seconds and after its last key. Its report says
how far the speedup moved, so a farm job can repeat a calibration of a moving
machine instead of shipping it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import CalibrationError

#: seconds between two probes of one batch (a probe takes about 10 ms)
PROBE_INTERVAL = 10.0
#: speedups further apart than this fraction mean the machine moved during the batch
STEADY_TOLERANCE = 0.10

#: ``probe(threads)``: serial time / time on ``threads`` threads of one fixed call
MachineProbe = Callable[[int], float]

_PROBES: dict[str, MachineProbe] = {}
_PROBES_LOCK = threading.Lock()


def register_machine_probe(library: str, probe: MachineProbe) -> None:
    """Watch the machine with ``probe`` while keys of ``library`` are calibrated.

    A later registration for the library replaces the earlier one.
    """
    if not isinstance(library, str) or not library:
        raise TypeError(f"expected a library name, got {library!r}")
    if not callable(probe):
        raise TypeError(f"expected a callable probe, got {probe!r}")
    with _PROBES_LOCK:
        _PROBES[library] = probe


@dataclass(frozen=True)
class Steadiness:
    """One library's probe over a batch: (seconds since the batch began, speedup) pairs."""

    library: str
    threads: int
    samples: tuple[tuple[float, float], ...]

    @property
    def moved(self) -> float:
        """How far the speedup moved: highest / lowest - 1."""
        speedups = [speedup for _, speedup in self.samples]
        return max(speedups) / min(speedups) - 1.0

    @property
    def steady(self) -> bool:
        return self.moved <= STEADY_TOLERANCE

    def to_dict(self) -> dict[str, object]:
        return {"library": self.library, "threads": self.threads,
                "samples": [list(sample) for sample in self.samples],
                "moved": self.moved, "steady": self.steady}


class SteadinessMonitor:
    """The probes of one batch: :meth:`probe` before each key, :meth:`finish` after the last."""

    def __init__(self, libraries: Iterable[str], threads: int):
        with _PROBES_LOCK:
            probes = dict(_PROBES)
        # one thread measures no parallel run, so the machine's parallel speed is moot
        self._probes = {library: probes[library] for library in sorted(set(libraries))
                        if library in probes} if threads > 1 else {}
        self._threads = threads
        self._start = time.perf_counter()
        self._last = -math.inf
        self._samples: dict[str, list[tuple[float, float]]] = {name: [] for name in self._probes}

    def probe(self, due: bool = False) -> None:
        """Probe if :data:`PROBE_INTERVAL` has passed since the last probe (or ``due``)."""
        if not due and time.perf_counter() - self._last < PROBE_INTERVAL:
            return
        for library, probe in self._probes.items():
            speedup = probe(self._threads)
            if (isinstance(speedup, bool) or not isinstance(speedup, int | float)
                    or not 0 < speedup < math.inf):
                raise CalibrationError(f"the machine probe of library {library!r} returned "
                                       f"{speedup!r}; expected a speedup > 0")
            self._samples[library].append((time.perf_counter() - self._start, float(speedup)))
        self._last = time.perf_counter()

    def finish(self) -> tuple[Steadiness, ...]:
        """A last probe, if the batch probed at all, and every library's result."""
        if any(self._samples.values()):
            self.probe(due=True)
        return tuple(Steadiness(library, self._threads, tuple(samples))
                     for library, samples in self._samples.items() if samples)
