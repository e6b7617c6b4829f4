"""The user calibration cache: values measured (or set by hand) on this machine, kept in one file.

The cache is an optimisation source, never the only source of a value: every
key keeps its compiled defaults, so no state of the file may stop a program or
spoil another entry. Loading therefore reports instead of raising, validates
each entry as a whole and publishes the valid compatible ones in one registry
generation; an update validates its input, then rewrites the file under an
inter-process lock through a temporary sibling and ``os.replace``, so a reader
or a crash only ever sees the previous or the next complete file.

The file is versioned YAML (``format`` and ``schema_version`` head it). Updates
write it in the JSON form of YAML, one entry per line: JSON is a subset of
YAML, so any YAML reader takes it, and it is parsed by ``json`` first because
a YAML parser is an order of magnitude too slow for a cache of 10,000 entries.
A file edited into other YAML syntax is read by the safe YAML loader; neither
path can construct anything but plain data. Each processor descriptor (with
its feature list) is written once, in the ``executions`` table, and entries
refer to it by id::

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

import contextlib
import functools
import gc
import json
import os
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock
import platformdirs
import yaml

from .cpu import CpuExecutionDescriptor
from .detect import current_execution
from .errors import CpuDescriptorError, Problem, TuningValidationError
from .files import write_atomically
from .keyfilter import KeyFilter
from .registry import KernelTuningProfile, KernelTuningRegistry, TuningSnapshot, default_registry
from .schema import KernelTuningKey, TuningValue
from .version import __version__

FORMAT = "kerneltune-kernel-tuning-cache"
SCHEMA_VERSION = 1
ENVIRONMENT_VARIABLE = "KERNELTUNE_CACHE"
#: the value of ``KERNELTUNE_CACHE`` that turns persistence off
DISABLED = "off"
FILE_NAME = "kernel_tuning.yaml"
#: where an entry's values came from
SOURCES = ("calibration", "manual")
#: seconds an update or a removal waits for another process's lock before giving up
LOCK_TIMEOUT = 10.0

_TOP_FIELDS = ("format", "schema_version", "executions", "entries")
_ENTRY_FIELDS = ("key", "execution", "values", "source", "versions", "report_digest")
_ENTRY_FIELD_SET = frozenset(_ENTRY_FIELDS)
#: a hand-written entry may leave out its report digest (a manual one has none)
_REQUIRED_ENTRY_FIELDS = _ENTRY_FIELD_SET - {"report_digest"}
_VERSION_FIELDS = frozenset({"kerneltune"})
_SCALARS = (bool, int, float, str)
_READABLE = ("ok", "not_found")


def default_kernel_tuning_cache_path() -> Path | None:
    """The cache file of this user, or None when ``KERNELTUNE_CACHE=off`` disables persistence.

    ``KERNELTUNE_CACHE`` names another file; otherwise platformdirs chooses the
    user cache directory, so each operating system's convention (XDG on Linux,
    Library/Caches on macOS, LOCALAPPDATA on Windows) is followed.
    """
    override = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if override.lower() == DISABLED:
        return None
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("kerneltune", appauthor=False)) / FILE_NAME


def cache_path(path: str | os.PathLike[str] | None) -> Path | None:
    """The file an operation acts on: ``path``, else the default (None when disabled).

    An explicit path always wins; ``KERNELTUNE_CACHE=off`` only disables the
    default one.
    """
    return Path(path) if path is not None else default_kernel_tuning_cache_path()


# --- entries and reports ----------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One cached result: values of one key for one execution, with where they came from.

    ``index`` is the entry's position in the file it was read from (None for
    an entry made from a profile). Two entries are the same cache slot when
    their key and execution identity are equal (:attr:`slot`).
    """

    key: KernelTuningKey
    execution: CpuExecutionDescriptor
    values: Mapping[str, TuningValue]
    source: str
    versions: Mapping[str, str]
    report_digest: str | None
    index: int | None = None

    @functools.cached_property
    def slot(self) -> tuple[KernelTuningKey, tuple]:
        return (self.key, self.execution.identity)

    @property
    def label(self) -> str:
        where = f"entry {self.index}" if self.index is not None else "entry"
        return f"{where} ({self.key}, {self.execution.effective_threads} threads)"

    def profile(self, origin: str) -> KernelTuningProfile:
        return KernelTuningProfile(self.key, self.values, execution=self.execution, origin=origin,
                                   report_digest=self.report_digest)

    def to_dict(self) -> dict[str, object]:
        processor = self.execution.processor
        return {
            "index": self.index,
            "key": self.key.to_dict(),
            "effective_threads": self.execution.effective_threads,
            "processor": {"vendor": processor.vendor, "family": processor.family,
                          "model": processor.model,
                          "microarchitecture": processor.microarchitecture},
            "values": dict(self.values),
            "source": self.source,
            "versions": dict(self.versions),
            "report_digest": self.report_digest,
        }


