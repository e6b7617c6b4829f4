"""What a calibration profile is for, and the measurements behind it.

A key names one operator of one backend implementation and either the exact
execution it was measured on (model, processor, threads) or the structure of
the models it serves (portable). Every argument is checked when a value is
built, so a bad key raises before anything is stored, with every problem and
the field it concerns.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._support.checks import is_count
from .._support.documents import kind
from ..errors import Problem, TuningValidationError

#: a backend's structural model properties, given as a mapping or as (name, value) pairs
StructuralProperties = Mapping[str, str] | Iterable[tuple[str, str]]
#: the fields of an exact identity, all of them required together
EXACT_FIELDS = ("model_digest", "processor", "thread_count")


def name_problems(value: object, field: str) -> list[Problem]:
    """A name must be a string with something in it: a blank one names nothing."""
    if not isinstance(value, str):
        return [Problem(field, f"expected a string, got {kind(value)}")]
    if not value.strip():
        return [Problem(field, "empty; expected a name")]
    return []


def prefixed(problems: Iterable[Problem], prefix: str) -> list[Problem]:
    """A part's problems, named from the whole: ``key.thread_count``, ``measurements[2].value``."""
    return [Problem(f"{prefix}.{p.field}" if p.field else prefix, p.message, p.entry, p.file)
            for p in problems]


def structure_of(properties: object, field: str
                 ) -> tuple[tuple[tuple[str, str], ...], list[Problem]]:
    """Structural properties as sorted (name, value) pairs, and what is wrong with them.

    Sorted, so that two spellings of one structure are one key.
    """
    if isinstance(properties, Mapping):
        pairs = list(properties.items())
    elif isinstance(properties, (str, bytes)) or not isinstance(properties, Iterable):
        return (), [Problem(field, f"expected a mapping of names to strings, got "
                                   f"{kind(properties)}")]
    else:
        pairs = list(properties)
    if all(type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str and pair[0].strip()
           and type(pair[1]) is str for pair in pairs) and len(dict(pairs)) == len(pairs):
        return tuple(sorted(pairs)), []  # the rule, checked fast: every lookup checks it twice
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            problems.append(Problem(f"{field}[{index}]", f"expected a (name, value) pair, got "
                                                         f"{kind(pair)}"))
            continue
        name, value = pair
        name_errors = name_problems(name, f"{field}[{index}]")
        if name_errors:
            problems += name_errors
            continue
        if not isinstance(value, str):
            problems.append(Problem(f"{field}.{name}", f"expected a string, got {kind(value)}"))
        elif name in seen:
            problems.append(Problem(f"{field}.{name}", "given twice"))
        seen[name] = value
    return tuple(sorted(seen.items())), problems


