"""The processor model: what a tuning profile is matched against.

A profile calibrated on one processor is only trusted on processors with the
same identity, so detection must be reproducible: it is a pure function of the
files the kernel exposes (``/proc/cpuinfo`` and ``/sys/devices/system/cpu``),
which lets the build farm replay any processor from a fake root, and lets a
descriptor file (``KERNELTUNE_CPU_DESCRIPTOR``) stand in for the host.
Whatever cannot be read stays ``None``: a guessed value would make a profile
match a processor it was never calibrated on.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

import archspec.cpu
import archspec.cpu.detect
import yaml
from archspec.cpu.schema import TARGETS_JSON

from kerneltune.errors import CpuDescriptorError, Problem
from kerneltune.names import (
    canonical_architecture,
    canonical_microarchitecture,
    canonical_vendor,
)

__all__ = [
    "CpuDescriptor",
    "CpuExecutionDescriptor",
    "current_execution",
    "detect_cpu_descriptor",
    "dump_cpu_descriptor",
    "get_cpu_descriptor",
    "load_cpu_descriptor",
]

DESCRIPTOR_ENVIRONMENT_VARIABLE = "KERNELTUNE_CPU_DESCRIPTOR"
FILE_FORMAT = "kerneltune-cpu-descriptor"
SCHEMA_VERSION = 1


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


# --- descriptor files -------------------------------------------------------------------------


def dump_cpu_descriptor(descriptor: CpuDescriptor, path: str | os.PathLike[str]) -> None:
    """Write ``descriptor`` under a format header, so a later reader can refuse a newer file."""
    document = {"format": FILE_FORMAT, "schema_version": SCHEMA_VERSION, **descriptor.to_dict()}
    Path(path).write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def load_cpu_descriptor(path: str | os.PathLike[str]) -> CpuDescriptor:
    """Read a descriptor file written by :func:`dump_cpu_descriptor` or by hand.

    Only plain YAML is accepted: a tag that would construct a Python object
    is an error, since a descriptor file may come from anywhere.
    """
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CpuDescriptorError(f"{source}: cannot read the processor descriptor: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _descriptor_error(source, [_yaml_problem(text, exc)]) from None
    if data is None:
        raise CpuDescriptorError(f"{source}: the file is empty; expected a processor descriptor")
    if isinstance(data, Mapping) and ("format" in data or "schema_version" in data):
        data = dict(data)
        header = [_check_header("format", data.pop("format", None), FILE_FORMAT)]
        header.append(
            _check_header("schema_version", data.pop("schema_version", None), SCHEMA_VERSION)
        )
        if any(header):
            raise _descriptor_error(source, filter(None, header))
    return CpuDescriptor.from_dict(data, source=source)


def _check_header(name: str, value: object, expected: object) -> Problem | None:
    if type(value) is type(expected) and value == expected:
        return None
    found = "it is missing" if value is None else f"got {value!r}"
    return Problem(name, f"expected {expected!r} (the only one this version reads), {found}")


def _yaml_problem(text: str, error: yaml.YAMLError) -> Problem:
    """Locate a YAML error at the descriptor field it occurred in, where that can be told."""
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return Problem("", f"not a plain YAML processor descriptor: {error}")
    parts = [
        f"{message} (line {where.line + 1}, column {where.column + 1})"
        for message, where in (
            (getattr(error, "context", None), getattr(error, "context_mark", None)),
            (getattr(error, "problem", None), mark),
        )
        if message and where
    ]
    return Problem(
        _field_at(text, mark), f"not a plain YAML processor descriptor: {': '.join(parts)}"
    )


def _field_at(text: str, mark: yaml.Mark) -> str:
    """The dotted key path whose value contains ``mark``; composing builds no Python objects."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return ""
    path: list[str] = []
    while isinstance(node, yaml.MappingNode):
        inside = [
            (key, value)
            for key, value in node.value
            if value.start_mark.index <= mark.index <= value.end_mark.index
        ]
        if not inside:
            break
        key, node = inside[0]
        path.append(str(key.value))
    return ".".join(path)


_descriptor_lock = threading.Lock()
_descriptor: CpuDescriptor | None = None


