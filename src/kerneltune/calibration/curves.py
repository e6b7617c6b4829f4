"""The crossover curves of a calibration report, read back from its JSON file.

``kerneltune calibrate --report`` keeps every measurement. This turns them into what a
person looks at to see why a value was chosen: for each key and decision, one series per
measured label (the serial and the parallel path, one per thread count, or one per
candidate value) of (size, median seconds), what each case's sizes count, and the sizes
where the selected value and the value in use before it switch, as the searches recorded
them (:class:`~.report.Mark`). ``kerneltune report`` prints and plots them
(:mod:`kerneltune.calibration.plot`); nothing here needs matplotlib. A report written before
decisions recorded marks and units still gives its curves, unmarked, on axes of "size".

A file that is not a calibration report raises :class:`ReportFileError` naming the file
and the first entry that is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._support.documents import read_bounded
from ..errors import KernelTuningError, TuningValidationError
from ..tuning.schema import KernelTuningKey, TuningValue
from .confirmation import Confirmation
from .interference import KeyInterference
from .report import MARK_ROLES, MEASURED, PREVIOUS, SELECTED, Mark

#: what a decision's candidates measured (see :mod:`.search`)
CROSSOVER = "crossover"  # two paths raced on growing sizes
THREADS = "threads"  # thread counts raced at the largest sizes
COMPARISON = "comparison"  # settings timed on the same cases; the first is the value in use
VERIFICATION = "verification"  # the decided values against the previous ones
UNMEASURED = "unmeasured"  # decided without measurements of its own

_THREAD_LABEL = re.compile(r"(\d+) threads")
#: what a case's sizes count when the report does not say
DEFAULT_UNIT = "size"


class ReportFileError(KernelTuningError, ValueError):
    """A file that cannot be read as a calibration report (``calibrate --report``)."""


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    """One label's measurement at one size: seconds per call (median and quartiles).

    ``relative`` is the median over the reference label's median in the same
    measurement (1.0 for the reference itself): the samples were interleaved, so
    the ratio is what the search compared.
    """

    size: int
    seconds: float
    q1: float
    q3: float
    relative: float

    def to_dict(self) -> dict[str, object]:
        return {"size": self.size, "seconds": self.seconds, "q1": self.q1, "q3": self.q3,
                "relative": self.relative}


@dataclasses.dataclass(frozen=True)
class Series:
    """The points one label measured on one case, by growing size (repeats kept)."""

    case: str
    label: str
    points: tuple[CurvePoint, ...]

    def to_dict(self) -> dict[str, object]:
        return {"case": self.case, "label": self.label,
                "points": [point.to_dict() for point in self.points]}


@dataclasses.dataclass(frozen=True)
class AxisMark:
    """A size on a crossover's axis, what happens there (``role``, as a
    :class:`~.report.Mark`'s) and how a legend says it."""

    label: str
    size: int
    role: str

    def to_dict(self) -> dict[str, object]:
        return {"label": self.label, "size": self.size, "role": self.role}


@dataclasses.dataclass(frozen=True)
class DecisionCurves:
    """One decision with the curves behind it.

    ``reference`` is the label the others are compared with (the value in use, or
    the lower side of a crossover); ``selected_label`` the label that won when the
    decision chose between labels (thread counts, settings); ``marks`` where the
    selected value and the value in use switch on a crossover's size axis, and the
    crossovers measured; ``units`` what each case's sizes count.
    """

    parameter: str
    value: TuningValue
    baseline: TuningValue
    measured: TuningValue | None
    reason: str
    kind: str
    candidates: int
    series: tuple[Series, ...] = ()
    reference: str | None = None
    selected_label: str | None = None
    marks: tuple[AxisMark, ...] = ()
    units: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: the comparison with the value in use a change needed (see .confirmation)
    confirmation: Confirmation | None = None

    @property
    def changed(self) -> bool:
        return self.value != self.baseline

    def unit(self, case: str) -> str:
        """What the sizes of ``case`` count, for an axis label."""
        return self.units.get(case, DEFAULT_UNIT)

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(series.case for series in self.series))

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(series.label for series in self.series))

    def to_dict(self) -> dict[str, object]:
        return {"parameter": self.parameter, "baseline": self.baseline, "value": self.value,
                "changed": self.changed, "measured": self.measured, "reason": self.reason,
                "kind": self.kind, "candidates": self.candidates, "reference": self.reference,
                "selected_label": self.selected_label, "units": dict(self.units),
                "confirmation": (None if self.confirmation is None
                                 else self.confirmation.to_dict()),
                "marks": [mark.to_dict() for mark in self.marks],
                "series": [series.to_dict() for series in self.series]}


