"""What calibration measured and decided, as plain data for JSON, profiles and reviews.

A report keeps every candidate with its samples, so a surprising value can be
traced to the measurements behind it, and it records the machine, the thread
count, the versions and the budgets it was taken under. Its digest is what a
calibrated profile points to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._support.reprs import brief_repr
from ..tuning.schema import KernelTuningKey, TuningValue
from .interference import KeyInterference
from .measure import Measurement
from .steadiness import Steadiness

if TYPE_CHECKING:
    from ..machine.descriptor import CpuExecutionDescriptor
    from ..tuning.registry import KernelTuningProfile
    from .confirmation import Confirmation


@dataclass(frozen=True)
class Candidate:
    """One point a search measured: a size or a value, each instance's timing, the outcome.

    ``unit`` is what the case's sizes count (:class:`~.search.Case`); a decision writes it
    once per case (:attr:`Decision.units`), not with every point.
    """

    case: str
    point: TuningValue
    measurements: Mapping[str, Measurement]
    outcome: str
    unit: str = "size"

    def to_dict(self) -> dict[str, object]:
        return {"case": self.case, "point": self.point, "outcome": self.outcome,
                "measurements": {name: m.to_dict() for name, m in self.measurements.items()}}


#: what a :class:`Mark` places: where the chosen value switches, where the value in use
#: before it switched, and where the search measured the crossover
SELECTED, PREVIOUS, MEASURED = "selected", "previous", "measured"
MARK_ROLES = (SELECTED, PREVIOUS, MEASURED)


@dataclass(frozen=True)
class Mark:
    """A size on one case's axis where a crossover decision's ``role`` happens.

    Recorded by the search that knows it, so a plot of the report reads the
    thresholds rather than recovering them from the reason's wording.
    """

    case: str
    size: int
    role: str

    def __post_init__(self):
        if self.role not in MARK_ROLES:
            raise ValueError(f"a mark's role is one of {', '.join(MARK_ROLES)}, "
                             f"got {self.role!r}")

    def to_dict(self) -> dict[str, object]:
        return {"case": self.case, "size": self.size, "role": self.role}


@dataclass(frozen=True)
class Decision:
    """The value chosen for one parameter, the value in use before, and why.

    ``measured`` is the value the measurements placed before the rules that
    keep a value in use near it (None when they placed none):
    what another parameter derived from this one follows. ``fewer_threads``
    says that the value runs some calls on fewer threads than the value in
    use: what a search also finds when a neighbour slows the machine's
    parallel speed, so a batch withholds it from a key never measured
    steadily. ``marks`` place a crossover's thresholds on its cases' size axes
    (none for thread counts and settings, whose winner is a label).
    """

    parameter: str
    value: TuningValue
    baseline: TuningValue
    reason: str
    candidates: tuple[Candidate, ...] = ()
    measured: TuningValue | None = None
    fewer_threads: bool = False
    marks: tuple[Mark, ...] = ()
    #: a change from the value in use is published only when this confirmed it; a value
    #: kept because it did not carries the comparison too (see .confirmation)
    confirmation: Confirmation | None = None

    @property
    def changed(self) -> bool:
        return self.value != self.baseline

    @property
    def units(self) -> dict[str, str]:
        """What each measured case's sizes count, by case."""
        return {c.case: c.unit for c in self.candidates}

    def to_dict(self) -> dict[str, object]:
        return {"parameter": self.parameter, "value": self.value, "baseline": self.baseline,
                "changed": self.changed, "measured": self.measured,
                "fewer_threads": self.fewer_threads, "reason": self.reason,
                "units": self.units, "marks": [m.to_dict() for m in self.marks],
                "confirmation": None if self.confirmation is None
                else self.confirmation.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates]}


