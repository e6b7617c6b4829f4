"""Deployment profiles: one machine's calibrations, bound to a processor selector.

A profile is what a build-farm machine leaves behind: the values calibration
decided for every key and calibrated thread count, a :class:`~kerneltune.CpuSelector`
naming the processors they are meant for, and the provenance a reviewer (and
the importer) needs to trust them: the calibrating machine, its thread counts,
effort, date, report digests, and the BLAS library and threading variables
that moved its crossovers. Thread ranges run from one calibrated count to the
next minus one; the last ends at the largest calibrated count, so a profile
calibrated for 1, 2 and 4 threads serves 1, 2-3 and 4, and never 16.

The file is versioned YAML in its JSON form (as the calibration cache is):
the header one field a line, each entry one line, keys sorted, so the same
profile always gives the same bytes and a diff shows what changed. It is
written whole or not at all. Reading checks the structure and reports every
problem at once; the values are checked against the registered schemas when
the profile is imported (:mod:`kerneltune.profile_import`).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import is_count, is_int
from .cpu import CpuDescriptor, CpuExecutionDescriptor
from .documents import DocumentFormat, kind, read_document
from .errors import CpuDescriptorError, Problem, ProfileError, TuningValidationError
from .files import write_atomically
from .schema import KernelTuningKey, TuningValue, value_problems
from .selector_files import NamedSelector, load_selector
from .selectors import CpuSelector
from .version import __version__

#: the profile file's format: its header and top-level fields
PROFILE_FORMAT = DocumentFormat(
    "kerneltune-deployment-profile", 1,
    {"format": str, "schema_version": int, "name": str, "priority": int, "selector_name": object,
     "selector": dict, "versions": dict, "provenance": list, "entries": list},
    what="deployment profile")

#: environment variables of the calibrating process a profile records: they move crossovers
RECORDED_VARIABLE_PREFIXES = ("OMP_", "GOMP_", "OPENBLAS_", "KMP_", "MKL_", "BLIS_",
                              "KERNELTUNE_ISA")

_ENTRY_FIELDS = frozenset({"key", "threads", "values"})


@dataclass(frozen=True)
class ProfileEntry:
    """The values of one key for the thread counts ``threads[0]`` to ``threads[1]``."""

    key: KernelTuningKey
    threads: tuple[int, int]
    values: Mapping[str, TuningValue]

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key.to_dict(), "threads": list(self.threads),
                "values": dict(sorted(self.values.items()))}


@dataclass(frozen=True)
class DeploymentProfile:
    """A selector-bound profile: entries, priority, versions and provenance.

    ``selector_name`` is the selector file's name when the selector came from
    one; ``path`` is where the profile was read from (None for one built here),
    and ``within`` which profile of a deployment file it is.
    """

    name: str
    selector: CpuSelector
    entries: tuple[ProfileEntry, ...]
    priority: int = 0
    selector_name: str | None = None
    versions: Mapping[str, object] = field(default_factory=dict)
    provenance: tuple[Mapping[str, object], ...] = ()
    path: str | None = field(default=None, compare=False)
    within: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, object]:
        """The file's document, field by field in the file's order."""
        return {"format": PROFILE_FORMAT.name, "schema_version": PROFILE_FORMAT.schema_version,
                "name": self.name, "priority": self.priority,
                "selector_name": self.selector_name, "selector": self.selector.to_dict(),
                "versions": dict(self.versions), "provenance": [dict(p) for p in self.provenance],
                "entries": [entry.to_dict() for entry in self.entries]}

    @property
    def digest(self) -> str:
        """SHA-256 of the file's bytes: what a deployment names and verification keys on."""
        return hashlib.sha256(profile_text(self).encode()).hexdigest()

    @property
    def place(self) -> str:
        """Where the profile is, for messages and origins: its file and, in a deployment
        file, which profile."""
        return ", ".join(filter(None, (self.path, self.within))) or self.name

    @property
    def thread_counts(self) -> tuple[int, ...]:
        """The calibrated thread counts: each entry range's first."""
        return tuple(sorted({entry.threads[0] for entry in self.entries}))


# --- export ---------------------------------------------------------------------------------