@dataclasses.dataclass(frozen=True)
class KeyCurves:
    """One key of one batch: calibrated, or skipped or unsupported with the reason."""

    key: KernelTuningKey
    threads: int
    status: str
    reason: str | None
    seconds: float | None
    stopped_early: str | None
    decisions: tuple[DecisionCurves, ...]
    #: what other processes took while it was measured (see .interference)
    interference: KeyInterference | None = None

    @property
    def threads_text(self) -> str:
        return f"{self.threads} thread{'s' * (self.threads != 1)}"

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "name": str(self.key), "threads": self.threads,
                "status": self.status, "reason": self.reason, "seconds": self.seconds,
                "stopped_early": self.stopped_early,
                "interference": (None if self.interference is None
                                 else self.interference.to_dict()),
                "decisions": [decision.to_dict() for decision in self.decisions]}


@dataclasses.dataclass(frozen=True)
class ReportCurves:
    """Every key of a report file, batch by batch (one batch per thread count)."""

    path: str
    keys: tuple[KeyCurves, ...]

    def select(self, key: str | None = None, parameter: str | None = None, *,
               kernel: str | None = None, element_type: str | None = None,
               threads: int | None = None, changed: bool = False,
               library: str | None = None) -> ReportCurves:
        """The keys whose name contains ``key`` (case-insensitive), of ``library``, ``kernel``,
        ``element_type`` and ``threads`` when given, and their decisions whose parameter
        contains ``parameter`` (``changed``: that changed the value in use); keys left
        without decisions drop out when the decisions are filtered."""
        keys = []
        for entry in self.keys:
            if key is not None and key.lower() not in str(entry.key).lower():
                continue
            if (library is not None and entry.key.library != library
                    or kernel is not None and entry.key.kernel.lower() != kernel.lower()
                    or element_type is not None
                    and entry.key.element_type_name != element_type.upper()
                    or threads is not None and entry.threads != threads):
                continue
            if parameter is not None or changed:
                decisions = tuple(d for d in entry.decisions
                                  if (parameter is None
                                      or parameter.lower() in d.parameter.lower())
                                  and (d.changed or not changed))
                if not decisions:
                    continue
                entry = dataclasses.replace(entry, decisions=decisions)
            keys.append(entry)
        return ReportCurves(self.path, tuple(keys))

    def to_dict(self) -> dict[str, object]:
        return {"file": self.path, "keys": [entry.to_dict() for entry in self.keys]}


def _get(mapping: object, name: str, kind: type | tuple[type, ...], where: str) -> object:
    """``mapping[name]`` if it is of ``kind`` (a bool is no number here), else a ValueError
    saying where."""
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(mapping).__name__}")
    if name not in mapping:
        raise ValueError(f"{where}: no {name!r}")
    value = mapping[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"{where}: {name!r} is {type(value).__name__}")
    return value


def _series(candidates: Sequence[object], where: str, reference: str | None = None
            ) -> tuple[tuple[Series, ...], str | None]:
    """The series of every (case, label) measured, each point relative to ``reference``'s
    median there (by default the first label measured), and the reference label."""
    found: dict[tuple[str, str], list[CurvePoint]] = {}
    for index, candidate in enumerate(candidates):
        at = f"{where}, candidates[{index}]"
        case = _get(candidate, "case", str, at)
        point = _get(candidate, "point", int, at)  # the searches' points are sizes
        measurements = _get(candidate, "measurements", Mapping, at)
        if not measurements:
            raise ValueError(f"{at}: no measurements")
        medians = {label: float(_get(m, "median", (int, float), f"{at}, {label}"))
                   for label, m in measurements.items()}
        first = next(iter(medians))
        reference = reference or first
        base = medians.get(reference, medians[first])
        for label, m in measurements.items():
            q1 = float(_get(m, "q1", (int, float), f"{at}, {label}"))
            q3 = float(_get(m, "q3", (int, float), f"{at}, {label}"))
            found.setdefault((case, label), []).append(CurvePoint(
                point, medians[label], q1, q3, medians[label] / base if base > 0 else 1.0))
    series = tuple(Series(case, label, tuple(sorted(points, key=lambda p: p.size)))
                   for (case, label), points in found.items())
    return series, reference


