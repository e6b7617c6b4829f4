"""The deployment image's bake step: the farm's profiles merged into one checked file.

Every entry of every profile is checked against the kernel library's schemas
(an entry for an ISA variant this process did not load is checked against the
same kernel's schema of the variant it did: the typed configs are the same);
two profiles whose selectors can match one processor at the same tier and
priority, for one key and thread count, are refused, naming both files and an
example processor, unless they are runs of one selector (the same selector,
priority, ISA variants and thread ranges) with their calibration reports: those
are merged by the evidence (:mod:`kerneltune.profiles.merge`); the coverage
table says, per profile, which keys and thread ranges it covers and where the
gaps are. Any problem fails the bake and writes
nothing; otherwise one deterministic, read-only deployment file is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._support.reprs import brief_repr
from ..calibration.curves import ReportFileError, read_calibration_reports
from ..errors import TuningValidationError
from ..machine.selector_files import NamedSelector, read_selector
from ..machine.selectors import CpuSelector, overlapping_pairs
from ..profiles.deployment import read_profiles, write_deployment_file
from ..profiles.importer import check_entries
from ..profiles.merge import (
    MachineRun,
    batches_of,
    by_digest,
    merge_runs,
    mergeable,
    missing_reports,
)
from ..profiles.model import MERGE_REASONS, DeploymentProfile
from ..tuning.keyfilter import KeyFilter
from ..tuning.registry import KernelTuningRegistry, TuningSnapshot, default_registry
from ..tuning.schema import KernelTuningKey, KernelTuningSchema, element_type_name


@brief_repr
@dataclass(frozen=True, repr=False)
class BakeReport:
    """What a bake checked and wrote: the coverage, its gaps and every problem.

    ``digest`` is the SHA-256 of the file written (None when nothing was).
    """

    output: str
    profiles: tuple[str, ...]
    coverage: dict[str, object]
    gaps: tuple[str, ...]
    problems: tuple[str, ...]
    digest: str | None = None
    #: the profiles merged from several runs of one selector (see :class:`Merge`)
    merges: tuple[Merge, ...] = ()

    @property
    def written(self) -> bool:
        return self.digest is not None

    def to_dict(self) -> dict[str, object]:
        return {"output": self.output, "profiles": list(self.profiles),
                "merges": [merge.to_dict() for merge in self.merges],
                "coverage": self.coverage, "gaps": list(self.gaps),
                "problems": list(self.problems), "digest": self.digest}

    def table(self) -> str:
        """The coverage table: per profile and key, the thread ranges covered and the gaps."""
        lines = []
        for name, keys in self.coverage.items():
            lines.append(f"{name}:")
            lines += [f"  {key:<52} {' '.join(row['covered']) or '-':<20} "
                      f"{'gaps: ' + ', '.join(row['gaps']) if row['gaps'] else ''}".rstrip()
                      for key, row in keys.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Merge:
    """Runs of one selector merged into one profile: its name, theirs, and per reason
    (:data:`~kerneltune.profiles.model.MERGE_REASONS`) how many parameters it decided."""

    name: str
    runs: tuple[str, ...]
    reasons: Mapping[str, int]

    def describe(self) -> str:
        counts = ", ".join(f"{reason}: {count}" for reason, count in self.reasons.items()
                           if count)
        return (f"{self.name}: merged from {', '.join(self.runs)}; values decided by "
                f"{counts or 'nothing (no entry)'}")

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "runs": list(self.runs), "reasons": dict(self.reasons)}


@dataclass(frozen=True)
class FileCheck:
    """One file as the bake checks it: its profiles, how many entries, what is wrong in it.

    ``status`` is ``ok``, ``rejected`` (an entry the kernel library refuses) or
    what reading said (``malformed``, ``not_found``, ``unreadable``, ...).
    """

    path: str
    status: str
    profiles: tuple[str, ...] = ()
    entries: int = 0
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "status": self.status, "profiles": list(self.profiles),
                "entries": self.entries, "problems": list(self.problems)}


@brief_repr
@dataclass(frozen=True, repr=False)
class ValidationReport:
    """Files checked as the bake checks its profiles: per file, and what is wrong between
    them (two profiles that could both apply, two of one name)."""

    files: tuple[FileCheck, ...]
    problems: tuple[str, ...]
    merges: tuple[Merge, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and all(file.status == "ok" for file in self.files)

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "files": [file.to_dict() for file in self.files],
                "merges": [merge.to_dict() for merge in self.merges],
                "problems": list(self.problems)}


def validate_deployment_files(
    paths: Iterable[str | os.PathLike[str]],
    registry: KernelTuningRegistry | None = None,
    reports: Iterable[str | os.PathLike[str]] = (),
) -> ValidationReport:
    """Check profile files and deployment files as the bake checks its profiles, together.

    Every entry of every profile (and of every variant: an entry of a variant this
    process did not load is checked against its sibling's schema), every section of a
    deployment file against its digest, two profiles that could both apply (unless
    runs of one selector the bake merges, by ``reports`` or those beside them), two of
    one name. Nothing is published.
    """
    registry = registry if registry is not None else default_registry
    return _checked(paths, registry.snapshot(), registry, reports)[1]


def _checked(paths: Iterable[str | os.PathLike[str]], snapshot: TuningSnapshot,
             registry: KernelTuningRegistry, reports: Iterable[str | os.PathLike[str]] = ()
             ) -> tuple[list[DeploymentProfile], ValidationReport]:
    """The profiles of ``paths``, runs of one selector merged, and what is wrong with them,
    against ``snapshot``."""
    schemas = _Schemas(snapshot, registry)
    found: list[DeploymentProfile] = []
    files = []
    for path in map(Path, paths):
        read = read_profiles(path)
        problems = [str(p) for p in read.problems] or ([] if read.status == "ok" else
                                                       [f"{path}: {read.status}"])
        for profile in read.profiles:
            problems += check_entries(profile, schemas.classify, schemas.schema).problems
        status = read.status if read.status != "ok" else "rejected" if problems else "ok"
        files.append(FileCheck(str(path), status, tuple(p.name for p in read.profiles),
                               sum(len(p.entries) for p in read.profiles), tuple(problems)))
        found += read.profiles
    between: list[str] = []
    merges: list[Merge] = []
    if not any(file.problems for file in files):
        found = _merged(found, list(map(Path, reports)), schemas, merges, between)
    between += _ambiguities(found) + _same_names(found)
    if not files:
        between.append("no profile given")
    problems = tuple(p for file in files for p in file.problems) + tuple(between)
    return found, ValidationReport(tuple(files), problems, tuple(merges))


def _merged(profiles: list[DeploymentProfile], reports: Sequence[Path], schemas: _Schemas,
            merges: list[Merge], problems: list[str]) -> list[DeploymentProfile]:
    """``profiles`` with each group of runs of one selector replaced by their merge.

    A group is the profiles of one selector and priority that share a key and thread
    count; each run's reports are found beside its file (``NAME.reports.json``) or among
    ``reports``. A group that cannot be merged is left as it is (and said why): the
    ambiguity check then refuses it.
    """
    groups: dict[tuple[CpuSelector, int], list[DeploymentProfile]] = {}
    for profile in profiles:
        groups.setdefault((profile.selector, profile.priority), []).append(profile)
    given: dict[str, Mapping] | None = None
    result = [p for p in profiles if len(groups[p.selector, p.priority]) == 1]
    for group in groups.values():
        if len(group) == 1:
            continue
        if not any(_shared_threads(a, b) for i, a in enumerate(group) for b in group[i + 1:]):
            result += group
            continue
        why = mergeable(group)
        if why is None:
            given = given if given is not None else by_digest(_read_reports(reports, problems))
            runs, missing = _runs(group, given, problems)
            why = missing
        if why is not None:
            problems.append(f"{' and '.join(f'{p.place} ({p.name})' for p in group)}: runs of "
                            f"one selector, not merged: {why}")
            result += group
            continue
        merged = merge_runs(runs, _values_check(schemas))
        merges.append(Merge(merged.name, tuple(sorted(run.name for run in runs)),
                            _reason_counts(merged)))
        result.append(merged)
    return result


def _read_reports(paths: Sequence[Path], problems: list[str]) -> list[object]:
    batches: list[object] = []
    for path in paths:
        try:
            batches += read_calibration_reports(path)
        except ReportFileError as error:
            problems.append(str(error))
    return batches


def _runs(group: Sequence[DeploymentProfile], given: Mapping[str, Mapping],
          problems: list[str]) -> tuple[list[MachineRun], str | None]:
    """Each profile of ``group`` with its reports (``given`` by digest, or beside its file),
    or why some have none."""
    runs, missing = [], []
    for profile in group:
        beside = (Path(profile.path).with_suffix(".reports.json")
                  if profile.path and profile.within is None else None)
        found = given
        if beside is not None and beside.exists():
            found = {**given, **by_digest(_read_reports([beside], problems))}
        batches = batches_of(profile, found)
        absent = missing_reports(profile, batches)
        if absent:
            missing.append(f"{profile.place} has no calibration report of its thread counts "
                           f"{', '.join(map(str, absent))}"
                           + (f" (none in {beside})" if beside is not None else ""))
        runs.append(MachineRun(profile, batches))
    if missing:
        return runs, ("; ".join(missing) + ": give the reports the runs wrote "
                      "(NAME.reports.json beside each profile, or --reports)")
    return runs, None


def _values_check(schemas: _Schemas):
    """Whether a merged entry's values go together, by the key's schema."""
    def check(key: KernelTuningKey, values: Mapping[str, object]) -> str | None:
        try:
            schemas.schema(key).configure(values)
        except (TuningValidationError, KeyError) as error:
            return str(error)
        return None
    return check


def _reason_counts(profile: DeploymentProfile) -> dict[str, int]:
    counts = dict.fromkeys(MERGE_REASONS, 0)
    for entry in profile.entries:
        for evidence in entry.evidence.values():
            counts[evidence.reason] += 1
    return counts


def bake(
    profiles: Iterable[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    require_complete: bool = False,
    expected_selectors: Iterable[str | NamedSelector] = (),
    registry: KernelTuningRegistry | None = None,
    reports: Iterable[str | os.PathLike[str]] = (),
    scope: KeyFilter | None = None,
) -> BakeReport:
    """Merge ``profiles`` into the deployment file ``output``, or write nothing and say why.

    ``require_complete`` fails on any coverage gap and on an expected selector
    (a file or a shipped name) that no profile is bound to; the coverage is over the
    registered keys ``scope`` selects by library, kernel and element type (all of them by
    default: a farm that calibrates some kernels scopes it to those). Runs of one
    selector are merged by the evidence of their calibration reports: those beside each
    profile (``NAME.reports.json``) and ``reports``.
    """
    registry = registry if registry is not None else default_registry
    paths = [Path(path) for path in profiles]
    snapshot = registry.snapshot()
    found, checked = _checked(paths, snapshot, registry, reports)
    problems = list(checked.problems)
    coverage, gaps = _coverage(found, snapshot, scope or KeyFilter())
    # A whole machine without a profile first: it is the gap a person must not miss.
    gaps = _missing_selectors(found, [_named(s) for s in expected_selectors]) + gaps
    if require_complete:
        problems += [f"incomplete: {line}" for line in summarise_gaps(gaps)]
    report = BakeReport(str(output), tuple(map(str, paths)), coverage, tuple(gaps),
                        tuple(problems), merges=checked.merges)
    if problems:
        return report
    digest = write_deployment_file(found, coverage, output)
    return dataclasses.replace(report, digest=digest)


def _named(selector: str | NamedSelector) -> NamedSelector:
    return selector if isinstance(selector, NamedSelector) else read_selector(selector)


class _Schemas:
    """The registered schemas, with an entry of another ISA variant checked by its sibling's."""

    def __init__(self, snapshot: TuningSnapshot, registry: KernelTuningRegistry):
        self.snapshot = snapshot
        self.registry = registry
        self.keys = set(snapshot.keys())
        self.libraries = {key.library for key in self.keys}
        self.siblings = {_variantless(key): key for key in self.keys}
        self.abis: dict[tuple, list[int]] = {}
        for key in self.keys:
            self.abis.setdefault(_variantless(key)[:-1], []).append(key.tuning_abi)

    def classify(self, key: KernelTuningKey) -> tuple[str, str | None]:
        possible = self.registry.implementations(key.library)
        if possible is not None and key.implementation not in possible:
            return "bad", (f"unknown implementation {key.implementation} of {key.library} (not "
                           f"one it can build)")
        if key in self.keys or _variantless(key) in self.siblings:
            return "ok", None
        if key.library not in self.libraries:
            return "bad", (f"kernel library {key.library} is not installed here (kerneltune "
                           f"libraries lists those that are): the bake checks every entry "
                           f"against its library's schemas")
        abis = self.abis.get(_variantless(key)[:-1])
        if abis:
            return "stale", (f"stale: tuning ABI {key.tuning_abi}; the registered schema has "
                             f"tuning ABI {', '.join(map(str, sorted(abis)))}")
        return "bad", f"no tuning schema is registered for {key} in any variant"

    def schema(self, key: KernelTuningKey) -> KernelTuningSchema:
        return self.snapshot.schema(key if key in self.keys else self.siblings[_variantless(key)])


def _variantless(key: KernelTuningKey) -> tuple:
    return (key.library, key.kernel, key.element_type, key.device, key.tuning_abi)


def _ambiguities(profiles: Sequence[DeploymentProfile]) -> list[str]:
    """Pairs of profiles that could both give one processor, key and thread count a value."""
    groups: dict[tuple[int, int], list[DeploymentProfile]] = {}
    for profile in profiles:
        groups.setdefault((profile.selector.tier, profile.priority), []).append(profile)
    problems = []
    for group in groups.values():
        for i, j in overlapping_pairs([profile.selector for profile in group]):
            first, second = group[i], group[j]
            if not _shared_threads(first, second):
                continue
            a, b = first.selector, second.selector
            problems.append(
                f"{first.place} ({first.name}) and {second.place} ({second.name}): selectors "
                f"that can match the same processor (for example {_example(a, b)}) at the "
                f"same tier ({a.tier.label}) and priority ({first.priority}); give one a "
                f"different priority or narrow a selector")
    return problems


def _same_names(profiles: Sequence[DeploymentProfile]) -> list[str]:
    """Profiles are told apart by name (coverage, order, ``profile_name=`` in sessions)."""
    first: dict[str, DeploymentProfile] = {}
    problems = []
    for profile in profiles:
        other = first.setdefault(profile.name, profile)
        if other is not profile:
            problems.append(f"{other.place} and {profile.place} are both named "
                            f"{profile.name!r}; give one another --name")
    return problems


def _shared_threads(first: DeploymentProfile, second: DeploymentProfile) -> bool:
    """Whether some key has entries in both whose thread ranges meet."""
    ranges: dict[KernelTuningKey, list[tuple[int, int]]] = {}
    for entry in first.entries:
        ranges.setdefault(entry.key, []).append(entry.threads)
    return any(low <= high2 and low2 <= high for entry in second.entries
               for low, high in ranges.get(entry.key, ()) for low2, high2 in [entry.threads])


def _example(a: CpuSelector, b: CpuSelector) -> str:
    """A processor both selectors could match, described by the fields they name."""
    models = sorted(set(a.models) & set(b.models)) or sorted(a.models or b.models)
    parts = [("vendor", a.vendor or b.vendor), ("family", a.family if a.family is not None
                                                 else b.family),
             ("model", models[0] if models else None),
             ("microarchitecture", a.microarchitecture or b.microarchitecture)]
    text = " ".join(f"{name} {value}" for name, value in parts if value is not None)
    features = sorted(a.required_features | b.required_features)
    if features:
        text += (" " if text else "") + "with " + ", ".join(features)
    return text or "any processor"


def _coverage(profiles: Sequence[DeploymentProfile], snapshot: TuningSnapshot,
              scope: KeyFilter) -> tuple[dict[str, object], list[str]]:
    """Per machine (the profiles of one selector and priority, named ``a+b`` when several
    runs of disjoint keys give it, one per kernel library say), per key of its libraries'
    implementations that ``scope`` selects: the thread ranges covered and the gaps. A
    library of no entry there is a gap of every key of it (``library/kernel/-``)."""
    keys = [key for key in snapshot.keys() if scope.matches(key)]  # noqa: SIM118
    registered = sorted({(k.library, k.kernel, k.element_type, k.device) for k in keys})
    machines: dict[str, list[DeploymentProfile]] = {}
    for profile in profiles:
        machines.setdefault(json.dumps([profile.selector.to_dict(), profile.priority],
                                       sort_keys=True), []).append(profile)
    coverage: dict[str, object] = {}
    gaps: list[str] = []
    for name, entries in sorted(("+".join(sorted(p.name for p in group)),
                                 [entry for p in group for entry in p.entries])
                                for group in machines.values()):
        ranges: dict[tuple, list[tuple[int, int]]] = {}
        implementations: dict[str, set[str]] = {}
        for entry in entries:
            key = entry.key
            ranges.setdefault((key.library, key.kernel, key.element_type, key.device,
                               key.implementation), []).append(entry.threads)
            implementations.setdefault(key.library, set()).add(key.implementation)
        top = max((entry.threads[1] for entry in entries), default=0)
        table = {}
        for library, kernel, element_type, device in registered:
            for implementation in sorted(implementations.get(library) or {"-"}):
                covered = sorted(ranges.get((library, kernel, element_type, device,
                                             implementation), []))
                holes = _holes(covered, top)
                label = f"{library}/{kernel}/{implementation}/{element_type_name(element_type)}"
                table[label] = {"covered": [f"{low}-{high}" if low != high else str(low)
                                            for low, high in covered], "gaps": holes}
                gaps += [f"{name}: {label}: {hole}" for hole in holes]
        coverage[name] = table
    return coverage, gaps


def summarise_gaps(gaps: Sequence[str]) -> list[str]:
    """The gaps a line per profile and kernel (``zen4: kerneltune_cpu/Abs/x86_64_v4: no entry
    for 10 element types (UINT8, INT8, ...)``); gaps of another shape as they are."""
    grouped: dict[tuple[str, str], dict[str, list[str]]] = {}
    lines = []
    for gap in gaps:
        profile, _, rest = gap.partition(": ")
        label, _, hole = rest.partition(": ")
        if not hole or label.count("/") != 3:
            lines.append(gap)
            continue
        kernel, _, element_type = label.rpartition("/")
        grouped.setdefault((profile, kernel), {}).setdefault(hole, []).append(element_type)
    for (profile, kernel), holes in grouped.items():
        parts = [f"{hole} for {len(types)} element type{'s' * (len(types) != 1)} "
                 f"({_some(types)})" for hole, types in holes.items()]
        lines.append(f"{profile}: {kernel}: {'; '.join(parts)}")
    return lines


def _some(names: Sequence[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f", ... {len(names) - shown} more"
                                       if len(names) > shown else "")


def _holes(covered: Sequence[tuple[int, int]], top: int) -> list[str]:
    """The thread counts from 1 to ``top`` that no range covers, as ranges."""
    if not covered:
        return ["no entry"]
    holes, expected = [], 1
    for low, high in covered:
        if low > expected:
            holes.append(f"threads {expected}-{low - 1}" if low - 1 > expected
                         else f"threads {expected}")
        expected = max(expected, high + 1)
    if expected <= top:
        holes.append(f"threads {expected}-{top}")
    return holes


def _missing_selectors(profiles: Sequence[DeploymentProfile],
                       expected: Sequence[NamedSelector]) -> list[str]:
    bound = {profile.selector for profile in profiles}
    names = {profile.selector_name for profile in profiles}
    return [f"no profile for the expected selector {named.name}" for named in expected
            if named.selector not in bound and named.name not in names]

