"""Type stub of the package: the names its submodules give, each loaded on first use
(``lazy_loader.attach_stub`` reads the imports below at run time)."""

from .entries import CacheEntry, RejectedCacheEntry
from .kernel_tuning_cache import (
    inspect_kernel_tuning_cache,
    load_kernel_tuning_cache,
    remove_kernel_tuning_cache,
    update_kernel_tuning_cache,
)
from .location import ENVIRONMENT_VARIABLE, default_kernel_tuning_cache_path
from .reports import CacheInspection, CacheLoadReport, CacheRemoveReport, CacheUpdateReport

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
