"""kerneltune: processor-aware tuning of compute-kernel thresholds.

Every tunable value of a kernel has a compiled portable default; profiles bound
to processor selectors, calibrated execution profiles and session overrides
replace it where they apply. This module re-exports the public API; see
docs/design.md for the contract and README.md for a tour.

Calibration, profiles, the profile store, sessions and the corpus parameter
search are reached from here too (``kerneltune.calibrate_registered_kernels``,
``kerneltune.RuntimeSession``, ...), but loaded only when first used: ``import
kerneltune`` imports neither onnx nor the runtime nor the calibration machinery.
"""

from __future__ import annotations

import lazy_loader

from ._support.version import __version__
from .errors import (
    AmbiguousProfileError,
    CalibrationError,
    CpuDescriptorError,
    KerneltuneStartupWarning,
    KernelTuningError,
    Problem,
    ProfileError,
    TuningValidationError,
    UnknownKernelError,
    UnsupportedModelError,
)
from .machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from .machine.detect import current_execution, detect_cpu_descriptor, get_cpu_descriptor
from .machine.openmp import WaitPolicy, wait_policy
from .startup import StartupReport, announce, initialise
from .tuning import (
    ELEMENT_TYPES,
    AccessCounts,
    KernelLibraryInfo,
    KernelTuningKey,
    KernelTuningProfile,
    KernelTuningRegistry,
    KernelTuningSchema,
    LibraryLoad,
    RejectedCandidate,
    Resolution,
    TuningParameter,
    TuningSnapshot,
    TuningSource,
    TuningValue,
    access_counts,
    default_registry,
    element_type_name,
    element_type_number,
    register_kernel_tuning_profile,
    register_kernel_tuning_profiles,
    register_kernel_tuning_schema,
    resolve_kernel_tuning,
    snapshot,
    tunable,
)

_STARTUP = initialise(default_registry)
announce(_STARTUP)


def startup_report() -> StartupReport:
    """What ``import kerneltune`` registered, and every problem it met (it never raises)."""
    return _STARTUP


#: public names that load with their subpackage on first use: the calibration machinery,
#: profiles, the profile store, the cache's operations, sessions, the corpus search,
#: selectors, descriptor files and explanations (a first session loads none of calibration,
#: the merge, the verification, the store, selectors nor explanations, and the cache's
#: machinery only when there is a cache file)
_EXPORTS = {
    "calibration": ("CalibrationOptions", "KernelTuningApplication",
                    "KernelTuningParameterReport", "KernelTuningParameters",
                    "KernelTuningProposal", "apply_kernel_tuning_updates",
                    "calibrate_registered_kernels", "kernel_tuning_parameters",
                    "propose_kernel_tuning_updates", "randn_tensor",
                    "set_kernel_tuning_parameters"),
    "profiles": ("DeploymentProfile", "KeyVerification", "ProfileEntry", "ProfileFileReport",
                 "ProfileImportReport", "VerificationReport", "export_deployment_profile",
                 "import_deployment_profiles", "read_deployment_profile",
                 "verify_deployment_profiles", "write_deployment_profile"),
    "store": ("CalibrationMeasurement", "CalibrationProfile", "CalibrationProfileKey",
              "CalibrationProfileLoadReport", "CalibrationProfileLookup",
              "CalibrationProfileStore", "CalibrationProfileUpdateReport",
              "RejectedCalibrationProfile", "default_calibration_profile_path"),
    "cache": ("CacheEntry", "CacheInspection", "CacheLoadReport", "CacheRemoveReport",
              "CacheUpdateReport", "RejectedCacheEntry", "default_kernel_tuning_cache_path",
              "inspect_kernel_tuning_cache", "load_kernel_tuning_cache",
              "remove_kernel_tuning_cache", "update_kernel_tuning_cache"),
    "runtime": ("RuntimeSession", "Contention"),
    "machine": ("CpuSelector", "NamedSelector", "Tier", "read_cpu_descriptor", "read_selector",
                "shipped_selectors", "write_cpu_descriptor"),
    "tuning": ("Explanation", "KeyExplanation", "explain"),
    "corpus": ("search_corpus_parameters", "analyze_kernel_tuning_latencies"),
}
__getattr__, _lazy_names, _ = lazy_loader.attach(__name__, submod_attrs=_EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_lazy_names()))


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
    "CalibrationMeasurement",
    "CalibrationOptions",
    "CalibrationProfile",
    "CalibrationProfileKey",
    "CalibrationProfileLoadReport",
    "CalibrationProfileLookup",
    "CalibrationProfileStore",
    "CalibrationProfileUpdateReport",
    "Contention",
    "CpuDescriptor",
    "CpuDescriptorError",
    "CpuExecutionDescriptor",
    "CpuSelector",
    "DeploymentProfile",
    "Explanation",
    "KernelLibraryInfo",
    "KernelTuningApplication",
    "KernelTuningError",
    "KernelTuningKey",
    "KernelTuningParameterReport",
    "KernelTuningParameters",
    "KernelTuningProfile",
    "KernelTuningProposal",
    "KernelTuningRegistry",
    "KernelTuningSchema",
    "KerneltuneStartupWarning",
    "KeyExplanation",
    "KeyVerification",
    "LibraryLoad",
    "NamedSelector",
    "Problem",
    "ProfileEntry",
    "ProfileError",
    "ProfileFileReport",
    "ProfileImportReport",
    "RejectedCacheEntry",
    "RejectedCalibrationProfile",
    "RejectedCandidate",
    "Resolution",
    "RuntimeSession",
    "StartupReport",
    "Tier",
    "TuningParameter",
    "TuningSnapshot",
    "TuningSource",
    "TuningValidationError",
    "TuningValue",
    "UnknownKernelError",
    "UnsupportedModelError",
    "VerificationReport",
    "WaitPolicy",
    "__version__",
    "access_counts",
    "analyze_kernel_tuning_latencies",
    "apply_kernel_tuning_updates",
    "calibrate_registered_kernels",
    "current_execution",
    "default_calibration_profile_path",
    "default_kernel_tuning_cache_path",
    "default_registry",
    "detect_cpu_descriptor",
    "element_type_name",
    "element_type_number",
    "explain",
    "export_deployment_profile",
    "get_cpu_descriptor",
    "import_deployment_profiles",
    "inspect_kernel_tuning_cache",
    "kernel_tuning_parameters",
    "load_kernel_tuning_cache",
    "propose_kernel_tuning_updates",
    "randn_tensor",
    "read_cpu_descriptor",
    "read_deployment_profile",
    "read_selector",
    "register_kernel_tuning_profile",
    "register_kernel_tuning_profiles",
    "register_kernel_tuning_schema",
    "remove_kernel_tuning_cache",
    "resolve_kernel_tuning",
    "search_corpus_parameters",
    "set_kernel_tuning_parameters",
    "shipped_selectors",
    "snapshot",
    "startup_report",
    "tunable",
    "update_kernel_tuning_cache",
    "verify_deployment_profiles",
    "wait_policy",
    "write_cpu_descriptor",
    "write_deployment_profile",
]
