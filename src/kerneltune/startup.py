"""What ``import kerneltune`` does, and the report of it.

Import registers every installed kernel library (the entry points of
``kerneltune.kernel_libraries``, restricted by ``KERNELTUNE_KERNEL_LIBRARIES``)
with the process-wide registry, imports the deployment profiles
``KERNELTUNE_DEPLOYMENT_PROFILES`` names, then loads the compatible entries of
the user calibration cache. Nothing it meets may stop the import: a library
that fails to register (a variant that cannot load, a bug of its own) costs its
kernels, not the tuning API or the other libraries; a missing, corrupt or stale
profile or cache costs only its values.
Every problem is kept in :func:`kerneltune.startup_report`, and :func:`announce`
names them in one :class:`~kerneltune.KerneltuneStartupWarning`, so that a
value that is not used is never a silent mystery.
"""

from __future__ import annotations

import dataclasses
import os
import time
import types
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._support.reprs import brief_repr
from .cache.location import default_kernel_tuning_cache_path
from .cache.reports import CacheLoadReport
from .errors import KerneltuneStartupWarning
from .machine.detect import get_cpu_descriptor
from .profiles.environment import ENVIRONMENT_VARIABLE
from .tuning.libraries import (
    ENTRY_POINT_GROUP,
    FAILED,
    LibraryLoad,
    load_kernel_libraries,
    selected_libraries,
)
from .tuning.libraries import ENVIRONMENT_VARIABLE as LIBRARIES_VARIABLE
from .tuning.registry import KernelTuningRegistry

if TYPE_CHECKING:
    from .profiles.importer import ProfileImportReport

#: cache statuses that say nothing went wrong
_QUIET_CACHE = ("loaded", "not_found", "disabled")


@brief_repr
@dataclass(frozen=True, repr=False)
class StartupReport:
    """The outcome of ``import kerneltune``: what was registered and loaded, what went wrong.

    ``libraries`` says what became of each installed kernel library, ``cache``
    is the load report of the default cache and ``profiles`` the import report
    of ``KERNELTUNE_DEPLOYMENT_PROFILES`` (None when it is not set, or when
    loading failed outright; the reason is then in ``problems``). ``seconds`` is
    what each step took: ``libraries``, ``profiles``, ``cache``.
    """

    libraries: tuple[LibraryLoad, ...]
    problems: tuple[str, ...]
    cache: CacheLoadReport | None = None
    profiles: ProfileImportReport | None = None
    seconds: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def schemas(self) -> int:
        """The tuning keys the libraries registered."""
        return sum(library.keys for library in self.libraries)

    @property
    def implementations(self) -> dict[str, tuple[str, ...]]:
        """Each loaded library's implementations for this processor (its ISA variant, say)."""
        return {library.name: library.implementations for library in self.libraries
                if library.implementations}


def _libraries(registry: KernelTuningRegistry) -> tuple[tuple[LibraryLoad, ...], list[str]]:
    loads = load_kernel_libraries(registry)
    if not loads:
        return loads, [f"no kernel library is installed (no entry point of the group "
                       f"{ENTRY_POINT_GROUP}): kerneltune itself was not installed?"]
    problems = [f"kernel library {load.name} (distribution {load.distribution}) not "
                f"registered: {load.problem}" for load in loads if load.status == FAILED]
    # a name no library has is a typo that would leave its library out without a word
    installed = {load.name for load in loads}
    unknown = sorted((selected_libraries(os.environ.get(LIBRARIES_VARIABLE)) or set())
                     - installed)
    if unknown:
        problems.append(f"{LIBRARIES_VARIABLE} names {', '.join(unknown)}, which no installed "
                        f"kernel library is (installed: {', '.join(sorted(installed))})")
    return loads, problems


def _cache(registry: KernelTuningRegistry) -> tuple[CacheLoadReport | None, list[str]]:
    try:
        path = default_kernel_tuning_cache_path()
        if path is None:
            return CacheLoadReport("disabled", None), []
        if not _exists(path):  # said without loading the cache's machinery
            return CacheLoadReport("not_found", str(path)), []
        from .cache.kernel_tuning_cache import load_kernel_tuning_cache

        report = load_kernel_tuning_cache(path=path, registry=registry)
    except Exception as error:  # noqa: BLE001 - e.g. an unreadable processor descriptor file
        return None, [f"kernel tuning cache not loaded: {type(error).__name__}: {error}"]
    problems = [] if report.status in _QUIET_CACHE else [
        f"kernel tuning cache not loaded ({report.status}): {problem}"
        for problem in report.problems]
    problems += [f"kernel tuning cache entry not loaded: {problem}"
                 for entry in report.invalid + report.duplicate for problem in entry.problems]
    return report, problems


def _exists(path: os.PathLike[str]) -> bool:
    """False only when nothing is there; a path that cannot be examined is the loader's to
    report."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        pass
    return True


def _profiles(registry: KernelTuningRegistry) -> tuple[ProfileImportReport | None, list[str]]:
    spec = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not spec:
        return None, []
    # imported here: a process that names no profile does not load the importer
    from .profiles.importer import IMPORTED, import_deployment_profiles, profile_paths

    try:
        report = import_deployment_profiles(profile_paths(spec), registry=registry,
                                            processor=get_cpu_descriptor())
    except Exception as error:  # noqa: BLE001 - any failure here must only be reported
        return None, [f"deployment profiles not imported: {type(error).__name__}: {error}"]
    problems = [f"deployment profile not imported ({file.status}): {problem}"
                for file in report.files if file.status != IMPORTED for problem in file.problems]
    problems += [f"deployment profile warning: {warning}"
                 for file in report.files for warning in file.warnings]
    return report, problems


def initialise(registry: KernelTuningRegistry) -> StartupReport:
    seconds = {}
    start = time.perf_counter()
    libraries, problems = _libraries(registry)
    seconds["libraries"], start = time.perf_counter() - start, time.perf_counter()
    profiles, profile_problems = _profiles(registry)
    seconds["profiles"], start = time.perf_counter() - start, time.perf_counter()
    cache, cache_problems = _cache(registry)
    seconds["cache"] = time.perf_counter() - start
    return StartupReport(libraries,
                         tuple(problems + profile_problems + cache_problems), cache, profiles,
                         types.MappingProxyType(seconds))


def announce(report: StartupReport) -> None:
    """One warning naming every problem of ``report``; nothing when there is none.

    ``stacklevel`` points at the module that called this, ``kerneltune/__init__.py``: the
    import that met the problems.
    """
    if not report.problems:
        return
    count = len(report.problems)
    what = "this problem concerns" if count == 1 else f"these {count} problems concern"
    listed = "\n".join(f"  - {problem}" for problem in report.problems)
    warnings.warn(f"kerneltune goes on without what {what} (kerneltune.startup_report() "
                  f"has them):\n{listed}", KerneltuneStartupWarning, stacklevel=2)