@dataclass(frozen=True)
class CalibrationProfileKey:
    """One operator of one backend implementation, on an exact execution or a structure.

    An exact key (``model_digest``, ``processor`` and ``thread_count``, all three)
    binds a profile to where it was measured; ``processor`` is the backend's own
    description, including whatever cache topology its kernels depend on. A
    portable key (``structural_properties``, such as dtype and shape pattern)
    serves any model and machine of that structure. A key is one or the other:
    one that claimed both could be selected on a machine it was never measured on.
    ``structural_properties`` may be given as a mapping or as pairs and is kept
    as sorted pairs, so a key is hashable and two spellings of it are equal.
    """

    backend: str
    operator_name: str
    implementation_version: str
    model_digest: str | None = None
    processor: str | None = None
    thread_count: int | None = None
    structural_properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        problems = [p for name in ("backend", "operator_name", "implementation_version")
                    for p in name_problems(getattr(self, name), name)]
        properties, structure_problems = structure_of(self.structural_properties or (),
                                                      "structural_properties")
        problems += structure_problems
        given = [name for name in EXACT_FIELDS if getattr(self, name) is not None]
        if self.structural_properties or structure_problems:
            problems += [Problem(name, "a key is exact (model_digest, processor, thread_count) "
                                       "or portable (structural_properties), not both")
                         for name in given]
        elif given:
            problems += [Problem(name, "missing; an exact key needs model_digest, processor "
                                       "and thread_count")
                         for name in EXACT_FIELDS if name not in given]
            problems += [p for name in ("model_digest", "processor") if name in given
                         for p in name_problems(getattr(self, name), name)]
            if self.thread_count is not None and not is_count(self.thread_count, 1):
                problems.append(Problem("thread_count", f"expected an integer of at least 1, "
                                                        f"got {self.thread_count!r}"))
        else:
            problems.append(Problem("structural_properties", "missing; a key needs an exact "
                                    "identity (model_digest, processor, thread_count) or a "
                                    "portable one (structural_properties)"))
        if problems:
            raise TuningValidationError(problems, context="calibration profile key")
        object.__setattr__(self, "structural_properties", properties)
        if self.thread_count is not None:
            object.__setattr__(self, "thread_count", int(self.thread_count))

    @property
    def exact(self) -> bool:
        return not self.structural_properties

    @property
    def kind(self) -> str:
        """``exact`` or ``portable``, as lookups and reports name the two identities."""
        return "exact" if self.exact else "portable"

    def portable(self, structural_properties: StructuralProperties) -> CalibrationProfileKey:
        """The portable key of the same backend, operator and implementation."""
        return CalibrationProfileKey(self.backend, self.operator_name,
                                     self.implementation_version,
                                     structural_properties=structural_properties)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        """The key as plain data: only the fields of its identity."""
        data: dict[str, object] = {"backend": self.backend, "operator_name": self.operator_name,
                                   "implementation_version": self.implementation_version}
        if self.exact:
            data.update(model_digest=self.model_digest, processor=self.processor,
                        thread_count=self.thread_count)
        else:
            data["structural_properties"] = dict(self.structural_properties)
        return data

    def __str__(self) -> str:
        if self.exact:
            where = f"{self.thread_count} threads on {self.processor!r}, model {self.model_digest}"
        else:
            where = ", ".join(f"{name}={value}" for name, value in self.structural_properties)
        return (f"{self.backend}/{self.operator_name} implementation "
                f"{self.implementation_version} ({where})")


@dataclass(frozen=True)
class CalibrationMeasurement:
    """One named figure a calibration measured, kept for inspection: the policy decides.

    ``value`` must be finite (an infinite latency is a failed measurement, not a
    figure) and is kept as a float; ``unit`` is free text and may be empty.
    """

    name: str
    value: float
    unit: str

    def __post_init__(self) -> None:
        problems = name_problems(self.name, "name")
        value = self.value
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            problems.append(Problem("value", f"expected a finite number, got {kind(value)}"))
        else:
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                problems.append(Problem("value", f"expected a finite number, got {self.value!r}"))
        if not isinstance(self.unit, str):
            problems.append(Problem("unit", f"expected a string, got {kind(self.unit)}"))
        if problems:
            raise TuningValidationError(problems, context="calibration measurement")
        object.__setattr__(self, "value", value)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "unit": self.unit}


#: a measurement as a backend gives it: the value itself or a (name, value, unit) triple
MeasurementLike = CalibrationMeasurement | tuple[str, float, str]


def measurements_of(items: object, field: str = "measurements"
                    ) -> tuple[CalibrationMeasurement, ...]:
    """Measurements from values or (name, value, unit) triples; raise with every problem.

    Two measurements of one name say two things about one figure, so they are refused.
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise TuningValidationError([Problem(field, f"expected (name, value, unit) triples, "
                                                    f"got {kind(items)}")])
    measurements, problems, names = [], [], set()
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        try:
            if isinstance(item, CalibrationMeasurement):
                measurement = item
            elif isinstance(item, (tuple, list)) and len(item) == 3:
                measurement = CalibrationMeasurement(*item)
            else:
                raise TuningValidationError([Problem("", f"expected a (name, value, unit) "
                                                         f"triple, got {kind(item)}")])
        except TuningValidationError as error:
            problems += prefixed(error.problems, where)
            continue
        if measurement.name in names:
            problems.append(Problem(f"{where}.name", f"{measurement.name!r} is measured twice"))
        names.add(measurement.name)
        measurements.append(measurement)
    if problems:
        raise TuningValidationError(problems, context="calibration measurements")
    return tuple(measurements)