def get_cpu_descriptor() -> CpuDescriptor:
    """The processor of this process, detected once; ``KERNELTUNE_CPU_DESCRIPTOR`` overrides it.

    The override lets the build farm resolve profiles for a processor it is
    not running on, and lets ``profiles explain`` answer for any machine.
    """
    global _descriptor
    with _descriptor_lock:
        if _descriptor is None:
            override = os.environ.get(DESCRIPTOR_ENVIRONMENT_VARIABLE)
            if override:
                try:
                    _descriptor = load_cpu_descriptor(override)
                except CpuDescriptorError as exc:
                    raise CpuDescriptorError(f"{DESCRIPTOR_ENVIRONMENT_VARIABLE}={exc}") from None
            else:
                _descriptor = detect_cpu_descriptor()
        return _descriptor


# --- detection --------------------------------------------------------------------------------


def _integer(key: str, base: int = 10) -> Callable[[Mapping[str, str]], int | None]:
    def read(block: Mapping[str, str]) -> int | None:
        try:
            return int(block[key], base)
        except (KeyError, ValueError):
            return None

    return read


def _midr_stepping(block: Mapping[str, str]) -> int | None:
    """``(variant << 4) | revision``: MIDR_EL1 bits [23:20] and [3:0], i.e. ``rNpM`` in one int.

    aarch64 has no stepping field; variant (major) and revision (minor)
    together are what distinguishes silicon revisions of one part number.
    """
    variant, revision = _integer("CPU variant", 16)(block), _integer("CPU revision")(block)
    return None if variant is None or revision is None else (variant << 4) | revision


@dataclass(frozen=True)
class _CpuinfoLayout:
    """Where one architecture's ``/proc/cpuinfo`` keeps the facts, and how archspec names them."""

    vendor_key: str
    archspec_vendor: Callable[[str], str]
    numbers: Mapping[str, Callable[[Mapping[str, str]], int | None]]
    features_key: str
    cpu_part_key: str | None = None


_ARM_VENDORS: Mapping[str, str] = TARGETS_JSON["conversions"]["arm_vendors"]

_CPUINFO_LAYOUTS = {
    "x86_64": _CpuinfoLayout(
        vendor_key="vendor_id",
        archspec_vendor=lambda raw: raw,
        numbers={
            "family": _integer("cpu family"),
            "model": _integer("model"),
            "stepping": _integer("stepping"),
        },
        features_key="flags",
    ),
    "aarch64": _CpuinfoLayout(
        vendor_key="CPU implementer",
        archspec_vendor=lambda raw: _ARM_VENDORS.get(raw, raw),
        numbers={
            "family": _integer("CPU architecture"),
            "model": _integer("CPU part", 16),
            "stepping": _midr_stepping,
        },
        features_key="Features",
        cpu_part_key="CPU part",
    ),
}

_L1_DATA = (1, "Data")

#: sysfs cache (level, type) -> descriptor field
_CACHE_FIELDS = {
    _L1_DATA: "l1_data_bytes",
    (2, "Unified"): "l2_bytes",
    (3, "Unified"): "l3_bytes",
}