def _kind(labels: set[str], settings: Sequence[str]) -> str:
    if not labels:
        return UNMEASURED
    if labels <= set(settings):
        return COMPARISON
    if all(_THREAD_LABEL.fullmatch(label) for label in labels):
        return THREADS
    if labels == {"decided", "previous"}:
        return VERIFICATION
    return CROSSOVER


def _recorded_marks(data: Mapping, where: str) -> list[Mark]:
    """The marks a decision recorded (none in a report older than them)."""
    marks = []
    for index, mark in enumerate(_get(data, "marks", list, where) if "marks" in data else []):
        at = f"{where}, marks[{index}]"
        role = _get(mark, "role", str, at)
        if role not in MARK_ROLES:
            raise ValueError(f"{at}: 'role' is {role!r}, not one of {', '.join(MARK_ROLES)}")
        marks.append(Mark(_get(mark, "case", str, at), _get(mark, "size", int, at), role))
    return marks


def _units(data: Mapping, where: str) -> dict[str, str]:
    """What each case's sizes count, as the decision recorded it (nothing in older reports)."""
    units = _get(data, "units", Mapping, where) if "units" in data else {}
    for case, unit in units.items():
        if not isinstance(unit, str):
            raise ValueError(f"{where}, units: {case!r} is {type(unit).__name__}")
    return dict(units)


def _axis_marks(parameter: str, value: TuningValue, baseline: TuningValue,
                marks: Sequence[Mark]) -> tuple[AxisMark, ...]:
    """The recorded marks with their legends: the selected value and the value in use
    before once where every case has them at one size, else one per case; each case's
    measured crossover."""
    kept = " (kept)" if value == baseline else ""
    labels = {SELECTED: f"selected {parameter} = {value}{kept}",
              PREVIOUS: f"value in use before, {baseline}"}
    shown = []
    for role in MARK_ROLES:
        chosen = [mark for mark in marks if mark.role == role]
        if role == MEASURED:
            shown += [AxisMark(f"crossover measured on {m.case}", m.size, role) for m in chosen]
        elif len({mark.size for mark in chosen}) == 1:
            shown.append(AxisMark(labels[role], chosen[0].size, role))
        else:
            shown += [AxisMark(f"{labels[role]} ({m.case})", m.size, role) for m in chosen]
    return tuple(shown)


def _decision(data: object, settings: Mapping[str, Mapping], values: Mapping[str, object],
              where: str) -> DecisionCurves:
    parameter = _get(data, "parameter", str, where)
    value = _get(data, "value", (int, float, str, bool), where)
    baseline = _get(data, "baseline", (int, float, str, bool), where)
    reason = _get(data, "reason", str, where)
    candidates = _get(data, "candidates", list, where)
    series, reference = _series(candidates, where)
    kind = _kind({s.label for s in series}, list(settings))
    marks = _axis_marks(parameter, value, baseline, _recorded_marks(data, where))
    selected = None
    if kind == COMPARISON:
        # relative to the value in use, whatever label each point measured first
        reference = next(iter(settings))
        series, _ = _series(candidates, where, reference)
        selected = next((label for label, chosen in settings.items()
                         if all(values.get(name) == v for name, v in chosen.items())), None)
    elif kind == THREADS:
        # a count above the largest measured runs as many threads as the largest
        largest = max(int(_THREAD_LABEL.fullmatch(s.label).group(1)) for s in series)
        selected = f"{min(int(value), largest)} threads" if isinstance(value, int) else None
    return DecisionCurves(parameter, value, baseline, data.get("measured"), reason, kind,
                          len(candidates), series, reference, selected, marks,
                          _units(data, where),
                          _optional(Confirmation, data, "confirmation", where))


