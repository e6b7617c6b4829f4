"""kerneltune: processor-aware tuning of compute-kernel thresholds.

Every tunable value of a kernel has a compiled portable default; profiles bound
to processor selectors, calibrated execution profiles and session overrides
replace it where they apply. This module re-exports the public API; see
docs/design.md for the contract and README.md for a tour.

Sessions, calibration and the backend-case search are reached from here too
(``kerneltune.RuntimeSession``, ``kerneltune.calibrate_registered_kernels``,
``kerneltune.search_backend_parameters``), but loaded only when first used:
``import kerneltune`` stays as light as the registry and the cache.
"""

from __future__ import annotations

import importlib

from .backend_analysis import analyze_kernel_tuning_latencies
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
from .cpu import CpuDescriptor, CpuExecutionDescriptor
from .cpu_files import dump_cpu_descriptor, load_cpu_descriptor
from .detect import current_execution, detect_cpu_descriptor, get_cpu_descriptor
from .errors import (
    AmbiguousProfileError,
    CalibrationError,
    CpuDescriptorError,
    KernelTuningError,
    Problem,
    ProfileError,
    TuningValidationError,
    UnknownKernelError,
    UnsupportedModelError,
)
from .explain import Explanation, KeyExplanation, explain
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
from .profile_import import ProfileFileReport, ProfileImportReport, import_deployment_profiles
from .profiles import (
    DeploymentProfile,
    ProfileEntry,
    export_deployment_profile,
    read_deployment_profile,
    write_deployment_profile,
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
from .selector_files import NamedSelector, load_selector, shipped_selectors
from .selectors import CpuSelector, Tier
from .startup import StartupReport, initialise
from .store import (
    CalibrationMeasurement,
    CalibrationProfile,
    CalibrationProfileKey,
    CalibrationProfileLoadReport,
    CalibrationProfileLookup,
    CalibrationProfileStore,
    CalibrationProfileUpdateReport,
    RejectedCalibrationProfile,
    default_calibration_profile_path,
)
from .verification import KeyVerification, VerificationReport, verify_deployment_profiles
from .version import __version__
from .wait_policy import WaitPolicy, wait_policy

_STARTUP = initialise(default_registry)


def startup_report() -> StartupReport:
    """What ``import kerneltune`` registered, and every problem it met (it never raises)."""
    return _STARTUP


#: public names whose modules load on first use: name -> module below this package
_LAZY = {
    "RuntimeSession": "runtime.session",
    "Contention": "runtime.contention",
    "CalibrationOptions": "calibration.options",
    "calibrate_registered_kernels": "calibration.batch",
    "randn_tensor": "calibration.tensors",
    "search_backend_parameters": "backend_search",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "KernelTuningApplication",
    "KernelTuningError",
    "KernelTuningKey",
    "KernelTuningParameterReport",
    "KernelTuningParameters",
    "KernelTuningProfile",
    "KernelTuningProposal",
    "KernelTuningRegistry",
    "KernelTuningSchema",
    "KeyExplanation",
    "KeyVerification",
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
    "dump_cpu_descriptor",
    "element_type_name",
    "element_type_number",
    "explain",
    "export_deployment_profile",
    "get_cpu_descriptor",
    "import_deployment_profiles",
    "inspect_kernel_tuning_cache",
    "kernel_tuning_parameters",
    "load_cpu_descriptor",
    "load_kernel_tuning_cache",
    "load_selector",
    "propose_kernel_tuning_updates",
    "randn_tensor",
    "read_deployment_profile",
    "register_kernel_tuning_profile",
    "register_kernel_tuning_profiles",
    "register_kernel_tuning_schema",
    "remove_kernel_tuning_cache",
    "resolve_kernel_tuning",
    "search_backend_parameters",
    "set_kernel_tuning_parameters",
    "shipped_selectors",
    "snapshot",
    "startup_report",
    "tunable",
    "update_kernel_tuning_cache",
    "verify_deployment_profiles",
    "wait_policy",
    "write_deployment_profile",
]
