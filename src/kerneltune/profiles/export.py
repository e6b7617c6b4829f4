"""Exporting a profile: one machine's calibration reports bound to a processor selector.

The reports are the batches of one calibrating machine, one per thread count.
Export refuses what would make the profile lie: a machine the selector does not
match (each failing field named), two reports of one thread count, reports of
two processors. Each entry keeps the values its decisions chose, and the
provenance keeps what shaped the timings (the machine, the BLAS library, the
threading variables).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._support.checks import is_int
from .._support.version import __version__
from ..errors import CpuDescriptorError, Problem, ProfileError
from ..machine.blas import blas_of
from ..machine.descriptor import CpuDescriptor, CpuExecutionDescriptor
from ..machine.selector_files import NamedSelector, read_selector
from ..machine.selectors import CpuSelector
from ..tuning.schema import KernelTuningKey
from .model import DeploymentProfile, ProfileEntry

#: environment variables of the calibrating process a profile records: they move crossovers
RECORDED_VARIABLE_PREFIXES = ("OMP_", "GOMP_", "OPENBLAS_", "KMP_", "MKL_", "BLIS_",
                              "KERNELTUNE_ISA")


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
    named = selector if isinstance(selector, NamedSelector) else read_selector(selector)
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
    decided, versions = {}, {}
    for report in batch.get("calibrated", ()):
        digest = report_digest(report)
        decided[digest] = [d["parameter"] for d in report.get("decisions", ())]
        versions[digest] = (report.get("versions") or {}).get("library_version")
    entries = []
    for profile in batch.get("successful_profiles", ()):
        values = profile["values"]
        parameters = decided.get(profile.get("report_digest")) or list(values)
        entries.append(ProfileEntry(KernelTuningKey.from_dict(profile["key"]), threads,
                                    types.MappingProxyType({p: values[p] for p in parameters
                                                            if p in values}),
                                    library_version=versions.get(profile.get("report_digest"))))
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
                    versions.get("library_version") or versions.get("kerneltune", __version__))
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
