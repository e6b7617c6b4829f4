"""Importing deployment profiles: every entry checked, each file published whole or not at all.

A profile is read, then each entry is checked against the registry's schemas:
its key must be registered (an entry of another tuning ABI is stale), its
values valid as a whole, its selector unambiguous beside what is registered.
A file with any problem registers nothing and its report lists every problem;
the files that pass are published together, in one registry generation.
Entries for an ISA variant or a kernel library this process did not register
are not problems: a deployment file serves many machines, and each takes
what applies to it. Given the processor to import for (``import kerneltune``
gives its own), a profile whose selector cannot match it, or whose entries are
all for variants or libraries this process did not register, is left unread:
a deployment file's index says so without parsing the profile, so start-up
costs what matches the host, not what the fleet holds.

Imported entries resolve in the tier of their selector (exact processor,
processor group, instruction set), below the calibration cache's
exact-execution values and session overrides.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._support.reprs import brief_repr
from ..errors import AmbiguousProfileError, Problem, ProfileError, TuningValidationError
from ..machine.blas import blas_difference
from ..machine.descriptor import CpuDescriptor
from ..machine.names import canonical_architecture, canonical_vendor
from ..machine.selectors import CpuSelector
from ..tuning.registry import KernelTuningRegistry, TuningSnapshot, default_registry
from ..tuning.resolution import KernelTuningProfile
from ..tuning.schema import KernelTuningKey, KernelTuningSchema
from .deployment import IndexRow, read_profiles
from .model import DeploymentProfile, ProfileEntry

#: a file's outcome when it was published
IMPORTED = "imported"


@brief_repr
@dataclass(frozen=True, repr=False)
class ProfileFileReport:
    """What became of one file: its status, what it registered and every problem.

    ``status`` is ``imported``, ``rejected`` (an entry the registry refuses),
    ``malformed`` (not a profile, or an entry that cannot be read),
    ``not_found``, ``unreadable``, ``too_large`` or ``unsupported_version``.
    ``not_applicable`` counts entries for variants or libraries this process
    did not register; ``unread`` names the profiles left unread (another
    processor's, or only other variants' and libraries'), whose entries
    ``not_applicable`` counts where the file's index gives their number;
    ``stale`` names entries of another tuning ABI; ``warnings`` say what may
    make a value wrong here without making it invalid (a BLAS library other
    than the calibrating one's). ``not_installed`` counts, per kernel library
    this process has not registered (not installed, or not selected), the
    entries for this processor that wait for it (they count in
    ``not_applicable`` too).
    """

    path: str
    status: str
    name: str | None = None
    digest: str | None = None
    imported: int = 0
    not_applicable: int = 0
    stale: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()
    not_installed: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "status": self.status, "name": self.name,
                "digest": self.digest, "imported": self.imported,
                "not_applicable": self.not_applicable,
                "not_installed": dict(sorted(self.not_installed.items())),
                "unread": list(self.unread),
                "stale": list(self.stale), "problems": list(self.problems),
                "warnings": list(self.warnings)}


@brief_repr
@dataclass(frozen=True, repr=False)
class ProfileImportReport:
    """The outcome of one import: a report per file, and the generation that holds them."""

    files: tuple[ProfileFileReport, ...]
    generation: int | None = None

    @property
    def imported(self) -> tuple[ProfileFileReport, ...]:
        return tuple(f for f in self.files if f.status == IMPORTED)

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(p for f in self.files for p in f.problems)

    @property
    def not_installed(self) -> dict[str, int]:
        """Entries for this processor per kernel library not registered here, over the files."""
        counts: collections.Counter[str] = collections.Counter()
        for file in self.files:
            counts.update(file.not_installed)
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, object]:
        return {"generation": self.generation, "files": [f.to_dict() for f in self.files]}


def profile_paths(spec: str) -> list[Path]:
    """The files a ``KERNELTUNE_DEPLOYMENT_PROFILES`` value names: a folder gives its *.yaml."""
    paths: list[Path] = []
    for part in filter(None, (p.strip() for p in spec.split(os.pathsep))):
        path = Path(part)
        paths += sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return paths


def import_deployment_profiles(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    registry: KernelTuningRegistry | None = None,
    strict: bool = False,
    processor: CpuDescriptor | None = None,
) -> ProfileImportReport:
    """Check every entry of every file, then publish the files that passed, together.

    Never raises for what a file holds (unless ``strict``): a file with a
    problem registers nothing and its report says why. With ``strict=True``
    any problem raises :class:`ProfileError` and nothing is registered. Given
    a ``processor``, the profiles that cannot apply to it are left unread (and
    unchecked); without one, every profile of every file is read and checked.
    """
    registry = registry if registry is not None else default_registry
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    snapshot = registry.snapshot()
    known = _Registered(snapshot, registry)
    wanted = None if processor is None else functools.partial(known.wanted, processor)
    checked = [_check_file(Path(path), known, snapshot, wanted) for path in paths]
    if strict:
        problems = [problem for report, _ in checked if report.status != IMPORTED
                    for problem in report.problems or (f"{report.path}: {report.status}",)]
        passing = [profile for _, profiles in checked for profile in profiles]
        if not problems and passing:
            problems = list(registry.check_profiles(passing))
        if problems:
            raise ProfileError(problems, context="deployment profiles not imported")
    reports = _publish(checked, registry)
    published = any(report.status == IMPORTED and report.imported for report in reports)
    return ProfileImportReport(tuple(reports), registry.generation if published else None)


class _Registered:
    """What the registry knows, indexed for telling a bad entry from one for another machine."""

    def __init__(self, snapshot: TuningSnapshot, registry: KernelTuningRegistry):
        self.keys = frozenset(snapshot.keys())
        self.libraries = {key.library for key in self.keys}
        self.kernels = {(key.library, key.kernel) for key in self.keys}
        self.element_types = {(key.library, key.kernel, key.element_type) for key in self.keys}
        self.implementations = {(k.library, k.kernel, k.implementation) for k in self.keys}
        self.loaded = {(key.library, key.implementation) for key in self.keys}
        self.possible = {library: registry.implementations(library)
                         for library in self.libraries}
        self.abis = snapshot.tuning_abis()

    def wanted(self, processor: CpuDescriptor, row: IndexRow) -> bool:
        """Whether a profile can apply to ``processor`` here, from its index row alone.

        The fields a fleet's selectors differ in are compared first (canonical, as the
        bake writes them): most rows are another processor's, told so without building
        their selector. A row naming an implementation its library cannot have is read,
        so that its entries are refused rather than left unread; a row this cannot judge
        is read, and its checks name the problem.
        """
        try:
            if not _may_match(row.selector, processor):
                return False
            selector = _selector(json.dumps(row.selector, sort_keys=True))
        except (TuningValidationError, TypeError, ValueError):
            return True
        if not selector.matches_processor(processor):
            return False
        if not row.implementations or not set(row.libraries) <= self.libraries:
            # a profile file's header says nothing of its entries; entries of a library
            # not registered here are counted per library (``not_installed``)
            return True
        possible = [self.possible.get(library) for library in row.libraries]
        if any(known is not None and implementation not in known for known in possible
               for implementation in row.implementations):
            return True
        return any((library, implementation) in self.loaded for library in row.libraries
                   for implementation in row.implementations)

    def classify(self, key: KernelTuningKey) -> tuple[str, str | None]:
        """``("ok", None)``, ``("skip", why)``, ``("stale", why)``, ``("bad", why)`` or
        ``("absent", library)`` for a key of a library not registered here."""
        if key in self.keys:
            return "ok", None
        if key.library not in self.libraries:
            return "absent", key.library
        abis = self.abis.get(key.without_abi)
        if abis:
            return "stale", (f"stale: tuning ABI {key.tuning_abi}; the registered schema has "
                             f"tuning ABI {', '.join(map(str, abis))}")
        if (key.library, key.kernel) not in self.kernels:
            return "bad", f"unknown kernel {key.kernel} of {key.library}"
        if (key.library, key.kernel, key.element_type) not in self.element_types:
            return "bad", f"{key.kernel} takes no element type {key.element_type_name}"
        if (key.library, key.kernel, key.implementation) not in self.implementations:
            possible = self.possible.get(key.library)
            if possible is not None and key.implementation not in possible:
                return "bad", (f"unknown implementation {key.implementation} of {key.library} "
                               f"(not one it can build)")
            return "skip", f"implementation {key.implementation} is not loaded here"
        return "bad", f"no tuning schema is registered for {key}"


#: how a selector's field and a processor's compare, spelled as either may be
_CANONICAL = {"architecture": canonical_architecture, "vendor": canonical_vendor}


def _may_match(fields: Mapping[str, object], processor: CpuDescriptor) -> bool:
    """False when the architecture, vendor, family or models a selector names (in any
    spelling the selector accepts) are not ``processor``'s; True when it may match."""
    for name, canonical in _CANONICAL.items():
        value = fields.get(name)
        if value is not None and canonical(str(value)) != getattr(processor, name):
            return False
    family, models = fields.get("family"), fields.get("models")
    if family is not None and family != processor.family:
        return False
    if isinstance(models, int) and not isinstance(models, bool):
        models = [models]
    return not models or processor.model in models


@functools.lru_cache(maxsize=4096)
def _selector(text: str) -> CpuSelector:
    """An index row's selector (as JSON), built once per spelling: files repeat selectors."""
    return CpuSelector.from_dict(json.loads(text))


def _check_file(path: Path, known: _Registered, snapshot: TuningSnapshot,
                wanted: Callable[[IndexRow], bool] | None
                ) -> tuple[ProfileFileReport, list[KernelTuningProfile]]:
    """A file's report before publication, and the profiles it would register."""
    read = read_profiles(path, wanted)
    if read.status != "ok":
        return ProfileFileReport(str(path), read.status,
                                 problems=tuple(map(str, read.problems))), []
    found, digest = read.profiles, read.digest
    unread = tuple(row.name for row in read.unread)
    problems, stale, profiles, absent = [], [], [], collections.Counter()
    skipped = sum(row.entries for row in read.unread)
    for profile in found:
        checked = check_entries(profile, known.classify, snapshot.schema)
        problems += checked.problems
        stale += checked.stale
        skipped += checked.skipped
        absent.update(checked.absent)
        profiles += _registered_profiles(profile, checked.passing)
    report = ProfileFileReport(
        str(path), "rejected" if problems else IMPORTED,
        ", ".join([p.name for p in found] + list(unread)) or None,
        digest, 0 if problems else len(profiles), skipped, tuple(stale), tuple(problems),
        () if problems else tuple(w for p in found for w in _blas_warnings(p)), unread,
        types.MappingProxyType(dict(absent)))
    return report, ([] if problems else profiles)


@dataclass(frozen=True)
class CheckedEntries:
    """A profile's entries against the schemas: those that pass (with their index), the rest.

    ``absent`` counts the entries skipped for a library not registered, per library."""

    passing: list[tuple[int, ProfileEntry]]
    problems: list[str]
    stale: list[str]
    skipped: int
    absent: Mapping[str, int] = dataclasses.field(default_factory=dict)


def check_entries(profile: DeploymentProfile,
                  classify: Callable[[KernelTuningKey], tuple[str, str | None]],
                  schema: Callable[[KernelTuningKey], KernelTuningSchema]) -> CheckedEntries:
    """Every entry classified (``classify``) and validated whole by its ``schema(key)``."""
    passing, problems, stale, skipped, absent = [], [], [], 0, collections.Counter()
    for index, entry in enumerate(profile.entries):
        verdict, why = classify(entry.key)
        if verdict in ("skip", "absent"):
            skipped += 1
            if verdict == "absent":
                absent[why] += 1
            continue
        if verdict != "ok":
            where = _entry_place(profile, index, entry)
            field = "key.tuning_abi" if verdict == "stale" else "key"
            problems.append(str(Problem(field, why, entry=where, file=profile.path)))
            if verdict == "stale":
                stale.append(where)
            continue
        try:
            schema(entry.key).configure(entry.values)
        except TuningValidationError as error:
            where = _entry_place(profile, index, entry)
            problems.extend(str(p.located(entry=where, file=profile.path))
                            for p in error.problems)
            continue
        passing.append((index, entry))
    return CheckedEntries(passing, problems, stale, skipped, absent)


def _entry_place(profile: DeploymentProfile, index: int, entry: ProfileEntry) -> str:
    """Where an entry is, for a message (built only for one: a key's text costs)."""
    return ", ".join(filter(None, (profile.within, f"entry {index} ({entry.key})")))


def _registered_profiles(profile: DeploymentProfile, entries: Iterable[tuple[int, ProfileEntry]]
                         ) -> list[KernelTuningProfile]:
    """Entries as the registry holds them: the profile's selector bounded to each entry's
    threads (one selector per range), the profile's provenance shared by its entries."""
    selectors: dict[tuple[int, int], CpuSelector] = {}
    provenance = types.MappingProxyType({"profile": profile.name, "file": profile.path,
                                         "machines": profile.provenance})
    registered = []
    for index, entry in entries:
        selector = selectors.get(entry.threads)
        if selector is None:
            low, high = entry.threads
            selector = selectors[entry.threads] = dataclasses.replace(
                profile.selector, minimum_threads=low, maximum_threads=high)
        # an entry's evidence and library version are its own; the rest is shared
        own = {name: value for name, value in (("evidence", entry.evidence),
                                               ("library_version", entry.library_version))
               if value}
        registered.append(KernelTuningProfile(
            entry.key, entry.values, selector=selector, priority=profile.priority,
            name=profile.name, origin=f"{profile.place}, entry {index}",
            provenance=types.MappingProxyType({**provenance, **own}) if own else provenance))
    return registered


def _publish(checked: Sequence[tuple[ProfileFileReport, list[KernelTuningProfile]]],
             registry: KernelTuningRegistry) -> list[ProfileFileReport]:
    """Publish every passing file in one generation; a file that cannot join is rejected.

    The whole batch is tried first (the usual case); only when the registry
    refuses it is each file checked beside those accepted before it, to tell
    which file the refusal belongs to.
    """
    passing = [profile for report, profiles in checked if report.status == IMPORTED
               for profile in profiles]
    try:
        if passing:
            registry.register_profiles(passing)
        return [report for report, _ in checked]
    except (TuningValidationError, AmbiguousProfileError):
        pass
    reports, accepted = [], []
    for report, profiles in checked:
        if report.status == IMPORTED:
            problems = registry.check_profiles([*accepted, *profiles])
            if problems:
                report = dataclasses.replace(report, status="rejected", imported=0,
                                             problems=problems, warnings=())
            else:
                accepted += profiles
        reports.append(report)
    if accepted:
        registry.register_profiles(accepted)
    return reports


def _blas_warnings(profile: DeploymentProfile) -> tuple[str, ...]:
    """A note when entries decide BLAS thresholds and this process's BLAS is another one."""
    involved = [entry for entry in profile.entries
                if any("blas" in parameter for parameter in entry.values)]
    difference = blas_difference(profile.provenance) if involved else None
    if difference is None:
        return ()
    return (f"{profile.path}: {len(involved)} entries decide BLAS thresholds (first: "
            f"{involved[0].key}), {difference}",)
