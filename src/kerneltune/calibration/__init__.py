"""Calibration: measure the real kernels on this machine and publish what wins.

:func:`calibrate_registered_kernels` runs the registered calibration function
of every selected key (see :mod:`.batch`); the functions use the shared
searches of :mod:`.search` through a :class:`CalibrationContext`, and every
measurement and decision ends in a :class:`CalibrationReport`. A kernel
library may register machine probes (:mod:`.steadiness`), run around each key,
whose rates send keys measured while the machine was slow back to be measured
again. Calibration functions and probes are registered with a tuning registry
(``registry=``, the process-wide one by default), and a batch runs those of
the registry it calibrates.
"""

from __future__ import annotations

from .batch import (
    CalibrationFunction,
    Workload,
    calibrate_kernel_thresholds,
    calibrate_registered_kernels,
    calibration_function,
    has_calibrated_profile,
    is_calibratable,
    register_kernel_calibration_function,
    spinning_blas_warning,
)
from .context import CalibrationContext, Tolerance
from .measure import Measurement
from .options import EFFORTS, CalibrationOptions, Effort, thread_counts
from .report import CalibrationBatchReport, CalibrationReport, Candidate, Decision, KeyOutcome
from .search import (
    Case,
    Comparison,
    ComparisonResult,
    Crossover,
    Setting,
    compare_settings,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
    record_crossover,
    search_crossover,
    search_threads,
    verify_decisions,
)
from .steadiness import PARALLEL, ProbeTrace, Steadiness, register_machine_probe
from .tensors import randn_tensor

__all__ = [
    "EFFORTS",
    "PARALLEL",
    "CalibrationBatchReport",
    "CalibrationContext",
    "CalibrationFunction",
    "CalibrationOptions",
    "CalibrationReport",
    "Candidate",
    "Case",
    "Comparison",
    "ComparisonResult",
    "Crossover",
    "Decision",
    "Effort",
    "KeyOutcome",
    "Measurement",
    "ProbeTrace",
    "Setting",
    "Steadiness",
    "Tolerance",
    "Workload",
    "calibrate_kernel_thresholds",
    "calibrate_registered_kernels",
    "calibration_function",
    "compare_settings",
    "decide_crossover",
    "decide_shared_crossover",
    "geometric_grid",
    "has_calibrated_profile",
    "is_calibratable",
    "randn_tensor",
    "record_crossover",
    "register_kernel_calibration_function",
    "register_machine_probe",
    "search_crossover",
    "search_threads",
    "spinning_blas_warning",
    "thread_counts",
    "verify_decisions",
]
