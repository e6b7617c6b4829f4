"""The machine: what kerneltune knows of the processor and of how a process runs on it.

Owns the processor and execution descriptors (:mod:`.descriptor`), their detection
(:mod:`.detect`) and descriptor files (:mod:`.descriptor_files`), canonical spellings
(:mod:`.names`), processor selectors (:mod:`.selectors`) and selector files
(:mod:`.selector_files`), the thread policy (:mod:`.threads`), the OpenMP wait
policy (:mod:`.openmp`) and the BLAS libraries loaded (:mod:`.blas`).
May import :mod:`kerneltune._support` and :mod:`kerneltune.errors`, nothing else
of kerneltune.
"""

from __future__ import annotations

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
