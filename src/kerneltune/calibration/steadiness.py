"""Which state the machine was in while calibration measured a key, and measuring again.

A serial/parallel crossover moves with the machine's parallel speed, and on a
shared host that speed jumps between states while nothing in the calibrating
process changes (a neighbour loads the core under the second vCPU, the host
moves it). On the 2-CPU virtual machine of the README's figures, the probe's
2-thread speedup flips between about 1.05 and about 0.70, each state lasting
from seconds to minutes, and a key's crossover moves by two to four times
with it; within one state, calibration repeats.

So a batch for more than one thread watches: a kernel library registers a
probe, and the batch probes just before and after each key. The batch's
reference state is the fastest the probe saw, as the :data:`REFERENCE_RANK`-th
highest speedup, so that one or two lucky probes do not set it. A key with a
probe more than :data:`STEADY_TOLERANCE` below the reference was measured in
a slower state, or across a change, and is measured again after the others,
as often as the effort level allows, each time once the probe says the
machine is back in the reference state. Calibrating the machine in its fastest
state is the repeatable choice, for the reason a benchmark's minimum time is:
a neighbour only ever slows the machine down, and its slow spells come and go.
A spell shorter than a key can fall between its probes; when it shows as two
measurements of one point won by opposite sides (``contradictions`` in the
key's report), the key is measured again too.

A probe only advises: one that fails or returns no speedup is recorded, never a
reason to lose the batch's measurements, and its keys count as measured.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..schema import KernelTuningKey

#: how many probes must reach a speedup for it to be the reference state's
REFERENCE_RANK = 3
#: a probe this fraction below the reference was taken in a slower state. On the 2-CPU
#: virtual machine of the README's figures, probes within one state stay within 11% of
#: each other; the two states are 50% apart.
STEADY_TOLERANCE = 0.20

#: seconds between two probes while a batch waits for the reference state to come back
POLL_SECONDS = 0.1

#: ``probe(threads)``: serial time / time on ``threads`` threads of one fixed call
MachineProbe = Callable[[int], float]

_PROBES: dict[str, MachineProbe] = {}
_PROBES_LOCK = threading.Lock()


def register_machine_probe(library: str, probe: MachineProbe) -> None:
    """Watch the machine with ``probe`` while keys of ``library`` are calibrated.

    ``probe(threads)`` times one fixed call of the library serially and on
    ``threads`` threads and returns the serial time over the parallel one; a
    call near the library's serial/parallel crossovers moves most with the
    machine. It runs once between two keys, so it should take milliseconds. A later
    registration for the library replaces the earlier one.
    """
    if not isinstance(library, str) or not library:
        raise TypeError(f"expected a library name, got {library!r}")
    if not callable(probe):
        raise TypeError(f"expected a callable probe, got {probe!r}")
    with _PROBES_LOCK:
        _PROBES[library] = probe


def reference_speedup(speedups: Iterable[float]) -> float | None:
    """The speedup of the fastest state that :data:`REFERENCE_RANK` probes reached.

    With fewer probes than that, the slowest of them: too few to tell a state
    from a lucky probe, so every probe counts as the reference state.
    """
    ranked = sorted(speedups, reverse=True)
    return ranked[min(REFERENCE_RANK, len(ranked)) - 1] if ranked else None


def in_reference_state(speedups: Iterable[float], reference: float | None) -> bool:
    """Whether every one of ``speedups`` is within the tolerance of ``reference``."""
    return reference is None or all(s * (1.0 + STEADY_TOLERANCE) >= reference for s in speedups)


@dataclass(frozen=True)
class Steadiness:
    """One library's probe over a batch, and which keys it sent back to be measured again.

    ``samples`` are (seconds since the batch began, speedup) pairs; ``error``
    says why probing stopped, if a probe failed. ``remeasured`` names the keys
    measured more than once, ``unsettled`` those never measured steadily: in
    the reference state and without contradicting themselves (their steadiest
    measurement is published).
    """

    library: str
    threads: int
    samples: tuple[tuple[float, float], ...]
    error: str | None = None
    remeasured: tuple[str, ...] = ()
    unsettled: tuple[str, ...] = ()

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
    def reference(self) -> float | None:
        return reference_speedup(self.speedups)

    @property
    def moved(self) -> float:
        """How far the speedup moved: highest / lowest - 1 (0 without samples)."""
        return self.highest / self.lowest - 1.0 if self.samples else 0.0

    @property
    def steady(self) -> bool:
        """The probe ran throughout and every key was measured in the reference state."""
        return self.error is None and bool(self.samples) and not self.unsettled

    def to_dict(self) -> dict[str, object]:
        return {"library": self.library, "threads": self.threads,
                "samples": [list(sample) for sample in self.samples],
                "lowest": self.lowest, "highest": self.highest, "reference": self.reference,
                "moved": self.moved, "steady": self.steady, "error": self.error,
                "remeasured": list(self.remeasured), "unsettled": list(self.unsettled)}


class SteadinessMonitor:
    """The probes of one batch: :meth:`sample` around each key, :meth:`settled` to judge it."""

    def __init__(self, libraries: Iterable[str], threads: int):
        with _PROBES_LOCK:
            probes = dict(_PROBES)
        # one thread measures no parallel run, so the machine's parallel speed is moot
        self._probes = {library: probes[library] for library in sorted(set(libraries))
                        if library in probes} if threads > 1 else {}
        self._threads = threads
        self._start = time.perf_counter()
        self._samples: dict[str, list[tuple[float, float]]] = {name: [] for name in self._probes}
        self._errors: dict[str, str] = {}

    def sample(self, library: str) -> float | None:
        """The library's probe now; None if it has none or its probe failed."""
        probe = self._probes.get(library)
        if probe is None or library in self._errors:
            return None
        try:
            speedup = probe(self._threads)
        except Exception as error:  # a probe advises: it never costs the batch
            self._errors[library] = f"the probe raised {type(error).__name__}: {error}"
            return None
        if (isinstance(speedup, bool) or not isinstance(speedup, numbers.Real)
                or not 0 < float(speedup) < math.inf):
            self._errors[library] = f"the probe returned {speedup!r}; expected a speedup > 0"
            return None
        self._samples[library].append((time.perf_counter() - self._start, float(speedup)))
        return float(speedup)

    def settled(self, library: str, speedups: Sequence[float]) -> bool:
        """Whether a key probed at ``speedups`` was in the reference state seen so far.

        Without a working probe, nothing can be judged, and every key counts as settled.
        """
        if library not in self._probes or library in self._errors:
            return True
        return in_reference_state(speedups, reference_speedup(s for _, s in
                                                              self._samples[library]))

    def await_reference(self, library: str, until: float, latest: float | None = None
                        ) -> float | None:
        """Probe until the machine is back in the reference state or ``until`` (a
        ``time.perf_counter()`` time) comes; the last speedup probed (None: no probe).

        ``latest`` is a probe taken just now, which may already tell. Waiting
        costs no measurement: a key measured again at once in a slow spell is
        measured in it again, one measured when the spell ends is settled.
        """
        speedup = latest if latest is not None else self.sample(library)
        while (speedup is not None and not self.settled(library, [speedup])
               and time.perf_counter() + POLL_SECONDS < until):
            time.sleep(POLL_SECONDS)
            speedup = self.sample(library)
        return speedup

    def finish(self, remeasured: Iterable[KernelTuningKey] = (),
               unsettled: Iterable[KernelTuningKey] = ()) -> tuple[Steadiness, ...]:
        """Each probed library's samples, with its keys measured again and never settled."""
        remeasured, unsettled = list(remeasured), list(unsettled)
        return tuple(
            Steadiness(library, self._threads, tuple(self._samples[library]),
                       self._errors.get(library),
                       tuple(str(key) for key in remeasured if key.library == library),
                       tuple(str(key) for key in unsettled if key.library == library))
            for library in self._probes
            if self._samples[library] or library in self._errors)