@dataclass(frozen=True)
class RejectedCacheEntry:
    """An entry that was not used, and every reason why (each names the file, entry and field)."""

    index: int
    key: KernelTuningKey | None
    problems: tuple[Problem, ...]

    @property
    def reason(self) -> str:
        return "; ".join(str(p) for p in self.problems)

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "key": None if self.key is None else self.key.to_dict(),
                "problems": [str(p) for p in self.problems]}


def _dicts(items: Iterable[Any]) -> list[object]:
    return [item.to_dict() for item in items]


def _text(problems: Iterable[Problem]) -> list[str]:
    return [str(p) for p in problems]


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CacheUpdateReport:
    """What an update wrote (or, ``read_only``, would have written).

    ``kept`` are existing entries an incoming one did not replace
    (``replace_existing=False``); ``preserved`` the entries no incoming one
    touched; ``pruned`` the entries of an older tuning ABI that were dropped.
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


@dataclass(frozen=True)
class CacheRemoveReport:
    status: str
    path: str | None
    removed: bool = False
    problems: tuple[Problem, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "removed": self.removed,
                "problems": _text(self.problems)}


# --- reading ----------------------------------------------------------------------------------


class _SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C one where built), refusing duplicate mapping keys.

    Plain YAML loaders keep the last of two equal keys without a word; a cache
    that says two things about one field means neither.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping = super().construct_mapping(node, deep)
        if len(mapping) != len(node.value):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found the key {key_node.value!r} twice",
                        key_node.start_mark)
                seen.add(key_node.value)
        return mapping


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise ValueError("a duplicate key")
    return mapping


def _parse(text: str) -> tuple[object, str | None]:
    """Plain data from the file's text, or why it is not plain YAML.

    ``NaN`` is read as the float it spells (the safe YAML loader reads ``.nan``
    the same way), so a non-finite value fails its entry, not the file. JSON
    that ``json`` refuses (a duplicate key, an over-long integer) goes to the
    YAML loader, which reports it with a line and column.
    """
    if not text.strip():
        return None, "the file is empty"
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=float), None
    except (ValueError, RecursionError):
        pass
    try:
        return yaml.load(text, Loader=_SafeLoader), None  # noqa: S506 - a safe loader
    except (yaml.YAMLError, ValueError, RecursionError) as error:
        return None, f"not plain YAML: {' '.join(str(error).split())}"


def _kind(value: object) -> str:
    return type(value).__name__


def _inspect(target: Path) -> CacheInspection:
    with _collector_paused():
        return _inspect_file(target)


def _inspect_file(target: Path) -> CacheInspection:
    path = str(target)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return CacheInspection("not_found", path)
    except OSError as error:
        return CacheInspection("unreadable", path, problems=(
            Problem("", f"cannot read the cache: {error.strerror or error}", file=path),))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return CacheInspection("malformed", path, problems=(
            Problem("", f"not UTF-8 text (byte {error.start}); not a kernel tuning cache",
                    file=path),))
    document, reason = _parse(text)
    if reason is not None:
        return CacheInspection("malformed", path, problems=(Problem("", reason, file=path),))
    return _read_document(document, path)


def _envelope(document: object, path: str) -> tuple[str, list[Problem]]:
    """The file-level status of a parsed document: its header first, then its shape."""
    def problem(field: str, message: str) -> tuple[str, list[Problem]]:
        return "malformed", [Problem(field, message, file=path)]

    if not isinstance(document, dict):
        return problem("", f"expected a mapping with the fields {', '.join(_TOP_FIELDS)}, "
                           f"got {_kind(document)}")
    if document.get("format") != FORMAT:
        return problem("format", f"expected {FORMAT!r}, got {document.get('format')!r}")
    version = document.get("schema_version")
    if type(version) is not int:
        return problem("schema_version", f"expected the integer {SCHEMA_VERSION}, got "
                                         f"{version!r}")
    if version != SCHEMA_VERSION:
        return "unsupported_version", [Problem(
            "schema_version", f"version {version}; this kerneltune reads version "
                              f"{SCHEMA_VERSION} only (a newer kerneltune may have written it)",
            file=path)]
    problems = [Problem(str(name), f"unknown field; expected {', '.join(_TOP_FIELDS)}", file=path)
                for name in document if name not in _TOP_FIELDS]
    problems += [Problem(name, "missing", file=path) for name in _TOP_FIELDS
                 if name not in document]
    if not problems:
        for name, kind in (("executions", dict), ("entries", list)):
            if not isinstance(document[name], kind):
                problems.append(Problem(name, f"expected a {'mapping' if kind is dict else 'list'}"
                                              f", got {_kind(document[name])}", file=path))
    return ("malformed" if problems else "ok"), problems


def _executions(table: dict, path: str) -> dict[object, CpuExecutionDescriptor | Problem]:
    """Each execution of the table validated once, however many entries refer to it."""
    executions: dict[object, CpuExecutionDescriptor | Problem] = {}
    for ident, record in table.items():
        try:
            executions[ident] = CpuExecutionDescriptor.from_dict(record, source=f"{ident!r}")
        except (CpuDescriptorError, ValueError) as error:
            executions[ident] = Problem("execution", f"the execution {error}", file=path)
    return executions


def _read_document(document: object, path: str) -> CacheInspection:
    status, problems = _envelope(document, path)
    if status != "ok":
        return CacheInspection(status, path, problems=tuple(problems))
    executions = _executions(document["executions"], path)
    keys: dict[object, KernelTuningKey | TuningValidationError] = {}
    entries, invalid = [], []
    for index, raw in enumerate(document["entries"]):
        entry = _entry(index, raw, executions, keys, path)
        (entries if isinstance(entry, CacheEntry) else invalid).append(entry)
    entries, duplicate = _without_duplicates(entries, path)
    return CacheInspection("ok", path, tuple(entries), tuple(invalid), tuple(duplicate))


def _key(raw: object, keys: dict) -> KernelTuningKey | TuningValidationError:
    """The key of an entry, parsed once per distinct spelling (one key has many executions)."""
    try:
        memo = tuple(raw.items()) if isinstance(raw, dict) else None
        hash(memo)
    except TypeError:
        memo = None
    found = keys.get(memo) if memo is not None else None
    if found is None:
        try:
            found = KernelTuningKey.from_dict(raw)
        except TuningValidationError as error:
            found = error
        if memo is not None:
            keys[memo] = found
    return found


def _entry(index: int, raw: object, executions: Mapping, keys: dict,
           path: str) -> CacheEntry | RejectedCacheEntry:
    """One entry as a whole, or every reason it cannot be interpreted.

    Each check builds a message only when it fails: a load reads thousands of
    valid entries for each broken one.
    """
    if not isinstance(raw, dict):
        return RejectedCacheEntry(index, None, (Problem(
            "", f"expected a mapping with the fields {', '.join(_ENTRY_FIELDS)}, got "
                f"{_kind(raw)}", entry=f"entry {index}", file=path),))
    problems = []
    if not _ENTRY_FIELD_SET.issuperset(raw):
        problems += [Problem(str(name), f"unknown field; expected {', '.join(_ENTRY_FIELDS)}")
                     for name in raw if name not in _ENTRY_FIELD_SET]
    if not _REQUIRED_ENTRY_FIELDS.issubset(raw):
        problems += [Problem(name, "missing") for name in _ENTRY_FIELDS
                     if name in _REQUIRED_ENTRY_FIELDS and name not in raw]
    key = _key(raw["key"], keys) if "key" in raw else None
    if isinstance(key, TuningValidationError):
        problems += key.problems
        key = None
    ident = raw.get("execution")
    execution = executions.get(ident) if isinstance(ident, str) else None
    if isinstance(execution, Problem):
        problems.append(execution)
        execution = None
    elif execution is None and "execution" in raw:
        problems.append(Problem("execution", f"{ident!r} is not an id of the executions table"))
    values = raw.get("values", {})
    if not isinstance(values, dict):
        problems.append(Problem("values", f"expected a mapping of parameter names, got "
                                          f"{_kind(values)}"))
    else:
        for name, value in values.items():
            if not isinstance(name, str) or not isinstance(value, _SCALARS):
                problems.append(Problem(f"values.{name}", f"expected an int, float, bool or "
                                                          f"string, got {_kind(value)}"))
    source = raw.get("source")
    if source not in SOURCES and "source" in raw:
        problems.append(Problem("source", f"expected one of {', '.join(SOURCES)}, got "
                                          f"{source!r}"))
    versions = raw.get("versions", {})
    if not (isinstance(versions, dict) and _VERSION_FIELDS.issuperset(versions)
            and all(isinstance(v, str) for v in versions.values())):
        problems.append(Problem("versions", f"expected a mapping of "
                                            f"{', '.join(sorted(_VERSION_FIELDS))} to a version "
                                            f"string, got {versions!r}"))
    digest = raw.get("report_digest")
    if digest is not None and (not isinstance(digest, str) or not digest):
        problems.append(Problem("report_digest", f"expected a non-empty string or null, got "
                                                 f"{digest!r}"))
    if problems:
        where = f"entry {index}" + (f" ({key})" if key is not None else "")
        return RejectedCacheEntry(index, key, tuple(p.located(file=path, entry=where)
                                                    for p in problems))
    return CacheEntry(key, execution, types.MappingProxyType(values), source,
                      types.MappingProxyType(versions), digest, index)


def _without_duplicates(entries: list[CacheEntry], path: str
                        ) -> tuple[list[CacheEntry], list[RejectedCacheEntry]]:
    """Entries that say two things about one key and execution: neither is believed."""
    groups: dict[tuple, list[CacheEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.slot, []).append(entry)
    if all(len(group) == 1 for group in groups.values()):
        return entries, []
    duplicate = [
        RejectedCacheEntry(entry.index, entry.key, (Problem(
            "", "the same key and execution as entries "
                + ", ".join(str(other.index) for other in group if other is not entry),
            entry=entry.label, file=path),))
        for group in groups.values() if len(group) > 1 for entry in group
    ]
    return [e for e in entries if len(groups[e.slot]) == 1], duplicate


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
    abis = registered_abis.get(_base(key))
    if abis:
        return Problem("key.tuning_abi", f"tuning ABI {key.tuning_abi}; the registered schema "
                                         f"has tuning ABI {', '.join(map(str, abis))}")
    return Problem("key.implementation", f"no tuning schema is registered for "
                                         f"{key.library}/{key.kernel}/{key.implementation}/"
                                         f"{key.element_type_name} on {key.device}")


def _base(key: KernelTuningKey) -> tuple:
    """A key without its tuning ABI: what two ABIs of one kernel share."""
    return (key.library, key.kernel, key.implementation, key.element_type, key.device)


def _registered_abis(snapshot: TuningSnapshot) -> dict[tuple, list[int]]:
    abis: dict[tuple, list[int]] = {}
    registered = snapshot.keys()
    for key in registered:
        abis.setdefault(_base(key), []).append(key.tuning_abi)
    return abis


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
    abis = _registered_abis(snapshot)
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


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of a bulk read.

    Reading a large cache allocates some 10^5 containers that all live on; the
    collector would traverse them (and the rest of the heap) several times
    over for no garbage: a third of a 10,000-entry load.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    with _collector_paused():
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


def entries_from_profiles(profiles: Iterable[KernelTuningProfile], source: str,
                          snapshot: TuningSnapshot) -> list[CacheEntry]:
    """Cache entries for calibrated profiles, each validated against its schema.

    Raises :class:`TuningValidationError` with every problem (a selector
    profile, an unregistered key, an invalid value, two profiles for one key
    and execution) so that nothing is written from a bad batch.
    """
    registered = set(snapshot.keys())
    entries, problems, slots = [], [], {}
    for index, profile in enumerate(profiles):
        if not isinstance(profile, KernelTuningProfile):
            problems.append(Problem("", f"expected a KernelTuningProfile, got {profile!r}",
                                    entry=f"profile {index}"))
            continue
        where = f"profile {index} ({profile.key})"
        if profile.execution is None:
            problems.append(Problem("execution", "the cache keeps calibrated profiles (bound to "
                                                 "an execution), not selector profiles",
                                    entry=where))
            continue
        if profile.key not in registered:
            problems.append(Problem("key", "no tuning schema is registered for this key",
                                    entry=where))
            continue
        try:
            values = snapshot.schema(profile.key).validate(profile.values)
        except TuningValidationError as error:
            problems += error.located(entry=where).problems
            continue
        entry = CacheEntry(profile.key, profile.execution, types.MappingProxyType(values), source,
                           types.MappingProxyType({"kerneltune": __version__}),
                           profile.report_digest)
        if entry.slot in slots:
            problems.append(Problem("", f"the same key and execution as profile "
                                        f"{slots[entry.slot]}", entry=where))
            continue
        slots[entry.slot] = index
        entries.append(entry)
    if problems:
        raise TuningValidationError(problems, context="kernel tuning cache not updated")
    return entries


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
           newest_abis: Mapping[tuple, int] | None) -> _Merge:
    """Incoming entries merged by slot into the existing ones, which keep their order."""
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
    pruned = [] if newest_abis is None else [
        entry for i, entry in enumerate(existing)
        if i not in touched and entry.key.tuning_abi < newest_abis.get(_base(entry.key), 0)
    ]
    gone = set(map(id, pruned))
    if gone:
        merged = [entry for entry in merged if id(entry) not in gone]
    preserved = tuple(entry for i, entry in enumerate(existing)
                      if i not in touched and id(entry) not in gone)
    return _Merge(merged, tuple(added), tuple(replaced), tuple(kept), preserved, tuple(pruned))


def _serialise(entries: Iterable[CacheEntry]) -> str:
    """The JSON form of the YAML file: one execution and one entry per line."""
    ids: dict[CpuExecutionDescriptor, str] = {}
    lines = []
    for entry in entries:
        ident = ids.get(entry.execution)
        if ident is None:
            ident = ids[entry.execution] = f"e{len(ids) + 1}"
        lines.append(json.dumps({
            "key": entry.key.to_dict(), "execution": ident, "values": dict(entry.values),
            "source": entry.source, "versions": dict(entry.versions),
            "report_digest": entry.report_digest}))
    executions = ",\n".join(f"  {json.dumps(ident)}: {json.dumps(execution.to_dict())}"
                            for execution, ident in ids.items())
    header = json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION})[:-1]
    return (f"{header},\n \"executions\": {{\n{executions}\n }},\n \"entries\": [\n"
            + ",\n".join(f"  {line}" for line in lines) + "\n ]}\n")


def _temporaries(target: Path) -> list[Path]:
    prefix = target.name + "."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    return [target.parent / name for name in names
            if name.startswith(prefix) and name.endswith(".tmp")]


def _remove_temporaries(target: Path) -> int:
    """Remove temporaries of writers that died; only called under the lock, when none is live."""
    removed = 0
    for stray in _temporaries(target):
        with contextlib.suppress(OSError):
            stray.unlink()
            removed += 1
    return removed


def _write(target: Path, text: str) -> Problem | None:
    """Replace ``target`` by ``text`` (see :mod:`kerneltune.files`), or say why not."""
    try:
        write_atomically(target, text)
    except OSError as error:
        return Problem("", f"could not write the cache: {error}", file=str(target))
    return None


def _lock(target: Path, timeout: float) -> filelock.FileLock:
    return filelock.FileLock(str(target) + ".lock", timeout=timeout)


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
    newest_abis: Mapping[tuple, int] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> CacheUpdateReport:
    """Merge ``incoming(existing entries)`` into the file under the lock.

    ``incoming`` runs under the lock on the entries just read, so a partial
    update (:func:`~kerneltune.set_kernel_tuning_parameters`) merges with what
    is there now, not with what was there before another process wrote.
    """
    if target is None:
        return CacheUpdateReport("disabled", None)
    path = str(target)
    if read_only:
        current = _inspect(target)
        unusable = _unusable(current)
        if unusable is not None:
            return unusable
        merge = _merge(current.entries, incoming(current.entries), replace_existing, newest_abis)
        return merge.report("read_only", path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _lock(target, lock_timeout):
            current = _inspect(target)
            unusable = _unusable(current)
            if unusable is not None:
                return unusable
            merge = _merge(current.entries, incoming(current.entries), replace_existing,
                           newest_abis)
            if not merge.changed:
                return merge.report("unchanged", path)
            removed = _remove_temporaries(target)
            problem = _write(target, _serialise(merge.entries))
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
    entries = entries_from_profiles(profiles, SOURCES[0], snapshot)
    newest = None
    if prune_stale_abis:
        newest = {base: max(abis) for base, abis in _registered_abis(snapshot).items()}
    return update_cache_entries(cache_path(path), lambda existing: entries, read_only=read_only,
                                replace_existing=replace_existing, newest_abis=newest,
                                lock_timeout=lock_timeout)


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
    try:
        with _lock(target, lock_timeout):
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
