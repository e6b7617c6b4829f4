"""Processor selectors: which machines a tuning profile is meant for.

A selector is canonicalised and validated when it is built, so a misspelt
feature or vendor is an error at registration instead of a profile that
silently never matches. Its specificity tier decides precedence in resolution;
:meth:`CpuSelector.can_overlap` lets the registry reject ambiguous profiles.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields

import archspec.cpu

from .._support.checks import is_int
from ..errors import Problem, TuningValidationError
from . import names


class Tier(enum.IntEnum):
    """Resolution precedence, highest first (docs/design.md, Resolution)."""

    DEFAULTS = 0
    PORTABLE = 1
    INSTRUCTION_SET = 2
    PROCESSOR_GROUP = 3
    EXACT_PROCESSOR = 4
    CALIBRATED = 5
    OVERRIDE = 6

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class CpuSelector:
    """A set of processors (and thread counts) a profile applies to.

    Unset fields match everything; ``models`` is a list so one profile can name
    several processors of a family. Built from any accepted spelling
    (``AuthenticAMD``, ``amd64``, ``Zen 4``, ``SSE4.1``) and stored canonical.
    """

    architecture: str | None = None
    vendor: str | None = None
    family: int | None = None
    models: tuple[int, ...] = ()
    microarchitecture: str | None = None
    required_features: frozenset[str] = field(default_factory=frozenset)
    excluded_features: frozenset[str] = field(default_factory=frozenset)
    minimum_threads: int | None = None
    maximum_threads: int | None = None

    def __post_init__(self) -> None:
        problems: list[Problem] = []
        set_ = functools.partial(object.__setattr__, self)
        set_("architecture", _canonical(self.architecture, "architecture",
                                        names.canonical_architecture, problems))
        set_("vendor", _canonical(self.vendor, "vendor", names.canonical_vendor, problems))
        set_("microarchitecture", _canonical(self.microarchitecture, "microarchitecture",
                                             names.canonical_microarchitecture, problems))
        set_("required_features", _features(self.required_features, "required_features", problems))
        set_("excluded_features", _features(self.excluded_features, "excluded_features", problems))
        set_("models", _models(self.models, problems))
        for name, lowest in (("family", 0), ("minimum_threads", 1), ("maximum_threads", 1)):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < lowest):
                problems.append(Problem(name, f"expected an integer >= {lowest}, got {value!r}"))
        problems += self._consistency_problems(field_problems=bool(problems))
        if problems:
            raise TuningValidationError(problems, context="processor selector")

    def _consistency_problems(self, field_problems: bool) -> list[Problem]:
        problems = []
        if not field_problems and not self.to_dict():
            problems.append(Problem("", "empty selector: it would match every processor; "
                                        "register portable values as the kernel's defaults"))
        both = self.required_features & self.excluded_features
        if both:
            problems.append(Problem("excluded_features",
                                    f"{', '.join(sorted(both))} both required and excluded"))
        low, high = self.minimum_threads, self.maximum_threads
        if is_int(low) and is_int(high) and low > high:
            problems.append(Problem("maximum_threads", f"{self.maximum_threads} is below "
                                                       f"minimum_threads {self.minimum_threads}"))
        if self.models and (self.vendor is None or self.family is None):
            problems.append(Problem("models", "model numbers need a vendor and a family"))
        if self.family is not None and self.vendor is None:
            problems.append(Problem("family", "a family number needs a vendor"))
        target = self._target
        if target is not None:
            vendor = names.canonical_vendor(target.vendor) if target.vendor != "generic" else None
            if self.vendor and vendor and vendor != self.vendor:
                problems.append(Problem("microarchitecture", f"{target.name} is made by "
                                                             f"{vendor}, not {self.vendor}"))
            if self.architecture and str(target.family) != self.architecture:
                problems.append(Problem("microarchitecture", f"{target.name} is "
                                                             f"{target.family}, not "
                                                             f"{self.architecture}"))
            missing = self.excluded_features & set(target.features)
            if missing:
                problems.append(Problem("excluded_features",
                                        f"{target.name} always has {', '.join(sorted(missing))}"))
        return problems

    @property
    def _target(self) -> archspec.cpu.Microarchitecture | None:
        return archspec.cpu.TARGETS[self.microarchitecture] if self.microarchitecture else None

    @functools.cached_property
    def tier(self) -> Tier:
        """How specific the selector is: exact processor, group, instruction set or portable."""
        if self.vendor and self.family is not None and len(self.models) == 1:
            return Tier.EXACT_PROCESSOR
        if self.models or self.microarchitecture or self.family is not None or self.vendor:
            return Tier.PROCESSOR_GROUP
        if self.required_features or self.excluded_features:
            return Tier.INSTRUCTION_SET
        return Tier.PORTABLE

    @functools.cached_property
    def rank(self) -> tuple[int, int, int]:
        """Finer specificity inside a tier, for ordering listings (priority decides ties).

        Fewer models, a deeper microarchitecture and more feature conditions
        mean fewer processors match.
        """
        depth = len(self._target.ancestors) + 1 if self._target is not None else 0
        models = -len(self.models) if self.models else -(2**31)
        return (depth, models, len(self.required_features) + len(self.excluded_features))

    def mismatches(self, execution: object) -> tuple[str, ...]:
        """The fields of the selector an execution fails (empty when it matches).

        ``execution`` is a :class:`~kerneltune.machine.descriptor.CpuExecutionDescriptor`;
        a bare processor descriptor is accepted too, with thread bounds ignored.
        """
        processor = getattr(execution, "processor", execution)
        failed = [
            name
            for name, wanted, actual in (
                ("architecture", self.architecture, processor.architecture),
                ("vendor", self.vendor, processor.vendor),
                ("family", self.family, processor.family),
                ("microarchitecture", self.microarchitecture, processor.microarchitecture),
            )
            if wanted is not None and wanted != actual
        ]
        if self.models and processor.model not in self.models:
            failed.append("models")
        if not self.required_features <= processor.features:
            failed.append("required_features")
        if self.excluded_features & processor.features:
            failed.append("excluded_features")
        threads = getattr(execution, "effective_threads", None)
        if threads is not None and not self.accepts_threads(threads):
            failed.append("threads")
        return tuple(failed)

    def matches(self, execution: object) -> bool:
        """Same answer as ``not mismatches(execution)``, without building the list.

        This is the inner loop of resolution, so it returns at the first
        failing field, testing the thread bounds (two integer comparisons) first.
        """
        threads = getattr(execution, "effective_threads", None)
        if threads is not None and not self.accepts_threads(threads):
            return False
        return self.matches_processor(getattr(execution, "processor", execution))

    def matches_processor(self, processor: object) -> bool:
        """Whether the processor fields match, thread bounds aside (resolution tests those)."""
        return not (
            (self.architecture is not None and self.architecture != processor.architecture)
            or (self.vendor is not None and self.vendor != processor.vendor)
            or (self.family is not None and self.family != processor.family)
            or (self.models and processor.model not in self.models)
            or (self.microarchitecture is not None
                and self.microarchitecture != processor.microarchitecture)
            or not self.required_features <= processor.features
            or (self.excluded_features and not self.excluded_features.isdisjoint(
                processor.features))
        )

    def accepts_threads(self, threads: int) -> bool:
        return (self.minimum_threads is None or threads >= self.minimum_threads) and (
            self.maximum_threads is None or threads <= self.maximum_threads
        )

    def can_overlap(self, other: CpuSelector) -> bool:
        """False only when no processor and thread count can match both.

        Conservative: when in doubt the answer is True, so the registry errs on
        the side of calling two profiles ambiguous.
        """
        low = max(self.minimum_threads or 1, other.minimum_threads or 1)
        high = min(self.maximum_threads or 2**31, other.maximum_threads or 2**31)
        if low > high:
            return False
        a, b = self._implied, other._implied
        for name in ("architecture", "vendor", "family", "microarchitecture"):
            if a[name] is not None and b[name] is not None and a[name] != b[name]:
                return False
        if self.models and other.models and not set(self.models) & set(other.models):
            return False
        return not (a["required"] & b["excluded"] or b["required"] & a["excluded"])

    @functools.cached_property
    def _implied(self) -> dict[str, object]:
        """The fields, completed with what the microarchitecture implies."""
        target = self._target
        implied = {
            "architecture": self.architecture or (str(target.family) if target else None),
            "vendor": self.vendor,
            "family": self.family,
            "microarchitecture": self.microarchitecture,
            "required": self.required_features | (set(target.features) if target else set()),
            "excluded": self.excluded_features,
        }
        if target is not None and implied["vendor"] is None and target.vendor != "generic":
            implied["vendor"] = names.canonical_vendor(target.vendor)
        return implied

    def to_dict(self) -> dict[str, object]:
        """The canonical file form: only the fields that are set, lists sorted."""
        data: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == () or value == frozenset():
                continue
            data[f.name] = sorted(value) if isinstance(value, tuple | frozenset) else value
        return data

    @classmethod
    def from_dict(cls, data: object) -> CpuSelector:
        """Build a selector from its file form, reporting unknown and ill-typed fields."""
        if not isinstance(data, Mapping):
            raise TuningValidationError([Problem("selector", f"expected a mapping, got "
                                                             f"{type(data).__name__}")])
        known = {f.name for f in fields(cls)}
        unknown = [Problem(str(name), "unknown selector field") for name in data
                   if name not in known]
        if unknown:
            raise TuningValidationError(unknown, context="processor selector")
        return cls(**data)

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items())


def _canonical(value, name, canonicalise, problems):
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(Problem(name, f"expected a string, got {type(value).__name__}"))
        return None
    result = canonicalise(value)
    if result is None:
        problems.append(Problem(name, f"unknown {name} {value!r}"))
    return result


def _features(value, name, problems) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        problems.append(Problem(name, "expected a list of feature names"))
        return frozenset()
    result = set()
    for item in value:
        feature = names.canonical_feature(item) if isinstance(item, str) else None
        if feature is None:
            problems.append(Problem(name, f"unknown feature {item!r} (archspec does not know it)"))
        else:
            result.add(feature)
    return frozenset(result)


def _models(value, problems) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, str) or not isinstance(value, Iterable):
        problems.append(Problem("models", "expected a list of model numbers"))
        return ()
    items = list(value)
    bad = [m for m in items if not is_int(m) or m < 0]
    if bad:
        problems.append(Problem("models", f"not model numbers: {bad!r}"))
        return ()
    duplicates = sorted({m for m in items if items.count(m) > 1})
    if duplicates:
        problems.append(Problem("models", f"duplicate models {duplicates}"))
    return tuple(sorted(set(items)))


def overlapping_pairs(selectors: Sequence[CpuSelector]) -> list[tuple[int, int]]:
    """Every pair ``(i, j)``, ``i < j``, of ``selectors`` that can match one processor and
    thread count (:meth:`CpuSelector.can_overlap`), in ascending order.

    Selectors are compared within buckets only, each by a sweep over its thread ranges'
    starts, so a fleet of profiles costs n log n comparisons rather than the n² of every
    pair: a selector naming a family and models is compared with those naming the same
    family and one of its models, one naming a microarchitecture (and no model) with
    those naming the same one; those naming neither, and the pairs across those two
    kinds, are compared with every other.
    """
    ranges = [(s.minimum_threads or 1, s.maximum_threads or 2**31) for s in selectors]
    buckets: dict[tuple, list[int]] = {}
    broad, by_models, by_microarchitecture = [], [], []
    for index, selector in enumerate(selectors):
        if selector.models and selector.family is not None:
            for model in selector.models:
                buckets.setdefault((selector.family, model), []).append(index)
            by_models.append(index)
        elif selector.microarchitecture is not None:
            buckets.setdefault((selector.microarchitecture,), []).append(index)
            by_microarchitecture.append(index)
        else:
            broad.append(index)
    candidates: set[tuple[int, int]] = set()
    for group in buckets.values():
        candidates.update(_meeting(group, ranges))
    across = by_models if len(by_models) < len(by_microarchitecture) else by_microarchitecture
    others = by_microarchitecture if across is by_models else by_models
    for first, rest in ((first, range(len(selectors))) for first in broad):
        candidates.update(_met(first, rest, ranges))
    for first in across:
        candidates.update(_met(first, others, ranges))
    return sorted(pair for pair in candidates if selectors[pair[0]].can_overlap(selectors[pair[1]]))


def _met(first: int, others: Iterable[int], ranges: Sequence[tuple[int, int]]
         ) -> Iterator[tuple[int, int]]:
    """The pairs of ``first`` with each of ``others`` whose thread ranges meet its own."""
    low, high = ranges[first]
    return ((min(first, other), max(first, other)) for other in others
            if other != first and low <= ranges[other][1] and ranges[other][0] <= high)


def _meeting(indices: Iterable[int], ranges: Sequence[tuple[int, int]]
             ) -> Iterator[tuple[int, int]]:
    """The pairs of ``indices`` whose thread ranges meet, by a sweep over the ranges' starts."""
    active: list[int] = []
    for index in sorted(indices, key=lambda i: ranges[i][0]):
        low = ranges[index][0]
        active = [other for other in active if ranges[other][1] >= low]
        yield from ((other, index) if other < index else (index, other) for other in active)
        active.append(index)
