"""kerneltune: processor-aware tuning of compute-kernel thresholds.

Every tunable value of a kernel has a compiled portable default; profiles bound
to processor selectors, calibrated execution profiles and session overrides
replace it where they apply. This module re-exports the public API; see
DESIGN.md for the contract and README.md for a tour.
"""

from __future__ import annotations

from .cache import (
    CacheEntry,
    CacheInspection,
    CacheLoadReport,
    CacheRemoveReport,
    CacheUpdateReport,
    RejectedCacheEntry,
    default_kernel_tuning_cache_path,
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    remove_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from .cpu import (
    CpuDescriptor,
    CpuExecutionDescriptor,
    current_execution,
    detect_cpu_descriptor,
    dump_cpu_descriptor,
    get_cpu_descriptor,
    load_cpu_descriptor,
)
from .errors import (
    AmbiguousProfileError,
    CalibrationError,
    CpuDescriptorError,
    KernelTuningError,
    Problem,
    TuningValidationError,
    UnknownKernelError,
    UnsupportedModelError,
)
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
from .registry import (
    AccessCounts,
    KernelTuningProfile,
    KernelTuningRegistry,
    RejectedCandidate,
    Resolution,
    TuningSnapshot,
    TuningSource,
    access_counts,
    default_registry,
    register_kernel_tuning_profile,
    register_kernel_tuning_profiles,
    register_kernel_tuning_schema,
    resolve_kernel_tuning,
    snapshot,
)
from .schema import (
    ELEMENT_TYPES,
    KernelTuningKey,
    KernelTuningSchema,
    TuningParameter,
    TuningValue,
    element_type_name,
    element_type_number,
    tunable,
)
from .selectors import CpuSelector, Tier
from .startup import StartupReport, initialise

__version__ = "0.1.0"

_STARTUP = initialise(default_registry)


def startup_report() -> StartupReport:
    """What ``import kerneltune`` registered, and every problem it met (it never raises)."""
    return _STARTUP

__all__ = [
    "ELEMENT_TYPES",
    "AccessCounts",
    "AmbiguousProfileError",
    "CacheEntry",
    "CacheInspection",
    "CacheLoadReport",
    "CacheRemoveReport",
    "CacheUpdateReport",
    "CalibrationError",
    "CpuDescriptor",
    "CpuDescriptorError",
    "CpuExecutionDescriptor",
    "CpuSelector",
    "KernelTuningApplication",
    "KernelTuningError",
    "KernelTuningKey",
    "KernelTuningParameterReport",
    "KernelTuningParameters",
    "KernelTuningProfile",
    "KernelTuningProposal",
    "KernelTuningRegistry",
    "KernelTuningSchema",
    "Problem",
    "RejectedCacheEntry",
    "RejectedCandidate",
    "StartupReport",
    "Resolution",
    "Tier",
    "TuningParameter",
    "TuningSnapshot",
    "TuningSource",
    "TuningValidationError",
    "TuningValue",
    "UnknownKernelError",
    "UnsupportedModelError",
    "__version__",
    "access_counts",
    "apply_kernel_tuning_updates",
    "current_execution",
    "default_kernel_tuning_cache_path",
    "default_registry",
    "detect_cpu_descriptor",
    "dump_cpu_descriptor",
    "element_type_name",
    "element_type_number",
    "get_cpu_descriptor",
    "inspect_kernel_tuning_cache",
    "kernel_tuning_parameters",
    "load_cpu_descriptor",
    "load_kernel_tuning_cache",
    "propose_kernel_tuning_updates",
    "register_kernel_tuning_profile",
    "register_kernel_tuning_profiles",
    "register_kernel_tuning_schema",
    "remove_kernel_tuning_cache",
    "resolve_kernel_tuning",
    "set_kernel_tuning_parameters",
    "snapshot",
    "startup_report",
    "tunable",
    "update_kernel_tuning_cache",
]
