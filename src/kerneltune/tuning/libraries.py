"""Kernel libraries: found through an entry-point group, each registered whole or not at all.

A kernel library is any installed distribution that declares an entry point in
the ``kerneltune.kernel_libraries`` group naming a callable
``register(registry) -> KernelLibraryInfo``. kerneltune's own library is one of
them: the core imports no library by name. :func:`load_kernel_libraries` calls
each ``register`` with a registry of its own, checks what it registered (every
key of the library it names, no key another library holds), then moves it into
the target registry in one step; a library that raises or fails a check leaves
nothing behind and its :class:`LibraryLoad` says why (see docs/libraries.md).
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .._support.reprs import brief_repr
from .registry import KernelTuningRegistry

#: the entry-point group a kernel library declares its ``register`` callable in
ENTRY_POINT_GROUP = "kerneltune.kernel_libraries"
#: restricts which libraries load: comma-separated names, or ``none``
ENVIRONMENT_VARIABLE = "KERNELTUNE_KERNEL_LIBRARIES"

#: a library's load status
LOADED, FAILED, NOT_SELECTED = "loaded", "failed", "not selected"


@brief_repr
@dataclass(frozen=True, repr=False)
class KernelLibraryInfo:
    """What a library's ``register`` returns: who it is and what it loaded on this processor.

    ``name`` is the library of its keys (``KernelTuningKey.library``) and the name of
    its entry point; ``version`` is recorded beside every value calibrated with it;
    ``implementations`` are those registered for this processor (an ISA variant, say).
    """

    name: str
    version: str
    implementations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise TypeError(f"a kernel library's name is a non-empty string, got {self.name!r}")
        if not (isinstance(self.version, str) and self.version):
            raise TypeError(f"kernel library {self.name}: its version is a non-empty string, "
                            f"got {self.version!r}")
        object.__setattr__(self, "implementations", tuple(self.implementations))


@brief_repr
@dataclass(frozen=True, repr=False)
class LibraryLoad:
    """What became of one installed library: its status, what it registered, the problem.

    ``status`` is ``loaded``, ``failed`` (``problem`` says why; nothing of it is
    registered) or ``not selected`` (left out by ``KERNELTUNE_KERNEL_LIBRARIES``).
    ``keys`` counts its tuning keys, ``calibratable`` those with a calibration
    function, ``probes`` names its machine probes' aspects.
    """

    name: str
    distribution: str | None
    status: str
    version: str | None = None
    implementations: tuple[str, ...] = ()
    keys: int = 0
    calibratable: int = 0
    probes: tuple[str, ...] = ()
    problem: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "distribution": self.distribution, "status": self.status,
                "version": self.version, "implementations": list(self.implementations),
                "keys": self.keys, "calibratable": self.calibratable,
                "probes": list(self.probes), "problem": self.problem}


def not_installed_lines(counts: Mapping[str, int]) -> list[str]:
    """A line per kernel library whose entries for this machine wait for it to be installed."""
    return [f"{count} entries of kernel library {library} for this machine: library not "
            f"installed (kerneltune libraries lists those that are)"
            for library, count in sorted(counts.items())]


def selected_libraries(spec: str | None) -> frozenset[str] | None:
    """The library names a ``KERNELTUNE_KERNEL_LIBRARIES`` value selects (None: all)."""
    if spec is None or not spec.strip():
        return None
    names = frozenset(filter(None, (name.strip() for name in spec.split(","))))
    return frozenset() if names == {"none"} else names


def installed_libraries() -> tuple[importlib.metadata.EntryPoint, ...]:
    """Every entry point of the group, by name (a name declared twice appears twice)."""
    return tuple(sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                        key=lambda point: (point.name, point.value)))


def load_kernel_libraries(
    registry: KernelTuningRegistry,
    selection: str | None = None,
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> tuple[LibraryLoad, ...]:
    """Register every installed (or given) library in ``registry``, each in its own try.

    ``selection`` is a ``KERNELTUNE_KERNEL_LIBRARIES`` value (read from the
    environment when None). Never raises for what a library does: its
    :class:`LibraryLoad` says so.
    """
    if selection is None:
        selection = os.environ.get(ENVIRONMENT_VARIABLE)
    wanted = selected_libraries(selection)
    points = installed_libraries() if entry_points is None else tuple(entry_points)
    loads = []
    for point in points:
        dist = getattr(point, "dist", None)  # None for an entry point made by hand
        distribution = dist.name if dist is not None else None
        if wanted is not None and point.name not in wanted:
            loads.append(LibraryLoad(point.name, distribution, NOT_SELECTED))
            continue
        loads.append(_load(point.name, distribution, point.load, registry))
    return tuple(loads)


def _load(name: str, distribution: str | None, load: Callable[[], Callable],
          registry: KernelTuningRegistry) -> LibraryLoad:
    """One library registered in a registry of its own, checked, then moved into ``registry``."""
    start = time.perf_counter()
    staging = KernelTuningRegistry()
    try:
        info = load()(staging)
        if not isinstance(info, KernelLibraryInfo):
            raise TypeError(f"register returned {type(info).__name__}, not a KernelLibraryInfo")
        if info.name != name:
            raise ValueError(f"register names the library {info.name!r}, its entry point "
                             f"{name!r}")
        registry.add_library(info, staging)
    except Exception as error:  # noqa: BLE001 - a library's failure is its own, reported
        return LibraryLoad(name, distribution, FAILED,
                           problem=f"{type(error).__name__}: {error}",
                           seconds=time.perf_counter() - start)
    keys = staging.snapshot().keys()
    return LibraryLoad(
        name, distribution, LOADED, info.version, info.implementations, len(keys),
        sum(staging.calibration_function(key) is not None for key in keys),
        tuple(sorted(staging.machine_probes(name))), seconds=time.perf_counter() - start)