_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _first_cpuinfo_block(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines; later blocks repeat it on sane machines."""
    block: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if not separator:
            if block:
                break
            continue
        block[key.strip()] = value.strip()
    return block


def _cpu_list(text: str | None) -> frozenset[int]:
    """Parse the kernel's CPU list format (``0-3,5``); unreadable -> empty."""
    cpus: set[int] = set()
    try:
        for part in filter(None, (text or "").replace("\n", ",").split(",")):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return frozenset()
    return frozenset(cpus)


def _number(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _size_bytes(text: str | None) -> int | None:
    """``32K`` -> 32768, as sysfs prints cache sizes."""
    digits = (text or "").rstrip("KMG")
    number, unit = _number(digits), _SIZE_UNITS.get((text or "")[len(digits) :])
    return None if number is None or unit is None else number * unit


def _topology(cpu_dir: Path, cpus: Iterable[int]) -> dict[int, tuple[str, str]]:
    """CPU id -> (physical_package_id, core_id) for the CPUs whose topology is readable."""
    topology = {}
    for cpu in cpus:
        base = cpu_dir / f"cpu{cpu}" / "topology"
        package, core = _read(base / "physical_package_id"), _read(base / "core_id")
        if package is not None and core is not None:
            topology[cpu] = (package, core)
    return topology


def _physical_cores(topology: Mapping[int, tuple[str, str]], cpus: Iterable[int]) -> int | None:
    """Distinct physical cores behind ``cpus``; None rather than an undercount if any is unknown."""
    cpus = list(cpus)
    if not cpus or any(cpu not in topology for cpu in cpus):
        return None
    return len({topology[cpu] for cpu in cpus})


def _sysfs_fields(cpu_dir: Path) -> dict[str, int | None]:
    online = _cpu_list(_read(cpu_dir / "online"))
    found: dict[str, int | None] = {
        "logical_cores": len(online) or None,
        "physical_cores": _physical_cores(_topology(cpu_dir, online), online),
    }
    cache_dir = cpu_dir / f"cpu{min(online, default=0)}" / "cache"
    caches = {
        (_number(_read(index / "level")), _read(index / "type")): index
        for index in sorted(cache_dir.glob("index*"))
    }
    for kind, name in _CACHE_FIELDS.items():
        found[name] = _size_bytes(_read(caches[kind] / "size")) if kind in caches else None
    # The line size that matters for blocking is the L1 data cache's; any cache's will do otherwise.
    line_sources = [caches[_L1_DATA]] if _L1_DATA in caches else caches.values()
    line_sizes = (_number(_read(index / "coherency_line_size")) for index in line_sources)
    found["cache_line_bytes"] = next(filter(None, line_sizes), None)
    return found


def _archspec_target(
    machine: str, vendor: str, features: frozenset[str], cpu_part: str
) -> str | None:
    """The archspec target for these facts, chosen by the rules of ``archspec.cpu.host()``.

    archspec only detects the host; applying its compatibility check and
    ranking to parsed facts gives the same answer for a fake root, so a
    fixture of a Graviton names ``neoverse_v1`` on an x86 test machine.
    """
    check = archspec.cpu.detect.COMPATIBILITY_CHECKS.get(machine)
    if check is None:
        return None
    info = archspec.cpu.Microarchitecture(
        name=machine,  # archspec's macOS aarch64 rule looks the name up; the family is known
        parents=[],
        vendor=vendor,
        features=set(features),
        compilers={},
        cpu_part=cpu_part,
    )
    candidates = [target for target in archspec.cpu.TARGETS.values() if check(info, target)]
    generic = [target for target in candidates if target.vendor == "generic"]
    if not generic:
        return None

    def rank(target: archspec.cpu.Microarchitecture) -> tuple[int, int]:
        return len(target.ancestors), len(target.features)

    best_generic = max(generic, key=rank)
    if cpu_part and any(target.cpu_part == cpu_part for target in candidates):
        candidates = [target for target in candidates if target.cpu_part == cpu_part]
    specific = [target for target in candidates if target > best_generic]
    return max(specific, key=rank).name if specific else best_generic.name


def _linux_fields(root: Path, machine: str | None) -> dict[str, Any]:
    found: dict[str, Any] = _sysfs_fields(root / "sys" / "devices" / "system" / "cpu")
    layout = _CPUINFO_LAYOUTS.get(machine or "")
    block = _first_cpuinfo_block(_read(root / "proc" / "cpuinfo") or "")
    if layout is None or not block:
        return found
    raw_vendor = block.get(layout.vendor_key)
    features = frozenset(block.get(layout.features_key, "").lower().split())
    found.update({name: read(block) for name, read in layout.numbers.items()})
    found["vendor"] = canonical_vendor(raw_vendor) if raw_vendor else None
    found["features"] = features
    found["microarchitecture"] = _archspec_target(
        machine,
        layout.archspec_vendor(raw_vendor) if raw_vendor else "generic",
        features,
        block.get(layout.cpu_part_key or "", ""),
    )
    return found


def _archspec_host_fields() -> dict[str, Any]:
    """What archspec's own host detection knows where there is no ``/proc/cpuinfo``."""
    info, host = archspec.cpu.detect.detected_info(), archspec.cpu.host()
    return {
        "vendor": canonical_vendor(info.vendor),
        "features": frozenset(name.lower() for name in info.features | host.features),
        "microarchitecture": host.name if host.name in archspec.cpu.TARGETS else None,
    }


#: descriptor field -> macOS sysctl key
_SYSCTL_KEYS = {
    "cache_line_bytes": "hw.cachelinesize",
    "l1_data_bytes": "hw.l1dcachesize",
    "l2_bytes": "hw.l2cachesize",
    "l3_bytes": "hw.l3cachesize",
    "physical_cores": "hw.physicalcpu",
    "logical_cores": "hw.logicalcpu",
    "family": "machdep.cpu.family",
    "model": "machdep.cpu.model",
    "stepping": "machdep.cpu.stepping",
}


def _darwin_fields() -> dict[str, Any]:
    keys = [*_SYSCTL_KEYS.values(), "machdep.cpu.vendor"]
    try:
        output = subprocess.run(
            ["/usr/sbin/sysctl", "-i", *keys],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        output = ""
    values = {
        key.strip(): value.strip()
        for key, separator, value in (line.partition(":") for line in output.splitlines())
        if separator
    }
    found = _archspec_host_fields()
    found.update({name: _number(values.get(key)) for name, key in _SYSCTL_KEYS.items()})
    if values.get("machdep.cpu.vendor"):
        found["vendor"] = canonical_vendor(values["machdep.cpu.vendor"])
    return found


def _windows_fields() -> dict[str, Any]:
    return {**_archspec_host_fields(), "logical_cores": os.cpu_count()}


_HOST_DETECTORS: Mapping[str, Callable[[], dict[str, Any]]] = {
    "Darwin": _darwin_fields,
    "Windows": _windows_fields,
}


def detect_cpu_descriptor(
    root: str | os.PathLike[str] = "/", machine: str | None = None
) -> CpuDescriptor:
    """Describe the processor seen under ``root``, as of ``machine`` (default: this host's).

    A pure function of ``root/proc/cpuinfo`` and ``root/sys/devices/system/cpu``
    on Linux, so a copied sysroot reproduces a processor anywhere. Missing
    files or fields leave their descriptor fields ``None``. On macOS and
    Windows (``root`` "/" with no ``/proc/cpuinfo``) sysctl and archspec's
    host detection fill in what they can.
    """
    architecture = canonical_architecture(machine or platform.machine())
    base = Path(root)
    host_detector = _HOST_DETECTORS.get(platform.system())
    if host_detector is not None and base == Path("/") and not (base / "proc/cpuinfo").exists():
        found = host_detector()
    else:
        found = _linux_fields(base, architecture)
    return CpuDescriptor(architecture=architecture, **found)


# --- execution --------------------------------------------------------------------------------


@functools.cache
def _host_topology() -> dict[int, tuple[str, str]]:
    """The host's CPU -> physical core map, read once: topology does not change under a process."""
    cpu_dir = Path("/sys/devices/system/cpu")
    cpus = [int(entry.name[3:]) for entry in cpu_dir.glob("cpu[0-9]*") if entry.name[3:].isdigit()]
    return _topology(cpu_dir, cpus)


def _affinity() -> frozenset[int]:
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def current_execution(
    threads: int | None = None, numa_policy: str = "default"
) -> CpuExecutionDescriptor:
    """How a kernel called now would run: this processor, these threads, this affinity.

    ``threads`` defaults to the CPUs this process may run on, which is what a
    thread pool sized by the affinity mask would use.
    """
    if threads is not None and not _is_count(threads, minimum=1):
        raise ValueError(f"threads must be an int >= 1 (bool is not accepted), got {threads!r}")
    affinity = _affinity()
    return CpuExecutionDescriptor(
        processor=get_cpu_descriptor(),
        effective_threads=len(affinity) if threads is None else threads,
        affinity=affinity,
        affinity_physical_cores=_physical_cores(_host_topology(), affinity),
        numa_policy=numa_policy,
    )
