"""The processor model: what a tuning profile is matched against.

A processor (:class:`CpuDescriptor`) and how a kernel runs on it
(:class:`CpuExecutionDescriptor`), with the validation of their plain-data
form. Whatever is not known stays ``None``: a guessed value would make a
profile match a processor it was never calibrated on. Detection is in
:mod:`kerneltune.machine.detect`, descriptor files in :mod:`kerneltune.machine.descriptor_files`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, NoReturn

from kerneltune.errors import CpuDescriptorError, Problem
from kerneltune.machine.names import (
    canonical_architecture,
    canonical_microarchitecture,
    canonical_vendor,
)

__all__ = ["CpuDescriptor", "CpuExecutionDescriptor"]



@dataclass(frozen=True)
class CpuDescriptor:
    """One processor as far as it is known; every field defaults to unknown (``None``).

    ``features`` are the kernel's own flag names (``flags`` on x86_64,
    ``Features`` on aarch64), so a selector can ask for any flag the kernel
    reports, not only those archspec knows.
    """

    architecture: str | None = None
    vendor: str | None = None
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    microarchitecture: str | None = None
    features: frozenset[str] = frozenset()
    cache_line_bytes: int | None = None
    l1_data_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None

    @functools.cached_property
    def identity(self) -> tuple[Any, ...]:
        """What profiles are matched on.

        Cache sizes and core counts are left out: they differ between SKUs
        and VM shapes of one processor whose tuning is otherwise the same.
        """
        return (
            self.architecture,
            self.vendor,
            self.family,
            self.model,
            self.stepping,
            self.microarchitecture,
            self.features,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML and JSON; unknown fields are written as null, not dropped."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["features"] = sorted(self.features)
        return data

    @classmethod
    def from_dict(cls, data: object, source: str = "<dict>") -> CpuDescriptor:
        """Validate hand-written or stored data, reporting every problem with ``source``."""
        try:
            return _build(cls, _DESCRIPTOR_CHECKS, data)
        except _Invalid as invalid:
            raise _descriptor_error(source, invalid.problems) from None


@dataclass(frozen=True)
class CpuExecutionDescriptor:
    """A processor together with how a kernel will run on it.

    The same processor tunes differently with 4 threads on 4 physical cores
    than with 4 threads on 2 hyper-threaded cores, so the affinity *shape*
    is part of the identity; the CPU ids themselves are recorded only for
    diagnostics, because a scheduler may hand out different ids next time.
    """

    processor: CpuDescriptor
    effective_threads: int
    affinity: frozenset[int]
    affinity_physical_cores: int | None
    numa_policy: str = "default"

    def __post_init__(self) -> None:
        if not _is_count(self.effective_threads, minimum=1):
            raise ValueError(
                f"effective_threads must be an int >= 1 (bool is not accepted), "
                f"got {self.effective_threads!r}"
            )

    @functools.cached_property
    def identity(self) -> tuple[Any, ...]:
        """What profiles are matched on: processor, threads, NUMA policy and affinity shape."""
        return (
            self.processor.identity,
            self.effective_threads,
            self.numa_policy,
            len(self.affinity),
            self.affinity_physical_cores,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML and JSON, with the processor nested."""
        return {
            "processor": self.processor.to_dict(),
            "effective_threads": self.effective_threads,
            "affinity": sorted(self.affinity),
            "affinity_physical_cores": self.affinity_physical_cores,
            "numa_policy": self.numa_policy,
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "<dict>") -> CpuExecutionDescriptor:
        """Validate stored data, reporting every problem (nested ones as ``processor.x``)."""
        try:
            return _build(cls, _EXECUTION_CHECKS, data)
        except _Invalid as invalid:
            raise _descriptor_error(source, invalid.problems) from None


# --- validation -------------------------------------------------------------------------------


class _Invalid(Exception):
    """Problems found below some field; the caller prefixes the field path."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems)
        self.problems = problems


def _expected(what: str, value: object) -> NoReturn:
    raise _Invalid([Problem("", f"expected {what}, got {value!r}")])


def _is_count(value: object, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _count(minimum: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if not _is_count(value, minimum):
            _expected(f"an integer >= {minimum} (not a bool)", value)
        return value  # type: ignore[return-value]

    return check


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        _expected("a non-empty string", value)
    return value


def _named(canonical: Callable[[str], str | None], what: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        name = canonical(value) if isinstance(value, str) else None
        if name is None:
            _expected(f"a known {what} name", value)
        return name

    return check


def _optional(check: Callable[[object], Any]) -> Callable[[object], Any]:
    return lambda value: None if value is None else check(value)


def _string_set(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        _expected("a list of strings", value)
    return frozenset(item.strip().lower() for item in value)


def _cpu_id_set(value: object) -> frozenset[int]:
    if not isinstance(value, list) or not all(_is_count(item) for item in value):
        _expected("a list of CPU ids (integers >= 0)", value)
    return frozenset(value)


def _build(cls: type, checks: Mapping[str, Callable[[object], Any]], data: object) -> Any:
    """Construct ``cls`` from ``data``; fields without a dataclass default are required."""
    if not isinstance(data, Mapping):
        _expected(f"a mapping with the fields {', '.join(checks)}", data)
    problems = [
        Problem(str(key), f"unknown field; expected one of {', '.join(checks)}")
        for key in data
        if key not in checks
    ]
    values = {}
    for spec in fields(cls):
        if spec.name not in data:
            if spec.default is MISSING:
                problems.append(Problem(spec.name, "missing required field"))
            continue
        try:
            values[spec.name] = checks[spec.name](data[spec.name])
        except _Invalid as invalid:
            problems.extend(
                Problem(".".join(filter(None, (spec.name, p.field))), p.message)
                for p in invalid.problems
            )
    if problems:
        raise _Invalid(problems)
    return cls(**values)


def _descriptor_error(source: str, problems: Iterable[Problem]) -> CpuDescriptorError:
    lines = [str(problem) for problem in problems]
    if len(lines) == 1:
        return CpuDescriptorError(f"{source}: {lines[0]}")
    listed = "\n".join(f"  - {line}" for line in lines)
    return CpuDescriptorError(f"{source}: {len(lines)} problems:\n{listed}")


_DESCRIPTOR_CHECKS: dict[str, Callable[[object], Any]] = {
    "architecture": _optional(_named(canonical_architecture, "architecture")),
    "vendor": _optional(_named(canonical_vendor, "vendor")),
    "family": _optional(_count(0)),
    "model": _optional(_count(0)),
    "stepping": _optional(_count(0)),
    "microarchitecture": _optional(_named(canonical_microarchitecture, "archspec target")),
    "features": _string_set,
    "cache_line_bytes": _optional(_count(1)),
    "l1_data_bytes": _optional(_count(1)),
    "l2_bytes": _optional(_count(1)),
    "l3_bytes": _optional(_count(1)),
    "physical_cores": _optional(_count(1)),
    "logical_cores": _optional(_count(1)),
}

_EXECUTION_CHECKS: dict[str, Callable[[object], Any]] = {
    "processor": lambda value: _build(CpuDescriptor, _DESCRIPTOR_CHECKS, value),
    "effective_threads": _count(1),
    "affinity": _cpu_id_set,
    "affinity_physical_cores": _optional(_count(1)),
    "numa_policy": _text,
}