def _optional(kind: type, data: Mapping, name: str, where: str):
    """``data[name]`` read by ``kind.from_dict``: None when absent (an older report)."""
    if data.get(name) is None:
        return None
    try:
        return kind.from_dict(data[name])
    except ValueError as error:
        raise ValueError(f"{where}, {name}: {error}") from None


def _key(data: object, threads: int, status: str, reason: str | None, where: str) -> KeyCurves:
    try:
        key = KernelTuningKey.from_dict(_get(data, "key", Mapping, where))
    except TuningValidationError as error:
        raise ValueError(f"{where}: {error}") from None
    if status != "calibrated" and data.get("report") is None:
        return KeyCurves(key, threads, status, reason, None, None, ())
    report = data if status == "calibrated" else _get(data, "report", Mapping, where)
    at = where if status == "calibrated" else f"{where}, report"
    values = _get(report, "values", Mapping, at)
    rows = _get(report, "comparison", list, at) if "comparison" in report else []
    settings = {_get(row, "label", str, f"{at}, comparison[{index}]"):
                _get(row, "values", Mapping, f"{at}, comparison[{index}]")
                for index, row in enumerate(rows)}
    decisions = tuple(
        _decision(decision, settings, values, f"{at}, decisions[{index}]")
        for index, decision in enumerate(_get(report, "decisions", list, at)))
    seconds = report.get("seconds")
    return KeyCurves(key, threads, status, reason,
                     float(seconds) if isinstance(seconds, int | float) else None,
                     report.get("stopped_early"), decisions,
                     _optional(KeyInterference, report, "interference", at))


def _batch(data: object, where: str) -> list[KeyCurves]:
    if not isinstance(data, Mapping) or "calibrated" not in data:
        raise ValueError(f"{where}: expected a batch report, an object with 'execution', "
                         f"'calibrated', 'skipped' and 'unsupported'")
    execution = _get(data, "execution", Mapping, where)
    threads = int(_get(execution, "effective_threads", int, f"{where}, execution"))
    keys = [_key(report, threads, "calibrated", None, f"{where}, calibrated[{index}]")
            for index, report in enumerate(_get(data, "calibrated", list, where))]
    for status in ("withheld", "skipped", "unsupported"):
        if status == "withheld" and status not in data:
            continue  # a report older than withholding
        for index, outcome in enumerate(_get(data, status, list, where)):
            at = f"{where}, {status}[{index}]"
            keys.append(_key(outcome, threads, status, _get(outcome, "reason", str, at), at))
    return keys


def report_curves(document: object, path: str = "<report>") -> ReportCurves:
    """The curves of a report as ``calibrate --report`` writes it: a list of batch reports
    (``CalibrationBatchReport.to_dict()``), or one."""
    batches = document if isinstance(document, list) else [document]
    if not batches:
        raise ReportFileError(f"{path}: not a calibration report: an empty list")
    try:
        keys = [key for index, batch in enumerate(batches)
                for key in _batch(batch, f"batch {index + 1}")]
    except ValueError as error:
        raise ReportFileError(f"{path}: not a calibration report: {error}") from None
    return ReportCurves(path, tuple(keys))


def read_calibration_reports(path: str | Path) -> list[object]:
    """The batch reports of a report file (``calibrate --report FILE``: a list, or one)."""
    contents = read_bounded(Path(path), "calibration report")
    if contents.data is None:
        reasons = "; ".join(p.message for p in contents.problems) or "no such file"
        raise ReportFileError(f"{path}: cannot be read: {reasons}")
    try:
        text = contents.data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportFileError(f"{path}: not a calibration report: not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportFileError(f"{path}: not a calibration report: not JSON ({error})") from None
    return document if isinstance(document, list) else [document]


def read_report_curves(path: str | Path) -> ReportCurves:
    """The curves of a report file (``calibrate --report FILE``)."""
    return report_curves(read_calibration_reports(path), str(path))