def export_deployment_profile(
    reports: Iterable[Any],
    selector: CpuSelector | NamedSelector | str | os.PathLike[str],
    name: str,
    priority: int = 0,
) -> DeploymentProfile:
    """A profile of this machine's calibrations, one batch report per thread count.

    ``reports`` are :class:`~kerneltune.calibration.CalibrationBatchReport`
    objects or their ``to_dict()`` form (a report file read back). ``selector``
    is a selector, a selector file or a shipped selector's name. Refuses with
    :class:`ProfileError`: a calibrating machine the selector does not match
    (the fields are named), two reports for one thread count, reports of two
    processors, a selector with thread bounds (the entries carry them).
    """
    bound, selector_name, selector_path = _selector_of(selector)
    batches = [report.to_dict() if hasattr(report, "to_dict") else report for report in reports]
    problems = []
    if not isinstance(name, str) or not name.strip():
        problems.append(Problem("name", f"expected a non-empty string, got {name!r}"))
    if not is_int(priority):
        problems.append(Problem("priority", f"expected an integer, got {priority!r}"))
    if bound.minimum_threads is not None or bound.maximum_threads is not None:
        problems.append(Problem("selector", "a profile's selector names no thread bounds: "
                                            "its entries' thread ranges come from the reports"))
    executions = [_execution(batch, index, problems) for index, batch in enumerate(batches)]
    if not batches:
        problems.append(Problem("reports", "no calibration report to export"))
    if problems:
        raise ProfileError(problems, context=f"profile {name!r} not exported")
    _check_machine(executions, bound, selector_path, name)
    counts = [execution.effective_threads for execution in executions]
    ranges = _thread_ranges(counts)
    entries = sorted(
        (entry for batch, count in zip(batches, counts, strict=True)
         for entry in _entries(batch, ranges[count])),
        key=lambda e: (e.key.library, e.key.kernel, e.key.element_type, e.key.implementation,
                       e.key.tuning_abi, e.threads))
    return DeploymentProfile(
        name=name, selector=bound, entries=tuple(entries), priority=priority,
        selector_name=selector_name,
        versions=_versions(batches),
        provenance=(_provenance(batches, executions),))


def _selector_of(selector: CpuSelector | NamedSelector | str | os.PathLike[str]
                 ) -> tuple[CpuSelector, str | None, str | None]:
    """The selector, the name of the selector file it came from, and that file's path."""
    if isinstance(selector, CpuSelector):
        return selector, None, None
    named = selector if isinstance(selector, NamedSelector) else load_selector(selector)
    return named.selector, named.name, named.path


def _execution(batch: Mapping, index: int, problems: list[Problem]
               ) -> CpuExecutionDescriptor | None:
    try:
        return CpuExecutionDescriptor.from_dict(batch["execution"], source=f"report {index}")
    except (KeyError, TypeError):
        problems.append(Problem("execution", "not a calibration batch report (no execution)",
                                entry=f"report {index}"))
    except (CpuDescriptorError, ValueError) as error:
        problems.append(Problem("execution", str(error), entry=f"report {index}"))
    return None


def _check_machine(executions: Sequence[CpuExecutionDescriptor], selector: CpuSelector,
                   selector_path: str | None, name: str) -> None:
    problems = []
    processors = {execution.processor.identity for execution in executions}
    if len(processors) > 1:
        problems.append(Problem("reports", "the reports come from more than one processor; "
                                           "export one profile per calibrating machine"))
    seen: dict[int, int] = {}
    for index, execution in enumerate(executions):
        count = execution.effective_threads
        if count in seen:
            problems.append(Problem("reports", f"reports {seen[count]} and {index} both "
                                               f"calibrated {count} threads"))
        seen.setdefault(count, index)
    problems += machine_mismatches(selector, executions[0].processor, selector_path)
    if problems:
        raise ProfileError(problems, context=f"profile {name!r} not exported")


def machine_mismatches(selector: CpuSelector, processor: CpuDescriptor,
                       selector_path: str | None = None) -> list[Problem]:
    """Each field of ``selector`` that ``processor`` fails, with both values (threads aside)."""
    return [Problem(f"selector.{name}", f"the selector asks for {_wanted(selector, name)}; this "
                                        f"processor has {_actual(processor, name, selector)}",
                    file=selector_path)
            for name in selector.mismatches(processor)]


def _wanted(selector: CpuSelector, name: str) -> str:
    value = getattr(selector, name)
    if name == "models":
        return "models " + _spans(value)
    if isinstance(value, frozenset):
        return ", ".join(sorted(value))
    return repr(value)


def _actual(processor: CpuDescriptor, name: str, selector: CpuSelector) -> str:
    if name == "models":
        return f"model {processor.model}"
    if name == "required_features":
        return "none of " + ", ".join(sorted(selector.required_features - processor.features))
    if name == "excluded_features":
        return ", ".join(sorted(selector.excluded_features & processor.features))
    return repr(getattr(processor, name))


def _spans(numbers: Iterable[int]) -> str:
    """``0-15, 32-95`` for a long list of models."""
    spans: list[list[int]] = []
    for number in sorted(numbers):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(f"{low}-{high}" if high > low else str(low) for low, high in spans)


