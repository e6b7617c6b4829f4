"""Type stub of the package: the names its submodules give, each loaded on first use
(``lazy_loader.attach_stub`` reads the imports below at run time)."""

from .explanation import Explanation, KeyExplanation, explain
from .keyfilter import KeyFilter
from .libraries import KernelLibraryInfo, LibraryLoad, load_kernel_libraries
from .registry import (
    KernelTuningRegistry,
    TuningSnapshot,
    access_counts,
    default_registry,
    register_kernel_tuning_profile,
    register_kernel_tuning_profiles,
    register_kernel_tuning_schema,
    resolve_kernel_tuning,
    snapshot,
)
from .resolution import (
    AccessCounts,
    KernelTuningProfile,
    RejectedCandidate,
    Resolution,
    TuningSource,
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

__all__ = [
    "ELEMENT_TYPES",
    "AccessCounts",
    "Explanation",
    "KernelTuningKey",
    "KernelTuningProfile",
    "KernelTuningRegistry",
    "KernelTuningSchema",
    "KernelLibraryInfo",
    "KeyExplanation",
    "KeyFilter",
    "LibraryLoad",
    "RejectedCandidate",
    "Resolution",
    "TuningParameter",
    "TuningSnapshot",
    "TuningSource",
    "TuningValue",
    "access_counts",
    "load_kernel_libraries",
    "default_registry",
    "element_type_name",
    "element_type_number",
    "explain",
    "register_kernel_tuning_profile",
    "register_kernel_tuning_profiles",
    "register_kernel_tuning_schema",
    "resolve_kernel_tuning",
    "snapshot",
    "tunable",
]
