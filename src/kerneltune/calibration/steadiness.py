"""Which state the machine was in while calibration measured a key, and measuring again.

A crossover moves with the machine's speed, and on a shared host that speed
jumps between states while nothing in the calibrating process changes. Two
aspects of it move: its parallel speed (a neighbour loads the core under the
second vCPU, and a key's crossover moves with it) and its shared cache (a
neighbour's traffic slows every read the core's own L2 cannot serve, on one
thread as on two). Within one state, calibration repeats; the figures are in
docs/calibration.md (Steadiness: the machine probes).

So a batch watches: a kernel library registers a probe per aspect (for more
than one thread only, when the aspect is parallel speed) into the registry it
registers its schemas with, and a batch on that registry probes just before
and after each key. An aspect's reference state is the fastest its probe held:
the highest rate :data:`REFERENCE_RUN` consecutive probes all reached, so that
lucky probes, however many, do not set it. A key with a probe more than
:data:`STEADY_TOLERANCE` below its aspect's reference was measured in a slower
state, or across a change, and is measured again after the others, as often as
the effort level allows, each time once every probe says the machine is back
in the reference state. Calibrating the machine in its fastest state is the
repeatable choice, for the reason a benchmark's minimum time is: a neighbour
only ever slows the machine down, and its slow spells come and go.
A spell shorter than a key can fall between its probes; when it shows as two
measurements of one point won by opposite sides (``contradictions`` in the
key's report), the key is measured again too.

A probe only advises: one that fails or returns no rate is recorded, never a
reason to lose the batch's measurements, and its keys count as measured.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# the probes' registration is the registry's (every ``import kerneltune`` registers the
# library's); the package gives it from here, beside what judges the probes
from ..tuning.machine_probes import PARALLEL, register_machine_probe  # noqa: F401
from ..tuning.registry import KernelTuningRegistry, default_registry
from ..tuning.schema import KernelTuningKey

#: how many consecutive probes must reach a rate for it to be the reference state's: a state
#: lasts, while single lucky probes would set a reference no later key meets
REFERENCE_RUN = 3
#: a probe this fraction below the reference was taken in a slower state: wider than the
#: scatter within one state, narrower than the distance between states
STEADY_TOLERANCE = 0.20

#: a parallel probe below this ran its call on its threads at under half its serial speed:
#: the machine cannot give the process that many CPUs now, however steady it looks against
#: itself (a quiet machine's probe is above 1)
PARALLEL_FLOOR = 0.5

#: seconds between two probes while a batch waits for the reference state to come back
POLL_SECONDS = 0.1

#: a key's probes: aspect -> the rates probed just before and after it was measured
Probes = Mapping[str, Sequence[float]]


def reference_rate(rates: Sequence[float]) -> float | None:
    """The rate of the fastest state the probe held: the highest that
    :data:`REFERENCE_RUN` consecutive ``rates`` (in the order probed) all reached.

    With fewer probes than that, the slowest of them: too few to tell a state
    from a lucky probe, so every probe counts as the reference state.
    """
    if not rates:
        return None
    run = min(REFERENCE_RUN, len(rates))
    return max(min(rates[i:i + run]) for i in range(len(rates) - run + 1))


def in_reference_state(rates: Iterable[float], reference: float | None) -> bool:
    """Whether every one of ``rates`` is within the tolerance of ``reference``."""
    return reference is None or all(r * (1.0 + STEADY_TOLERANCE) >= reference for r in rates)


@dataclass(frozen=True)
class ProbeTrace:
    """What one aspect's probe saw over a batch: (seconds since the batch began, rate)
    pairs, and why probing stopped, if the probe failed."""

    aspect: str
    samples: tuple[tuple[float, float], ...]
    error: str | None = None

    @property
    def rates(self) -> tuple[float, ...]:
        return tuple(rate for _, rate in self.samples)

    @property
    def lowest(self) -> float | None:
        return min(self.rates, default=None)

    @property
    def highest(self) -> float | None:
        return max(self.rates, default=None)

    @property
    def reference(self) -> float | None:
        return reference_rate(self.rates)

    @property
    def moved(self) -> float:
        """How far the rate moved: highest / lowest - 1 (0 without samples)."""
        return self.highest / self.lowest - 1.0 if self.samples else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"aspect": self.aspect, "samples": [list(sample) for sample in self.samples],
                "lowest": self.lowest, "highest": self.highest, "reference": self.reference,
                "moved": self.moved, "error": self.error}


@dataclass(frozen=True)
class Steadiness:
    """One library's probes over a batch, and which keys they sent back to be measured again.

    ``remeasured`` names the keys measured more than once, ``unsettled`` those
    never measured steadily: in the reference state of every aspect and
    without contradicting themselves (their steadiest measurement is published).
    """

    library: str
    threads: int
    probes: tuple[ProbeTrace, ...]
    remeasured: tuple[str, ...] = ()
    unsettled: tuple[str, ...] = ()

    @property
    def steady(self) -> bool:
        """Every probe ran throughout and every key was measured in the reference state."""
        return (bool(self.probes) and not self.unsettled
                and all(trace.error is None and trace.samples for trace in self.probes))

    def to_dict(self) -> dict[str, object]:
        return {"library": self.library, "threads": self.threads,
                "probes": [trace.to_dict() for trace in self.probes], "steady": self.steady,
                "remeasured": list(self.remeasured), "unsettled": list(self.unsettled)}


class SteadinessMonitor:
    """The probes of one batch, those ``registry`` holds for its libraries: :meth:`sample`
    around each key, :meth:`settled` to judge it; ``floor`` is the parallel probe's (0: a
    batch that keeps every measurement, however disturbed)."""

    def __init__(self, libraries: Iterable[str], threads: int, *,
                 registry: KernelTuningRegistry = default_registry,
                 floor: float = PARALLEL_FLOOR):
        self._floor = floor
        self._probes = {(library, aspect): registration
                        for library in sorted(set(libraries))
                        for aspect, registration in sorted(registry.machine_probes(library).items())
                        if registration.minimum_threads <= threads}
        self._threads = threads
        self._start = time.perf_counter()
        self._samples: dict[tuple[str, str], list[tuple[float, float]]] = {
            name: [] for name in self._probes}
        self._errors: dict[tuple[str, str], str] = {}

    def _working(self, library: str) -> list[tuple[str, str]]:
        return [name for name in self._probes if name[0] == library and name not in self._errors]

    def sample(self, library: str) -> dict[str, float]:
        """Each working probe of the library now, by aspect (none: nothing to judge by)."""
        rates = {}
        for name in self._working(library):
            try:
                rate = self._probes[name](self._threads)
            except Exception as error:  # a probe advises: it never costs the batch
                self._errors[name] = f"the probe raised {type(error).__name__}: {error}"
                continue
            if (isinstance(rate, bool) or not isinstance(rate, numbers.Real)
                    or not 0 < float(rate) < math.inf):
                self._errors[name] = f"the probe returned {rate!r}; expected a rate > 0"
                continue
            self._samples[name].append((time.perf_counter() - self._start, float(rate)))
            rates[name[1]] = float(rate)
        return rates

    def _reference(self, name: tuple[str, str]) -> float | None:
        return reference_rate([rate for _, rate in self._samples[name]])

    def standing(self, library: str, probes: Probes) -> float:
        """How fast the machine was for a key probed at ``probes``: its slowest probe over
        its aspect's reference state so far (1 in it; infinite when nothing can judge)."""
        ratios = []
        for name in self._working(library):
            reference = self._reference(name)
            if reference is not None:
                ratios += [rate / reference for rate in probes.get(name[1], ())]
        return min(ratios, default=math.inf)

    def settled(self, library: str, probes: Probes) -> bool:
        """Whether a key probed at ``probes`` was in the reference state seen so far, and
        its threads had their CPUs (no parallel probe below the floor).

        Without a working probe, nothing can be judged, and every key counts as settled.
        """
        return not self.starved(library, probes) and all(
            in_reference_state(probes.get(name[1], ()), self._reference(name))
            for name in self._working(library))

    def starved(self, library: str, probes: Probes) -> bool:
        """Whether a parallel probe of ``probes`` fell below the floor."""
        return (library, PARALLEL) in self._working(library) and any(
            rate < self._floor for rate in probes.get(PARALLEL, ()))

    def await_reference(self, library: str, until: float,
                        latest: Mapping[str, float] | None = None
                        ) -> tuple[dict[str, float], bool]:
        """Probe until the machine is back in the reference state or ``until`` (a
        ``time.perf_counter()`` time) comes; the rates probed last, and whether they
        are in the reference state.

        ``latest`` are probes taken just now, which may already tell. Waiting
        costs no measurement: a key measured again at once in a slow spell is
        measured in it again, one measured when the spell ends is settled.
        """
        rates = dict(latest) if latest is not None else self.sample(library)
        while not (settled := self.settled(library, _once(rates))) \
                and time.perf_counter() + POLL_SECONDS < until:
            time.sleep(POLL_SECONDS)
            rates = self.sample(library)
        return rates, settled

    def finish(self, remeasured: Iterable[KernelTuningKey] = (),
               unsettled: Iterable[KernelTuningKey] = ()) -> tuple[Steadiness, ...]:
        """Each probed library's traces, with its keys measured again and never settled."""
        remeasured, unsettled = list(remeasured), list(unsettled)
        traces: dict[str, list[ProbeTrace]] = {}
        for (library, aspect), samples in self._samples.items():
            if samples or (library, aspect) in self._errors:
                traces.setdefault(library, []).append(ProbeTrace(
                    aspect, tuple(samples), self._errors.get((library, aspect))))
        return tuple(
            Steadiness(library, self._threads, tuple(probes),
                       tuple(str(key) for key in remeasured if key.library == library),
                       tuple(str(key) for key in unsettled if key.library == library))
            for library, probes in traces.items())


def _once(rates: Mapping[str, float]) -> Probes:
    return {aspect: (rate,) for aspect, rate in rates.items()}