@brief_repr
@dataclass(frozen=True, repr=False)
class CalibrationReport:
    """Everything one key's calibration did."""

    key: KernelTuningKey
    execution: CpuExecutionDescriptor
    options: Mapping[str, object]
    baseline: Mapping[str, TuningValue]
    values: Mapping[str, TuningValue]
    decisions: tuple[Decision, ...]
    seconds: float
    versions: Mapping[str, object]
    stopped_early: str | None = None
    #: explicit comparison: value -> seconds of the workload and speedup over the baseline
    #: (the geometric mean of the cases')
    comparison: tuple[Mapping[str, object], ...] = field(default=())
    #: what else shaped the timings: environment variables and the thread pools loaded
    environment: Mapping[str, object] = field(default_factory=dict)
    #: the machine probes' rates just before and after this measurement, by aspect (see
    #: .steadiness)
    machine_probe: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: points where two measurements were won by opposite sides: the machine changed meanwhile
    contradictions: tuple[str, ...] = ()
    #: what the key lost to other processes while it was measured (see .interference)
    interference: KeyInterference | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key.to_dict(),
            "execution": self.execution.to_dict(),
            "options": dict(self.options),
            "versions": dict(self.versions),
            "environment": dict(self.environment),
            "baseline": dict(self.baseline),
            "values": dict(self.values),
            "decisions": [d.to_dict() for d in self.decisions],
            "comparison": [dict(c) for c in self.comparison],
            "seconds": self.seconds,
            "stopped_early": self.stopped_early,
            "machine_probe": {aspect: list(rates) for aspect, rates in self.machine_probe.items()},
            "contradictions": list(self.contradictions),
            "interference": None if self.interference is None else self.interference.to_dict(),
        }

    @property
    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class KeyOutcome:
    """A selected key that was not calibrated, and why."""

    key: KernelTuningKey
    reason: str
    report: CalibrationReport | None = None

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "reason": self.reason,
                "report": None if self.report is None else self.report.to_dict()}


@brief_repr
@dataclass(frozen=True, repr=False)
class CalibrationBatchReport:
    """The outcome of one batch: reports of calibrated keys, and the keys left out with reasons.

    ``successful_profiles`` are the calibrated profiles the batch published
    (``generation`` is the registry generation that holds them); pass them to
    ``update_kernel_tuning_cache`` to keep them. ``steadiness`` holds what the
    machine probes saw (see :mod:`.steadiness`) and which keys they sent back
    to be measured again; a key never measured steadily (in the machine's
    reference state, without contradicting itself) may not repeat. ``withheld``
    are the keys that could not be measured cleanly within their budget (other
    processes took their CPUs, see :mod:`.interference`): they keep the values in
    use, and their reports say what was lost.
    """

    calibrated: tuple[CalibrationReport, ...]
    skipped: tuple[KeyOutcome, ...]
    unsupported: tuple[KeyOutcome, ...]
    successful_profiles: tuple[KernelTuningProfile, ...]
    execution: CpuExecutionDescriptor
    generation: int | None
    seconds: float
    steadiness: tuple[Steadiness, ...] = ()
    withheld: tuple[KeyOutcome, ...] = ()
    #: the keys of ``skipped`` that a budget stopped: meant to be calibrated, and not
    stopped: tuple[KeyOutcome, ...] = ()

    @property
    def unfinished(self) -> tuple[KeyOutcome, ...]:
        """The keys selected for calibration and not published: withheld or stopped."""
        return (*self.withheld, *self.stopped)

    def to_dict(self) -> dict[str, object]:
        return {
            "execution": self.execution.to_dict(),
            "generation": self.generation,
            "seconds": self.seconds,
            "steadiness": [s.to_dict() for s in self.steadiness],
            "calibrated": [r.to_dict() for r in self.calibrated],
            "skipped": [s.to_dict() for s in self.skipped],
            "withheld": [w.to_dict() for w in self.withheld],
            "stopped": [s.to_dict() for s in self.stopped],
            "unsupported": [u.to_dict() for u in self.unsupported],
            "successful_profiles": [
                {"key": p.key.to_dict(), "values": dict(p.values), "digest": p.digest,
                 "report_digest": p.report_digest}
                for p in self.successful_profiles
            ],
        }
