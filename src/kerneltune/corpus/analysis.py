"""The statistics of a corpus parameter search, and the choice of a set.

A search measures every parameter set on the same cases; this module turns
those latencies into per-set metrics and picks the best complete set by one
criterion. It is kept apart from the measuring so that latencies from
anywhere (another machine, a saved report) can be analysed the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from .._support.checks import is_count, is_positive_number
from ..errors import Problem, TuningValidationError

#: criteria whose metric is minimised: latencies, in seconds
LATENCY_CRITERIA = {"sum": "latency_sum", "average": "latency_average",
                    "median": "latency_median", "max-latency": "latency_max"}
#: criteria whose metric is maximised: speedups against the baseline (set 0)
SPEEDUP_CRITERIA = {"average-speedup": "speedup_average", "median-speedup": "speedup_median",
                    "max-speedup": "speedup_max"}
CRITERIA = (*LATENCY_CRITERIA, *SPEEDUP_CRITERIA)
BASELINE = 0


@dataclass(frozen=True)
class CaseLatency:
    """One case measured with one parameter set; None when it has no latency (timed out, failed)."""

    set_index: int
    case: str
    latency_seconds: float | None

    def to_dict(self) -> dict[str, object]:
        return {"set": self.set_index, "case": self.case,
                "latency_seconds": self.latency_seconds}


@dataclass(frozen=True)
class SetMetrics:
    """One parameter set's metrics; all None when the set is incomplete.

    Speedups are baseline latency over this set's latency, per case (above 1
    is faster); they are None too when the baseline is incomplete.
    """

    set_index: int
    complete: bool
    latency_sum: float | None = None
    latency_average: float | None = None
    latency_median: float | None = None
    latency_max: float | None = None
    speedup_average: float | None = None
    speedup_median: float | None = None
    speedup_max: float | None = None

    def metric(self, criterion: str) -> float | None:
        return getattr(self, LATENCY_CRITERIA.get(criterion) or SPEEDUP_CRITERIA[criterion])

    def to_dict(self) -> dict[str, object]:
        return {"set": self.set_index, "complete": self.complete,
                "latency_seconds": {"sum": self.latency_sum, "average": self.latency_average,
                                    "median": self.latency_median, "max": self.latency_max},
                "speedup": {"average": self.speedup_average, "median": self.speedup_median,
                            "max": self.speedup_max}}


@dataclass(frozen=True)
class LatencyAnalysis:
    """Every set's metrics and the set the criterion selects (None when no set qualifies)."""

    criterion: str
    cases: tuple[str, ...]
    sets: tuple[SetMetrics, ...]
    selected: int | None

    @property
    def baseline_complete(self) -> bool:
        return self.sets[BASELINE].complete

    @property
    def maximised(self) -> bool:
        return self.criterion in SPEEDUP_CRITERIA

    def to_dict(self) -> dict[str, object]:
        return {"criterion": self.criterion,
                "direction": "maximise" if self.maximised else "minimise",
                "baseline": BASELINE, "baseline_complete": self.baseline_complete,
                "cases": list(self.cases), "sets": [s.to_dict() for s in self.sets],
                "selected": self.selected}


def unknown_criterion(criterion: object) -> str:
    return f"unknown criterion {criterion!r}; choose one of {', '.join(CRITERIA)}"


def _checked(rows: Iterable[CaseLatency], criterion: str) -> dict[int, dict[str, float | None]]:
    """The latencies by set and case, or one error naming every problem of the input."""
    problems: list[Problem] = []
    if criterion not in CRITERIA:
        problems.append(Problem("criterion", unknown_criterion(criterion)))
    table: dict[int, dict[str, float | None]] = {}
    for number, row in enumerate(rows):
        where = f"row {number}"
        if not isinstance(row, CaseLatency):
            problems.append(Problem(where, f"expected a CaseLatency, got {type(row).__name__}"))
            continue
        if not is_count(row.set_index) or not isinstance(row.case, str) or not row.case:
            problems.append(Problem(where, f"set index {row.set_index!r} must be an int >= 0 "
                                           f"and case {row.case!r} a non-empty name"))
            continue
        latency = row.latency_seconds
        if latency is not None and not is_positive_number(latency):
            problems.append(Problem(where, f"latency of set {row.set_index}, case {row.case!r} "
                                           f"must be a finite number of seconds above 0 or "
                                           f"None, got {latency!r}"))
        cases = table.setdefault(row.set_index, {})
        if row.case in cases:
            problems.append(Problem(where, f"set {row.set_index}, case {row.case!r} is given "
                                           f"twice"))
        cases[row.case] = None if latency is None else float(latency)
    if not table and not problems:
        problems.append(Problem("rows", "no latencies to analyse"))
    if table:
        if sorted(table) != list(range(len(table))):
            problems.append(Problem("rows", f"set indices must run from 0 without gaps, got "
                                            f"{sorted(table)}"))
        names = set(table[min(table)])
        for index, cases in table.items():
            if set(cases) != names:
                missing, extra = sorted(names - set(cases)), sorted(set(cases) - names)
                problems.append(Problem("rows", f"set {index} has other cases than set "
                                                f"{min(table)}: missing {missing}, extra {extra}"))
    if problems:
        raise TuningValidationError(problems, context="kernel tuning latencies")
    return table


def _metrics(index: int, latencies: list[float | None],
             baseline: list[float | None]) -> SetMetrics:
    if any(latency is None for latency in latencies):
        return SetMetrics(index, complete=False)
    values = [float(latency) for latency in latencies]  # type: ignore[arg-type]
    latency = {"latency_sum": math.fsum(values), "latency_average": statistics.fmean(values),
               "latency_median": statistics.median(values), "latency_max": max(values)}
    if any(reference is None for reference in baseline):
        return SetMetrics(index, True, **latency)
    speedups = [reference / value  # type: ignore[operator]
                for reference, value in zip(baseline, values, strict=True)]
    return SetMetrics(index, True, **latency, speedup_average=statistics.fmean(speedups),
                      speedup_median=statistics.median(speedups), speedup_max=max(speedups))


def analyze_kernel_tuning_latencies(rows: Iterable[CaseLatency],
                                    criterion: str = "median") -> LatencyAnalysis:
    """Per-set latency and speedup metrics, and the best complete set by ``criterion``.

    Set 0 is the baseline. A set missing a case's latency is incomplete: its
    metrics are unavailable and it is never selected. Latency criteria are
    minimised, speedup criteria maximised, and a tie goes to the lower set
    index. Invalid input raises :class:`~kerneltune.TuningValidationError`.
    """
    rows = tuple(rows)
    table = _checked(rows, criterion)
    cases = tuple(dict.fromkeys(row.case for row in rows if row.set_index == BASELINE))
    columns = {index: [table[index][case] for case in cases] for index in sorted(table)}
    sets = tuple(_metrics(index, latencies, columns[BASELINE])
                 for index, latencies in columns.items())
    sign = -1.0 if criterion in SPEEDUP_CRITERIA else 1.0
    best: tuple[float, int] | None = None
    for metrics in sets:
        value = metrics.metric(criterion)
        if value is not None and (best is None or sign * value < best[0]):
            best = (sign * value, metrics.set_index)
    return LatencyAnalysis(criterion, cases, sets, None if best is None else best[1])
