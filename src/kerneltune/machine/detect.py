"""Detection: the processor seen under a root, and the one this process runs on.

A profile calibrated on one processor is only trusted on processors with the
same identity, so detection must be reproducible: it is a pure function of the
files the kernel exposes (``/proc/cpuinfo`` and ``/sys/devices/system/cpu``),
which lets the build farm replay any processor from a fake root. Facts are
read through per-architecture layouts (a table, not branches), and the
microarchitecture is named by archspec's own compatibility rules.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import archspec.cpu
import archspec.cpu.detect
from archspec.cpu.schema import TARGETS_JSON

from ..errors import CpuDescriptorError
from .descriptor import CpuDescriptor, CpuExecutionDescriptor
from .names import canonical_architecture, canonical_vendor
from .threads import affinity, thread_count

DESCRIPTOR_ENVIRONMENT_VARIABLE = "KERNELTUNE_CPU_DESCRIPTOR"


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


@functools.cache
def host_cpu_descriptor() -> CpuDescriptor:
    """The processor this process really runs on, detected once (the host does not change
    under a process); :func:`get_cpu_descriptor` is what profiles resolve for."""
    return detect_cpu_descriptor()


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
                # imported here: without the override a process never reads a descriptor
                # file, nor loads the document machinery that reads one
                from .descriptor_files import read_cpu_descriptor

                try:
                    _descriptor = read_cpu_descriptor(override)
                except CpuDescriptorError as exc:
                    raise CpuDescriptorError(f"{DESCRIPTOR_ENVIRONMENT_VARIABLE}={exc}") from None
            else:
                _descriptor = host_cpu_descriptor()
        return _descriptor


@functools.cache
def _host_topology() -> dict[int, tuple[str, str]]:
    """The host's CPU -> physical core map, read once: topology does not change under a process."""
    cpu_dir = Path("/sys/devices/system/cpu")
    cpus = [int(entry.name[3:]) for entry in cpu_dir.glob("cpu[0-9]*") if entry.name[3:].isdigit()]
    return _topology(cpu_dir, cpus)


def current_execution(
    threads: int | None = None, numa_policy: str = "default"
) -> CpuExecutionDescriptor:
    """How a kernel called now would run: this processor, these threads, this affinity.

    ``threads`` defaults to the CPUs this process may run on, which is what a
    thread pool sized by the affinity mask would use.
    """
    cpus = affinity()
    return CpuExecutionDescriptor(
        processor=get_cpu_descriptor(),
        effective_threads=thread_count(threads),
        affinity=cpus,
        affinity_physical_cores=_physical_cores(_host_topology(), cpus),
        numa_policy=numa_policy,
    )
