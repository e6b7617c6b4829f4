"""Type stub of the package: the names its submodules give, each loaded on first use
(``lazy_loader.attach_stub`` reads the imports below at run time)."""

from .batch import (
    CalibrationFunction,
    calibrate_kernel_thresholds,
    calibrate_registered_kernels,
    calibration_function,
    has_calibrated_profile,
    is_calibratable,
    register_kernel_calibration_function,
    spinning_blas_warning,
)
from .confirmation import Confirmation, compare_values, confirm, points_between
from .context import CalibrationContext, Tolerance
from .interference import (
    MAXIMUM_SHARE,
    Interference,
    InterferenceSource,
    KeyInterference,
    ProcessInterference,
)
from .measure import Measurement
from .options import EFFORTS, CalibrationOptions, Effort, thread_counts
from .parameters import (
    KernelTuningApplication,
    KernelTuningParameterReport,
    KernelTuningParameters,
    KernelTuningProposal,
    apply_kernel_tuning_updates,
    kernel_tuning_parameters,
    propose_kernel_tuning_updates,
    set_kernel_tuning_parameters,
)
from .plot import PlottingUnavailableError, plot_report
from .report import CalibrationBatchReport, CalibrationReport, Candidate, Decision, KeyOutcome
from .search import (
    Case,
    Comparison,
    ComparisonResult,
    Crossover,
    Setting,
    Workload,
    compare_settings,
    decide_crossover,
    decide_shared_crossover,
    geometric_grid,
    record_crossover,
    search_crossover,
    search_threads,
)
from .steadiness import PARALLEL, ProbeTrace, Steadiness, register_machine_probe
from .tensors import randn_tensor

__all__ = [
    "EFFORTS",
    "MAXIMUM_SHARE",
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
    "Confirmation",
    "Crossover",
    "Decision",
    "Effort",
    "Interference",
    "InterferenceSource",
    "KernelTuningApplication",
    "KernelTuningParameterReport",
    "KernelTuningParameters",
    "KernelTuningProposal",
    "KeyInterference",
    "KeyOutcome",
    "Measurement",
    "PlottingUnavailableError",
    "ProbeTrace",
    "ProcessInterference",
    "Setting",
    "Steadiness",
    "Tolerance",
    "Workload",
    "apply_kernel_tuning_updates",
    "calibrate_kernel_thresholds",
    "calibrate_registered_kernels",
    "calibration_function",
    "compare_settings",
    "compare_values",
    "confirm",
    "decide_crossover",
    "decide_shared_crossover",
    "geometric_grid",
    "has_calibrated_profile",
    "is_calibratable",
    "kernel_tuning_parameters",
    "plot_report",
    "points_between",
    "propose_kernel_tuning_updates",
    "randn_tensor",
    "record_crossover",
    "register_kernel_calibration_function",
    "register_machine_probe",
    "search_crossover",
    "search_threads",
    "set_kernel_tuning_parameters",
    "spinning_blas_warning",
    "thread_counts",
]
