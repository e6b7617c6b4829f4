"""The user calibration cache: values measured (or set by hand) on this machine, kept in one file.

The cache is an optimisation source, never the only source of a value: every
key keeps its compiled defaults, so no state of the file may stop a program or
spoil another entry. Loading therefore reports instead of raising, validates
each entry as a whole and publishes the valid compatible ones in one registry
generation; an update validates its input, then rewrites the file under an
inter-process lock through a temporary sibling and ``os.replace``, so a reader
or a crash only ever sees the previous or the next complete file.

The file is versioned YAML (``format`` and ``schema_version`` head it), read
as :mod:`kerneltune._support.documents` reads every kerneltune file. Updates write it
in the JSON form of YAML, one entry per line (:mod:`kerneltune.cache.entries`),
so any YAML reader takes it and ``json`` parses it fast. Each processor
descriptor (with its feature list) is written once, in the ``executions``
table, and entries refer to it by id::

    {"format": "kerneltune-kernel-tuning-cache", "schema_version": 1,
     "executions": {
      "e1": {"processor": {...}, "effective_threads": 4, "affinity": [0, 1, 2, 3], ...}
     },
     "entries": [
      {"key": {"library": "kerneltune_cpu", "kernel": "Abs", ...}, "execution": "e1",
       "values": {"parallel.minimum_elements": 16384}, "source": "calibration",
       "versions": {"kerneltune": "0.1.0"}, "report_digest": "3f1c..."}
     ]}

Statuses. Reading (``inspect``; ``load`` says ``loaded`` for ``ok``): ``ok``,
``not_found``, ``disabled``, ``unreadable`` (the file cannot be read),
``malformed`` (not plain YAML, not this format, or a broken envelope) and
``unsupported_version``. Updating: ``updated``, ``unchanged`` (nothing to
write), ``read_only``, ``disabled``, ``unreadable``, ``malformed`` (also when
an entry cannot be interpreted: an update never drops what it cannot read),
``unsupported_version``, ``lock_timeout`` and ``write_failed``. Removing:
``removed``, ``not_found``, ``disabled``, ``lock_timeout``, ``remove_failed``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._support.documents import collector_paused, read_document
from .._support.files import (
    LOCK_TIMEOUT,
    file_lock,
    remove_stray_temporaries,
    write_atomically,
)
from ..errors import Problem, TuningValidationError
from ..machine.descriptor import CpuExecutionDescriptor
from ..machine.detect import current_execution
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import (
    KernelTuningProfile,
    KernelTuningRegistry,
    TuningSnapshot,
    default_registry,
)
from ..tuning.schema import KernelTuningKey
from .entries import (
    CACHE_FORMAT,
    SOURCES,
    CacheEntry,
    RejectedCacheEntry,
    entries_from_profiles,
    read_entries,
    serialise,
)
from .location import cache_path
from .reports import CacheInspection, CacheLoadReport, CacheRemoveReport, CacheUpdateReport

FORMAT = CACHE_FORMAT.name
_READABLE = ("ok", "not_found")


# --- reading ----------------------------------------------------------------------------------


def _inspect(target: Path) -> CacheInspection:
    with collector_paused():
        document = read_document(target, CACHE_FORMAT)
        if document.status != "ok":
            return CacheInspection(document.status, document.path, problems=document.problems)
        entries, invalid, duplicate = read_entries(document.data, document.path)
    return CacheInspection("ok", document.path, tuple(entries), tuple(invalid), tuple(duplicate))


def inspect_kernel_tuning_cache(path: str | os.PathLike[str] | None = None) -> CacheInspection:
    """Read and check the cache, publishing nothing; never raises for any content of the file."""
    target = cache_path(path)
    return CacheInspection("disabled", None) if target is None else _inspect(target)


# --- loading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassifiedEntries:
    """Cache entries sorted for one execution: what a load would publish, and the rest."""

    usable: tuple[CacheEntry, ...]
    incompatible: tuple[CacheEntry, ...]
    stale: tuple[RejectedCacheEntry, ...]
    invalid: tuple[RejectedCacheEntry, ...]


def _stale_problem(key: KernelTuningKey, registered_abis: Mapping[tuple, list[int]]) -> Problem:
    abis = registered_abis.get(key.without_abi)
    if abis:
        return Problem("key.tuning_abi", f"tuning ABI {key.tuning_abi}; the registered schema "
                                         f"has tuning ABI {', '.join(map(str, abis))}")
    return Problem("key.implementation", f"no tuning schema is registered for "
                                         f"{key.library}/{key.kernel}/{key.implementation}/"
                                         f"{key.element_type_name} on {key.device}")


def classify_entries(
    entries: Iterable[CacheEntry], selection: KeyFilter, execution: CpuExecutionDescriptor,
    snapshot: TuningSnapshot, file: str | None, *, all_thread_counts: bool = True,
    validate: bool = True,
) -> ClassifiedEntries:
    """Sort selected entries into usable, incompatible, stale and invalid for ``execution``.

    With ``validate``, usable entries passed their schema as a whole;
    without, that is left to the caller (a load lets the registry do it).
    """
    registered = set(snapshot.keys())
    abis = snapshot.tuning_abis()
    compatible: dict[int, bool] = {}
    usable, incompatible, stale = [], [], []
    for entry in entries:
        if not selection.matches(entry.key):
            continue
        run = entry.execution
        fits = compatible.get(id(run))
        if fits is None:
            fits = compatible[id(run)] = (
                run.processor.identity == execution.processor.identity if all_thread_counts
                else run.identity == execution.identity)
        if not fits:
            incompatible.append(entry)
        elif entry.key not in registered:
            stale.append(RejectedCacheEntry(entry.index, entry.key, (
                _stale_problem(entry.key, abis).located(entry=entry.label, file=file),)))
        else:
            usable.append(entry)
    invalid: tuple[RejectedCacheEntry, ...] = ()
    if validate:
        usable, invalid = _validated(usable, snapshot, file)
    return ClassifiedEntries(tuple(usable), tuple(incompatible), tuple(stale), invalid)


def _validated(entries: Iterable[CacheEntry], snapshot: TuningSnapshot, file: str | None
               ) -> tuple[list[CacheEntry], tuple[RejectedCacheEntry, ...]]:
    """Entries whose values pass their schema as a whole, and the others with every reason."""
    valid, invalid = [], []
    for entry in entries:
        try:
            snapshot.schema(entry.key).configure(entry.values)
        except TuningValidationError as error:
            invalid.append(RejectedCacheEntry(entry.index, entry.key,
                                              error.located(entry=entry.label,
                                                            file=file).problems))
            continue
        valid.append(entry)
    return valid, tuple(invalid)


def load_kernel_tuning_cache(
    library: str | None = None,
    kernels: Iterable[str] | str = (),
    implementations: Iterable[str] | str = (),
    element_types: Iterable[object] | object = (),
    path: str | os.PathLike[str] | None = None,
    execution: CpuExecutionDescriptor | None = None,
    *,
    device: str | None = None,
    all_thread_counts: bool = True,
    registry: KernelTuningRegistry = default_registry,
) -> CacheLoadReport:
    """Publish the valid cached entries for this processor that the selection matches.

    Sessions pick a calibrated profile by their execution identity (processor
    and thread count), so by default every thread count of this processor is
    loaded: a session with fewer threads finds its own entry.
    ``all_thread_counts=False`` loads only entries of ``execution`` itself
    (default: :func:`~kerneltune.current_execution`) and reports the others as
    incompatible. Everything is published in one generation; an entry that
    fails leaves its key's previous values and is reported with the reason.
    Only a bad selection argument raises.
    """
    selection = KeyFilter.of(library, kernels, implementations, element_types, device)
    target = cache_path(path)
    if target is None:
        return CacheLoadReport("disabled", None)
    with collector_paused():
        inspection = _inspect(target)
        if inspection.status != "ok":
            return CacheLoadReport(inspection.status, inspection.path,
                                   problems=inspection.problems)
        execution = execution or current_execution()
        snapshot = registry.snapshot()
        found = classify_entries(inspection.entries, selection, execution, snapshot,
                                 inspection.path, all_thread_counts=all_thread_counts,
                                 validate=False)
        usable, invalid = _publish(found.usable, inspection.path, snapshot, registry)
    here = {entry.key for entry in usable if entry.execution.identity == execution.identity}
    registered = snapshot.keys()
    missing = tuple(key for key in registered if selection.matches(key) and key not in here)
    return CacheLoadReport(
        "loaded", inspection.path, usable, found.incompatible, found.stale,
        invalid + tuple(e for e in inspection.invalid if _selected(e, selection)),
        tuple(e for e in inspection.duplicate if _selected(e, selection)), missing,
        generation=registry.generation if usable else None)


def _publish(entries: tuple[CacheEntry, ...], origin: str, snapshot: TuningSnapshot,
             registry: KernelTuningRegistry
             ) -> tuple[tuple[CacheEntry, ...], tuple[RejectedCacheEntry, ...]]:
    """Publish entries in one generation, leaving out those their schema refuses.

    The registry validates a batch as a whole and publishes all or nothing,
    so the batch is tried first (valid caches are the rule, and one
    validation per entry is half the cost of a large load); when it is
    refused, each entry is validated to find the culprits and the rest is
    published.
    """
    if not entries:
        return (), ()
    try:
        registry.register_profiles(entry.profile(origin) for entry in entries)
        return entries, ()
    except TuningValidationError:
        valid, invalid = _validated(entries, snapshot, origin)
    if valid:
        registry.register_profiles(entry.profile(origin) for entry in valid)
    return tuple(valid), invalid


def _selected(entry: RejectedCacheEntry, selection: KeyFilter) -> bool:
    """An entry whose key could not be read is reported whatever the selection."""
    return entry.key is None or selection.matches(entry.key)


# --- updating ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Merge:
    entries: list[CacheEntry]
    added: tuple[CacheEntry, ...]
    replaced: tuple[CacheEntry, ...]
    kept: tuple[CacheEntry, ...]
    preserved: tuple[CacheEntry, ...]
    pruned: tuple[CacheEntry, ...]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.pruned)

    def report(self, status: str, path: str, **more: Any) -> CacheUpdateReport:
        return CacheUpdateReport(status, path, self.added, self.replaced, self.kept,
                                 self.preserved, self.pruned, **more)


def _merge(existing: Sequence[CacheEntry], incoming: Sequence[CacheEntry], replace_existing: bool,
           drop: Callable[[CacheEntry], bool] | None) -> _Merge:
    """Incoming entries merged by slot into the existing ones, which keep their order; an
    untouched one that ``drop`` names is left out."""
    position = {entry.slot: i for i, entry in enumerate(existing)}
    merged: list[CacheEntry] = list(existing)
    touched: set[int] = set()
    added, replaced, kept = [], [], []
    for entry in incoming:
        i = position.get(entry.slot)
        if i is None:
            added.append(entry)
            merged.append(entry)
            continue
        touched.add(i)
        if replace_existing:
            replaced.append(entry)
            merged[i] = entry
        else:
            kept.append(existing[i])
    pruned = [] if drop is None else [
        entry for i, entry in enumerate(existing) if i not in touched and drop(entry)]
    gone = set(map(id, pruned))
    if gone:
        merged = [entry for entry in merged if id(entry) not in gone]
    preserved = tuple(entry for i, entry in enumerate(existing)
                      if i not in touched and id(entry) not in gone)
    return _Merge(merged, tuple(added), tuple(replaced), tuple(kept), preserved, tuple(pruned))


def _write(target: Path, text: str) -> Problem | None:
    """Replace ``target`` by ``text`` (see :mod:`kerneltune._support.files`), or say why not."""
    try:
        write_atomically(target, text)
    except OSError as error:
        return Problem("", f"could not write the cache: {error}", file=str(target))
    return None


def _lock_timeout(path: str, timeout: float) -> Problem:
    return Problem("", f"another process held the cache lock for more than {timeout} s",
                   file=path)


def _unusable(inspection: CacheInspection) -> CacheUpdateReport | None:
    """The report of an update that must not touch the existing file, if it must not."""
    if inspection.status not in _READABLE:
        return CacheUpdateReport(inspection.status, inspection.path,
                                 problems=inspection.problems)
    rejected = inspection.invalid + inspection.duplicate
    if rejected:
        return CacheUpdateReport("malformed", inspection.path, problems=tuple(
            p for entry in rejected for p in entry.problems))
    return None


def update_cache_entries(
    target: Path | None,
    incoming: Callable[[Sequence[CacheEntry]], Sequence[CacheEntry]],
    *,
    read_only: bool = False,
    replace_existing: bool = True,
    lock_timeout: float = LOCK_TIMEOUT,
    drop: Callable[[CacheEntry], bool] | None = None,
) -> CacheUpdateReport:
    """Merge ``incoming(existing entries)`` into the file under the lock.

    ``incoming`` runs under the lock on the entries just read, so a partial
    update (:func:`~kerneltune.set_kernel_tuning_parameters`) merges with what
    is there now, not with what was there before another process wrote.
    Existing entries no incoming one replaces that ``drop(entry)`` names are
    removed (reported as ``pruned``).
    """
    if target is None:
        return CacheUpdateReport("disabled", None)
    path = str(target)
    if read_only:
        current = _inspect(target)
        unusable = _unusable(current)
        if unusable is not None:
            return unusable
        merge = _merge(current.entries, incoming(current.entries), replace_existing, drop)
        return merge.report("read_only", path)
    import filelock  # only writers lock (see file_lock)

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(target, lock_timeout):
            current = _inspect(target)
            unusable = _unusable(current)
            if unusable is not None:
                return unusable
            merge = _merge(current.entries, incoming(current.entries), replace_existing, drop)
            if not merge.changed:
                return merge.report("unchanged", path)
            removed = remove_stray_temporaries(target)
            problem = _write(target, serialise(merge.entries))
    except filelock.Timeout:
        return CacheUpdateReport("lock_timeout", path,
                                 problems=(_lock_timeout(path, lock_timeout),))
    except OSError as error:
        return CacheUpdateReport("write_failed", path, problems=(Problem(
            "", f"could not create or lock the cache: {error}", file=path),))
    if problem is not None:
        return CacheUpdateReport("write_failed", path, problems=(problem,),
                                 removed_temporaries=removed)
    return merge.report("updated", path, removed_temporaries=removed)


def update_kernel_tuning_cache(
    profiles: Iterable[KernelTuningProfile],
    path: str | os.PathLike[str] | None = None,
    read_only: bool = False,
    replace_existing: bool = True,
    prune_stale_abis: bool = False,
    *,
    lock_timeout: float = LOCK_TIMEOUT,
    registry: KernelTuningRegistry = default_registry,
) -> CacheUpdateReport:
    """Persist calibrated profiles (``calibrate_registered_kernels(...).successful_profiles``).

    Every profile is validated against its registered schema first: invalid
    input raises and nothing is written. Entries merge by key and execution
    identity; entries of other keys, executions, libraries or implementations
    are preserved. ``read_only`` reports the merge without writing;
    ``replace_existing=False`` keeps an existing entry for the same slot;
    ``prune_stale_abis`` drops entries whose tuning ABI is older than the
    registered schema's (a newer ABI is left for the kerneltune that wrote it).
    A file that cannot be read or interpreted is reported and left byte for
    byte: remove it with :func:`remove_kernel_tuning_cache`.
    """
    snapshot = registry.snapshot()
    entries = entries_from_profiles(profiles, SOURCES[0], snapshot, registry.library_version)
    stale = None
    if prune_stale_abis:
        newest = {base: max(abis) for base, abis in snapshot.tuning_abis().items()}

        def stale(entry: CacheEntry) -> bool:
            return entry.key.tuning_abi < newest.get(entry.key.without_abi, 0)

    return update_cache_entries(cache_path(path), lambda existing: entries, read_only=read_only,
                                replace_existing=replace_existing, lock_timeout=lock_timeout,
                                drop=stale)


def remove_kernel_tuning_cache(
    path: str | os.PathLike[str] | None = None, *, lock_timeout: float = LOCK_TIMEOUT,
) -> CacheRemoveReport:
    """Delete the cache file under the lock, so no update is cut in half.

    Profiles this process already published stay (sessions keep their values);
    later processes start from the defaults. The ``.lock`` sibling stays: a
    process may be waiting on it, and deleting it would let two writers in.
    """
    target = cache_path(path)
    if target is None:
        return CacheRemoveReport("disabled", None)
    path = str(target)
    if not target.parent.is_dir():
        return CacheRemoveReport("not_found", path)
    import filelock  # only writers lock (see file_lock)

    try:
        with file_lock(target, lock_timeout):
            try:
                target.unlink()
            except FileNotFoundError:
                return CacheRemoveReport("not_found", path)
    except filelock.Timeout:
        return CacheRemoveReport("lock_timeout", path,
                                 problems=(_lock_timeout(path, lock_timeout),))
    except OSError as error:
        return CacheRemoveReport("remove_failed", path, problems=(Problem(
            "", f"could not remove the cache: {error}", file=path),))
    return CacheRemoveReport("removed", path, removed=True)
