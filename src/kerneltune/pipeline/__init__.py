"""The build-farm pipeline: a machine's calibration becomes a profile; profiles bake into one file.

``nox -s calibrate`` runs :func:`calibrate_machine` on each representative
machine (a CI matrix job each); ``nox -s bake`` runs :func:`bake` over the
profiles they leave, for the deployment image. May import :mod:`kerneltune.profiles`,
the kernel library and every layer below them.
"""

from __future__ import annotations

from .baking import (
    BakeReport,
    FileCheck,
    Merge,
    ValidationReport,
    bake,
    summarise_gaps,
    validate_deployment_files,
)
from .calibrate import MachineCalibration, ThreadSummary, calibrate_machine

__all__ = ["BakeReport", "FileCheck", "MachineCalibration", "Merge", "ThreadSummary",
           "ValidationReport", "bake", "calibrate_machine", "summarise_gaps",
           "validate_deployment_files"]
