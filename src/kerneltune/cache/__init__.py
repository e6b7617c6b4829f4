"""The user calibration cache: values measured (or set by hand) on this machine, in one file.

Owns the cache's entries and their text (:mod:`.entries`) and the operations on the
file: inspect, load into a registry, update under the lock, remove
(:mod:`.kernel_tuning_cache`). May import :mod:`kerneltune.tuning`,
:mod:`kerneltune.machine`, :mod:`kerneltune._support` and :mod:`kerneltune.errors`.
"""

from __future__ import annotations

from .entries import CacheEntry, RejectedCacheEntry
from .kernel_tuning_cache import (
    ENVIRONMENT_VARIABLE,
    CacheInspection,
    CacheLoadReport,
    CacheRemoveReport,
    CacheUpdateReport,
    default_kernel_tuning_cache_path,
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    remove_kernel_tuning_cache,
    update_kernel_tuning_cache,
)

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "CacheEntry",
    "CacheInspection",
    "CacheLoadReport",
    "CacheRemoveReport",
    "CacheUpdateReport",
    "RejectedCacheEntry",
    "default_kernel_tuning_cache_path",
    "inspect_kernel_tuning_cache",
    "load_kernel_tuning_cache",
    "remove_kernel_tuning_cache",
    "update_kernel_tuning_cache",
]
