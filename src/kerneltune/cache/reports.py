"""What each operation on the cache file reports: inspect, load, update, remove.

The statuses are listed in :mod:`kerneltune.cache.kernel_tuning_cache`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._support.reprs import brief_repr
from ..errors import Problem

if TYPE_CHECKING:
    from ..tuning.schema import KernelTuningKey
    from .entries import CacheEntry, RejectedCacheEntry


def _dicts(items: Iterable[Any]) -> list[object]:
    return [item.to_dict() for item in items]


def _text(problems: Iterable[Problem]) -> list[str]:
    return [str(p) for p in problems]


@brief_repr
@dataclass(frozen=True, repr=False)
class CacheInspection:
    """What the file holds, read without publishing anything.

    ``entries`` are the entries that can be interpreted (whatever the current
    registry thinks of their values); ``invalid`` could not be, ``duplicate``
    share their key and execution with another entry. ``problems`` are about
    the file as a whole.
    """

    status: str
    path: str | None
    entries: tuple[CacheEntry, ...] = ()
    invalid: tuple[RejectedCacheEntry, ...] = ()
    duplicate: tuple[RejectedCacheEntry, ...] = ()
    problems: tuple[Problem, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "entries": _dicts(self.entries),
                "invalid": _dicts(self.invalid), "duplicate": _dicts(self.duplicate),
                "problems": _text(self.problems)}


@brief_repr
@dataclass(frozen=True, repr=False)
class CacheLoadReport:
    """What a load published, and every entry it left out, by reason.

    ``incompatible`` entries belong to another processor (or, with
    ``all_thread_counts=False``, another execution); ``stale`` ones to a tuning
    ABI or implementation this process has no schema for; ``invalid`` ones
    failed validation; ``missing`` are the selected registered keys with no
    loaded entry for the load's execution. ``generation`` is the registry
    generation holding the loaded profiles (None when nothing was published).
    """

    status: str
    path: str | None
    loaded: tuple[CacheEntry, ...] = ()
    incompatible: tuple[CacheEntry, ...] = ()
    stale: tuple[RejectedCacheEntry, ...] = ()
    invalid: tuple[RejectedCacheEntry, ...] = ()
    duplicate: tuple[RejectedCacheEntry, ...] = ()
    missing: tuple[KernelTuningKey, ...] = ()
    problems: tuple[Problem, ...] = ()
    generation: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "generation": self.generation,
                "loaded": _dicts(self.loaded), "incompatible": _dicts(self.incompatible),
                "stale": _dicts(self.stale), "invalid": _dicts(self.invalid),
                "duplicate": _dicts(self.duplicate),
                "missing": [k.to_dict() for k in self.missing], "problems": _text(self.problems)}


@brief_repr
@dataclass(frozen=True, repr=False)
class CacheUpdateReport:
    """What an update wrote (or, ``read_only``, would have written).

    ``kept`` are existing entries an incoming one did not replace
    (``replace_existing=False``); ``preserved`` the entries no incoming one
    touched; ``pruned`` the entries that were dropped: of an older tuning ABI,
    or named by the caller (a demotion that verification lifted).
    ``removed_temporaries`` counts stray temporary siblings of crashed writers
    that the update cleaned up under the lock.
    """

    status: str
    path: str | None
    added: tuple[CacheEntry, ...] = ()
    replaced: tuple[CacheEntry, ...] = ()
    kept: tuple[CacheEntry, ...] = ()
    preserved: tuple[CacheEntry, ...] = ()
    pruned: tuple[CacheEntry, ...] = ()
    problems: tuple[Problem, ...] = ()
    removed_temporaries: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "added": _dicts(self.added),
                "replaced": _dicts(self.replaced), "kept": _dicts(self.kept),
                "preserved": len(self.preserved), "pruned": _dicts(self.pruned),
                "problems": _text(self.problems),
                "removed_temporaries": self.removed_temporaries}


@brief_repr
@dataclass(frozen=True, repr=False)
class CacheRemoveReport:
    status: str
    path: str | None
    removed: bool = False
    problems: tuple[Problem, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "removed": self.removed,
                "problems": _text(self.problems)}
