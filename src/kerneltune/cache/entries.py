"""Calibration cache entries: one key's values for one execution, read and written.

An entry is checked as a whole: any problem (a broken key, an unknown
execution id, a value that is no scalar, an unknown field) rejects that entry
with every reason, and leaves the others. Two entries for one key and
execution say two things about one slot: neither is believed. Each processor
descriptor is written once, in the file's ``executions`` table, and entries
refer to it by id; the file is written in the JSON form of YAML, one entry per
line (see :mod:`kerneltune.cache` for the layout).
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .._support.documents import DocumentFormat, kind
from .._support.version import __version__
from ..errors import CpuDescriptorError, Problem, TuningValidationError
from ..machine.descriptor import CpuExecutionDescriptor
from ..tuning.registry import KernelTuningProfile, TuningSnapshot
from ..tuning.schema import KernelTuningKey, TuningValue, value_problems

#: the cache file's format: its header and top-level fields
CACHE_FORMAT = DocumentFormat(
    "kerneltune-kernel-tuning-cache", 1,
    {"format": str, "schema_version": int, "executions": dict, "entries": list},
    what="kernel tuning cache")
#: an entry that first-use verification wrote: the defaults restored where a deployment
#: file's values were slower (its report digest is the deployment file's SHA-256)
VERIFICATION = "verification"
#: where an entry's values came from
SOURCES = ("calibration", "manual", VERIFICATION)

_ENTRY_FIELDS = ("key", "execution", "values", "source", "versions", "report_digest")
_ENTRY_FIELD_SET = frozenset(_ENTRY_FIELDS)
#: a hand-written entry may leave out its report digest (a manual one has none)
_REQUIRED_ENTRY_FIELDS = _ENTRY_FIELD_SET - {"report_digest"}
#: kerneltune's version, and the version of the key's kernel library (where it said)
_VERSION_FIELDS = frozenset({"kerneltune", "library"})


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
        """The calibrated profile the entry publishes; a verification entry is named, with the
        deployment file it demoted values of, so that explain says why the defaults apply."""
        name = None
        if self.source == VERIFICATION:
            name = VERIFICATION
            origin = f"{origin}, deployment file {(self.report_digest or '?')[:12]}"
        return KernelTuningProfile(self.key, self.values, execution=self.execution, name=name,
                                   origin=origin, report_digest=self.report_digest)

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


def read_entries(document: Mapping, path: str
                 ) -> tuple[list[CacheEntry], list[RejectedCacheEntry], list[RejectedCacheEntry]]:
    """The entries of a checked document: interpretable, invalid and duplicate ones."""
    executions = _executions(document["executions"], path)
    keys: dict[object, KernelTuningKey | TuningValidationError] = {}
    entries, invalid = [], []
    for index, raw in enumerate(document["entries"]):
        entry = _entry(index, raw, executions, keys, path)
        (entries if isinstance(entry, CacheEntry) else invalid).append(entry)
    entries, duplicate = _without_duplicates(entries, path)
    return entries, invalid, duplicate


def _executions(table: dict, path: str) -> dict[object, CpuExecutionDescriptor | Problem]:
    """Each execution of the table validated once, however many entries refer to it."""
    executions: dict[object, CpuExecutionDescriptor | Problem] = {}
    for ident, record in table.items():
        try:
            executions[ident] = CpuExecutionDescriptor.from_dict(record, source=f"{ident!r}")
        except (CpuDescriptorError, ValueError) as error:
            executions[ident] = Problem("execution", f"the execution {error}", file=path)
    return executions


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
                f"{kind(raw)}", entry=f"entry {index}", file=path),))
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
    problems += value_problems(values)
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


def serialise(entries: Iterable[CacheEntry]) -> str:
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
    header = CACHE_FORMAT.opening()
    return (f"{header},\n \"executions\": {{\n{executions}\n }},\n \"entries\": [\n"
            + ",\n".join(f"  {line}" for line in lines) + "\n ]}\n")


def entries_from_profiles(profiles: Iterable[KernelTuningProfile], source: str,
                          snapshot: TuningSnapshot,
                          library_version: Callable[[str], str | None] = lambda name: None,
                          ) -> list[CacheEntry]:
    """Cache entries for calibrated profiles, each validated against its schema and stamped
    with ``library_version(key.library)``.

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
                           types.MappingProxyType(_versions(library_version(profile.key.library))),
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


def _versions(library_version: str | None) -> dict[str, str]:
    versions = {"kerneltune": __version__}
    if library_version is not None:
        versions["library"] = library_version
    return versions
