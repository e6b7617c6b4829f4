"""What ``import kerneltune`` does, and the report of it.

Import registers the kernel library's schemas with the process-wide registry.
Nothing it meets may stop the import: a missing compiled library (a source
checkout that was never built, a variant that cannot load) costs the kernels,
not the tuning API, and every problem is kept in :func:`startup_report`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import KernelTuningRegistry


@dataclass(frozen=True)
class StartupReport:
    """The outcome of ``import kerneltune``: what was registered and what went wrong."""

    implementation: str | None
    schemas: int
    problems: tuple[str, ...]


def initialise(registry: KernelTuningRegistry) -> StartupReport:
    try:
        from . import kernels

        implementation = kernels.variants.selected_variant()
        count = kernels.register_library(registry, implementation)
    except Exception as error:  # noqa: BLE001 - any failure here must only be reported
        return StartupReport(None, 0, (f"kernel library not registered: "
                                       f"{type(error).__name__}: {error}",))
    return StartupReport(implementation, count, ())