def _thread_ranges(counts: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Each calibrated count's range: to the next count minus one; the last ends at itself."""
    ordered = sorted(set(counts))
    return {count: (count, (ordered[i + 1] - 1) if i + 1 < len(ordered) else count)
            for i, count in enumerate(ordered)}


def _entries(batch: Mapping, threads: tuple[int, int]) -> list[ProfileEntry]:
    """One entry per calibrated key: the values its decisions chose."""
    decided = {report_digest(report): [d["parameter"] for d in report.get("decisions", ())]
               for report in batch.get("calibrated", ())}
    entries = []
    for profile in batch.get("successful_profiles", ()):
        values = profile["values"]
        parameters = decided.get(profile.get("report_digest")) or list(values)
        entries.append(ProfileEntry(KernelTuningKey.from_dict(profile["key"]), threads,
                                    types.MappingProxyType({p: values[p] for p in parameters
                                                            if p in values})))
    return entries


def report_digest(report: Mapping) -> str:
    """The digest a calibrated profile names its report by (``CalibrationReport.digest``)."""
    text = json.dumps(dict(report), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _versions(batches: Sequence[Mapping]) -> dict[str, object]:
    libraries: dict[str, set] = {}
    for batch in batches:
        for report in batch.get("calibrated", ()):
            versions = report.get("versions", {})
            if "library" in versions:
                libraries.setdefault(versions["library"], set()).add(
                    versions.get("kerneltune", __version__))
    return {"kerneltune": __version__,
            "kernel_libraries": {name: sorted(found)[-1] for name, found in
                                 sorted(libraries.items())}}


def _provenance(batches: Sequence[Mapping], executions: Sequence[CpuExecutionDescriptor]
                ) -> dict[str, object]:
    """The calibrating machine, its thread counts, and what shaped its timings."""
    environment: Mapping = next((report["environment"] for batch in batches
                                 for report in batch.get("calibrated", ())
                                 if report.get("environment")), {})
    options = next((report["options"] for batch in batches
                    for report in batch.get("calibrated", ()) if report.get("options")), {})
    first = executions[0]
    variables = environment.get("variables", {})
    return {
        "processor": first.processor.to_dict(),
        "affinity": {"cpus": len(first.affinity),
                     "physical_cores": first.affinity_physical_cores},
        "thread_counts": sorted(execution.effective_threads for execution in executions),
        "effort": options.get("effort"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "report_digests": {str(execution.effective_threads): report_digest(batch)
                           for batch, execution in zip(batches, executions, strict=True)},
        "blas": blas_of(environment.get("thread_pools", ())),
        "environment": {name: value for name, value in sorted(variables.items())
                        if name.startswith(RECORDED_VARIABLE_PREFIXES)},
    }


def blas_of(thread_pools: Iterable[Mapping]) -> list[dict[str, object]]:
    """The BLAS libraries among threadpoolctl's pools: name, version, architecture, threads."""
    return [{"name": pool.get("internal_api"), "version": pool.get("version"),
             "architecture": pool.get("architecture"), "threads": pool.get("num_threads")}
            for pool in thread_pools if pool.get("user_api") == "blas"]


# --- writing and reading --------------------------------------------------------------------


def profile_text(profile: DeploymentProfile, indent: str = "") -> str:
    """The file's text: JSON-form YAML, a header field a line and an entry a line.

    ``indent`` shifts every line, for a profile inside a deployment file.
    """
    document = profile.to_dict()
    entries = document.pop("entries")
    header = ",\n".join(f"{indent} {json.dumps(name)}: {json.dumps(value, sort_keys=True)}"
                        for name, value in document.items())
    body = ",\n".join(f"{indent}  {json.dumps(entry, sort_keys=True)}" for entry in entries)
    return (f"{indent}{{\n{header},\n{indent} \"entries\": [\n{body}" + ("\n" if body else "")
            + f"{indent} ]\n{indent}}}\n")


def write_deployment_profile(profile: DeploymentProfile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` whole or not at all (temporary sibling, fsync, replace)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, profile_text(profile))
    return target


def read_deployment_profile(path: str | os.PathLike[str]) -> DeploymentProfile:
    """Read and check a profile file; :class:`ProfileError` lists every problem.

    Each problem names the file, the entry (by index, with its key when that
    could be read) and the field.
    """
    document = read_document(Path(path), PROFILE_FORMAT)
    if document.status != "ok":
        problems = document.problems or (Problem("", "no such file", file=document.path),)
        raise ProfileError(problems, context="deployment profile not read")
    return profile_from_document(document.data, document.path)


def profile_from_document(data: Mapping[str, Any], path: str,
                          within: str | None = None) -> DeploymentProfile:
    """A profile from a checked document's data; every problem raised at once.

    ``within`` says which profile of a deployment file it is, for the messages.
    """
    problems: list[Problem] = []

    def problem(name: str, message: str) -> None:
        problems.append(Problem(name, message, entry=within, file=path))

    name = data["name"]
    if not name.strip():
        problem("name", "expected a non-empty string")
    if type(data["priority"]) is not int:
        problem("priority", f"expected an integer, got {kind(data['priority'])}")
    selector_name = data["selector_name"]
    if selector_name is not None and not isinstance(selector_name, str):
        problem("selector_name", f"expected a string or null, got {kind(selector_name)}")
    selector = None
    try:
        selector = CpuSelector.from_dict(data["selector"])
    except TuningValidationError as error:
        problems += [Problem(f"selector.{p.field}".rstrip("."), p.message, entry=within,
                             file=path) for p in error.problems]
    if selector is not None and (selector.minimum_threads or selector.maximum_threads):
        problem("selector", "a profile's selector names no thread bounds: its entries do")
    if not all(isinstance(p, dict) for p in data["provenance"]):
        problem("provenance", "expected a list of mappings")
    indexed = [(index, entry) for index, raw in enumerate(data["entries"])
               if (entry := _entry(index, raw, path, problems, within)) is not None]
    problems += _overlapping(indexed, path, within)
    entries = [entry for _, entry in indexed]
    if problems:
        raise ProfileError(problems, context="deployment profile not read")
    return DeploymentProfile(name, selector, tuple(entries), data["priority"], selector_name,
                             types.MappingProxyType(dict(data["versions"])),
                             tuple(types.MappingProxyType(p) for p in data["provenance"]),
                             path, within)


def _entry(index: int, raw: object, path: str, problems: list[Problem],
           within: str | None) -> ProfileEntry | None:
    """One entry, or None with its every problem added."""
    where = _entry_label(within, index)
    if not isinstance(raw, dict):
        problems.append(Problem("", f"expected a mapping with the fields key, threads, values, "
                                    f"got {kind(raw)}", entry=where, file=path))
        return None
    found = [Problem(str(name), "unknown field; expected key, threads, values")
             for name in raw if name not in _ENTRY_FIELDS]
    found += [Problem(name, "missing") for name in sorted(_ENTRY_FIELDS) if name not in raw]
    key = None
    if "key" in raw:
        try:
            key = _key(raw["key"])
            where = _entry_label(within, index, key)
        except TuningValidationError as error:
            found += error.problems
    threads = raw.get("threads")
    if "threads" in raw and not (isinstance(threads, list) and len(threads) == 2
                                 and all(is_count(t, minimum=1) for t in threads)
                                 and threads[0] <= threads[1]):
        found.append(Problem("threads", f"expected [low, high] with 1 <= low <= high, got "
                                        f"{threads!r}"))
    values = raw.get("values", {})
    found += value_problems(values)
    if found:
        problems += [p.located(entry=where, file=path) for p in found]
        return None
    return ProfileEntry(key, (threads[0], threads[1]), types.MappingProxyType(dict(values)))


@functools.lru_cache(maxsize=4096)
def _parsed_key(fields: tuple) -> KernelTuningKey:
    return KernelTuningKey.from_dict(dict(fields))


def _key(raw: object) -> KernelTuningKey:
    """An entry's key, parsed once per spelling: a profile repeats each key per thread range."""
    if isinstance(raw, dict) and all(isinstance(v, str | int) for v in raw.values()):
        return _parsed_key(tuple(raw.items()))
    return KernelTuningKey.from_dict(raw)


def _entry_label(within: str | None, index: int, key: KernelTuningKey | None = None) -> str:
    label = f"entry {index}" + (f" ({key})" if key is not None else "")
    return f"{within}, {label}" if within else label


def _overlapping(entries: Sequence[tuple[int, ProfileEntry]], path: str,
                 within: str | None) -> list[Problem]:
    """Two entries of one key whose thread ranges share a count say two things at once."""
    problems: list[Problem] = []
    by_key: dict[KernelTuningKey, list[tuple[int, ProfileEntry]]] = {}
    for index, entry in entries:
        by_key.setdefault(entry.key, []).append((index, entry))
    for key, group in by_key.items():
        group.sort(key=lambda item: item[1].threads)
        for (first, before), (index, after) in zip(group, group[1:], strict=False):
            if after.threads[0] <= before.threads[1]:
                problems.append(Problem(
                    "threads", f"{list(after.threads)} overlaps entry {first}'s "
                               f"{list(before.threads)}: a duplicate entry for this key",
                    entry=_entry_label(within, index, key), file=path))
    return problems
