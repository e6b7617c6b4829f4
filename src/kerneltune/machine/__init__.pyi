"""Type stub of the package: the names its submodules give, each loaded on first use
(``lazy_loader.attach_stub`` reads the imports below at run time)."""

from .blas import current_blas
from .descriptor import CpuDescriptor, CpuExecutionDescriptor
from .descriptor_files import read_cpu_descriptor, write_cpu_descriptor
from .detect import (
    DESCRIPTOR_ENVIRONMENT_VARIABLE,
    current_execution,
    detect_cpu_descriptor,
    get_cpu_descriptor,
)
from .openmp import WaitPolicy, wait_policy
from .selector_files import (
    NamedSelector,
    processor_selector,
    read_selector,
    selector_text,
    shipped_selectors,
    write_selector,
)
from .selectors import CpuSelector, Tier
from .threads import available_threads, thread_count

__all__ = [
    "DESCRIPTOR_ENVIRONMENT_VARIABLE",
    "CpuDescriptor",
    "CpuExecutionDescriptor",
    "CpuSelector",
    "NamedSelector",
    "Tier",
    "WaitPolicy",
    "available_threads",
    "current_blas",
    "current_execution",
    "detect_cpu_descriptor",
    "get_cpu_descriptor",
    "processor_selector",
    "read_cpu_descriptor",
    "read_selector",
    "selector_text",
    "shipped_selectors",
    "thread_count",
    "wait_policy",
    "write_cpu_descriptor",
    "write_selector",
]
