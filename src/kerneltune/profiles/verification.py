"""First-use verification: a deployment host checks the shipped values once, and demotes the slower.

A deployment file's values were measured on the farm's machine; a host its
selector matches may still differ (another stepping, a hypervisor hiding flags,
slower memory, a noisy neighbour). :func:`verify_deployment_profiles` measures,
on this execution, every key whose values here come from the files against the
kernel's defaults, with calibration's own tools: the key's comparison workload
at the sizes around each threshold the file moved, outputs compared before any
timing, measurements under interference discarded, and the confirmation rule a
calibrated change must pass (:func:`~kerneltune.calibration.compare_values`), in
the other direction: a value is demoted only when the defaults beat it by the
margin at the stated confidence. A demotion writes an exact-execution entry of the user
calibration cache restores the defaults (source ``verification``, carrying the
file's SHA-256), so later processes use them. Values that hold are recorded in
a sibling of the cache for this execution identity and file digest, so that a
second run measures nothing; a missing or damaged record costs a verification,
nothing else. The files are only read, and nothing runs by itself at import:
verifying is a deliberate step (docs/design.md, First-use verification).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import filelock
from threadpoolctl import threadpool_limits

from .._support.documents import Document, DocumentFormat, read_document
from .._support.files import file_lock, write_atomically
from .._support.reprs import brief_repr
from ..cache.entries import VERIFICATION
from ..cache.kernel_tuning_cache import (
    LOCK_TIMEOUT,
    CacheEntry,
    classify_entries,
    entries_from_profiles,
    inspect_kernel_tuning_cache,
    update_cache_entries,
)
from ..cache.location import cache_path
from ..cache.reports import CacheUpdateReport
from ..calibration import (
    CalibrationContext,
    CalibrationOptions,
    InterferenceSource,
    ProcessInterference,
    compare_values,
    spinning_blas_warning,
)
from ..calibration.measure import BudgetExhausted, Deadline
from ..errors import CalibrationError, CpuDescriptorError, TuningValidationError
from ..machine.descriptor import CpuExecutionDescriptor
from ..machine.detect import current_execution
from ..machine.selectors import Tier
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import (
    KernelTuningProfile,
    KernelTuningRegistry,
    TuningSnapshot,
    default_registry,
)
from ..tuning.schema import KernelTuningKey, TuningValue
from .environment import ENVIRONMENT_VARIABLE
from .importer import (
    IMPORTED,
    ProfileFileReport,
    import_deployment_profiles,
    profile_paths,
)

#: outcomes of a key: its shipped values held, were demoted, could not be verified (a budget,
#: no workload), are the defaults already, or are not in use here (this execution's cache
#: entry from calibration or by hand wins)
KEPT, DEMOTED, UNVERIFIED, DEFAULTS, CACHED = "kept", "demoted", "unverified", "defaults", "cached"
#: the record of verified values, beside the calibration cache
RECORD_FORMAT = DocumentFormat(
    "kerneltune-verification-record", 1,
    {"format": str, "schema_version": int, "verified": list}, what="verification record")


@dataclass(frozen=True)
class KeyVerification:
    """One key whose values here come from a deployment file, and what verification found.

    ``file`` and ``digest`` name the file the values come from and its
    SHA-256; ``shipped`` holds its values that differ from the kernel's
    ``defaults`` (shown for the same parameters); ``measured`` says whether
    this run measured the key (one decided by an earlier run, or with nothing
    to verify, was not); ``library_version`` is the version of the key's kernel
    library the shipped values were calibrated with (None where the file does not say).
    """

    key: KernelTuningKey
    outcome: str
    reason: str
    file: str
    digest: str
    shipped: Mapping[str, TuningValue]
    defaults: Mapping[str, TuningValue]
    measured: bool = False
    library_version: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "outcome": self.outcome, "reason": self.reason,
                "file": self.file, "digest": self.digest, "shipped": dict(self.shipped),
                "defaults": dict(self.defaults), "measured": self.measured,
                "library_version": self.library_version}


@brief_repr
@dataclass(frozen=True, repr=False)
class VerificationReport:
    """What a verification found per key, what it wrote, and every problem met.

    ``cache`` is the update that wrote the demotions (None when there was
    none to write); ``record`` is the file holding the verified keys, and
    ``record_status`` what reading it found (``ok``, ``not_found``, or why it
    could not be used: its keys are then measured again, and it is replaced).
    """

    execution: CpuExecutionDescriptor
    files: tuple[ProfileFileReport, ...]
    keys: tuple[KeyVerification, ...]
    seconds: float
    cache: CacheUpdateReport | None = None
    record: str | None = None
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    record_status: str | None = None

    def _with(self, outcome: str) -> tuple[KeyVerification, ...]:
        return tuple(row for row in self.keys if row.outcome == outcome)

    @property
    def kept(self) -> tuple[KeyVerification, ...]:
        return self._with(KEPT)

    @property
    def demoted(self) -> tuple[KeyVerification, ...]:
        return self._with(DEMOTED)

    @property
    def unverified(self) -> tuple[KeyVerification, ...]:
        return self._with(UNVERIFIED)

    @property
    def measured(self) -> int:
        """How many keys this run measured: none, on a second run with the same file."""
        return sum(row.measured for row in self.keys)

    def summary(self) -> str:
        counts = {outcome: len(self._with(outcome))
                  for outcome in (KEPT, DEMOTED, UNVERIFIED, DEFAULTS, CACHED)}
        return (f"{self.execution.effective_threads} threads: {counts[KEPT]} kept, "
                f"{counts[DEMOTED]} demoted, {counts[UNVERIFIED]} unverified, "
                f"{counts[DEFAULTS]} the defaults already, {counts[CACHED]} not in use "
                f"(cached values win); {self.measured} measured in {self.seconds:.1f} s")

    def to_dict(self) -> dict[str, object]:
        return {"execution": self.execution.to_dict(),
                "files": [file.to_dict() for file in self.files],
                "keys": [row.to_dict() for row in self.keys], "seconds": self.seconds,
                "measured": self.measured,
                "cache": None if self.cache is None else self.cache.to_dict(),
                "record": self.record, "record_status": self.record_status,
                "problems": list(self.problems), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class _Candidate:
    """A key's values from the files on this execution where they differ from the defaults,
    and the file they come from."""

    key: KernelTuningKey
    file: str
    digest: str
    shipped: Mapping[str, TuningValue]
    defaults: Mapping[str, TuningValue]
    library_version: str | None = None

    def row(self, outcome: str, reason: str, measured: bool = False) -> KeyVerification:
        return KeyVerification(self.key, outcome, reason, self.file, self.digest, self.shipped,
                               self.defaults, measured, self.library_version)


class _NoOrder(Exception):
    """Shipped values that no order of setting them one at a time keeps valid throughout."""


def verify_deployment_profiles(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None,
    *,
    threads: int | None = None,
    time_budget: float = 30.0,
    margin: float = 0.05,
    force: bool = False,
    path: str | os.PathLike[str] | None = None,
    registry: KernelTuningRegistry | None = None,
    interference: InterferenceSource | None = None,
) -> VerificationReport:
    """Measure the files' values in use on this execution against the defaults; demote losers.

    ``paths`` are profile or deployment files (or folders); by default those
    ``KERNELTUNE_DEPLOYMENT_PROFILES`` names. ``threads`` is the execution
    verified (default: the CPUs this process may use). Past ``time_budget``
    seconds it stops: the keys left are reported unverified, and nothing
    unconfirmed is demoted. ``margin``: how much faster the defaults must be, at
    the confirmation's confidence, to demote. Keys verified or demoted for this execution and file
    digest before are not measured again, unless ``force``. ``path`` is the
    calibration cache (default: the user's); ``registry`` the one whose
    schemas and calibration functions are used and where demotions are
    published for this process; ``interference`` where what other processes
    take is read (default: this process's counters). Raises :class:`CalibrationError` when two
    configurations compute different outputs, before anything is written.
    """
    start = time.perf_counter()
    registry = registry if registry is not None else default_registry
    options = CalibrationOptions(threads=threads, time_budget=time_budget,
                                 minimum_margin=margin)
    options = dataclasses.replace(options, maximum_interference=options.interference_limit)
    execution = current_execution(options.threads)
    if execution.effective_threads > len(execution.affinity):
        raise CalibrationError(f"cannot verify for {execution.effective_threads} threads: this "
                               f"process may run on {len(execution.affinity)} CPUs")
    snapshot = registry.snapshot()
    # The files alone, over the same schemas: what they give each key, whatever the cache says.
    shipped = KernelTuningRegistry()
    keys = snapshot.keys()
    shipped.register_schemas((key, snapshot.schema(key).config_type) for key in keys)
    imported = import_deployment_profiles(_files(paths), registry=shipped,
                                          processor=execution.processor)
    from_files = shipped.snapshot()
    problems = [f"{file.path}: {file.status}: {problem}" for file in imported.files
                if file.status != IMPORTED for problem in file.problems or ("",)]
    target = cache_path(path)
    inspection = inspect_kernel_tuning_cache(target)
    problems += [str(problem) for problem in inspection.problems]
    cached = {entry.key: entry for entry in classify_entries(
        inspection.entries, KeyFilter(), execution, from_files, inspection.path,
        all_thread_counts=False).usable}
    record = _record_path(target)
    verified, record_status, record_warnings = _read_record(record, execution)
    rows, queue = [], []
    for candidate in _candidates(from_files, execution, imported.files):
        row = _settled(candidate, cached.get(candidate.key), verified, force)
        if row is None:
            queue.append(candidate)
        else:
            rows.append(row)
    deadline = Deadline(start + time_budget, "total")
    with threadpool_limits(limits=execution.effective_threads, user_api="blas"):
        rows += _measure(queue, registry, snapshot, execution, options, deadline,
                         interference if interference is not None else ProcessInterference())
    update, written = _demote(rows, cached, target, execution, from_files, registry)
    if update is not None:
        problems += [str(problem) for problem in update.problems]
    if written:
        problem = _write_record(record, execution, [r for r in rows if r.measured])
        problems += [problem] if problem else []
    warning = spinning_blas_warning(execution.effective_threads)
    return VerificationReport(execution, imported.files, tuple(sorted(rows, key=_order)),
                              time.perf_counter() - start, update,
                              None if record is None else str(record), tuple(problems),
                              (*record_warnings, *([warning] if warning else ())),
                              record_status)


def _files(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None
           ) -> list[Path]:
    if paths is None:
        spec = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
        if not spec:
            raise ValueError(f"no deployment file to verify: give paths, or set "
                             f"{ENVIRONMENT_VARIABLE} as the processes that use them do")
        return profile_paths(spec)
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    return [file for p in paths for file in profile_paths(os.fspath(p))]


def _order(row: KeyVerification) -> tuple:
    key = row.key
    return (key.library, key.kernel, key.element_type, key.implementation, key.tuning_abi)


def _candidates(snapshot: TuningSnapshot, execution: CpuExecutionDescriptor,
                files: Sequence[ProfileFileReport]) -> list[_Candidate]:
    """Every key a file's profile resolves on this execution, with what it changes."""
    digests = {file.path: file.digest for file in files if file.status == IMPORTED}
    found, keys = [], snapshot.keys()
    for key in keys:
        resolution = snapshot.resolve(key, execution)
        if resolution.source.tier is Tier.DEFAULTS:
            continue
        profile = next(p for p in snapshot.profiles(key) if p.digest == resolution.source.digest)
        file = str(profile.provenance["file"])
        defaults = snapshot.schema(key).default_values()
        changed = {name: value for name, value in resolution.values.items()
                   if defaults[name] != value}
        found.append(_Candidate(key, file, digests[file], types.MappingProxyType(changed),
                                types.MappingProxyType({n: defaults[n] for n in changed}),
                                profile.provenance.get("library_version")))
    return found


def _settled(candidate: _Candidate, entry: CacheEntry | None,
             verified: Mapping[str, frozenset[KernelTuningKey]], force: bool
             ) -> KeyVerification | None:
    """The outcome of a key that needs no measurement, or None when it must be measured."""
    if not candidate.shipped:
        return candidate.row(DEFAULTS, "the shipped values are the defaults")
    if entry is not None and entry.source != VERIFICATION:
        return candidate.row(CACHED, f"this execution's {entry.source} entry in the cache wins")
    if force:
        return None
    if entry is not None and entry.report_digest == candidate.digest:
        return candidate.row(DEMOTED, "demoted by an earlier verification of this file")
    if candidate.key in verified.get(candidate.digest, ()):
        return candidate.row(KEPT, "verified by an earlier verification of this file")
    return None


def _measure(queue: Sequence[_Candidate], registry: KernelTuningRegistry,
             snapshot: TuningSnapshot, execution: CpuExecutionDescriptor,
             options: CalibrationOptions, deadline: Deadline,
             interference: InterferenceSource) -> list[KeyVerification]:
    """Each key's shipped values against the defaults, until the deadline."""
    rows = []
    inputs: dict[tuple, object] = {}  # shared by the keys of one element type, as calibration's
    for candidate in sorted(queue, key=lambda c: c.key.element_type):
        if inputs and next(iter(inputs))[0] != candidate.key.element_type:
            inputs.clear()
        if deadline.remaining <= 0:
            rows.append(candidate.row(UNVERIFIED, "the time budget ran out before this key"))
            continue
        rows.append(_verify_key(candidate, registry, snapshot, execution, options, deadline,
                                inputs, interference))
    return rows


def _verify_key(candidate: _Candidate, registry: KernelTuningRegistry, snapshot: TuningSnapshot,
                execution: CpuExecutionDescriptor, options: CalibrationOptions,
                deadline: Deadline, inputs: dict, interference: InterferenceSource
                ) -> KeyVerification:
    function = registry.calibration_function(candidate.key)
    if not callable(getattr(function, "workload", None)):
        return candidate.row(UNVERIFIED, "its calibration function offers no workload to "
                                         "measure on")
    schema = snapshot.schema(candidate.key)
    own = time.perf_counter() + options.seconds_per_key
    if own < deadline.at:  # one key on a busy host may not take the others' time
        deadline = Deadline(own, "per-key")
    context = CalibrationContext(candidate.key, schema, execution, options,
                                 schema.default_values(), deadline, inputs, interference)
    workload = function.workload(context)
    try:
        _apply(context, candidate.shipped)
    except _NoOrder:
        return candidate.row(UNVERIFIED, "its shipped values cannot be set one at a time "
                                         "over the defaults, as a comparison needs")
    try:
        defaults = compare_values(context, workload, context.values, schema.default_values())
    except BudgetExhausted:
        lost = (f" ({len(context.discarded)} measurements discarded for interference)"
                if context.discarded else "")
        return candidate.row(UNVERIFIED, f"the time budget ran out while measuring it{lost}",
                             True)
    if not defaults.points:
        return candidate.row(UNVERIFIED, f"no size of its workload within the memory budget "
                                         f"of {options.memory_budget} bytes runs the shipped "
                                         f"values and the defaults differently", True)
    if defaults.confirmed:
        return candidate.row(DEMOTED, f"the defaults ran {defaults.describe()}", True)
    return candidate.row(KEPT, f"the defaults do not beat them: {defaults.describe()}", True)


def _apply(context: CalibrationContext, values: Mapping[str, TuningValue]) -> None:
    """Set the shipped values over the defaults, in an order every intermediate set passes.

    Each is checked with those set before it, and a cross-field rule
    (a limit that may not exceed a tile) can refuse one until another is set.
    """
    pending = dict(values)
    while pending:
        for name, value in list(pending.items()):
            try:
                context.decide(name, value, "shipped in the deployment file")
            except TuningValidationError:
                continue
            del pending[name]
            break
        else:
            raise _NoOrder


def _demote(rows: Sequence[KeyVerification], cached: Mapping[KernelTuningKey, CacheEntry],
            target: Path | None, execution: CpuExecutionDescriptor, snapshot: TuningSnapshot,
            registry: KernelTuningRegistry) -> tuple[CacheUpdateReport | None, bool]:
    """Write this run's demotions and lift the earlier ones whose values now held.

    Returns the update (None when nothing changes) and whether the cache
    holds what was measured, so that the kept keys may be recorded.
    """
    measured = [row for row in rows if row.measured]
    profiles = [KernelTuningProfile(row.key, row.defaults, execution=execution,
                                    origin=VERIFICATION, report_digest=row.digest)
                for row in measured if row.outcome == DEMOTED]
    lifted = {(row.key, execution.identity) for row in measured
              if row.outcome == KEPT and row.key in cached}
    if not profiles and not lifted:
        return None, True
    entries = entries_from_profiles(profiles, VERIFICATION, snapshot)
    update = update_cache_entries(
        target, lambda existing: entries,
        drop=lambda entry: entry.slot in lifted and entry.source == VERIFICATION)
    origin = update.path or "verification, not persisted"
    if entries:
        registry.register_profiles(entry.profile(origin) for entry in entries)
    return update, update.status in ("updated", "unchanged")


# --- the record of verified keys ------------------------------------------------------------


def _record_path(cache: Path | None) -> Path | None:
    """``kernel_tuning.verified.yaml`` beside ``kernel_tuning.yaml`` (None: no cache)."""
    return None if cache is None else cache.with_name(f"{cache.stem}.verified{cache.suffix}")


def _read_groups(record: Path) -> tuple[list[dict], Document]:
    """The record's groups as read (anything unreadable counts as no record), and what
    reading it found."""
    document = read_document(record, RECORD_FORMAT)
    if document.status != "ok":
        return [], document
    return [group for group in document.data["verified"] if isinstance(group, dict)], document


def _group_of(group: Mapping, execution: CpuExecutionDescriptor
              ) -> tuple[str, frozenset[KernelTuningKey]] | None:
    """A group's file digest and keys when it is of ``execution``; None otherwise or if broken."""
    try:
        found = CpuExecutionDescriptor.from_dict(group["execution"], source="record")
        if found.identity != execution.identity or not isinstance(group["digest"], str):
            return None
        return group["digest"], frozenset(KernelTuningKey.from_dict(k) for k in group["keys"])
    except (KeyError, TypeError, ValueError, CpuDescriptorError, TuningValidationError):
        return None


def _read_record(record: Path | None, execution: CpuExecutionDescriptor
                 ) -> tuple[dict[str, frozenset[KernelTuningKey]], str | None, tuple[str, ...]]:
    """The keys verified on this execution, by file digest; the record's status; a warning
    when it could not be used, before the next write replaces it."""
    if record is None:
        return {}, None, ()
    groups, document = _read_groups(record)
    warnings = tuple(f"{problem}; the keys it held are measured again, and it is replaced"
                     for problem in document.problems)
    found = (_group_of(group, execution) for group in groups)
    return dict(group for group in found if group is not None), document.status, warnings


def _write_record(record: Path | None, execution: CpuExecutionDescriptor,
                  measured: Sequence[KeyVerification]) -> str | None:
    """Add the keys kept now to the record, under its lock; a failure is only reported.

    Groups of other executions and files stay; a group that cannot be read goes.
    """
    kept: dict[str, set[KernelTuningKey]] = {}
    for row in measured:
        if row.outcome == KEPT:
            kept.setdefault(row.digest, set()).add(row.key)
    if record is None or not kept:
        return None
    try:
        record.parent.mkdir(parents=True, exist_ok=True)  # the lock file goes there too
        with file_lock(record, LOCK_TIMEOUT):
            groups = []
            for group in _read_groups(record)[0]:
                found = _group_of(group, execution)
                if found is not None and found[0] in kept:
                    kept[found[0]] |= found[1]
                else:
                    groups.append(group)
            groups += [{"digest": digest, "execution": execution.to_dict(),
                        "keys": [key.to_dict() for key in sorted(keys, key=str)]}
                       for digest, keys in sorted(kept.items())]
            write_atomically(record, _record_text(groups))
    except (OSError, filelock.Timeout) as error:
        return f"{record}: the verified keys were not recorded ({error}); they are measured again"
    return None


def _record_text(groups: Sequence[Mapping]) -> str:
    """The record in YAML's JSON form, one group a line, as the cache is written."""
    header = RECORD_FORMAT.opening()
    lines = ",\n".join(f"  {json.dumps(group, sort_keys=True)}" for group in groups)
    return f"{header},\n \"verified\": [\n{lines}\n ]}}\n"
