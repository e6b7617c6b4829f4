"""Whether the machine held still while calibration measured it.

A serial/parallel crossover moves with the machine's parallel speed, and on a
shared host that speed can move by 40% within a minute while nothing in the
calibrating process changes (a neighbour loads the core under the second
vCPU, the host moves it). No search can repeat what the machine does not, so
a batch for more than one thread watches: a kernel library registers a probe,
and the batch runs each selected library's probe before its first key,
between keys every :data:`PROBE_INTERVAL` seconds and after its last key. Its
report says how far the probe's speedup moved, so a farm job can repeat a
calibration of a moving machine instead of shipping it.

A probe only advises: one that fails or returns no speedup is recorded in the
report, never a reason to lose the batch's measurements.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: seconds between two probes of one batch (a probe takes about 10 ms)
PROBE_INTERVAL = 10.0
#: speedups further apart than this fraction mean the machine moved during the batch. On
#: the 2-CPU virtual machine of the README's figures, a calm batch's probe moved 11% over
#: 15 probes; batches whose values did not repeat moved 56% to 68%.
STEADY_TOLERANCE = 0.20

#: ``probe(threads)``: serial time / time on ``threads`` threads of one fixed call
MachineProbe = Callable[[int], float]

_PROBES: dict[str, MachineProbe] = {}
_PROBES_LOCK = threading.Lock()


def register_machine_probe(library: str, probe: MachineProbe) -> None:
    """Watch the machine with ``probe`` while keys of ``library`` are calibrated.

    ``probe(threads)`` times one fixed call of the library serially and on
    ``threads`` threads and returns the serial time over the parallel one; a
    call near the library's serial/parallel crossovers moves most with the
    machine. A later registration for the library replaces the earlier one.
    """
    if not isinstance(library, str) or not library:
        raise TypeError(f"expected a library name, got {library!r}")
    if not callable(probe):
        raise TypeError(f"expected a callable probe, got {probe!r}")
    with _PROBES_LOCK:
        _PROBES[library] = probe


@dataclass(frozen=True)
class Steadiness:
    """One library's probe over a batch.

    ``samples`` are (seconds since the batch began, speedup) pairs; ``error``
    says why probing stopped, if a probe failed.
    """

    library: str
    threads: int
    samples: tuple[tuple[float, float], ...]
    error: str | None = None

    @property
    def speedups(self) -> tuple[float, ...]:
        return tuple(speedup for _, speedup in self.samples)

    @property
    def lowest(self) -> float | None:
        return min(self.speedups, default=None)

    @property
    def highest(self) -> float | None:
        return max(self.speedups, default=None)

    @property
    def moved(self) -> float:
        """How far the speedup moved: highest / lowest - 1 (0 without samples)."""
        return self.highest / self.lowest - 1.0 if self.samples else 0.0

    @property
    def steady(self) -> bool:
        """The probe ran throughout and its speedup moved by at most the tolerance."""
        return self.error is None and bool(self.samples) and self.moved <= STEADY_TOLERANCE

    def to_dict(self) -> dict[str, object]:
        return {"library": self.library, "threads": self.threads,
                "samples": [list(sample) for sample in self.samples],
                "lowest": self.lowest, "highest": self.highest,
                "moved": self.moved, "steady": self.steady, "error": self.error}


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
        self._errors: dict[str, str] = {}

    def probe(self, due: bool = False) -> None:
        """Probe if :data:`PROBE_INTERVAL` has passed since the last probe (or ``due``)."""
        if not due and time.perf_counter() - self._last < PROBE_INTERVAL:
            return
        for library, probe in self._probes.items():
            if library not in self._errors:
                self._run(library, probe)
        self._last = time.perf_counter()

    def _run(self, library: str, probe: MachineProbe) -> None:
        try:
            speedup = probe(self._threads)
        except Exception as error:  # a probe advises: it never costs the batch
            self._errors[library] = f"the probe raised {type(error).__name__}: {error}"
            return
        if (isinstance(speedup, bool) or not isinstance(speedup, numbers.Real)
                or not 0 < float(speedup) < math.inf):
            self._errors[library] = f"the probe returned {speedup!r}; expected a speedup > 0"
            return
        self._samples[library].append((time.perf_counter() - self._start, float(speedup)))

    def finish(self) -> tuple[Steadiness, ...]:
        """A last probe, if the batch probed at all, and every probed library's result."""
        if self._last == -math.inf:
            return ()
        self.probe(due=True)
        return tuple(Steadiness(library, self._threads, tuple(self._samples[library]),
                                self._errors.get(library))
                     for library in self._probes)
